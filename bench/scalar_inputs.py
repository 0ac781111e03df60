#!/usr/bin/env python3
"""Per-input cost over the wire: one XGBoost forest served with 20 scalar inputs (what
coremltools' XGBoost converter writes by default: one `double` input per feature) and with one
20-wide array input, under the same closed-loop load.

Trains an XGBoost regressor (100 trees, depth 6, 20 features), converts it with named
features, and derives the array twin by replacing the 20 scalar input descriptions with one
`MultiArray<Double>[20]` (a tree ensemble reads the concatenation of its inputs in order, so the
two models compute the same function; the script checks that both answer the same value for
the same row through tritonclient). Both go in one repository served by one `cortado serve`
(release build); `cortado-load --api oip --concurrency 16` then drives each model in turn, in
alternating rounds, and the script prints the median calls/s of each and the ratio
scalar/array (goal in #23: at least 0.75). It also reads the server's own CPU time
(/proc/PID/stat) around each run and prints the server's CPU microseconds per call: on a
machine shared with other work the calls/s swing, the CPU cost per call much less, so the
ratio of those (array/scalar) is printed too, beside the client's (cortado-load's own CPU per
call, from its CSV: the client shares the cores, so its cost per call bounds the calls/s too).

Usage: .venv/bin/python bench/scalar_inputs.py [--bin .build/release] [--seconds 5]
       [--rounds 3] [--workers N] [--keep DIR] [--summary FILE.json]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import common  # noqa: F401  (one-thread environment before numpy loads)
import numpy as np
from server_vs_mlserver import cortado_load, free_port, stop, wait_ready

FEATURES = 20


def make_models(repo, seed):
    common.quiet_coremltools()
    import xgboost
    from coremltools.converters import xgboost as ct_xgb
    from coremltools.proto import FeatureTypes_pb2

    rng = np.random.RandomState(seed)
    X = rng.randn(4000, FEATURES).astype(np.float32).astype(np.float64)
    y = X @ rng.randn(FEATURES) + np.sin(3 * X[:, 0])
    reg = xgboost.XGBRegressor(n_estimators=100, max_depth=6, base_score=0.5, n_jobs=1,
                               random_state=seed, tree_method="hist").fit(X, y)
    names = [f"f{i}" for i in range(FEATURES)]
    scalar = ct_xgb.convert(reg, feature_names=names, target="y").get_spec()
    array = ct_xgb.convert(reg, feature_names=names, target="y").get_spec()
    del array.description.input[:]
    inp = array.description.input.add()
    inp.name = "x"
    inp.type.multiArrayType.shape.append(FEATURES)
    inp.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    for name, spec in (("scalar", scalar), ("array", array)):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "1", "model.mlmodel"), "wb") as fh:
            fh.write(spec.SerializeToString())
    return X[:1]


def check_same_answer(url, row):
    import tritonclient.grpc as tc
    client = tc.InferenceServerClient(url)
    inputs = []
    for i in range(FEATURES):
        t = tc.InferInput(f"f{i}", [1, 1], "FP64")
        t.set_data_from_numpy(row[:, i:i + 1].astype(np.float64))
        inputs.append(t)
    a = client.infer("scalar", inputs).as_numpy("y")
    t = tc.InferInput("x", [1, FEATURES], "FP64")
    t.set_data_from_numpy(row.astype(np.float64))
    b = client.infer("array", [t]).as_numpy("y")
    if not np.allclose(a, b, rtol=1e-12, atol=0):
        sys.exit(f"the scalar and array models disagree: {a} vs {b}")
    return float(a.ravel()[0])


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=common.DEFAULT_BIN, help="build folder holding cortado and cortado-load")
    p.add_argument("--seconds", type=int, default=5, help="measured seconds per run")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=0, help="cortado serve --workers (0: its default)")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--keep")
    p.add_argument("--summary")
    a = p.parse_args()
    folder = a.bin if os.path.isdir(a.bin) else os.path.dirname(a.bin)
    cortado, load = os.path.join(folder, "cortado"), os.path.join(folder, "cortado-load")
    for exe in (cortado, load):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found: swift build -c release --product cortado && swift build -c release --product cortado-load")

    work = a.keep or tempfile.mkdtemp(prefix="cortado-scalar-bench-")
    os.makedirs(work, exist_ok=True)
    repo = os.path.join(work, "repo")
    row = make_models(repo, a.seed)
    port = free_port()
    url = f"127.0.0.1:{port}"
    log = open(os.path.join(work, "serve.log"), "w")
    cmd = [cortado, "serve", "--models", repo, "--port", str(port), "--http-port", "0", "--metrics-port=-1"]
    if a.workers:
        cmd += ["--workers", str(a.workers)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log.name
    runs = {"scalar": [], "array": []}
    cpu_per_call = {"scalar": [], "array": []}
    client_per_call = {"scalar": [], "array": []}
    try:
        wait_ready(url, ["scalar", "array"], proc)
        value = check_same_answer(url, row)
        print(f"CPU: {common.cpu_model()} ({common.cpu_flags()}); both models answer {value:.6g} for the same row")
        print(f"cortado-load --api oip --concurrency 16, {a.seconds} s per run, {a.rounds} alternating rounds")
        for r in range(a.rounds):
            for model in (("scalar", "array") if r % 2 == 0 else ("array", "scalar")):
                c0 = cpu_seconds(proc.pid)
                res = cortado_load(load, url, model, a.seconds, os.path.join(work, f"{model}-{r}.csv"))
                spent = cpu_seconds(proc.pid) - c0
                if "error" in res or res.get("failed"):
                    sys.exit(f"{model}: cortado-load failed: {res}")
                runs[model].append(res["throughput"])
                # The run's calls include its 1 s warm-up at about the same rate.
                us = 1e6 * spent / (res["throughput"] * (a.seconds + 1))
                cpu_per_call[model].append(us)
                client_us = 1e6 * res["cpu_percent"] / 100 / res["throughput"]
                client_per_call[model].append(client_us)
                print(f"  round {r + 1} {model:<6} {res['throughput']:>10,.0f} calls/s  p50 {res['p50_us']:.0f} us  "
                      f"server CPU {us:.1f} us/call  client CPU {client_us:.1f} us/call")
    finally:
        stop(proc)
        log.close()
    med = {m: statistics.median(v) for m, v in runs.items()}
    ratio = med["scalar"] / med["array"]
    cpu = {m: statistics.median(v) for m, v in cpu_per_call.items()}
    print(f"median calls/s: 20 scalar inputs {med['scalar']:,.0f}, one 20-wide array {med['array']:,.0f}; "
          f"scalar/array {ratio:.2f} (goal >= 0.75)")
    print(f"median server CPU per call: scalar {cpu['scalar']:.1f} us, array {cpu['array']:.1f} us; "
          f"array/scalar {cpu['array'] / cpu['scalar']:.2f} (the calls/s ratio a server bound by its own CPU reaches)")
    client = {m: statistics.median(v) for m, v in client_per_call.items()}
    print(f"median client CPU per call: scalar {client['scalar']:.1f} us, array {client['array']:.1f} us")
    if a.summary:
        with open(a.summary, "w") as fh:
            json.dump({"benchmark": "scalar_inputs", "cpu": common.cpu_model(), "runs": runs,
                       "median": med, "ratio": ratio,
                       "server_cpu_us_per_call": cpu_per_call, "cpu_ratio": cpu["array"] / cpu["scalar"],
                       "client_cpu_us_per_call": client_per_call}, fh, indent=1)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
