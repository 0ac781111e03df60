#!/usr/bin/env python3
"""Neural networks, Cortado vs onnxruntime, side by side in one run (same weights, same threads).

Cases:
- Tiny YOLO v2 (VOC): 3×416×416 → 125×13×13, 6.97 GFLOP, fixed random weights (the builders of
  Tests/NeuralNetwork/test_tiny_yolo.py), batch 1: median latency and single-stream throughput.
- A MobileNet/BlazeFace-style detector (bench/detector.py): depthwise separable blocks with
  residual adds, 24–96 channels on 128²–32² maps, 3×256×256 → 16×32×32, 0.18 GFLOP, random
  weights, batch 1.
- The same detector as an ML Program (`detector.build_mlprogram`: coremltools' MIL builder, fp32,
  the same weights and padding; conv, add and relu as separate ops), batch 1 (`detector-mlprogram`).
- MLP 784-512-512-10 with ReLU: batch 1 and batch 256. The Core ML model declares FLOAT32
  input and output arrays, as onnxruntime is fed and answers float32 (`--double-io`: DOUBLE,
  NeuralNetworkBuilder's default, which adds a conversion of every value each way).

Cortado is timed with `cortado report MODEL --input ROWS --threads T --batch B --json` (the
public MLModel.prediction / predictions(fromBatch:) path, JSON decoding excluded); onnxruntime
with `InferenceSession.run` on float32 arrays, `intra_op_num_threads = T`,
`inter_op_num_threads = 1`, default graph optimizations. Each engine: `--repeat` rounds of
`--iterations` timed runs (after warm-up), the median of the round medians is reported.
Outputs are compared once (Tiny YOLO: 1e-3 of the output's scale; MLP: 1e-4 relative).

OpenVINO (PyPI `openvino`, installed by scripts/setup-bench.sh) reads the same ONNX twins and
runs beside them in the same rounds: `compile_model` on CPU with `INFERENCE_NUM_THREADS = T`,
one stream, the LATENCY hint and `INFERENCE_PRECISION_HINT = f32` (left alone it would run bf16
on CPUs that have it, and not compute the same function); timed with `InferRequest.infer` on
the same float32 arrays, outputs compared like onnxruntime's. `--no-openvino` leaves it out (it
is left out, with a line saying so, when the package is missing).

Cortado's kernel path (`cg_isa`: avx512, avx2 or portable, as `cortado report --json` names it)
and the CPU model are printed first. `--isa PATH` forces a narrower path for every Cortado run
(`CORTADO_ISA`); `--alt-isa PATH` times Cortado on that path too, in rounds alternating with
the default (e.g. the AVX2 path beside AVX-512 on an AVX-512 host). `--cases` picks the
networks (yolo, detector, detector-mlprogram, mlp).

With `--openblas`, Cortado is also timed with `CORTADO_GEMM=openblas` (convolutions and inner
products on OpenBLAS's sgemm instead of Cortado's own AVX-512 GEMM); with `--baseline BIN`,
another build of `cortado` (before a change) is timed instead. Either runs in rounds that
alternate with the default, so both meet the same machine load.

Also printed: Cortado's GFLOP/s on the Tiny YOLO convolutions (each 3×3/1×1 convolution of
the network timed alone as a one-layer model; and the whole network's FLOPs over its latency),
against a 2048³ sgemm in the same OpenBLAS library Cortado links (Debian's libopenblas,
called through ctypes) and in numpy's bundled OpenBLAS, and (when `cortado-bench` is built
beside `cortado`) Cortado's own GEMM next to that OpenBLAS in one process (`cortado-bench gemm`); Tiny YOLO load time and peak RSS
(Cortado: `cortado report`; onnxruntime: session creation, and the peak RSS (VmHWM) of a child Python
process that imports onnxruntime, loads the model and runs once).

Usage: .venv/bin/python bench/nn_vs_onnxruntime.py [--bin .build/release] [--threads 1 2]
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402  (pins numpy's own BLAS to one thread before numpy loads)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "Tests", "NeuralNetwork"))
from nnharness import array_json  # noqa: E402

TINY_YOLO_CONVS = [  # (cin, cout, k, input h = w)
    (3, 16, 3, 416), (16, 32, 3, 208), (32, 64, 3, 104), (64, 128, 3, 52), (128, 256, 3, 26),
    (256, 512, 3, 13), (512, 1024, 3, 13), (1024, 1024, 3, 13), (1024, 125, 1, 13),
]


def conv_flops(cin, cout, k, hw):
    return 2 * cin * cout * k * k * hw * hw


TINY_YOLO_FLOPS = sum(conv_flops(*c) for c in TINY_YOLO_CONVS)


def write_rows(path, name, arrays, data_type="DOUBLE"):
    """JSON rows of one array feature, its values held as data_type (FLOAT32 or DOUBLE)."""
    with open(path, "w") as f:
        for a in arrays:
            f.write(json.dumps({name: dict(array_json(a), dataType=data_type)}) + "\n")


OPENBLAS_ENV = dict(os.environ, CORTADO_GEMM="openblas")
# The environment of the default Cortado runs (--isa sets CORTADO_ISA in it).
DEFAULT_ENV = None


def isa_env(isa):
    return dict(os.environ, CORTADO_ISA=isa)


def kernel_path(exe, model, rows, env=None):
    """The kernel path `cortado report` says it ran on."""
    return cortado_report(exe, model, rows, 1, 1, 1, 0, env).get("kernelPath", "unknown (before kernel paths)")


def cortado_report(exe, model, rows, threads, batch, iterations, warmup, env=None):
    env = env or DEFAULT_ENV
    cmd = [exe, "report", model, "--input", rows, "--threads", str(threads), "--batch", str(batch),
           "--iterations", str(iterations), "--warmup", str(warmup), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"cortado report failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def cortado_predict(exe, model, rows):
    done = subprocess.run([exe, "predict", model, "--input", rows], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cortado predict failed: {done.stderr.strip()}")
    return [json.loads(l) for l in done.stdout.splitlines() if l.strip()]


def time_ort(session, feeds, iterations, warmup):
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def openvino_request(onnx_model, threads):
    """An OpenVINO infer request for the ONNX model on the CPU: `threads` threads, one stream,
    float32 arithmetic (see the module docstring)."""
    import openvino as ov
    core = ov.Core()
    model = core.read_model(onnx_model.SerializeToString(), b"")
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                                                 "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
    return compiled.create_infer_request()


def openvino_run(request, feeds):
    """The first output of one OpenVINO inference, as a NumPy array."""
    return next(iter(request.infer(feeds, share_inputs=True).values()))


def time_ov(request, feeds, iterations, warmup):
    for _ in range(warmup):
        request.infer(feeds, share_inputs=True)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        request.infer(feeds, share_inputs=True)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def openvino_version():
    """OpenVINO's version, or None when the package is not installed."""
    try:
        import openvino
        return openvino.__version__
    except ImportError:
        return None


def median_of(fn, repeat):
    return float(np.median([fn() for _ in range(repeat)]))


# Peak RSS as VmHWM: ru_maxrss survives exec and would report this (larger) parent's peak.
HWM = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]) * 1024"

ORT_RSS_CHILD = """
import sys, time, numpy as np, onnxruntime as ort
o = ort.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2]); o.inter_op_num_threads = 1
t0 = time.perf_counter()
s = ort.InferenceSession(sys.argv[1], o, providers=["CPUExecutionProvider"])
load = time.perf_counter() - t0
s.run(None, {"image": np.zeros((1, 3, 416, 416), np.float32)})
print(load, """ + HWM + """)
"""

PYTHON_BASELINE_CHILD = """
import numpy as np, onnxruntime as ort
print(""" + HWM + """)
"""


def cortado_gemm_gflops(exe, n, threads, repeat):
    """`cortado-bench gemm` (beside `cortado`): Cortado's own GEMM and the OpenBLAS it links on
    the same n³ product, alternating, in one process; None when cortado-bench is not built."""
    bench = os.path.join(os.path.dirname(exe), "cortado-bench")
    if not os.access(bench, os.X_OK):
        return None
    done = subprocess.run([bench, "gemm", str(n), "--threads", str(threads), "--repeat", str(repeat)], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"cortado-bench gemm failed: {done.stderr.strip()}")
        return None
    return json.loads(done.stdout)


def sgemm_gflops(n, threads, repeat=5):
    """2048³ sgemm GFLOP/s in Debian's libopenblas (what Cortado links) and in numpy."""
    out = {}
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    path = None
    for candidate in ("/usr/lib/x86_64-linux-gnu/libopenblas.so.0", ctypes.util.find_library("openblas")):
        if candidate and os.path.exists(candidate):
            path = candidate
            break
    if path:
        lib = ctypes.CDLL(path)
        lib.openblas_set_num_threads(ctypes.c_int(threads))
        f = lib.cblas_sgemm
        f.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
        call = lambda: f(101, 111, 111, n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0, c.ctypes.data, n)
        call()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter(); call(); times.append(time.perf_counter() - t0)
        out["debian_openblas"] = 2 * n ** 3 / float(np.median(times)) / 1e9
        assert np.allclose(c[:4, :4], (a[:4] @ b[:, :4]), rtol=1e-3, atol=1e-2)
    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(limits=threads, user_api="blas")
    except ImportError:
        limit = None
    a @ b
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); a @ b; times.append(time.perf_counter() - t0)
    out["numpy"] = 2 * n ** 3 / float(np.median(times)) / 1e9
    out["numpy_threads"] = threads if limit is not None else 1
    if limit is not None:
        limit.restore_original_limits()
    return out


def mlp_models(seed=0, sizes=(784, 512, 512, 10), float32_io=False):
    """The MLP as a Core ML NeuralNetworkBuilder and an ONNX model, same weights. The Core ML
    input and output are DOUBLE arrays (the builder's default) unless float32_io."""
    from coremltools.models import datatypes
    from coremltools.proto import FeatureTypes_pb2 as ft
    from coremltools.models.neural_network import NeuralNetworkBuilder
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    r = np.random.default_rng(seed)
    sizes = list(sizes)
    ws = [(r.standard_normal((o, i)) * np.sqrt(2 / i)).astype(np.float32) for i, o in zip(sizes, sizes[1:])]
    bs = [(r.standard_normal(o) * 0.1).astype(np.float32) for o in sizes[1:]]
    b = NeuralNetworkBuilder([("x", datatypes.Array(784))], [("y", datatypes.Array(10))])
    blob = "x"
    nodes, inits = [], []
    oblob = "x"
    for k, (w, bias) in enumerate(zip(ws, bs)):
        last = k == len(ws) - 1
        b.add_inner_product(f"fc{k}", W=w, b=bias, input_channels=w.shape[1], output_channels=w.shape[0], has_bias=True,
                            input_name=blob, output_name="y" if last else f"h{k}")
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(bias, f"b{k}")]
        nodes.append(helper.make_node("Gemm", [oblob, f"w{k}", f"b{k}"], ["y" if last else f"g{k}"], transB=1))
        if not last:
            b.add_activation(f"relu{k}", "RELU", f"h{k}", f"r{k}")
            nodes.append(helper.make_node("Relu", [f"g{k}"], [f"r{k}"]))
            blob = oblob = f"r{k}"
    if float32_io:
        for f in list(b.spec.description.input) + list(b.spec.description.output):
            f.type.multiArrayType.dataType = ft.ArrayFeatureType.FLOAT32
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 784])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return b, model


def conv_only_model(cin, cout, k, hw, seed):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    r = np.random.default_rng(seed)
    w = (r.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype(np.float32)
    b = NeuralNetworkBuilder([("x", datatypes.Array(cin, hw, hw))], [("y", datatypes.Array(cout, hw, hw))])
    b.add_convolution("conv", cin, cout, k, k, 1, 1, "same", 1, W=w.transpose(2, 3, 1, 0), b=None, has_bias=False,
                      input_name="x", output_name="y")
    return b


def save(spec, path):
    with open(path, "wb") as f:
        f.write(spec.SerializeToString(deterministic=True))


def add_args(p, iterations, iterations_help="timed runs per round"):
    """The options every Cortado-vs-onnxruntime script takes."""
    p.add_argument("--bin", default=common.DEFAULT_BIN, help="build folder holding cortado (default .build/release), or an executable in it")
    p.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}),
                   help="thread counts to compare at (default: 1 and all cores)")
    p.add_argument("--repeat", type=int, default=5, help="rounds per engine and case (median of round medians)")
    p.add_argument("--iterations", type=int, default=iterations, help=iterations_help)
    p.add_argument("--keep", help="folder to keep the models and rows in")
    p.add_argument("--summary", help="write the results as JSON here (bench/run_all.py reads it)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p, iterations=20, iterations_help="timed runs per round (Tiny YOLO; the MLP runs 10× more)")
    p.add_argument("--no-layers", action="store_true", help="skip timing each Tiny YOLO convolution alone")
    p.add_argument("--no-sgemm", action="store_true", help="skip the 2048³ sgemm figures")
    p.add_argument("--openblas", action="store_true",
                   help="also time Cortado with CORTADO_GEMM=openblas (its OpenBLAS path), alternating rounds")
    p.add_argument("--baseline", help="also time this other cortado build (folder or executable), alternating rounds")
    p.add_argument("--double-io", action="store_true",
                   help="declare the Core ML MLP's input and output DOUBLE (the builder's default) instead of FLOAT32")
    p.add_argument("--isa", choices=["avx512", "avx2", "portable"], help="force this kernel path (CORTADO_ISA) for Cortado")
    p.add_argument("--alt-isa", choices=["avx512", "avx2", "portable"],
                   help="also time Cortado with CORTADO_ISA=PATH, alternating rounds")
    p.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out of the rounds")
    p.add_argument("--no-pin", action="store_true",
                   help="leave rounds of fewer threads than CPUs unpinned (by default every engine runs them on the "
                        "same first CPUs this process may use)")
    p.add_argument("--cases", nargs="+", choices=["yolo", "detector", "detector-mlprogram", "mlp"],
                   default=["yolo", "detector", "detector-mlprogram", "mlp"],
                   help="networks to time (default all)")
    common.add_avx2_host_arg(p)
    a = p.parse_args()
    common.enter_avx2_host(a)
    global DEFAULT_ENV
    if a.isa:
        DEFAULT_ENV = isa_env(a.isa)
    exe = common.resolve_bin(a.bin, "cortado")
    # The alternative Cortado timed beside the default: (executable, environment, label, description).
    alt = None
    if a.baseline:
        alt = (common.resolve_bin(a.baseline, "cortado"), None, "baseline", f"the build at {a.baseline}")
    elif a.openblas:
        alt = (exe, OPENBLAS_ENV, "openblas", "Cortado with CORTADO_GEMM=openblas (OpenBLAS's sgemm)")
    elif a.alt_isa:
        alt = (exe, isa_env(a.alt_isa), a.alt_isa, f"Cortado with CORTADO_ISA={a.alt_isa}")
    common.quiet_coremltools()
    from test_tiny_yolo import INPUT, build_coreml, build_onnx, onnx_session, tiny_yolo_weights

    work = a.keep or tempfile.mkdtemp(prefix="cortado-nn-")
    os.makedirs(work, exist_ok=True)
    weights = tiny_yolo_weights(0)
    yolo_path = os.path.join(work, "tiny_yolo.mlmodel")
    save(build_coreml(weights).spec, yolo_path)
    yolo_onnx = build_onnx(weights)
    yolo_onnx_path = os.path.join(work, "tiny_yolo.onnx")
    with open(yolo_onnx_path, "wb") as f:
        f.write(yolo_onnx.SerializeToString())
    image = np.random.default_rng(1).uniform(0, 1, size=(1, *INPUT)).astype(np.float32)
    yolo_rows = os.path.join(work, "tiny_yolo_rows.jsonl")
    write_rows(yolo_rows, "image", [image[0]])

    mlp_coreml, mlp_onnx = mlp_models(float32_io=not a.double_io)
    mlp_path = os.path.join(work, "mlp.mlmodel")
    save(mlp_coreml.spec, mlp_path)
    mlp_x = np.random.default_rng(2).standard_normal((256, 784)).astype(np.float32)
    mlp_rows = os.path.join(work, "mlp_rows.jsonl")
    write_rows(mlp_rows, "x", mlp_x, "DOUBLE" if a.double_io else "FLOAT32")

    import detector
    det_weights = detector.weights(0)
    det_path = os.path.join(work, "detector.mlmodel")
    save(detector.build_coreml(det_weights).spec, det_path)
    det_onnx = detector.build_onnx(det_weights)
    det_x = np.random.default_rng(3).uniform(0, 1, size=(1, *detector.INPUT)).astype(np.float32)
    det_rows = os.path.join(work, "detector_rows.jsonl")
    write_rows(det_rows, "x", [det_x[0]], "FLOAT32")
    det_ml_path = None
    if "detector-mlprogram" in a.cases:
        det_ml_path = detector.build_mlprogram(det_weights, os.path.join(work, "detector.mlpackage"))
        det_ml_rows = os.path.join(work, "detector_ml_rows.jsonl")
        write_rows(det_ml_rows, "x", [det_x], "FLOAT32")

    path = kernel_path(exe, mlp_path, mlp_rows)
    alt_path = f"; alternating with {alt[2]} ({kernel_path(alt[0], mlp_path, mlp_rows, alt[1])})" if alt else ""
    print(f"CPU: {common.cpu_model()} ({common.cpu_flags()}); Cortado's kernel path: {path}{alt_path}")

    ov_version = None if a.no_openvino else openvino_version()
    if ov_version:
        print(f"OpenVINO {ov_version} (CPU plugin, f32) runs beside onnxruntime on the same ONNX twins")
    elif not a.no_openvino:
        print("OpenVINO is not installed (scripts/setup-bench.sh installs it): timing onnxruntime only")

    # Agreement, once.
    got = np.asarray(cortado_predict(exe, det_path, det_rows)[0]["y"]["data"]).reshape(detector.OUTPUT)
    ref = onnx_session(det_onnx, 1).run(None, {"x": det_x})[0][0]
    det_err = float(np.abs(got - ref).max() / np.abs(ref).max())
    det_ml_err = 0.0
    if det_ml_path:
        got = np.asarray(cortado_predict(exe, det_ml_path, det_ml_rows)[0]["y"]["data"]).reshape(detector.OUTPUT)
        det_ml_err = float(np.abs(got - ref).max() / np.abs(ref).max())
    got = np.asarray(cortado_predict(exe, yolo_path, yolo_rows)[0]["grid"]["data"]).reshape(125, 13, 13)
    ref = onnx_session(yolo_onnx, 1).run(None, {"image": image})[0][0]
    yolo_err = float(np.abs(got - ref).max() / np.abs(ref).max())
    got = np.stack([np.asarray(o["y"]["data"]) for o in cortado_predict(exe, mlp_path, mlp_rows)])
    ref = onnx_session(mlp_onnx, 1).run(None, {"x": mlp_x})[0]
    mlp_err = float((np.abs(got - ref) / np.maximum(1, np.abs(ref))).max())
    agree = yolo_err <= 1e-3 and mlp_err <= 1e-4 and det_err <= 1e-3 and det_ml_err <= 1e-3
    ov_errors = {}
    if ov_version:
        ref = onnx_session(det_onnx, 1).run(None, {"x": det_x})[0]
        ov_errors["detector"] = float(np.abs(openvino_run(openvino_request(det_onnx, 1), {"x": det_x}) - ref).max() / np.abs(ref).max())
        ref = onnx_session(yolo_onnx, 1).run(None, {"image": image})[0]
        ov_errors["yolo"] = float(np.abs(openvino_run(openvino_request(yolo_onnx, 1), {"image": image}) - ref).max() / np.abs(ref).max())
        ref = onnx_session(mlp_onnx, 1).run(None, {"x": mlp_x})[0]
        got = openvino_run(openvino_request(mlp_onnx, 1), {"x": mlp_x})
        ov_errors["mlp"] = float((np.abs(got - ref) / np.maximum(1, np.abs(ref))).max())
        print(f"OpenVINO against onnxruntime: Tiny YOLO {ov_errors['yolo']:.2g}, detector {ov_errors['detector']:.2g}, "
              f"MLP {ov_errors['mlp']:.2g} (same measures and limits)")
        agree = agree and ov_errors["yolo"] <= 1e-3 and ov_errors["detector"] <= 1e-3 and ov_errors["mlp"] <= 1e-4
    print(f"MLP input and output in Core ML: {'DOUBLE' if a.double_io else 'FLOAT32'} arrays (onnxruntime: float32)")
    print(f"agreement: Tiny YOLO max|diff|/max|out| {yolo_err:.2g} (limit 1e-3); detector {det_err:.2g} (limit 1e-3); "
          f"MLP max rel {mlp_err:.2g} (limit 1e-4)" + (f"; detector ML Program {det_ml_err:.2g} (limit 1e-3)" if det_ml_path else ""))

    results = []
    it = a.iterations

    def rounds(model, rows, t, batch, iters, warmup, ort_call, ov_call=None):
        """Round medians of Cortado (and the alternative: --openblas or --baseline),
        onnxruntime and OpenVINO, the engines taking turns each round."""
        cortado, other, ort_times, ov_times = [], [], [], []
        for _ in range(a.repeat):
            cortado.append(cortado_report(exe, model, rows, t, batch, iters, warmup))
            if alt:
                other.append(cortado_report(alt[0], model, rows, t, batch, iters, warmup, alt[1])["medianSeconds"])
            ort_times.append(ort_call())
            if ov_call:
                ov_times.append(ov_call())
        own = [r["medianSeconds"] for r in cortado]
        # The ratios are medians of each round's ratio: the host's speed drifts from round to
        # round, and a ratio within a round compares engines that met the same speed.
        out = dict(cortado_seconds=float(np.median(own)), ort_seconds=float(np.median(ort_times)),
                   ort_ratio=float(np.median(np.divide(ort_times, own))))
        if alt:
            out["alt_seconds"] = float(np.median(other))
            out["alt_ratio"] = float(np.median(np.divide(ort_times, other)))
        if ov_call:
            out["ov_seconds"] = float(np.median(ov_times))
            out["ov_ratio"] = float(np.median(np.divide(ov_times, own)))
        return out, cortado

    def ov_timer(onnx_model, t, feeds, iters, warmup):
        """A round of OpenVINO timings, or None when it is left out."""
        if not ov_version:
            return None
        request = openvino_request(onnx_model, t)
        return lambda: time_ov(request, feeds, iters, warmup)

    allowed = sorted(os.sched_getaffinity(0))
    for t in a.threads:
        # Rounds of fewer threads than CPUs run every engine on the same t CPUs.
        pin = common.pin_for(t, allowed, not a.no_pin)
        if pin:
            print(f"rounds of {t} thread{'s' if t > 1 else ''}: every engine pinned to CPU{'s' if t > 1 else ''} "
                  f"{', '.join(map(str, pin))} (--no-pin: not)")
        # Tiny YOLO, batch 1.
        if "yolo" in a.cases:
            s = onnx_session(yolo_onnx, t)
            times, reports = rounds(yolo_path, yolo_rows, t, 1, it, 3, lambda: time_ort(s, {"image": image}, it, 3),
                                    ov_timer(yolo_onnx, t, {"image": image}, it, 3))
            results.append(dict(case="Tiny YOLO batch 1", threads=t, rows=1, **times,
                                load_seconds=float(np.median([r["loadSeconds"] for r in reports])),
                                peak_rss=int(np.median([r["peakRSSBytes"] for r in reports]))))
        # The detector, batch 1.
        if "detector" in a.cases:
            ds = onnx_session(det_onnx, t)
            times, _ = rounds(det_path, det_rows, t, 1, it * 2, 5, lambda: time_ort(ds, {"x": det_x}, it * 2, 5),
                              ov_timer(det_onnx, t, {"x": det_x}, it * 2, 5))
            results.append(dict(case="detector batch 1", threads=t, rows=1, **times))
        # The detector as an ML Program (same ONNX twin), batch 1.
        if det_ml_path:
            ds = onnx_session(det_onnx, t)
            times, _ = rounds(det_ml_path, det_ml_rows, t, 1, it * 2, 5, lambda: time_ort(ds, {"x": det_x}, it * 2, 5),
                              ov_timer(det_onnx, t, {"x": det_x}, it * 2, 5))
            results.append(dict(case="detector ML Program batch 1", threads=t, rows=1, **times))
        # MLP, batch 1 and 256.
        ms = onnx_session(mlp_onnx, t)
        for batch in ((1, 256) if "mlp" in a.cases else ()):
            iters = it * 10 if batch == 1 else it * 2
            feeds = {"x": mlp_x[:batch]}
            times, _ = rounds(mlp_path, mlp_rows, t, batch, iters, 20, lambda: time_ort(ms, feeds, iters, 20),
                              ov_timer(mlp_onnx, t, feeds, iters, 20))
            results.append(dict(case=f"MLP 784-512-512-10 batch {batch}", threads=t, rows=batch, **times))

    common.pin_threads(allowed)
    print()
    extra = f" {alt[2] + ' ms':>12} {'ratio':>6}" if alt else ""
    extra += f" {'openvino ms':>12} {'vs openvino':>12}" if ov_version else ""
    print(f"{'case':<30} {'thr':>3} {'cortado ms':>11} {'ort ms':>9} {'cortado rows/s':>15} {'ort rows/s':>12} {'speed ratio':>12}{extra}")
    for r in results:
        extra = f" {r['alt_seconds'] * 1e3:>12.3f} {r['alt_ratio']:>5.2f}x" if alt else ""
        if "ov_seconds" in r:
            extra += f" {r['ov_seconds'] * 1e3:>12.3f} {r['ov_ratio']:>11.2f}x"
        print(f"{r['case']:<30} {r['threads']:>3} {r['cortado_seconds'] * 1e3:>11.3f} {r['ort_seconds'] * 1e3:>9.3f} "
              f"{r['rows'] / r['cortado_seconds']:>15,.1f} {r['rows'] / r['ort_seconds']:>12,.1f} "
              f"{r['ort_ratio']:>11.2f}x{extra}")
    print("speed ratio = onnxruntime time ÷ Cortado time, vs openvino = OpenVINO time ÷ Cortado time (above 1: Cortado")
    print(f"is faster), each the median of the rounds' ratios; Cortado on the {path} path, CPU {common.cpu_model()}.")
    print("Latency = median over rounds of each round's median per call; rows/s = rows per call ÷ that latency (one stream).")
    if alt:
        print(f"{alt[2]} ms / ratio: {alt[3]}, rounds alternating with the default.")

    # GFLOP/s.
    print()
    tmax = max(a.threads)
    for r in results:
        if r["case"].startswith("Tiny YOLO"):
            print(f"Tiny YOLO whole network, {r['threads']} thread(s): {TINY_YOLO_FLOPS / 1e9:.2f} GFLOP in "
                  f"{r['cortado_seconds'] * 1e3:.1f} ms = {TINY_YOLO_FLOPS / r['cortado_seconds'] / 1e9:.1f} GFLOP/s (Cortado), "
                  f"{TINY_YOLO_FLOPS / r['ort_seconds'] / 1e9:.1f} GFLOP/s (onnxruntime)")
        if r["case"].startswith("detector"):
            print(f"{r['case']}, {r['threads']} thread(s): {detector.flops() / 1e9:.3f} GFLOP in {r['cortado_seconds'] * 1e3:.2f} ms "
                  f"(Cortado), {r['ort_seconds'] * 1e3:.2f} ms (onnxruntime)")
    layer_rows = []
    if not a.no_layers and "yolo" in a.cases:
        for t in a.threads:
            total_time = total_alt = 0.0
            for i, (cin, cout, k, hw) in enumerate(TINY_YOLO_CONVS):
                path = os.path.join(work, f"conv{i}.mlmodel")
                save(conv_only_model(cin, cout, k, hw, i).spec, path)
                rows = os.path.join(work, f"conv{i}_rows.jsonl")
                if not os.path.exists(rows):
                    write_rows(rows, "x", [np.random.default_rng(i).standard_normal((cin, hw, hw))])
                engines = [(exe, None)] + ([alt[:2]] if alt else [])
                runs = [[cortado_report(e, path, rows, t, 1, max(5, it // 2), 2, env)["medianSeconds"] for e, env in engines]
                        for _ in range(max(1, a.repeat // 2))]
                secs = float(np.median([r[0] for r in runs]))
                total_time += secs
                layer_rows.append(dict(threads=t, layer=i, shape=f"{cin}->{cout} {k}x{k} @{hw}x{hw}",
                                       gflop=conv_flops(cin, cout, k, hw) / 1e9, seconds=secs))
                if alt:
                    layer_rows[-1]["alt_seconds"] = float(np.median([r[1] for r in runs]))
                    total_alt += layer_rows[-1]["alt_seconds"]
            layer_rows.append(dict(threads=t, layer="all", shape="sum of the nine", gflop=TINY_YOLO_FLOPS / 1e9, seconds=total_time))
            if alt:
                layer_rows[-1]["alt_seconds"] = total_alt
        extra = f" {alt[2]:>9}" if alt else ""
        print(f"{'conv alone':<28} {'thr':>3} {'GFLOP':>7} {'ms':>8} {'GFLOP/s':>8}{extra}")
        for l in layer_rows:
            extra = f" {l['gflop'] / l['alt_seconds']:>9.1f}" if alt else ""
            print(f"{str(l['layer']) + ' ' + l['shape']:<28} {l['threads']:>3} {l['gflop']:>7.3f} {l['seconds'] * 1e3:>8.2f} "
                  f"{l['gflop'] / l['seconds']:>8.1f}{extra}")
        if alt:
            print(f"({alt[2]}: GFLOP/s of the same layer, {alt[3]})")
        print("(each convolution as a one-layer model through `cortado report`: includes copying the input in and the output out)")
    gemm = {t: sgemm_gflops(2048, t) for t in a.threads} if not a.no_sgemm else {}
    for t, g in gemm.items():
        print(f"2048³ sgemm, {t} thread(s): Debian libopenblas (Cortado's) {g.get('debian_openblas', float('nan')):.1f} GFLOP/s, "
              f"numpy's OpenBLAS {g['numpy']:.1f} GFLOP/s ({g['numpy_threads']} thread(s))")
        ours = cortado_gemm_gflops(exe, 2048, t, max(5, a.repeat))
        if ours:
            g["cortado_gemm"] = ours
            print(f"  in one process (cortado-bench gemm, alternating): Cortado's GEMM {ours['cortado_gflops']:.1f} GFLOP/s, "
                  f"OpenBLAS {ours['openblas_gflops']:.1f} GFLOP/s (results agree to {ours['max_relative_difference']:.1g})")
        else:
            print("  (Cortado's own GEMM: build cortado-bench beside cortado to compare it here)")

    # Load time and memory.
    yolo = ([r for r in results if r["case"].startswith("Tiny YOLO") and r["threads"] == tmax] or [None])[0]
    if yolo is not None:
        child = subprocess.run([sys.executable, "-c", ORT_RSS_CHILD, yolo_onnx_path, str(tmax)], capture_output=True, text=True)
        base = subprocess.run([sys.executable, "-c", PYTHON_BASELINE_CHILD], capture_output=True, text=True)
    print()
    if yolo is None:
        pass
    elif child.returncode == 0 and base.returncode == 0:
        ort_load, ort_rss = child.stdout.split()
        ort_load, ort_rss, base_rss = float(ort_load), int(ort_rss), int(base.stdout.strip())
        print(f"Tiny YOLO load: Cortado {yolo['load_seconds'] * 1e3:.1f} ms, onnxruntime session {ort_load * 1e3:.1f} ms")
        print(f"Tiny YOLO peak RSS: Cortado {yolo['peak_rss'] / 2**20:.1f} MB (whole process); onnxruntime "
              f"{ort_rss / 2**20:.1f} MB (Python + numpy + onnxruntime process; {base_rss / 2**20:.1f} MB of it before loading)")
        yolo.update(ort_load_seconds=ort_load, ort_peak_rss=ort_rss, ort_python_baseline_rss=base_rss)
    else:
        print(f"onnxruntime memory probe failed: {child.stderr.strip()[-500:]}")
        print(f"Tiny YOLO load: Cortado {yolo['load_seconds'] * 1e3:.1f} ms; peak RSS {yolo['peak_rss'] / 2**20:.1f} MB")

    if a.summary:
        summary_rows = [{
            "case": f"{r['case']} ({r['threads']}t)", "reference": "ort", "rows": r["rows"],
            "reference_rows_per_second": r["rows"] / r["ort_seconds"], "reference_rows_per_cpu_second": float("nan"),
            "cortado_rows_per_second": r["rows"] / r["cortado_seconds"], "cortado_rows_per_cpu_second": float("nan"),
            "wall_ratio": r["ort_ratio"], "cpu_ratio": float("nan"),
            "max_error": (yolo_err if "YOLO" in r["case"] else det_ml_err if "ML Program" in r["case"]
                          else det_err if "detector" in r["case"] else mlp_err),
            "tolerance": 1e-4 if "MLP" in r["case"] else 1e-3, "kernel_path": path,
            "agree": agree} for r in results]
        summary_rows += [{
            "case": f"{r['case']} ({r['threads']}t)", "reference": "openvino", "rows": r["rows"],
            "reference_rows_per_second": r["rows"] / r["ov_seconds"], "reference_rows_per_cpu_second": float("nan"),
            "cortado_rows_per_second": r["rows"] / r["cortado_seconds"], "cortado_rows_per_cpu_second": float("nan"),
            "wall_ratio": r["ov_ratio"], "cpu_ratio": float("nan"),
            "max_error": max(ov_errors.values()), "tolerance": 1e-3, "kernel_path": path,
            "agree": agree} for r in results if "ov_seconds" in r]
        common.write_summary(a.summary, "nn_vs_onnxruntime", "Tiny YOLO v2 and an MLP, Cortado vs onnxruntime "
                             "(same weights and threads, batch-1 latency; MLP also batch 256)", summary_rows)
        with open(a.summary) as f:
            doc = json.load(f)
        doc.update(layers=layer_rows, sgemm=gemm, details=results)
        with open(a.summary, "w") as f:
            json.dump(doc, f, indent=1)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
