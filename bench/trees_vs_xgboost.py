#!/usr/bin/env python3
"""Cortado's tree-ensemble batch path against XGBoost's own `inplace_predict` and against
tl2cgen (the same forest compiled to C by treelite + tl2cgen and built with gcc -O3).

Trains XGBoost models (fixed seed, base_score=0.5 because coremltools' XGBoost converter
ignores base_score), converts them with coremltools, writes the same rows for both, times
XGBoost single-threaded (nthread=1, median of several runs) and `cortado-bench trees` (median
of its runs, single-threaded), checks that Cortado's predictions equal XGBoost's and prints a
table with the throughput ratio. The same booster, imported by treelite and compiled by
tl2cgen into a shared library (gcc -O3, no -march), is timed through tl2cgen's Predictor with
nthread=1 on the same float32 rows (its DMatrix built once, outside the timing, as Cortado's rows
are read before its timing starts) and gets a second table. Exits 1 when the engines disagree.
tl2cgen and treelite come from scripts/requirements-bench-venv.txt (scripts/setup-bench.sh
installs them into .venv); without them the tl2cgen table is skipped with a note.

Accuracy: XGBoost compares float32 features with float32 thresholds and sums leaves in
float32; the converted Core ML model holds the same float32 values as doubles, and Cortado
evaluates in float64 as Core ML specifies. The rows are float32 values stored as float64, so
both take the same branches; the sums then differ only by float32 rounding, hence the check
|cortado - xgboost| <= 1e-5 * max(1, |xgboost|).

Usage: .venv/bin/python bench/trees_vs_xgboost.py [--bin .build/release] [--rows 10000]
       [--trees 100] [--depth 6] [--features 20] [--repeat 21] [--no-classifier]
       [--keep DIR] [--summary FILE.json] [--no-tl2cgen]
--bin takes the build folder holding cortado-bench or the executable itself.
Build it first: swift build -c release --product cortado-bench
"""
import argparse
import os
import shutil
import sys
import tempfile

import common  # first: pins BLAS/OpenMP to one thread before numpy loads
import numpy as np

TOLERANCE = 1e-5


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_common_args(p, repeat=21)
    p.add_argument("--trees", type=int, default=100)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--no-classifier", action="store_true", help="only the regressor")
    p.add_argument("--no-tl2cgen", action="store_true", help="skip the tl2cgen comparison")
    return p.parse_args()


def make_data(rng, rows, features):
    """float32-representable values (stored as float64), some correlated with the target."""
    return rng.randn(rows, features).astype(np.float32).astype(np.float64)


def tl2cgen_predictor(booster, workdir, stem):
    """The booster compiled to C by tl2cgen (gcc -O3) and loaded with one thread, or None
    with the reason when treelite/tl2cgen are not installed."""
    try:
        import tl2cgen
        import treelite
    except ImportError as e:
        return None, f"tl2cgen not installed ({e.name}); run scripts/setup-bench.sh"
    model = treelite.frontend.from_xgboost(booster)
    lib = os.path.join(workdir, stem + "_tl2cgen.so")
    tl2cgen.export_lib(model, toolchain="gcc", libpath=lib, params={"parallel_comp": 8},
                       options=["-O3"], verbose=False)
    return tl2cgen.Predictor(lib, nthread=1, verbose=False), f"tl2cgen {tl2cgen.__version__} (treelite {treelite.__version__})"


def main():
    a = parse_args()
    binary = common.resolve_bin(a.bin)
    common.quiet_coremltools()
    import xgboost
    from coremltools.converters import xgboost as ct_xgb

    rng = np.random.RandomState(a.seed)
    Xtr = make_data(rng, 5000, a.features)
    w = rng.randn(a.features)
    y = Xtr @ w + np.sin(3 * Xtr[:, 0]) * 2 + Xtr[:, 1] * Xtr[:, 2] + 0.1 * rng.randn(len(Xtr))
    X = make_data(rng, a.rows, a.features)
    X32 = X.astype(np.float32)
    names = [f"f{i}" for i in range(a.features)]

    workdir = a.keep or tempfile.mkdtemp(prefix="cortado-trees-bench-")
    os.makedirs(workdir, exist_ok=True)
    common_params = dict(n_estimators=a.trees, max_depth=a.depth, learning_rate=0.1, base_score=0.5,
                         n_jobs=1, random_state=a.seed, tree_method="hist")

    cases = []
    reg = xgboost.XGBRegressor(**common_params).fit(Xtr, y)
    spec = ct_xgb.convert(reg, feature_names=names, target="y").get_spec()
    cases.append(("trees regressor", reg, spec, lambda raw: raw.reshape(-1, 1)))
    if not a.no_classifier:
        yb = (y > np.median(y)).astype(int)
        cls = xgboost.XGBClassifier(objective="binary:logistic", **common_params).fit(Xtr, yb)
        spec_c = ct_xgb.convert(cls, feature_names=names, target="label", mode="classifier").get_spec()
        # inplace_predict gives p(class 1); Cortado writes (p0, p1) per row.
        cases.append(("trees binary classifier", cls, spec_c, lambda raw: np.c_[1 - raw, raw]))

    results, tl_results, tl_note = [], [], None
    print(f"{a.rows} rows x {a.features} features, {a.trees} trees of max depth {a.depth}, "
          f"single thread, median of {a.repeat} runs")
    for name, m, spec, shape in cases:
        stem = name.replace(" ", "_")
        path = os.path.join(workdir, stem + ".mlmodel")
        with open(path, "wb") as f:
            f.write(spec.SerializeToString(deterministic=True))
        booster = m.get_booster()
        booster.set_param({"nthread": 1})
        xgb_s, xgb_cpu, xgb_pred = common.time_python(lambda: booster.inplace_predict(X32), a.repeat)
        report, pred = common.run_cortado(binary, "trees", path, X, a.repeat, workdir, stem)
        err = common.max_relative_error(pred, shape(np.asarray(xgb_pred, dtype=np.float64)))
        r = common.result_row(name, "xgboost", a.rows, xgb_s, xgb_cpu, report, err, TOLERANCE)
        if not report["all_finite"]:
            print(f"  {name}: Cortado produced non-finite outputs")
        print(f"  {name}: max |cortado - xgboost| / max(1, |xgboost|) = {err:.3g} "
              f"({'OK' if r['agree'] else 'MISMATCH'}, tolerance {TOLERANCE:g}; XGBoost sums in float32)")
        results.append(r)
        if not a.no_tl2cgen:
            predictor, tl_note = tl2cgen_predictor(booster, workdir, stem)
            if predictor is not None:
                import tl2cgen
                dm = tl2cgen.DMatrix(X32)
                tl_s, tl_cpu, tl_pred = common.time_python(lambda: predictor.predict(dm), a.repeat)
                tl_pred = shape(np.asarray(tl_pred, dtype=np.float64).reshape(-1))
                tl_err = common.max_relative_error(pred, tl_pred)
                rt = common.result_row(name, "tl2cgen", a.rows, tl_s, tl_cpu, report, tl_err, TOLERANCE)
                print(f"  {name}: max |cortado - tl2cgen| / max(1, |tl2cgen|) = {tl_err:.3g} "
                      f"({'OK' if rt['agree'] else 'MISMATCH'})")
                tl_results.append(rt)

    print()
    common.print_table(results, "xgboost")
    if tl_results:
        print()
        common.print_table(tl_results, "tl2cgen")
    if tl_note:
        print(tl_note + (", the forest compiled to C with gcc -O3, Predictor nthread=1, float32 rows" if tl_results else ""))
    print()
    print("wall: median elapsed time per run; cpu: median CPU time of the run (XGBoost: process CPU "
          "time; Cortado: its thread's CPU time), steadier when other work shares the cores.")
    print(f"CPU: {common.cpu_model()} ({common.cpu_flags()})")
    print(f"XGBoost {xgboost.__version__} inplace_predict (float32 input, nthread=1); "
          f"Cortado {os.path.relpath(binary)} (float64 input, dense batch path).")
    if a.keep:
        print(f"files kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    common.write_summary(a.summary, "trees_vs_xgboost",
                         f"{a.trees} trees, depth {a.depth}, {a.features} features, {a.rows} rows", results + tl_results)
    return 0 if all(r["agree"] for r in results + tl_results) else 1


if __name__ == "__main__":
    sys.exit(main())
