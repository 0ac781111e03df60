"""Tiny YOLO v2 (VOC) with fixed random weights: Cortado against onnxruntime on the same weights.

The network (tiny-yolo-voc.cfg): six blocks of conv 3×3 (16, 32, 64, 128, 256, 512 filters,
no bias) + batch norm + leaky ReLU 0.1 + max-pool 2×2 (stride 2; the sixth stride 1 with same
padding, i.e. one row/column of padding at the bottom/right), then conv 3×3 1024 + BN + leaky,
conv 3×3 1024 + BN + leaky, conv 1×1 125 with bias. 3×416×416 in, 125×13×13 out, 6.97 GFLOP.

Weights are He-scaled normals (seeded) and batch-norm statistics near identity, so activations
stay O(1). Tolerance: |cortado - onnxruntime| <= 1e-3 · max|onnxruntime| + 1e-3 · |onnxruntime|
per value (float32 sums of up to 9216 products, in different orders).

`build_coreml` / `build_onnx` are also used by bench/nn_vs_onnxruntime.py.
"""

import numpy as np
import pytest

from nnharness import assert_close, predict

FILTERS = [16, 32, 64, 128, 256, 512, 1024, 1024]
INPUT = (3, 416, 416)
OUTPUT = (125, 13, 13)
EPS = 1e-5


def tiny_yolo_weights(seed=0):
    """Per 3×3 conv layer: (w [Cout, Cin, 3, 3], gamma, beta, mean, var); then the 1×1 head (w, b)."""
    r = np.random.default_rng(seed)
    layers, cin = [], 3
    for cout in FILTERS:
        w = (r.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        gamma = r.uniform(0.8, 1.2, cout).astype(np.float32)
        beta = (r.standard_normal(cout) * 0.1).astype(np.float32)
        mean = (r.standard_normal(cout) * 0.1).astype(np.float32)
        var = r.uniform(0.5, 1.5, cout).astype(np.float32)
        layers.append((w, gamma, beta, mean, var))
        cin = cout
    head_w = (r.standard_normal((125, cin, 1, 1)) * np.sqrt(1.0 / cin)).astype(np.float32)
    head_b = (r.standard_normal(125) * 0.1).astype(np.float32)
    return layers, (head_w, head_b)


def build_coreml(weights, batch_input_name="image"):
    """The network with coremltools' NeuralNetworkBuilder; returns the builder."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    layers, (head_w, head_b) = weights
    b = NeuralNetworkBuilder([(batch_input_name, datatypes.Array(*INPUT))], [("grid", datatypes.Array(*OUTPUT))])
    blob = batch_input_name
    for i, (w, gamma, beta, mean, var) in enumerate(layers):
        cout, cin = w.shape[:2]
        b.add_convolution(f"conv{i}", cin, cout, 3, 3, 1, 1, "same", 1, W=w.transpose(2, 3, 1, 0), b=None,
                          has_bias=False, input_name=blob, output_name=f"conv{i}")
        b.add_batchnorm(f"bn{i}", cout, gamma, beta, mean, var, input_name=f"conv{i}", output_name=f"bn{i}", epsilon=EPS)
        b.add_activation(f"leaky{i}", "LEAKYRELU", f"bn{i}", f"leaky{i}", params=[0.1])
        blob = f"leaky{i}"
        if i < 5:
            b.add_pooling(f"pool{i}", 2, 2, 2, 2, "MAX", "VALID", blob, f"pool{i}")
            blob = f"pool{i}"
        elif i == 5:
            b.add_pooling(f"pool{i}", 2, 2, 1, 1, "MAX", "SAME", blob, f"pool{i}")
            blob = f"pool{i}"
    b.add_convolution("head", head_w.shape[1], 125, 1, 1, 1, 1, "valid", 1, W=head_w.transpose(2, 3, 1, 0), b=head_b,
                      has_bias=True, input_name=blob, output_name="grid")
    return b


def build_onnx(weights, batch="N"):
    """The same network as an ONNX graph (opset 13); input [batch, 3, 416, 416]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    layers, (head_w, head_b) = weights
    nodes, inits = [], []

    def init(name, a):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(a, dtype=np.float32), name))
        return name

    blob = "image"
    for i, (w, gamma, beta, mean, var) in enumerate(layers):
        nodes.append(helper.make_node("Conv", [blob, init(f"w{i}", w)], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", init(f"g{i}", gamma), init(f"b{i}", beta),
                                                             init(f"m{i}", mean), init(f"v{i}", var)], [f"n{i}"], epsilon=EPS))
        nodes.append(helper.make_node("LeakyRelu", [f"n{i}"], [f"l{i}"], alpha=0.1))
        blob = f"l{i}"
        if i < 5:
            nodes.append(helper.make_node("MaxPool", [blob], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            blob = f"p{i}"
        elif i == 5:
            nodes.append(helper.make_node("MaxPool", [blob], [f"p{i}"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]))
            blob = f"p{i}"
    nodes.append(helper.make_node("Conv", [blob, init("hw", head_w), init("hb", head_b)], ["grid"], kernel_shape=[1, 1]))
    graph = helper.make_graph(nodes, "tiny_yolo_v2_voc",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, *INPUT])],
                              [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [batch, *OUTPUT])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def onnx_session(model, threads=1):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def tiny_yolo():
    weights = tiny_yolo_weights(0)
    return build_coreml(weights), build_onnx(weights)


def test_tiny_yolo_matches_onnxruntime(tiny_yolo, tmp_path):
    coreml, onnx_model = tiny_yolo
    x = np.random.default_rng(1).uniform(0, 1, size=(1, *INPUT)).astype(np.float32)
    expected = onnx_session(onnx_model).run(None, {"image": x})[0][0]
    assert expected.shape == OUTPUT
    scale = float(np.abs(expected).max())
    assert 0.1 < scale < 1e3, f"activations blew up or vanished (max |out| {scale})"
    out = predict(coreml, {"image": x[0].astype(np.float64)}, tmp_path, timeout=600)
    assert_close(out["grid"], expected, rtol=1e-3, atol=1e-3 * scale, what="Tiny YOLO grid")


def test_tiny_yolo_batch_of_two(tiny_yolo, tmp_path):
    """Two rows run as one batch along B and each matches onnxruntime's batch of two."""
    coreml, onnx_model = tiny_yolo
    x = np.random.default_rng(2).uniform(0, 1, size=(2, *INPUT)).astype(np.float32)
    expected = onnx_session(onnx_model, threads=2).run(None, {"image": x})[0]
    outs = predict(coreml, [{"image": x[i].astype(np.float64)} for i in range(2)], tmp_path, timeout=600)
    for i in range(2):
        scale = float(np.abs(expected[i]).max())
        assert_close(outs[i]["grid"], expected[i], rtol=1e-3, atol=1e-3 * scale, what=f"row {i}")
