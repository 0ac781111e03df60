#!/usr/bin/env python3
"""Every benchmark in bench/, one after the other, then a summary of the ratios.

Runs bench/trees_vs_xgboost.py (Cortado vs XGBoost inplace_predict: 100 trees of depth 6 on
20 features, 10,000 rows) and bench/glm_vs_sklearn.py (Cortado vs scikit-learn linear models
on 20 features, 10,000 rows), each with the same `--bin`, all single-threaded, and
bench/nn_vs_onnxruntime.py (Tiny YOLO v2 and an MLP vs onnxruntime at 1 and all threads; it
needs the `cortado` executable beside `cortado-bench`) and bench/transformer_vs_onnxruntime.py
(a transformer-style block vs onnxruntime) and bench/mlprogram_vs_onnxruntime.py (a ResNet-style
CNN and a transformer encoder as ML Programs vs onnxruntime, fp32 and fp16). Each prints its
table as it goes; the summary at the end lists every case's median rows/s for both engines and
the ratio (wall clock and CPU time). Nothing asserts on time: the exit status is 1 only when an
engine disagreed with its reference (or a benchmark failed to run), 0 otherwise.

Then bench/server_vs_mlserver.py: `cortado serve` vs MLServer under perf_analyzer (concurrency
1, 16, 64), and h2load against nghttpd (the HTTP/2 ceiling) and against Cortado replaying a
recorded ModelInfer (needs scripts/setup-bench.sh; skip with --only trees glm).

Then bench/compiled_load.py: load time of a large network, .mlmodel vs `cortado compile`'s form.

Then bench/scalar_inputs.py: one XGBoost forest served with 20 scalar inputs and with one
20-wide array, calls/s of each under cortado-load (concurrency 16) and their ratio.

Then bench/variants.py with its small default (300 variants stored as heads): memory, first-use
latency, update latency and throughput across variants (`--stored 10000` by hand).

Usage: .venv/bin/python bench/run_all.py [--bin .build/release] [--only trees|glm|nn|transformer|mlprogram|server|compiled|scalar|variants ...]
`make bench` builds in release mode and runs this with --bin .build/release.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (sets the one-thread environment the children inherit)

BENCHMARKS = [
    ("trees", "trees_vs_xgboost.py", "Cortado vs XGBoost inplace_predict"),
    ("glm", "glm_vs_sklearn.py", "Cortado vs scikit-learn"),
    ("nn", "nn_vs_onnxruntime.py", "Cortado vs onnxruntime on neural networks"),
    ("transformer", "transformer_vs_onnxruntime.py", "Cortado vs onnxruntime on a transformer-style block"),
    ("mlprogram", "mlprogram_vs_onnxruntime.py", "Cortado vs onnxruntime on ML Programs (CNN, transformer encoder)"),
]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=common.DEFAULT_BIN,
                   help="build folder holding cortado-bench, or the executable (default .build/release)")
    p.add_argument("--only", nargs="+", choices=[b[0] for b in BENCHMARKS] + ["server", "compiled", "scalar", "variants"], help="run only these")
    a = p.parse_args()
    binary = common.resolve_bin(a.bin)

    summaries, failures = [], []
    started = time.perf_counter()
    print(f"CPU: {common.cpu_model()} ({common.cpu_flags()}); Cortado's kernel path: {common.kernel_path()} "
          "(CORTADO_ISA forces a narrower one)", flush=True)
    with tempfile.TemporaryDirectory(prefix="cortado-bench-") as tmp:
        for key, script, title in BENCHMARKS:
            if a.only and key not in a.only:
                continue
            print(f"=== {title} ({script}) ===", flush=True)
            summary_path = os.path.join(tmp, key + ".json")
            t0 = time.perf_counter()
            # The children inherit the one-thread environment set by `common`.
            done = subprocess.run([sys.executable, os.path.join(HERE, script), "--bin", binary,
                                   "--summary", summary_path])
            print(f"({script}: exit {done.returncode}, {time.perf_counter() - t0:.0f} s)\n", flush=True)
            if done.returncode != 0:
                failures.append(f"{script} exited {done.returncode}")
            if os.path.exists(summary_path):
                with open(summary_path) as f:
                    summaries.append(json.load(f))
            elif done.returncode == 0:
                failures.append(f"{script} wrote no summary")

    if not a.only or "server" in a.only:
        print("=== Cortado serve vs MLServer under perf_analyzer; HTTP/2 ceiling (server_vs_mlserver.py) ===", flush=True)
        done = subprocess.run([sys.executable, os.path.join(HERE, "server_vs_mlserver.py"), "--bin", os.path.dirname(binary)])
        if done.returncode != 0:
            failures.append(f"server_vs_mlserver.py exited {done.returncode}")
        print()

    if not a.only or "compiled" in a.only:
        print("=== Load time of a large network: .mlmodel vs compiled (compiled_load.py) ===", flush=True)
        done = subprocess.run([sys.executable, os.path.join(HERE, "compiled_load.py"), "--bin", os.path.dirname(binary)])
        if done.returncode != 0:
            failures.append(f"compiled_load.py exited {done.returncode}")
        print()

    if not a.only or "scalar" in a.only:
        print("=== 20 scalar inputs vs one 20-wide array, same forest, served (scalar_inputs.py) ===", flush=True)
        done = subprocess.run([sys.executable, os.path.join(HERE, "scalar_inputs.py"), "--bin", os.path.dirname(binary)])
        if done.returncode != 0:
            failures.append(f"scalar_inputs.py exited {done.returncode}")
        print()

    if not a.only or "variants" in a.only:
        print("=== Per-user variants stored as heads, 300 of them (variants.py; --stored 10000 by hand) ===", flush=True)
        done = subprocess.run([sys.executable, os.path.join(HERE, "variants.py"), "--bin", os.path.dirname(binary), "--seconds", "3"])
        if done.returncode != 0:
            failures.append(f"variants.py exited {done.returncode}")
        print()

    rows = [r for s in summaries for r in s["results"]]
    print("=== Summary: Cortado throughput relative to each engine's own batch predict "
          "(single thread, medians) ===")
    if rows:
        w = max(len(r["case"]) for r in rows)
        print(f"{'case':<{w}} {'vs':<8} {'cortado rows/s':>15} {'theirs rows/s':>15} "
              f"{'wall ratio':>11} {'cpu ratio':>10}  agree")
        for r in rows:
            print(f"{r['case']:<{w}} {r['reference']:<8} {r['cortado_rows_per_second']:>15,.0f} "
                  f"{r['reference_rows_per_second']:>15,.0f} {r['wall_ratio']:>10.2f}x {r['cpu_ratio']:>9.2f}x  "
                  f"{'yes' if r['agree'] else 'NO (max error %.3g > %g)' % (r['max_error'], r['tolerance'])}")
    print("ratio = Cortado rows/s ÷ the other engine's rows/s (above 1: Cortado is faster).")
    for s in summaries:
        print(f"  {s['benchmark']}: {s['description']}")
    disagreed = [r["case"] for r in rows if not r["agree"]]
    if disagreed:
        failures.append("engines disagreed on: " + ", ".join(disagreed))
    print(f"total {time.perf_counter() - started:.0f} s")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
