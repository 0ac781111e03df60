#!/usr/bin/env python3
"""The server's loop thread and its dynamic batcher, measured side by side.

1. h2load replay (`--replay`): nghttpd serving a 62-byte file (the HTTP/2 ceiling) and each
   `--bin` given answering one recorded ModelInfer (the logistic regression of
   server_vs_mlserver.py), 16 connections × 16 streams, in rounds that alternate the servers,
   so builds before and after a change meet the same machine load. Two placements: unpinned
   (client and server share both cores, as server_vs_mlserver.py measures) and pinned (the
   server on CPU 0, h2load on CPU 1). Prints each server's median req/s and its fraction of
   the ceiling's median, and the server's CPU time per request by thread (loop thread,
   workers, all; from /proc, so steadier than req/s on a shared machine) with the rate the
   loop thread alone could sustain.
2. Instructions per call (`--instructions`): each `--bin` runs under valgrind's callgrind
   (a copy without debug info: valgrind 3.19 cannot read Swift's DWARF 5), instrumentation
   switched on only while h2load replays `--requests` ModelInfer calls after a warm-up; the
   user-space instructions executed per call, all threads. Deterministic to ~0.1% from run
   to run, so it compares builds on a busy machine where req/s cannot; it leaves out the
   kernel and stalls (cache misses, wake-ups).
3. The dynamic batcher (`--batcher`): an MLP 784-512-512-10 neural network (the one of
   nn_vs_onnxruntime.py) served by the last `--bin` with and without
   `--max-batch-size 16`, perf_analyzer at concurrency 16, batch 1, the server on CPU 0 and
   perf_analyzer on CPU 1, alternating rounds; medians of throughput and p50/p99, plus the
   executions the server counted per inference.
4. perf_analyzer side by side (`--perf`): every `--bin` in turn on the logreg and xgb models of
   server_vs_mlserver.py, gRPC, concurrency 16, batch 1, server on CPU 0 and perf_analyzer on
   CPU 1, rounds alternating the builds; median throughput and p99 per build, and each build's
   ratio to the first.

Nothing asserts on time. Usage:
  .venv/bin/python bench/server_replay_batching.py --bin .build-rel/release [--bin OTHER] [--rounds 5]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (pins numerical libraries to one thread before numpy loads)
import server_vs_mlserver as sv  # noqa: E402




def serve(binary, repo, work, *args, cpus=None):
    port = sv.free_port()
    log = open(os.path.join(work, f"cortado-{port}.log"), "w")
    cmd = [binary, "serve", "--models", repo, "--port", str(port), "--metrics-port=-1", "--log-level", "warning", *args]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log.name
    return proc, f"127.0.0.1:{port}"


def thread_cpu(pid):
    """CPU seconds (user + system) of a process's threads: {tid: (name, seconds)}."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def server_threads(sample, used):
    """(loop tid, worker tids) of a `cortado serve` with the default single worker. Builds
    that name their threads say so; in older ones (threads all called "cortado") the loop is
    the last one started before the load, and the worker the other one that worked most."""
    named = {tid: name for tid, (name, _) in sample.items()}
    loop = [t for t, n in named.items() if n == "cortado-loop"]
    workers = [t for t, n in named.items() if n.startswith("cortado-work")]
    if loop:
        return loop[0], workers
    plain = sorted(t for t, n in named.items() if n == "cortado")
    rest = [t for t in plain[:-1]]
    return plain[-1], [max(rest, key=lambda t: used.get(t, 0))] if rest else []


def median(values):
    return statistics.median(values) if values else float("nan")


def spread(values):
    return f"{min(values):,.0f}–{max(values):,.0f}" if values else "-"


def replay(binaries, rounds, requests, work):
    repo, _, row = sv.make_models(work)
    body = sv.infer_request_body(work, "logreg", row[0])
    www = os.path.join(work, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "tiny"), "wb") as fh:
        fh.write(b"x" * 62)
    grpc = ["-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    for placement, server_cpus, client in (("unpinned", None, ()), ("pinned", "0", ("taskset", "-c", "1"))):
        rates = {"nghttpd": []}
        rates.update({b: [] for b in binaries})
        # Server CPU per request (µs), by thread: steadier than req/s on a shared machine.
        cpu = {b: {"loop": [], "workers": [], "total": []} for b in binaries}
        for _ in range(rounds):
            port = sv.free_port()
            cmd = ["nghttpd", "--no-tls", "-d", www, str(port)]
            nghttpd = subprocess.Popen((["taskset", "-c", server_cpus] if server_cpus else []) + cmd,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            r = sv.h2load(f"http://127.0.0.1:{port}/tiny", [], requests, prefix=client)
            sv.stop(nghttpd)
            if "rps" in r:
                rates["nghttpd"].append(r["rps"])
            for b in binaries:
                proc, url = serve(b, repo, work, cpus=server_cpus)
                try:
                    sv.wait_ready(url, ["logreg"], proc)
                    before = thread_cpu(proc.pid)
                    r = sv.h2load(f"http://{url}/inference.GRPCInferenceService/ModelInfer", grpc, requests, prefix=client)
                    after = thread_cpu(proc.pid)
                finally:
                    sv.stop(proc)
                if "rps" in r and r["failed"] == 0:
                    rates[b].append(r["rps"])
                    used = {t: after[t][1] - before.get(t, ("", 0))[1] for t in after}
                    loop, workers = server_threads(before, used)
                    per = 1e6 / requests
                    cpu[b]["loop"].append(used.get(loop, 0) * per)
                    cpu[b]["workers"].append(sum(used.get(t, 0) for t in workers) * per)
                    cpu[b]["total"].append(sum(used.values()) * per)
                else:
                    print(f"  {b}: {r}", file=sys.stderr)
        ceiling = median(rates["nghttpd"])
        print(f"\nh2load {placement}, 16 connections × 16 streams, {requests} requests, {rounds} rounds (median, range)")
        print(f"  {'nghttpd 62-byte file (ceiling)':<44} {ceiling:>10,.0f} req/s  ({spread(rates['nghttpd'])})")
        for b in binaries:
            m = median(rates[b])
            print(f"  {'cortado ModelInfer ' + b:<44} {m:>10,.0f} req/s  ({spread(rates[b])})  {m / ceiling:.0%} of the ceiling")
            c = cpu[b]
            loop = median(c["loop"])
            print(f"  {'':<44} server CPU per request: loop thread {loop:.2f} µs, workers {median(c['workers']):.2f} µs, "
                  f"all {median(c['total']):.2f} µs; the loop alone could take {1e6 / loop:,.0f} req/s "
                  f"({1e6 / loop / ceiling:.0%} of the ceiling)")
        sys.stdout.flush()


def instructions(binaries, requests, work, keep=None):
    """User-space instructions per replayed ModelInfer call, under callgrind. With `keep`, each
    run's callgrind profile is copied there (callgrind_annotate reads it)."""
    for tool in ("valgrind", "callgrind_control", "objcopy"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run scripts/setup-bench.sh")
    repo, _, row = sv.make_models(work)
    body = sv.infer_request_body(work, "logreg", row[0])
    grpc = ["-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    print(f"\ninstructions per ModelInfer call (callgrind, user space, all threads; {requests} calls after a warm-up)")
    for i, b in enumerate(binaries):
        stripped = os.path.join(work, f"cortado-{i}")
        subprocess.run(["objcopy", "--strip-debug", b, stripped], check=True)
        out = os.path.join(work, f"callgrind-{i}.out")
        port = sv.free_port()
        log = open(os.path.join(work, f"callgrind-{i}.log"), "w")
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                                 stripped, "serve", "--models", repo, "--port", str(port), "--metrics-port=-1",
                                 "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
        url = f"127.0.0.1:{port}"
        try:
            sv.wait_ready(url, ["logreg"], proc, timeout=300)
            path = f"http://{url}/inference.GRPCInferenceService/ModelInfer"
            sv.h2load(path, grpc, 5000)
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], capture_output=True, check=True)
            r = sv.h2load(path, grpc, requests)
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], capture_output=True, check=True)
        finally:
            sv.stop(proc)
        total = None
        with open(out) as fh:
            for line in fh:
                if line.startswith("totals:") or line.startswith("summary:"):
                    total = int(line.split()[1])
        if total is None or r.get("failed", 1) != 0:
            print(f"  {b}: no result ({r})", file=sys.stderr)
            continue
        print(f"  {b:<60} {total / requests:>10,.0f} instructions a call")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(out, os.path.join(keep, f"callgrind-{i}.out"))
            print(f"  {'':<60} profile: {os.path.join(keep, f'callgrind-{i}.out')}")
        sys.stdout.flush()


def perf_side_by_side(binaries, rounds, interval_ms, work):
    """perf_analyzer (gRPC, concurrency 16, batch 1) against each build in turn, on the logreg and
    xgb models, server on CPU 0 and perf_analyzer on CPU 1, rounds alternating the builds (so each
    meets the same background load): median throughput and p99 per build and model."""
    repo, _, _ = sv.make_models(work)
    models = ("logreg", "xgb")
    results = {(b, m): [] for b in binaries for m in models}
    for _ in range(rounds):
        for b in binaries:
            proc, url = serve(b, repo, work, cpus="0")
            try:
                sv.wait_ready(url, list(models), proc)
                for m in models:
                    r = sv.perf_analyzer(url, m, 16, interval_ms, work, prefix=("taskset", "-c", "1"))
                    if "error" in r:
                        print(f"  {b} {m}: {r['error']}", file=sys.stderr)
                    else:
                        results[(b, m)].append(r)
            finally:
                sv.stop(proc)
    print(f"\nperf_analyzer -i grpc, concurrency 16, batch 1, server CPU 0, client CPU 1, {rounds} rounds (median, range)")
    for m in models:
        base = None
        for b in binaries:
            rs = results[(b, m)]
            if not rs:
                continue
            t = [r["throughput"] for r in rs]
            med = median(t)
            base = base or med
            print(f"  {m:<7} {b:<52} {med:>9,.0f} infer/s ({spread(t)})  p99 {median([r['p99_us'] for r in rs]):>6,.0f} µs  "
                  f"{med / base:.2f}× the first build")
    sys.stdout.flush()


def batcher(binary, rounds, interval_ms, work, delays=(0,)):
    import nn_vs_onnxruntime as nn
    import tritonclient.grpc as tc
    common.quiet_coremltools()
    builder, _ = nn.mlp_models()
    repo = os.path.join(work, "nn")
    os.makedirs(os.path.join(repo, "mlp", "1"))
    nn.save(builder.spec, os.path.join(repo, "mlp", "1", "model.mlmodel"))
    setups = [("batcher off", ())] + [(f"batcher 16, {d} µs", ("--max-batch-size", "16", "--max-queue-delay-us", str(d))) for d in delays]
    results = {label: [] for label, _ in setups}
    for _ in range(rounds):
        for label, args in setups:
            proc, url = serve(binary, repo, work, *args, cpus="0")
            try:
                sv.wait_ready(url, ["mlp"], proc)
                r = sv.perf_analyzer(url, "mlp", 16, interval_ms, work, prefix=("taskset", "-c", "1"))
                client = tc.InferenceServerClient(url)
                s = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
                client.close()
                r["rows_per_execution"] = int(s["inference_count"]) / max(1, int(s["execution_count"]))
            finally:
                sv.stop(proc)
            if "error" in r:
                print(f"  {label}: {r['error']}", file=sys.stderr)
            else:
                results[label].append(r)
    print(f"\nperf_analyzer, MLP 784-512-512-10, concurrency 16, batch 1, server CPU 0, client CPU 1, {rounds} rounds (median, range)")
    base = None
    for label, _ in setups:
        rs = results[label]
        t = [r["throughput"] for r in rs]
        m = median(t)
        base = base or m
        print(f"  {label:<20} {m:>9,.0f} infer/s ({spread(t)})  p50 {median([r['p50_us'] for r in rs]):>6,.0f} µs  "
              f"p99 {median([r['p99_us'] for r in rs]):>6,.0f} µs  rows/execution {median([r['rows_per_execution'] for r in rs]):.1f}  "
              f"{m / base:.2f}×")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", action="append", help="build folder holding `cortado`, or the executable (repeatable)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=200_000, help="h2load requests per run")
    p.add_argument("--interval-ms", type=int, default=3000, help="perf_analyzer measurement window")
    p.add_argument("--replay", action="store_true", help="only the h2load replay")
    p.add_argument("--batcher", action="store_true", help="only the batcher")
    p.add_argument("--perf", action="store_true",
                   help="only perf_analyzer (gRPC, concurrency 16) against each --bin in turn, logreg and xgb")
    p.add_argument("--instructions", action="store_true",
                   help="only the instructions per call under callgrind (use --requests 20000: valgrind runs ~50× slower)")
    p.add_argument("--profile-to", metavar="DIR",
                   help="with --instructions: keep each build's callgrind profile in DIR (read it with callgrind_annotate)")
    p.add_argument("--delays", default="0", help="batcher --max-queue-delay-us values to try, comma-separated")
    args = p.parse_args()
    binaries = []
    for b in args.bin or [os.path.join(sv.ROOT, ".build", "release")]:
        exe = os.path.join(b, "cortado") if os.path.isdir(b) else b
        if not os.access(exe, os.X_OK):
            sys.exit(f"no cortado executable at {exe}")
        binaries.append(exe)
    for tool in ("h2load", "nghttpd", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run scripts/setup-bench.sh")
    both = not args.replay and not args.batcher and not args.instructions and not args.perf
    work = tempfile.mkdtemp(prefix="cortado-replaybatch-")
    try:
        if args.replay or both:
            replay(binaries, args.rounds, args.requests, work)
        if args.instructions:
            instructions(binaries, args.requests, work, args.profile_to)
        if args.perf:
            perf_side_by_side(binaries, args.rounds, args.interval_ms, work)
        if args.batcher or both:
            batcher(binaries[-1], args.rounds, args.interval_ms, work, [int(d) for d in args.delays.split(",")])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
