#!/usr/bin/env python3
"""Columns against rows, in process: the same batch predicted as one feature provider per row
(`MLModel.predictions(fromBatch:)`, each row with its own arrays) and as columns, one array or
list per input (`MLModel.predictions(fromColumns:)`), timed alternately by
`cortado-bench columns` on three models made here:

- mlp: a float32 MLP 784-512-512-10 (NeuralNetworkBuilder, random weights);
- xgb: an XGBoost regressor, 100 trees of depth 6, converted with 20 scalar `double` inputs
  (coremltools' default: one input per feature);
- glm: a scikit-learn LogisticRegression (OvR, 3 classes) over the same 20 scalar inputs.

For each model and batch size it prints the medians of both ways (wall and process CPU), the
ratios rows/columns (above 1: columns are faster) and the largest relative difference between
the two ways' outputs. Both ways run in one process on the same inputs; the networks use the
threads the configuration gives them (all cores), the other kinds one.

Usage: .venv/bin/python bench/columns_vs_rows.py [--bin .build/release] [--rows 1,16,256]
       [--repeat 20] [--keep DIR] [--summary FILE.json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import common  # noqa: F401  (one-thread environment before numpy loads)
import numpy as np
from nn_vs_onnxruntime import mlp_models

FEATURES = 20


def make_models(folder, seed):
    common.quiet_coremltools()
    import xgboost
    from coremltools.converters import sklearn as ct_sklearn
    from coremltools.converters import xgboost as ct_xgb
    from coremltools.proto import FeatureTypes_pb2 as ft
    from sklearn.linear_model import LogisticRegression

    paths = {}
    builder, _ = mlp_models(seed=seed, float32_io=True)
    paths["mlp"] = os.path.join(folder, "mlp.mlmodel")
    with open(paths["mlp"], "wb") as fh:
        fh.write(builder.spec.SerializeToString())

    rng = np.random.RandomState(seed)
    X = rng.randn(4000, FEATURES)
    y = X @ rng.randn(FEATURES) + np.sin(3 * X[:, 0])
    names = [f"f{i}" for i in range(FEATURES)]
    reg = xgboost.XGBRegressor(n_estimators=100, max_depth=6, base_score=0.5, n_jobs=1,
                               random_state=seed, tree_method="hist").fit(X, y)
    paths["xgb"] = os.path.join(folder, "xgb.mlmodel")
    with open(paths["xgb"], "wb") as fh:
        fh.write(ct_xgb.convert(reg, feature_names=names, target="y").get_spec().SerializeToString())

    classes = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    glm = LogisticRegression(multi_class="ovr", max_iter=500).fit(X, classes)
    spec = ct_sklearn.convert(glm, names, "label").get_spec()
    for f in spec.description.input:
        f.type.doubleType.CopyFrom(ft.DoubleFeatureType())
    paths["glm"] = os.path.join(folder, "glm.mlmodel")
    with open(paths["glm"], "wb") as fh:
        fh.write(spec.SerializeToString())
    return paths


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=common.DEFAULT_BIN, help="build folder holding cortado-bench, or the executable")
    parser.add_argument("--rows", default="1,16,256", help="batch sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", help="folder to keep the models in")
    parser.add_argument("--summary", help="write the results as JSON here")
    args = parser.parse_args()
    exe = common.resolve_bin(args.bin)
    folder = args.keep or tempfile.mkdtemp(prefix="cortado-columns-")
    os.makedirs(folder, exist_ok=True)
    results = []
    try:
        paths = make_models(folder, args.seed)
        print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
        print(f"{'model':5} {'rows':>5} {'rows/s (rows)':>14} {'rows/s (cols)':>14} {'wall ratio':>10} {'cpu ratio':>10} {'max diff':>9}")
        for name, path in paths.items():
            for rows in [int(r) for r in args.rows.split(",")]:
                done = subprocess.run([exe, "columns", path, str(rows), "--repeat", str(args.repeat)],
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"cortado-bench columns failed ({done.returncode}): {done.stderr.strip()}")
                r = json.loads(done.stdout)
                r["name"] = name
                results.append(r)
                print(f"{name:5} {rows:5d} {r['rows_per_second_rows']:14.0f} {r['rows_per_second_columns']:14.0f} "
                      f"{r['wall_ratio_rows_over_columns']:10.2f} {r['cpu_ratio_rows_over_columns']:10.2f} "
                      f"{r['largest_relative_difference']:9.1e}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump({"cpu": cpu_model(), "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
