#!/usr/bin/env python3
"""Cortado's tree-ensemble batch path against XGBoost's own `inplace_predict`.

Trains XGBoost models (fixed seed, base_score=0.5 because coremltools' XGBoost converter
ignores base_score), converts them with coremltools, writes the same rows for both, times
XGBoost single-threaded (nthread=1, median of several runs) and `cortado-bench trees` (median
of its runs, single-threaded), checks that Cortado's predictions equal XGBoost's and prints a
table with the throughput ratio.

Accuracy: XGBoost compares float32 features with float32 thresholds and sums leaves in
float32; the converted Core ML model holds the same float32 values as doubles, and Cortado
evaluates in float64 as Core ML specifies. The rows are float32 values stored as float64, so
both take the same branches; the sums then differ only by float32 rounding, hence the check
|cortado - xgboost| <= 1e-5 * max(1, |xgboost|).

Usage: .venv/bin/python bench/trees_vs_xgboost.py [--bin .build/release/cortado-bench]
       [--rows 10000] [--trees 100] [--depth 6] [--features 20] [--repeat 21] [--no-classifier]
Build the binary first: swift build -c release --product cortado-bench
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def parse_args():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=os.path.join(root, ".build", "release", "cortado-bench"))
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--repeat", type=int, default=21, help="timed runs per engine (median reported)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-classifier", action="store_true", help="only the regressor")
    p.add_argument("--keep", help="folder to keep the model, data and prediction files in")
    return p.parse_args()


def make_data(rng, rows, features):
    """float32-representable values (stored as float64), some correlated with the target."""
    X = rng.randn(rows, features).astype(np.float32).astype(np.float64)
    return X


def time_xgboost(booster, X32, repeat):
    """Median wall and process-CPU seconds of inplace_predict over the whole matrix, nthread=1."""
    booster.set_param({"nthread": 1})
    for _ in range(3):
        booster.inplace_predict(X32)
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        booster.inplace_predict(X32)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(wall)), float(np.median(cpu)), booster.inplace_predict(X32)


def run_cortado(binary, model_path, X, repeat, workdir, name):
    data_path = os.path.join(workdir, name + "_rows.f64")
    out_path = os.path.join(workdir, name + "_cortado.f64")
    X.astype("<f8").tofile(data_path)
    cmd = [binary, "trees", model_path, data_path, str(X.shape[0]), str(X.shape[1]),
           "--repeat", str(repeat), "--out", out_path]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"cortado-bench failed ({done.returncode}): {done.stderr.strip()}\n{done.stdout}")
    report = json.loads(done.stdout)
    pred = np.fromfile(out_path, dtype="<f8").reshape(X.shape[0], report["outputWidth"])
    return report, pred


def compare(name, cortado, reference):
    err = np.abs(cortado - reference) / np.maximum(1.0, np.abs(reference))
    worst = float(err.max())
    ok = worst <= 1e-5
    print(f"  {name}: max |cortado - xgboost| / max(1, |xgboost|) = {worst:.3g} "
          f"({'OK' if ok else 'MISMATCH'}, tolerance 1e-5; XGBoost sums in float32)")
    return ok


def main():
    a = parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import xgboost
    import coremltools as ct
    from coremltools.converters import xgboost as ct_xgb

    if not os.path.exists(a.bin):
        sys.exit(f"no cortado-bench at {a.bin}; build it with: swift build -c release --product cortado-bench")

    rng = np.random.RandomState(a.seed)
    Xtr = make_data(rng, 5000, a.features)
    w = rng.randn(a.features)
    y = Xtr @ w + np.sin(3 * Xtr[:, 0]) * 2 + Xtr[:, 1] * Xtr[:, 2] + 0.1 * rng.randn(len(Xtr))
    X = make_data(rng, a.rows, a.features)
    X32 = X.astype(np.float32)
    names = [f"f{i}" for i in range(a.features)]

    workdir = a.keep or tempfile.mkdtemp(prefix="cortado-trees-bench-")
    os.makedirs(workdir, exist_ok=True)
    common = dict(n_estimators=a.trees, max_depth=a.depth, learning_rate=0.1, base_score=0.5,
                  n_jobs=1, random_state=a.seed, tree_method="hist")

    cases = []
    reg = xgboost.XGBRegressor(**common).fit(Xtr, y)
    spec = ct_xgb.convert(reg, feature_names=names, target="y").get_spec()
    cases.append(("regressor", reg, spec, lambda raw: raw.reshape(-1, 1)))
    if not a.no_classifier:
        yb = (y > np.median(y)).astype(int)
        cls = xgboost.XGBClassifier(objective="binary:logistic", **common).fit(Xtr, yb)
        spec_c = ct_xgb.convert(cls, feature_names=names, target="label", mode="classifier").get_spec()
        # inplace_predict gives p(class 1); Cortado writes (p0, p1) per row.
        cases.append(("binary classifier", cls, spec_c, lambda raw: np.c_[1 - raw, raw]))

    rows = []
    all_ok = True
    print(f"{a.rows} rows x {a.features} features, {a.trees} trees of max depth {a.depth}, "
          f"single thread, median of {a.repeat} runs")
    for name, m, spec, shape in cases:
        path = os.path.join(workdir, name.replace(" ", "_") + ".mlmodel")
        with open(path, "wb") as f:
            f.write(spec.SerializeToString(deterministic=True))
        xgb_s, xgb_cpu, xgb_pred = time_xgboost(m.get_booster(), X32, a.repeat)
        report, pred = run_cortado(a.bin, path, X, a.repeat, workdir, name.replace(" ", "_"))
        if not report["all_finite"]:
            print(f"  {name}: Cortado produced non-finite outputs")
            all_ok = False
        all_ok &= compare(name, pred, shape(np.asarray(xgb_pred, dtype=np.float64)))
        rows.append((name, a.rows / xgb_s, report["rows_per_second"], a.rows / xgb_cpu, report["rows_per_cpu_second"]))

    print()
    print(f"{'model':<20} {'clock':<5} {'xgboost rows/s':>16} {'cortado rows/s':>16} {'cortado/xgboost':>16}")
    for name, x_rate, c_rate, x_cpu, c_cpu in rows:
        print(f"{name:<20} {'wall':<5} {x_rate:>16,.0f} {c_rate:>16,.0f} {c_rate / x_rate:>15.2f}x")
        print(f"{'':<20} {'cpu':<5} {x_cpu:>16,.0f} {c_cpu:>16,.0f} {c_cpu / x_cpu:>15.2f}x")
    print()
    print("wall: median elapsed time per run; cpu: median CPU time of the run (XGBoost: process CPU "
          "time; Cortado: its thread's CPU time), steadier when other work shares the cores.")
    print(f"XGBoost {xgboost.__version__} inplace_predict (float32 input, nthread=1); "
          f"Cortado {os.path.relpath(a.bin)} (float64 input, dense batch path).")
    if a.keep:
        print(f"files kept in {workdir}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
