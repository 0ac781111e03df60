#!/usr/bin/env python3
"""Cortado's GLM batch path against scikit-learn's own `predict` / `predict_proba`.

Trains scikit-learn linear models on the same synthetic data (fixed seed):

- LinearRegression, timed with `predict`;
- LogisticRegression(multi_class='ovr'), binary, timed with `predict_proba`;
- LogisticRegression(multi_class='ovr'), 3 classes, timed with `predict_proba`;

converts each with coremltools (one multi-array input, so the Core ML model is a bare
glmRegressor / glmClassifier), writes the rows for both and times scikit-learn on one thread
(BLAS pinned to 1 thread before numpy loads; median of several runs) and `cortado-bench glm`
(Cortado's dense batch path, one thread, median of its runs). Prints a table with the
throughput ratio. Exits 1 when the engines disagree.

Accuracy: both engines compute in float64 from the same float64 weights; only the order of
the additions differs (scikit-learn calls BLAS, Cortado sums four lanes), so the check is
|cortado - sklearn| <= 1e-9 * max(1, |sklearn|) on the regression outputs and the class
probabilities.

Usage: .venv/bin/python bench/glm_vs_sklearn.py [--bin .build/release] [--rows 10000]
       [--features 20] [--repeat 301] [--keep DIR] [--summary FILE.json]
--bin takes the build folder holding cortado-bench or the executable itself.
Build it first: swift build -c release --product cortado-bench
"""
import argparse
import os
import shutil
import sys
import tempfile
import warnings

import common  # first: pins BLAS/OpenMP to one thread before numpy loads
import numpy as np

TOLERANCE = 1e-9


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(p, repeat=301)
    return p.parse_args()


def main():
    a = parse_args()
    binary = common.resolve_bin(a.bin)
    common.quiet_coremltools()
    import sklearn
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from coremltools.converters import sklearn as ct_sk
    from coremltools.models import datatypes
    # coremltools converts only one-vs-rest logistic regressions; scikit-learn 1.5 deprecates
    # the parameter that asks for one.
    warnings.filterwarnings("ignore", message=".*'multi_class' was deprecated.*", category=FutureWarning)

    rng = np.random.RandomState(a.seed)
    Xtr = rng.randn(5000, a.features)
    w = rng.randn(a.features)
    score = Xtr @ w + 0.5 * rng.randn(len(Xtr))
    y = score + 3.0
    y2 = (score > 0).astype(int)
    y3 = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    X = rng.randn(a.rows, a.features)

    workdir = a.keep or tempfile.mkdtemp(prefix="cortado-glm-bench-")
    os.makedirs(workdir, exist_ok=True)
    inputs = [("input", datatypes.Array(a.features))]

    lin = LinearRegression().fit(Xtr, y)
    log2 = LogisticRegression(multi_class="ovr", max_iter=1000).fit(Xtr, y2)
    log3 = LogisticRegression(multi_class="ovr", max_iter=1000).fit(Xtr, y3)
    cases = [
        ("linear regression", "predict", lin, lambda: lin.predict(X), lambda out: out.reshape(-1, 1)),
        ("logistic binary ovr", "predict_proba", log2, lambda: log2.predict_proba(X), lambda out: out),
        ("logistic 3-class ovr", "predict_proba", log3, lambda: log3.predict_proba(X), lambda out: out),
    ]

    results = []
    print(f"{a.rows} rows x {a.features} features, scikit-learn linear models, "
          f"single thread, median of {a.repeat} runs")
    print(f"  threads: {common.thread_report()}")
    for name, method, model, run, shape in cases:
        stem = name.replace(" ", "_")
        spec = ct_sk.convert(model, inputs, "y" if method == "predict" else "label").get_spec()
        kind = spec.WhichOneof("Type")
        if kind not in ("glmRegressor", "glmClassifier"):
            sys.exit(f"{name}: coremltools wrote a {kind} model, expected a bare GLM")
        path = os.path.join(workdir, stem + ".mlmodel")
        with open(path, "wb") as f:
            f.write(spec.SerializeToString(deterministic=True))
        sk_s, sk_cpu, sk_out = common.time_python(run, a.repeat)
        report, pred = common.run_cortado(binary, "glm", path, X, a.repeat, workdir, stem)
        err = common.max_relative_error(pred, shape(np.asarray(sk_out, dtype=np.float64)))
        r = common.result_row(name, "sklearn", a.rows, sk_s, sk_cpu, report, err, TOLERANCE)
        r["method"] = method
        if not report["all_finite"]:
            print(f"  {name}: Cortado produced non-finite outputs")
        print(f"  {name} ({kind}, sklearn {method}): max |cortado - sklearn| / max(1, |sklearn|) = "
              f"{err:.3g} ({'OK' if r['agree'] else 'MISMATCH'}, tolerance {TOLERANCE:g})")
        results.append(r)

    print()
    common.print_table(results, "sklearn")
    print()
    print("wall: median elapsed time per run; cpu: median CPU time of the run (scikit-learn: process "
          "CPU time; Cortado: its thread's CPU time), steadier when other work shares the cores.")
    print(f"scikit-learn {sklearn.__version__} predict / predict_proba (float64 input, input validation "
          f"included, 1 BLAS thread); Cortado {os.path.relpath(binary)} (float64 input, dense batch path).")
    if a.keep:
        print(f"files kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    common.write_summary(a.summary, "glm_vs_sklearn",
                         f"scikit-learn linear models, {a.features} features, {a.rows} rows", results)
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
