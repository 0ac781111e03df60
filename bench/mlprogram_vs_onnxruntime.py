#!/usr/bin/env python3
"""ML Programs, Cortado vs onnxruntime, side by side in one run (same weights, same threads).

Two networks, written here with coremltools' MIL builder and converted to ML Programs, and
built again with `onnx.helper` from the same random weights:

- a ResNet-style CNN: 3×64×64 input, a 3×3 stem convolution with batch norm and ReLU, two
  residual blocks (conv-BN-ReLU-conv-BN + skip, ReLU), a 2×2 max pool, a strided 3×3
  convolution to 64 channels, a global average pool and a 10-way linear head;
- a transformer encoder: 64 tokens of width 128, 4 heads, two layers of layer norm,
  self-attention (matmul-softmax-matmul), residual, layer norm, GELU feed-forward (×4), residual.

Batch 1 and 32 (the batch is part of the program's input shape), 1 and 2 threads, fp32
programs, plus the fp16 program of each (compute_precision=FLOAT16) against onnxruntime fp32.
Outputs are compared once with onnxruntime (fp32: 1e-4 of the output's scale; fp16: 3e-2).
Cortado is timed with `cortado report MODEL --input ROWS --threads T --json`, onnxruntime
with `InferenceSession.run` (`intra_op_num_threads = T`); the medians of `--repeat` rounds of
`--iterations` runs, the engines taking turns each round. The table prints the CPU model.

`--baseline BIN` also times another build of `cortado` (before a change) in the same alternating
rounds; `--nets cnn transformer` and `--batches` pick the cases.

Usage: .venv/bin/python bench/mlprogram_vs_onnxruntime.py [--bin .build/release] [--threads 1 2]
"""
import argparse
import json
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

import numpy as np  # noqa: E402

from nn_vs_onnxruntime import cortado_predict, cortado_report, time_ort  # noqa: E402

warnings.filterwarnings("ignore")
os.environ.setdefault("TQDM_DISABLE", "1")


# ---------------------------------------------------------------------------- weights

def cnn_weights(seed=0):
    r = np.random.default_rng(seed)

    def conv(cin, cout):
        return (r.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (cin * 9))).astype(np.float32)

    def bn(c):
        return dict(gamma=r.uniform(0.5, 1.5, c).astype(np.float32), beta=(r.standard_normal(c) * 0.1).astype(np.float32),
                    mean=(r.standard_normal(c) * 0.1).astype(np.float32), var=r.uniform(0.5, 1.5, c).astype(np.float32))

    w = {"stem": conv(3, 32), "stem_bn": bn(32)}
    for b in range(2):
        w[f"b{b}c1"], w[f"b{b}n1"], w[f"b{b}c2"], w[f"b{b}n2"] = conv(32, 32), bn(32), conv(32, 32), bn(32)
    w["down"], w["down_bn"] = conv(32, 64), bn(64)
    w["fc"] = (r.standard_normal((10, 64)) * 0.1).astype(np.float32)
    w["fc_b"] = (r.standard_normal(10) * 0.1).astype(np.float32)
    return w


def transformer_weights(seed=1, d=128, layers=2, ff=512):
    r = np.random.default_rng(seed)
    w = {}
    for l in range(layers):
        for k in ("q", "k", "v", "o"):
            w[f"l{l}{k}"] = (r.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
            w[f"l{l}{k}b"] = (r.standard_normal(d) * 0.02).astype(np.float32)
        w[f"l{l}f1"] = (r.standard_normal((ff, d)) / np.sqrt(d)).astype(np.float32)
        w[f"l{l}f1b"] = (r.standard_normal(ff) * 0.02).astype(np.float32)
        w[f"l{l}f2"] = (r.standard_normal((d, ff)) / np.sqrt(ff)).astype(np.float32)
        w[f"l{l}f2b"] = (r.standard_normal(d) * 0.02).astype(np.float32)
        for n in ("g1", "g2"):
            w[f"l{l}{n}"] = r.uniform(0.8, 1.2, d).astype(np.float32)
        for n in ("b1", "b2"):
            w[f"l{l}{n}"] = (r.standard_normal(d) * 0.05).astype(np.float32)
    return w


# ---------------------------------------------------------------------------- ML Programs

def cnn_program(w, batch):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    def cbr(x, conv, bn, stride=1, relu=True):
        y = mb.conv(x=x, weight=conv, strides=[stride, stride], pad_type="custom", pad=[1, 1, 1, 1])
        y = mb.batch_norm(x=y, mean=bn["mean"], variance=bn["var"], gamma=bn["gamma"], beta=bn["beta"], epsilon=1e-5)
        return mb.relu(x=y) if relu else y

    @mb.program(input_specs=[mb.TensorSpec(shape=(batch, 3, 64, 64))], opset_version=ct.target.iOS16)
    def prog(image):
        x = cbr(image, w["stem"], w["stem_bn"])
        for b in range(2):
            y = cbr(x, w[f"b{b}c1"], w[f"b{b}n1"])
            y = cbr(y, w[f"b{b}c2"], w[f"b{b}n2"], relu=False)
            x = mb.relu(x=mb.add(x=x, y=y))
        x = mb.max_pool(x=x, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        x = cbr(x, w["down"], w["down_bn"], stride=2)
        x = mb.reduce_mean(x=x, axes=[2, 3])
        return mb.linear(x=x, weight=w["fc"], bias=w["fc_b"])

    return prog


def transformer_program(w, batch, t=64, d=128, heads=4, layers=2):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    dh = d // heads

    @mb.program(input_specs=[mb.TensorSpec(shape=(batch, t, d))], opset_version=ct.target.iOS16)
    def prog(tokens):
        x = tokens
        for l in range(layers):
            n = mb.layer_norm(x=x, axes=[-1], gamma=w[f"l{l}g1"], beta=w[f"l{l}b1"], epsilon=1e-5)

            def heads_of(p):
                y = mb.linear(x=n, weight=w[f"l{l}{p}"], bias=w[f"l{l}{p}b"])
                return mb.transpose(x=mb.reshape(x=y, shape=[batch, t, heads, dh]), perm=[0, 2, 1, 3])

            q, k, v = heads_of("q"), heads_of("k"), heads_of("v")
            s = mb.mul(x=mb.matmul(x=q, y=k, transpose_y=True), y=np.float32(1 / np.sqrt(dh)))
            a = mb.matmul(x=mb.softmax(x=s, axis=-1), y=v)
            a = mb.reshape(x=mb.transpose(x=a, perm=[0, 2, 1, 3]), shape=[batch, t, d])
            x = mb.add(x=x, y=mb.linear(x=a, weight=w[f"l{l}o"], bias=w[f"l{l}ob"]))
            n2 = mb.layer_norm(x=x, axes=[-1], gamma=w[f"l{l}g2"], beta=w[f"l{l}b2"], epsilon=1e-5)
            f = mb.gelu(x=mb.linear(x=n2, weight=w[f"l{l}f1"], bias=w[f"l{l}f1b"]), mode="TANH_APPROXIMATION")
            x = mb.add(x=x, y=mb.linear(x=f, weight=w[f"l{l}f2"], bias=w[f"l{l}f2b"]))
        return x

    return prog


def convert(prog, path, fp16):
    import coremltools as ct
    m = ct.convert(prog, convert_to="mlprogram",
                   compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32)
    m.save(path)
    spec = m.get_spec()
    return spec.description.input[0].name, spec.description.output[0].name


# ---------------------------------------------------------------------------- ONNX twins

def cnn_onnx(w, batch):
    from onnx import TensorProto, helper, numpy_helper
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def cbr(x, name, conv, bn, stride=1, relu=True):
        const(name + "_w", conv)
        for k in ("gamma", "beta", "mean", "var"):
            const(f"{name}_{k}", bn[k])
        nodes.append(helper.make_node("Conv", [x, name + "_w"], [name + "_c"], pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("BatchNormalization", [name + "_c", name + "_gamma", name + "_beta", name + "_mean", name + "_var"],
                                      [name + "_bn"], epsilon=1e-5))
        if not relu:
            return name + "_bn"
        nodes.append(helper.make_node("Relu", [name + "_bn"], [name + "_r"]))
        return name + "_r"

    x = cbr("image", "stem", w["stem"], w["stem_bn"])
    for b in range(2):
        y = cbr(x, f"b{b}a", w[f"b{b}c1"], w[f"b{b}n1"])
        y = cbr(y, f"b{b}b", w[f"b{b}c2"], w[f"b{b}n2"], relu=False)
        nodes.append(helper.make_node("Add", [x, y], [f"b{b}s"]))
        nodes.append(helper.make_node("Relu", [f"b{b}s"], [f"b{b}o"]))
        x = f"b{b}o"
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[2, 2], strides=[2, 2]))
    x = cbr("pool", "down", w["down"], w["down_bn"], stride=2)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    const("fc_w", w["fc"])
    const("fc_b", w["fc_b"])
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 64, 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer_onnx(w, batch, t=64, d=128, heads=4, layers=2):
    from onnx import TensorProto, helper, numpy_helper
    dh = d // heads
    inits, nodes = [], []
    n = helper.make_node

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    const("heads_shape", [batch, t, heads, dh], np.int64)
    const("merged_shape", [batch, t, d], np.int64)
    const("scale", 1 / np.sqrt(dh))
    const("half", 0.5)
    const("one", 1.0)
    const("c", np.sqrt(2 / np.pi))
    const("k3", 0.044715)
    const("three", 3.0)

    def linear(x, name, wk, bk):
        const(name + "_w", w[wk].T)
        const(name + "_b", w[bk])
        nodes.append(n("MatMul", [x, name + "_w"], [name + "_m"]))
        nodes.append(n("Add", [name + "_m", name + "_b"], [name]))
        return name

    x = "tokens"
    for l in range(layers):
        p = f"l{l}"
        for k in ("g1", "b1", "g2", "b2"):
            const(p + k, w[p + k])
        nodes.append(n("LayerNormalization", [x, p + "g1", p + "b1"], [p + "n1"], axis=-1, epsilon=1e-5))
        hs = {}
        for k in ("q", "k", "v"):
            y = linear(p + "n1", f"{p}{k}", f"{p}{k}", f"{p}{k}b")
            nodes.append(n("Reshape", [y, "heads_shape"], [y + "_h"]))
            nodes.append(n("Transpose", [y + "_h"], [y + "_t"], perm=[0, 2, 1, 3]))
            hs[k] = y + "_t"
        nodes.append(n("Transpose", [hs["k"]], [p + "kT"], perm=[0, 1, 3, 2]))
        nodes.append(n("MatMul", [hs["q"], p + "kT"], [p + "s0"]))
        nodes.append(n("Mul", [p + "s0", "scale"], [p + "s"]))
        nodes.append(n("Softmax", [p + "s"], [p + "p"], axis=-1))
        nodes.append(n("MatMul", [p + "p", hs["v"]], [p + "a"]))
        nodes.append(n("Transpose", [p + "a"], [p + "at"], perm=[0, 2, 1, 3]))
        nodes.append(n("Reshape", [p + "at", "merged_shape"], [p + "am"]))
        o = linear(p + "am", p + "o", p + "o", p + "ob")
        nodes.append(n("Add", [x, o], [p + "x1"]))
        nodes.append(n("LayerNormalization", [p + "x1", p + "g2", p + "b2"], [p + "n2"], axis=-1, epsilon=1e-5))
        f = linear(p + "n2", p + "f1", p + "f1", p + "f1b")
        # GELU, tanh approximation, written out.
        nodes += [n("Pow", [f, "three"], [p + "g3"]), n("Mul", [p + "g3", "k3"], [p + "g4"]), n("Add", [f, p + "g4"], [p + "g5"]),
                  n("Mul", [p + "g5", "c"], [p + "g6"]), n("Tanh", [p + "g6"], [p + "g7"]), n("Add", [p + "g7", "one"], [p + "g8"]),
                  n("Mul", [f, p + "g8"], [p + "g9"]), n("Mul", [p + "g9", "half"], [p + "gelu"])]
        f2 = linear(p + "gelu", p + "f2", p + "f2", p + "f2b")
        nodes.append(n("Add", [p + "x1", f2], [p + "x2"]))
        x = p + "x2"
    nodes.append(n("Identity", [x], ["out"]))
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [batch, t, d])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [batch, t, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# ---------------------------------------------------------------------------- timing

def ort_session(model, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default=common.DEFAULT_BIN)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--summary")
    p.add_argument("--baseline", help="also time this other cortado build (folder or executable), alternating rounds")
    p.add_argument("--nets", nargs="+", choices=["cnn", "transformer"], default=["cnn", "transformer"])
    p.add_argument("--no-pin", action="store_true",
                   help="leave rounds of fewer threads than CPUs unpinned (by default both engines run them on the same "
                        "first CPUs this process may use)")
    common.add_avx2_host_arg(p)
    a = p.parse_args()
    common.enter_avx2_host(a)
    allowed = sorted(os.sched_getaffinity(0))
    exe = common.resolve_bin(a.bin, "cortado")
    base = common.resolve_bin(a.baseline, "cortado") if a.baseline else None
    common.quiet_coremltools()
    isa, kernels = common.cpu_flags(), common.kernel_path()
    path = (f"{kernels}: Cortado's GEMM, direct and depthwise convolutions" if kernels != "portable"
            else "portable: OpenBLAS sgemm, convolutions as im2col + sgemm")
    print(f"CPU: {common.cpu_model()} ({isa}); Cortado's ML Program kernel path: {path}; other ops: Swift loops")
    results = []
    with tempfile.TemporaryDirectory(prefix="cortado-mlprogram-") as work:
        nets = ([("ResNet-style CNN", cnn_weights(), cnn_program, cnn_onnx, (3, 64, 64))] if "cnn" in a.nets else []) + \
               ([("transformer encoder", transformer_weights(), transformer_program, transformer_onnx, (64, 128))]
                if "transformer" in a.nets else [])
        for title, w, program, onnx_builder, shape in nets:
            for batch in a.batches:
                x = np.random.default_rng(5).standard_normal((batch, *shape)).astype(np.float32)
                onnx_model = onnx_builder(w, batch)
                ref = ort_session(onnx_model, 1).run(None, {onnx_model.graph.input[0].name: x})[0]
                for fp16 in (False, True):
                    path = os.path.join(work, f"{title[:3]}{batch}{'h' if fp16 else 'f'}.mlpackage")
                    in_name, out_name = convert(program(w, batch), path, fp16)
                    rows = os.path.join(work, f"rows{batch}.jsonl")
                    with open(rows, "w") as f:
                        f.write(json.dumps({in_name: {"shape": list(x.shape), "dataType": "FLOAT32", "data": x.reshape(-1).tolist()}}) + "\n")
                    got = np.asarray(cortado_predict(exe, path, rows)[0][out_name]["data"]).reshape(ref.shape)
                    err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-6))
                    limit = 3e-2 if fp16 else 1e-4
                    if err > limit:
                        sys.exit(f"{title} batch {batch} {'fp16' if fp16 else 'fp32'}: max|diff|/max|ref| {err:.3g} over {limit}")
                    for t in a.threads:
                        # Rounds of fewer threads than CPUs run both engines on the same CPUs.
                        common.pin_for(t, allowed, not a.no_pin)
                        s = ort_session(onnx_model, t)
                        feeds = {onnx_model.graph.input[0].name: x}
                        c_times, o_times, b_times = [], [], []
                        for _ in range(a.repeat):
                            c_times.append(cortado_report(exe, path, rows, t, 1, a.iterations, 3)["medianSeconds"])
                            if base:
                                b_times.append(cortado_report(base, path, rows, t, 1, a.iterations, 3)["medianSeconds"])
                            o_times.append(time_ort(s, feeds, a.iterations, 3))
                        common.pin_threads(allowed)
                        c, o = float(np.median(c_times)), float(np.median(o_times))
                        # The ratio: the median of each round's (the host's speed drifts between rounds).
                        ratio = float(np.median(np.divide(o_times, c_times)))
                        results.append(dict(case=f"{title} batch {batch}", precision="fp16" if fp16 else "fp32", threads=t,
                                            cortado_ms=c * 1e3, ort_ms=o * 1e3, ratio=ratio, error=err, rows=batch, limit=limit))
                        r = results[-1]
                        extra = ""
                        if base:
                            r["baseline_ms"] = float(np.median(b_times)) * 1e3
                            extra = f"  baseline {r['baseline_ms']:9.3f} ms  ratio {float(np.median(np.divide(o_times, b_times))):5.2f}x"
                        print(f"{r['case']:<32} {r['precision']:>5} {t:>2} thr  Cortado {r['cortado_ms']:9.3f} ms  "
                              f"onnxruntime {r['ort_ms']:9.3f} ms  ratio {r['ratio']:5.2f}x{extra}  (agreement {err:.1e})", flush=True)
    print("\nratio = onnxruntime time ÷ Cortado time (above 1: Cortado is faster), the median of alternating rounds' ratios"
          f"{'' if a.no_pin else '; one-thread rounds pinned to one CPU'};"
          " onnxruntime always runs fp32." + (f" baseline: the build at {a.baseline}, in the same rounds." if base else ""))
    # bench/run_all.py's summary rows (CPU time is not measured here: its ratio is left NaN).
    common.write_summary(a.summary, "mlprogram_vs_onnxruntime", f"ML Programs vs onnxruntime on {common.cpu_model()}", [
        dict(case=f"ML Program {r['case']} {r['precision']} {r['threads']}t", reference="ort",
             cortado_rows_per_second=r["rows"] / (r["cortado_ms"] / 1e3), reference_rows_per_second=r["rows"] / (r["ort_ms"] / 1e3),
             wall_ratio=r["ratio"], cpu_ratio=float("nan"), agree=True, max_error=r["error"], tolerance=r["limit"])
        for r in results])


if __name__ == "__main__":
    main()
