"""Per-user variants over one base, measured on a running `cortado serve` (not in `make test`).

The model: x[2048] -> dense 2048 -> ReLU -> dense 2048 -> ReLU -> dense 512 -> ReLU -> dense 10
(updatable head) -> softmax, cross-entropy, SGD; the three body layers hold ~40 MB of float32
weights, the head 512x10. The script starts the server with --model-control explicit and
--max-variants (default: the largest count asked, so that every variant stays compiled), and
reports:

- resident memory (VmRSS of the server process) with the base loaded, then with 1, 100, ...
  variants made by Update (each from 32 examples, 1 epoch);
- the latency of one Update of one variant with 32 examples (median over the variants made);
- prediction throughput (Predict over gRPC, one client thread, batch 1) on the base, and on
  variants chosen at random among --random-over (1,000) of them.

    .venv/bin/python bench/variants.py --bin .build/release --counts 1 100 1000
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402  (pins numerical libraries to one thread before numpy loads)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "Tests" / "Server"))

BODY = [(2048, 2048), (2048, 2048), (2048, 512)]
CLASSES = 10


def build_model(path):
    common.quiet_coremltools()
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder, SgdParams
    rng = np.random.default_rng(1)
    b = NeuralNetworkBuilder([("x", datatypes.Array(BODY[0][0]))], [("probs", None)])
    blob = "x"
    for i, (cin, cout) in enumerate(BODY):
        w = (rng.standard_normal((cout, cin), dtype=np.float32) / np.sqrt(cin)).astype(np.float32)
        b.add_inner_product(f"body{i}", W=w, b=np.zeros(cout, np.float32), input_channels=cin, output_channels=cout,
                            has_bias=True, input_name=blob, output_name=f"h{i}")
        b.add_activation(f"relu{i}", "RELU", f"h{i}", f"r{i}")
        blob = f"r{i}"
    b.add_inner_product("head", W=rng.standard_normal((CLASSES, BODY[-1][1])) * 0.05, b=np.zeros(CLASSES),
                        input_channels=BODY[-1][1], output_channels=CLASSES, has_bias=True, input_name=blob, output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["head"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    p = SgdParams(lr=0.05, batch=32)
    p.set_batch(32, [1, 8, 16, 32])
    b.set_sgd_optimizer(p)
    b.set_epochs(1, allowed_set=[1, 2, 5])
    b.spec.neuralNetwork.updateParams.shuffle.defaultValue = False
    folder = Path(path) / "net" / "1"
    folder.mkdir(parents=True)
    (folder / "model.mlmodel").write_bytes(b.spec.SerializeToString(deterministic=True))
    body_bytes = sum(cin * cout * 4 for cin, cout in BODY)
    return body_bytes


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss_mib(pid, limit=40):
    """VmRSS once it stops falling: the allocator (jemalloc) hands freed pages back to the
    system after a delay, so a reading right after an update still counts its transient
    training buffers."""
    last = rss_mib(pid)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(2)
        now = rss_mib(pid)
        if abs(now - last) < 0.5:
            return now
        last = now
    return last


def cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=common.DEFAULT_BIN, help="build folder holding cortado (default .build/release)")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 100, 1000], help="variant counts to measure memory at")
    parser.add_argument("--max-variants", type=int, help="--max-variants of the server (default: the largest count)")
    parser.add_argument("--random-over", type=int, default=1000, help="variants the throughput run picks from")
    parser.add_argument("--seconds", type=float, default=5, help="length of each throughput run")
    args = parser.parse_args()
    binary = common.resolve_bin(args.bin, "cortado")

    import grpc
    from protos import load_predictor
    P = load_predictor()
    pb = P.predictor_pb2

    def array(a, dtype=np.float32):
        a = np.ascontiguousarray(np.asarray(a, dtype=dtype))
        kind = pb.FLOAT32 if a.dtype == np.float32 else pb.INT32
        return pb.FeatureValue(multi_array=pb.MultiArray(data_type=kind, shape=list(a.shape), data=a.tobytes()))

    rng = np.random.default_rng(2)
    work = tempfile.mkdtemp(prefix="cortado-variants-")
    body_bytes = build_model(work)
    port = free_port()
    most = max(args.counts)
    max_variants = args.max_variants or max(most, 1)
    log = open(os.path.join(work, "serve.log"), "wb")
    server = subprocess.Popen([binary, "serve", "--models", work, "--host", "127.0.0.1", "--port", str(port), "--http-port", "0",
                               "--metrics-port=-1", "--model-control", "explicit", "--max-variants", str(max_variants),
                               "--log-level", "warning"], stdout=log, stderr=log)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.enable_http_proxy", 0),
                                                                      ("grpc.max_send_message_length", 64 << 20)])
        grpc.channel_ready_future(channel).result(timeout=120)
        stub = P.predictor_pb2_grpc.PredictorStub(channel)
        x0 = rng.standard_normal(BODY[0][0]).astype(np.float32)
        stub.Predict(pb.PredictRequest(model="net", inputs=[pb.Feature(name="x", value=array(x0))]), timeout=120)
        print(f"CPU: {common.cpu_model()} ({common.cpu_flags()}); server {binary}; --max-variants {max_variants}")
        print(f"base body weights: {body_bytes / 2**20:.1f} MiB float32; head 512x10")
        base_rss = settled_rss_mib(server.pid)
        print(f"{'variants':>9} {'RSS MiB':>9} {'over base MiB':>14} {'KiB per variant after the first':>32}")
        print(f"{0:>9} {base_rss:>9.1f} {0:>14.1f} {'':>32}")
        first_rss = None

        def throughput(pick):
            n, t_end = 0, time.perf_counter() + args.seconds
            xs = [array(rng.standard_normal(BODY[0][0]).astype(np.float32)) for _ in range(16)]
            t0 = time.perf_counter()
            while time.perf_counter() < t_end:
                stub.Predict(pb.PredictRequest(model="net", variant=pick(), inputs=[pb.Feature(name="x", value=xs[n % 16])]),
                             timeout=60)
                n += 1
            return n / (time.perf_counter() - t0)

        def report_throughput(over):
            base_rate = throughput(lambda: "")
            variant_rate = throughput(lambda: f"user{random.randrange(over)}")
            print(f"Predict, batch 1, one client: base {base_rate:,.0f}/s; a random variant of {over}: {variant_rate:,.0f}/s "
                  f"(ratio {variant_rate / base_rate:.2f})", flush=True)

        made, latencies, update_cpu = 0, [], 0.0
        for count in sorted(args.counts):
            while made < count:
                X = rng.standard_normal((32, BODY[0][0])).astype(np.float32)
                T = rng.integers(0, CLASSES, 32)
                rows = [pb.Row(features=[pb.Feature(name="x", value=array(x)),
                                         pb.Feature(name="probs_true", value=array([t], np.int32))]) for x, t in zip(X, T)]
                t0, c0 = time.perf_counter(), cpu_seconds(server.pid)
                events = list(stub.Update(pb.UpdateRequest(model="net", variant=f"user{made}", rows=rows), timeout=600))
                latencies.append(time.perf_counter() - t0)
                update_cpu += cpu_seconds(server.pid) - c0
                assert events[-1].WhichOneof("event") == "result", events[-1]
                made += 1
            rss = settled_rss_mib(server.pid)
            if count == 1 or first_rss is None:
                first_rss = (count, rss)
            marginal = (rss - first_rss[1]) * 1024 / (count - first_rss[0]) if count > first_rss[0] else float("nan")
            print(f"{count:>9} {rss:>9.1f} {rss - base_rss:>14.1f} {marginal:>32.1f}   "
                  f"(Update, 32 examples, 1 epoch: median {statistics.median(latencies) * 1e3:.1f} ms wall over {len(latencies)}, "
                  f"server CPU {update_cpu / len(latencies) * 1e3:.1f} ms each)",
                  flush=True)
            if count == args.random_over:
                report_throughput(count)
        listed = stub.ListVariants(pb.ListVariantsRequest(model="net"), timeout=60).variants
        print(f"listed {len(listed)} variants, {sum(v.loaded for v in listed)} compiled in memory")
        if made < args.random_over:
            report_throughput(made)
        print(f"RSS after the throughput runs: {rss_mib(server.pid):.1f} MiB")
    finally:
        server.terminate()
        server.wait(60)
        log.close()


if __name__ == "__main__":
    main()
