"""Two Cortado binaries side by side on the REST path: server CPU per call and throughput.

Both serve the bench's logreg and xgb models (`server_vs_mlserver.make_models`) on their own
ports at once; h2load `--h1` replays one JSON infer request (`rest_json_body`, the body
perf_analyzer's JSON format sends) against one then the other, `--rounds` times, alternating,
so each meets the same background load. A round sends `--requests` calls from `--connections`
connections; the server's CPU (utime + stime from /proc) over the round divided by the calls
is its CPU per call. Prints medians per binary and the after/before ratios.

    .venv/bin/python bench/rest_before_after.py --before /work/main/.build/release/cortado \\
        --after .build/release/cortado
"""
import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

_spec = importlib.util.spec_from_file_location("server_vs_mlserver", os.path.join(HERE, "server_vs_mlserver.py"))
svm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(svm)


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def h2load_round(address, model, body, connections, requests):
    """(calls/s, calls) of one h2load --h1 run; raises unless every answer was 2xx."""
    cmd = ["h2load", "--h1", "-c", str(connections), "-n", str(requests), "-d", body,
           "-H", "content-type: application/json", f"http://{address}/v2/models/{model}/infer"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    rate = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", proc.stdout)
    codes = re.search(r"status codes: (\d+) 2xx", proc.stdout)
    if proc.returncode != 0 or not rate or not codes or int(codes.group(1)) != requests:
        raise RuntimeError(f"h2load failed against {address}: {proc.stdout[-600:]}{proc.stderr[-600:]}")
    return float(rate.group(1)), requests


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the reference cortado executable")
    p.add_argument("--after", required=True, help="the cortado executable under test")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--connections", type=int, default=16)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="cortado-rest-ab-")
    cortado_repo, _, row = svm.make_models(work)
    servers = []
    try:
        for label, binary in (("before", args.before), ("after", args.after)):
            grpc, http = svm.free_port(), svm.free_port()
            log = open(os.path.join(work, f"{label}.log"), "w")
            proc = subprocess.Popen([binary, "serve", "--models", cortado_repo, "--port", str(grpc), "--http-port", str(http),
                                     "--metrics-port=-1", "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT)
            proc.log_path = log.name
            servers.append((label, proc, f"127.0.0.1:{grpc}", f"127.0.0.1:{http}"))
        for _, proc, grpc, _ in servers:
            svm.wait_ready(grpc, ["logreg", "xgb"], proc)
        print(f"REST, h2load --h1 -c {args.connections}, {args.requests} calls a round, {args.rounds} alternating rounds; "
              f"CPU: {common.cpu_model()}")
        for model in ("logreg", "xgb"):
            body = svm.rest_json_body(work, model, row[0])
            rps = {label: [] for label, *_ in servers}
            cpu = {label: [] for label, *_ in servers}
            for _, _, _, http in servers:  # warm-up
                h2load_round(http, model, body, args.connections, 2000)
            for _ in range(args.rounds):
                for label, proc, _, http in servers:
                    start = cpu_seconds(proc.pid)
                    rate, calls = h2load_round(http, model, body, args.connections, args.requests)
                    rps[label].append(rate)
                    cpu[label].append((cpu_seconds(proc.pid) - start) / calls * 1e6)
            for label, *_ in servers:
                print(f"  {model:<7} {label:<7} median {statistics.median(rps[label]):>9.0f} calls/s "
                      f"(range {min(rps[label]):.0f}–{max(rps[label]):.0f}), server CPU per call median "
                      f"{statistics.median(cpu[label]):.1f} µs (range {min(cpu[label]):.1f}–{max(cpu[label]):.1f})")
            ratios = [a / b for a, b in zip(rps["after"], rps["before"])]
            print(f"  {model:<7} after/before: throughput {statistics.median(rps['after']) / statistics.median(rps['before']):.2f}× "
                  f"(rounds' own ratios {min(ratios):.2f}–{max(ratios):.2f}), CPU per call "
                  f"{statistics.median(cpu['after']) / statistics.median(cpu['before']):.2f}×")
    finally:
        for _, proc, _, _ in servers:
            svm.stop(proc)


if __name__ == "__main__":
    main()
