"""Per-user variants over one base, stored as heads, measured on a running `cortado serve`
(not in `make bench`; run it by hand).

The model: x[2048] -> dense 2048 -> ReLU -> dense 2048 -> ReLU -> dense 512 -> ReLU -> dense 10
(updatable head) -> softmax, cross-entropy, SGD; the three body layers hold ~40 MB of float32
weights, the head 512x10. The run, on one repository folder:

1. A server with no variant makes --via-update variants by Update (32 examples, 1 epoch
   each), which it stores as heads (`<repo>/net/variants/<name>.head`): the Update latency
   (median wall, and the server's CPU per update). Then it stops.
2. The script writes the other --stored minus --via-update heads itself, in the same format
   (a Core ML Model message holding the head layer with random weights, the base version in
   its metadata): an Update per variant would take ~0.3 s each (45 minutes for 10,000).
3. A second server starts on the folder (its start time with and without the heads, side by
   side) and learns the heads by listing them; the script predicts once on every variant in
   turn (each read from disk, merged with the base, compiled: the first-use latency, median,
   beside the base's own Predict latency) with --max-variants (1,000) compiled at most, and
   prints the server's resident memory (VmRSS) after 1, 100, 1,000, 10,000 variants used.
4. Predict throughput (batch 1, one grpcio client) on the base, on variants drawn at random
   among 1,000 (warmed: all compiled), and among all of them (mostly not compiled: a read and
   a compile per call).

    .venv/bin/python bench/variants.py --bin .build/release                  # 300 variants
    .venv/bin/python bench/variants.py --bin .build/release --stored 10000   # the #19 figure
"""
import argparse
import os
import random
import shutil
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
BASE_VERSION_KEY = "cortado.variant.base-version"
HEAD_FORM_KEY = "cortado.variant.head"


def build_model(path):
    """Writes the model to <path>/net/1/model.mlmodel; returns (spec, body bytes)."""
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
    return b.spec, sum(cin * cout * 4 for cin, cout in BODY)


def write_heads(repo, spec, names, seed=3):
    """Head files as the server writes them (README "Updatable models"): a Model message with
    the changed layer only, marked as such, and the base version; random head weights."""
    from coremltools.proto import Model_pb2
    rng = np.random.default_rng(seed)
    template = Model_pb2.Model()
    template.specificationVersion = spec.specificationVersion
    template.description.metadata.userDefined[HEAD_FORM_KEY] = "changed-layers"
    template.description.metadata.userDefined[BASE_VERSION_KEY] = "1"
    template.description.metadata.userDefined["cortado.variant.updates"] = "1"
    template.neuralNetwork.layers.add().CopyFrom(next(l for l in spec.neuralNetwork.layers if l.name == "head"))
    folder = Path(repo) / "net" / "variants"
    folder.mkdir(parents=True, exist_ok=True)
    sizes = []
    for name in names:
        head = Model_pb2.Model()
        head.CopyFrom(template)
        ip = head.neuralNetwork.layers[0].innerProduct
        del ip.weights.floatValue[:]
        ip.weights.floatValue.extend(rng.standard_normal(CLASSES * BODY[-1][1]).astype(np.float32) * 0.05)
        del ip.bias.floatValue[:]
        ip.bias.floatValue.extend(rng.standard_normal(CLASSES).astype(np.float32) * 0.05)
        data = head.SerializeToString(deterministic=True)
        (folder / f"{name}.head").write_bytes(data)
        sizes.append(len(data))
    return sizes


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settled_rss_mib(pid, limit=40):
    """VmRSS once it stops falling: the allocator hands freed pages back to the system after
    a delay, so a reading right after loads or an update still counts transient buffers."""
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


class Serve:
    """One `cortado serve` on the repository; `started` is the seconds until it answered."""

    def __init__(self, binary, repo, max_variants, log):
        import grpc
        self.port = free_port()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([binary, "serve", "--models", str(repo), "--host", "127.0.0.1", "--port", str(self.port),
                                      "--http-port", "0", "--metrics-port=-1", "--model-control", "explicit",
                                      "--max-variants", str(max_variants), "--log-level", "warning"], stdout=log, stderr=log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[("grpc.enable_http_proxy", 0),
                                                                               ("grpc.max_send_message_length", 64 << 20)])
        grpc.channel_ready_future(self.channel).result(timeout=300)
        self.started = time.perf_counter() - t0

    def stop(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(60)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=common.DEFAULT_BIN, help="build folder holding cortado (default .build/release)")
    parser.add_argument("--stored", type=int, default=300, help="variants stored in the repository (default 300; 10000 for #19's figure)")
    parser.add_argument("--via-update", type=int, default=8, help="of them made by the Update RPC, the rest written as head files (default 8)")
    parser.add_argument("--max-variants", type=int, default=1000, help="--max-variants of the server (default 1000)")
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[1, 100, 1000, 10000],
                        help="variants used at which to read the server's memory (default 1 100 1000 10000)")
    parser.add_argument("--random-over", type=int, default=1000, help="variants the warm throughput run picks from (default 1000)")
    parser.add_argument("--seconds", type=float, default=5, help="length of each throughput run")
    parser.add_argument("--keep", help="build the repository in this (new) folder and keep it")
    args = parser.parse_args()
    if not 0 < args.via_update <= args.stored:
        parser.error("--via-update must be between 1 and --stored")
    binary = common.resolve_bin(args.bin, "cortado")

    import grpc  # noqa: F401
    from protos import load_predictor
    P = load_predictor()
    pb = P.predictor_pb2

    def array(a, dtype=np.float32):
        a = np.ascontiguousarray(np.asarray(a, dtype=dtype))
        kind = pb.FLOAT32 if a.dtype == np.float32 else pb.INT32
        return pb.FeatureValue(multi_array=pb.MultiArray(data_type=kind, shape=list(a.shape), data=a.tobytes()))

    rng = np.random.default_rng(2)
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="cortado-variants-"))
    repo = work / "repo"
    spec, body_bytes = build_model(repo)
    model_bytes = (repo / "net" / "1" / "model.mlmodel").stat().st_size
    names = [f"user{i}" for i in range(args.stored)]
    xs = [array(rng.standard_normal(BODY[0][0]).astype(np.float32)) for _ in range(16)]
    log = open(work / "serve.log", "wb")
    print(f"CPU: {common.cpu_model()} ({common.cpu_flags()}); Cortado's kernel path: {common.kernel_path()}; server {binary}")
    print(f"base: body weights {body_bytes / 2**20:.1f} MiB float32, model file {model_bytes / 2**20:.1f} MiB; head 512x10; "
          f"{args.stored} variants ({args.via_update} by Update), --max-variants {args.max_variants}", flush=True)

    def predict(stub, variant, i=0):
        return stub.Predict(pb.PredictRequest(model="net", variant=variant, inputs=[pb.Feature(name="x", value=xs[i % 16])]),
                            timeout=120)

    # 1. Updates, on a server with no variant yet.
    server = Serve(binary, repo, args.max_variants, log)
    start_plain = server.started
    try:
        stub = P.predictor_pb2_grpc.PredictorStub(server.channel)
        for i in range(50):
            predict(stub, "", i)
        plain_rss = settled_rss_mib(server.proc.pid)
        latencies, cpu = [], 0.0
        for name in names[:args.via_update]:
            X = rng.standard_normal((32, BODY[0][0])).astype(np.float32)
            T = rng.integers(0, CLASSES, 32)
            rows = [pb.Row(features=[pb.Feature(name="x", value=array(x)), pb.Feature(name="probs_true", value=array([t], np.int32))])
                    for x, t in zip(X, T)]
            t0, c0 = time.perf_counter(), cpu_seconds(server.proc.pid)
            events = list(stub.Update(pb.UpdateRequest(model="net", variant=name, rows=rows), timeout=600))
            latencies.append(time.perf_counter() - t0)
            cpu += cpu_seconds(server.proc.pid) - c0
            result = events[-1].result
            assert events[-1].WhichOneof("event") == "result" and result.stored, events[-1]
        print(f"Update, 32 examples, 1 epoch: median {statistics.median(latencies) * 1e3:.1f} ms wall over {len(latencies)}, "
              f"server CPU {cpu / len(latencies) * 1e3:.1f} ms each", flush=True)
    finally:
        server.stop()
    stored_sizes = [(repo / "net" / "variants" / f"{n}.head").stat().st_size for n in names[:args.via_update]]

    # 2. The other heads, written directly.
    t0 = time.perf_counter()
    written = write_heads(repo, spec, names[args.via_update:])
    print(f"head files: {statistics.median(stored_sizes) / 1024:.1f} KiB made by Update, "
          f"{statistics.median(written or [0]) / 1024:.1f} KiB written here ({len(written)} in {time.perf_counter() - t0:.1f} s); "
          f"model file / head = {model_bytes / statistics.median(stored_sizes):.0f}", flush=True)

    # 3. A server that finds them, and a first use of each.
    server = Serve(binary, repo, args.max_variants, log)
    try:
        stub = P.predictor_pb2_grpc.PredictorStub(server.channel)
        pid = server.proc.pid
        print(f"start until serving: {start_plain:.2f} s with no variant, {server.started:.2f} s with {args.stored} stored "
              f"(ratio {server.started / start_plain:.2f})")
        listed = stub.ListVariants(pb.ListVariantsRequest(model="net"), timeout=120).variants
        assert len(listed) == args.stored and not any(v.loaded for v in listed), (len(listed), sum(v.loaded for v in listed))
        base_latency = []
        for i in range(50):
            t0 = time.perf_counter()
            predict(stub, "", i)
            base_latency.append(time.perf_counter() - t0)
        base_rss = settled_rss_mib(pid)
        print(f"{'variants used':>13} {'compiled':>9} {'RSS MiB':>9} {'over base MiB':>14}")
        print(f"{0:>13} {0:>9} {base_rss:>9.1f} {0:>14.1f}   (the base, {args.stored} variants listed; "
              f"{plain_rss:.1f} MiB with none stored)", flush=True)
        checkpoints = sorted(c for c in args.checkpoints if c <= args.stored)
        first_use = []
        for i, name in enumerate(names):
            t0 = time.perf_counter()
            predict(stub, name, i)
            first_use.append(time.perf_counter() - t0)
            if i + 1 in checkpoints:
                compiled = sum(v.loaded for v in stub.ListVariants(pb.ListVariantsRequest(model="net"), timeout=120).variants)
                rss = settled_rss_mib(pid)
                print(f"{i + 1:>13} {compiled:>9} {rss:>9.1f} {rss - base_rss:>14.1f}", flush=True)
        base_ms, first_ms = statistics.median(base_latency) * 1e3, statistics.median(first_use) * 1e3
        print(f"Predict latency, one client: base median {base_ms:.2f} ms; a variant's first use (head read, merged, compiled, "
              f"predicted) median {first_ms:.2f} ms over {len(first_use)} (ratio {first_ms / base_ms:.2f}; "
              f"p90 {np.percentile(first_use, 90) * 1e3:.2f} ms)", flush=True)

        def throughput(pick):
            n, t_end = 0, time.perf_counter() + args.seconds
            t0 = time.perf_counter()
            while time.perf_counter() < t_end:
                predict(stub, pick(), n)
                n += 1
            return n / (time.perf_counter() - t0)

        chosen = random.Random(5).sample(names, min(args.random_over, args.stored, args.max_variants))
        for name in chosen:  # warm: compiled before the run
            predict(stub, name)
        base_rate = throughput(lambda: "")
        warm_rate = throughput(lambda: random.choice(chosen))
        cold_rate = throughput(lambda: random.choice(names))
        print(f"Predict throughput, batch 1, one client: base {base_rate:,.0f}/s; a random variant of {len(chosen)} "
              f"(compiled) {warm_rate:,.0f}/s (ratio {warm_rate / base_rate:.2f}); a random variant of all {args.stored} "
              f"{cold_rate:,.0f}/s (ratio {cold_rate / base_rate:.2f})", flush=True)
        listed = stub.ListVariants(pb.ListVariantsRequest(model="net"), timeout=120).variants
        print(f"listed {len(listed)} variants, {sum(v.stored for v in listed)} stored, {sum(v.loaded for v in listed)} compiled; "
              f"RSS {rss_mib(pid):.1f} MiB")
    finally:
        server.stop()
        log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
