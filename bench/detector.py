"""A MobileNet/BlazeFace-style detector for the benchmarks: depthwise separable blocks (a 3×3
depthwise convolution, then a 1×1 convolution) with residual adds, 24 to 96 channels on
128² to 32² maps, as phones run them. Built twice with the same random weights: with
coremltools' NeuralNetworkBuilder, as an ML Program (coremltools' MIL builder) and as an ONNX
graph (the onnxruntime twin).

Layout (input 3×256×256, all padding explicit so both formats pad alike):
  conv 3×3 stride 2, 3→24, ReLU                        → 24×128×128
  2 × [depthwise 3×3, ReLU; 1×1 24→24; + input; ReLU]   at 128²
  depthwise 3×3 stride 2, ReLU; 1×1 24→48, ReLU        → 48×64×64
  2 × block at 64² (48 channels)
  depthwise 3×3 stride 2, ReLU; 1×1 48→96, ReLU        → 96×32×32
  2 × block at 32² (96 channels)
  1×1 96→16 (the head)                                 → 16×32×32
"""
import numpy as np

INPUT = (3, 256, 256)
OUTPUT = (16, 32, 32)


def _layers():
    """(kind, cin, cout, stride, relu, residual) in order."""
    out = [("conv", 3, 24, 2, True, False)]
    for cin, cout in ((24, 24), (24, 48), (48, 96)):
        if cin != cout:
            out += [("dw", cin, cin, 2, True, False), ("pw", cin, cout, 1, True, False)]
        blocks = 2
        for _ in range(blocks):
            out += [("dw", cout, cout, 1, True, False), ("pw", cout, cout, 1, True, True)]
    out.append(("pw", 96, 16, 1, False, False))
    return out


def weights(seed=0):
    r = np.random.default_rng(seed)
    ws = []
    for kind, cin, cout, _, _, _ in _layers():
        k = 1 if kind == "pw" else 3
        per = 1 if kind == "dw" else cin
        w = (r.standard_normal((cout, per, k, k)) * np.sqrt(2 / (per * k * k))).astype(np.float32)
        b = (r.standard_normal(cout) * 0.1).astype(np.float32)
        ws.append((w, b))
    return ws


def build_coreml(ws, float32_io=True):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    from coremltools.proto import FeatureTypes_pb2 as ft
    b = NeuralNetworkBuilder([("x", datatypes.Array(*INPUT))], [("y", datatypes.Array(*OUTPUT))])
    blob, block_in = "x", None
    layers = _layers()
    for i, ((kind, cin, cout, stride, relu, residual), (w, bias)) in enumerate(zip(layers, ws)):
        last = i == len(layers) - 1
        k, groups, pad = (1, 1, 0) if kind == "pw" else (3, cin if kind == "dw" else 1, 1)
        if kind == "dw" and stride == 1:
            block_in = blob
        out = "y" if last else f"l{i}"
        b.add_convolution(f"conv{i}", w.shape[1], cout, k, k, stride, stride, "valid", groups, W=w.transpose(2, 3, 1, 0), b=bias,
                          has_bias=True, input_name=blob, output_name=out, padding_top=pad, padding_bottom=pad,
                          padding_left=pad, padding_right=pad)
        blob = out
        if residual:
            b.add_elementwise(f"add{i}", [blob, block_in], f"s{i}", "ADD")
            blob = f"s{i}"
        if relu:
            b.add_activation(f"relu{i}", "RELU", blob, f"r{i}")
            blob = f"r{i}"
    if float32_io:
        for f in list(b.spec.description.input) + list(b.spec.description.output):
            f.type.multiArrayType.dataType = ft.ArrayFeatureType.FLOAT32
    return b


def build_mlprogram(ws, path, fp16=False):
    """The same network as an ML Program (iOS16 opset, fp32 unless `fp16`), saved at `path`
    (an .mlpackage): conv (explicit padding, bias), then the add and the ReLU as separate ops,
    as the NeuralNetwork and ONNX forms have them."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    layers = _layers()

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, *INPUT))], opset_version=ct.target.iOS16)
    def prog(x):
        blob, block_in = x, None
        for (kind, cin, cout, stride, relu, residual), (w, bias) in zip(layers, ws):
            pad, groups = (0, 1) if kind == "pw" else (1, cin if kind == "dw" else 1)
            if kind == "dw" and stride == 1:
                block_in = blob
            blob = mb.conv(x=blob, weight=w, bias=bias, strides=[stride, stride], pad_type="custom", pad=[pad] * 4, groups=groups)
            if residual:
                blob = mb.add(x=blob, y=block_in)
            if relu:
                blob = mb.relu(x=blob)
        return blob

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32)
    # Name the feature "y" as the other forms do (the builder names it after the last op).
    spec = model.get_spec()
    old = spec.description.output[0].name
    if old != "y":
        ct.utils.rename_feature(spec, old, "y")
        model = ct.models.MLModel(spec, weights_dir=model.weights_dir)
    model.save(path)
    return path


def build_onnx(ws):
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits = [], []
    blob, block_in = "x", None
    layers = _layers()
    for i, ((kind, cin, cout, stride, relu, residual), (w, bias)) in enumerate(zip(layers, ws)):
        last = i == len(layers) - 1
        pad, groups = (0, 1) if kind == "pw" else (1, cin if kind == "dw" else 1)
        if kind == "dw" and stride == 1:
            block_in = blob
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        out = "y" if last else f"l{i}"
        nodes.append(helper.make_node("Conv", [blob, f"w{i}", f"b{i}"], [out], group=groups, strides=[stride, stride],
                                      pads=[pad] * 4, kernel_shape=list(w.shape[2:])))
        blob = out
        if residual:
            nodes.append(helper.make_node("Add", [blob, block_in], [f"s{i}"]))
            blob = f"s{i}"
        if relu:
            nodes.append(helper.make_node("Relu", [blob], [f"r{i}"]))
            blob = f"r{i}"
    graph = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *INPUT])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *OUTPUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def flops():
    """Multiply-adds × 2 of the convolutions."""
    total, hw = 0, INPUT[1]
    for kind, cin, cout, stride, _, _ in _layers():
        hw = hw // stride if stride > 1 else hw
        k = 1 if kind == "pw" else 3
        per = 1 if kind == "dw" else cin
        total += 2 * cout * per * k * k * hw * hw
    return total
