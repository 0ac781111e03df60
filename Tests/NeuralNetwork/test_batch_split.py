"""A batch split over the threads: each thread runs a share of the rows as a batch of its own.

With more than one thread, a large enough batch of stacked rows runs as one share per thread
(each share a single-threaded pass of the whole network on its own workspace); the
`CORTADO_BATCH_SPLIT` variable forces the split on (`1`) or off (`0`) instead of the rule,
which goes by the time the last batch took. These cases run the same rows both ways
(`cortado predict` batches its input rows and uses both cores): outputs must match NumPy
references and each other, row for row and in order, with shares of equal and unequal size
(9 rows on 2 threads are 5 + 4; 3 rows are 2 + 1), for array outputs of each data type, and
for a classifier's labels and probabilities. Tolerances: test_dense's GEMM_TOL against the
references; the two runs agree to 1e-6 (the same sums, in shares of other sizes).
"""
import numpy as np
import pytest
from coremltools.proto import FeatureTypes_pb2 as ft

import test_dense as dense
from nnharness import assert_close, builder, predict, rng

SPLIT = ["1", "0"]


def both_ways(spec, rows, tmp_path, monkeypatch):
    outs = {}
    for split in SPLIT:
        monkeypatch.setenv("CORTADO_BATCH_SPLIT", split)
        folder = tmp_path / f"split{split}"
        folder.mkdir()
        outs[split] = predict(spec, rows, folder)
    monkeypatch.delenv("CORTADO_BATCH_SPLIT")
    return outs


def conv_net(cin=3, hw=12, cout=8, hidden=6, seed=3):
    """conv 3×3 same + bias → ReLU → max pool 2×2 → inner product; the pooled map (float32)
    and the inner product (double) are both outputs."""
    r = rng(seed)
    w = (r.normal(size=(cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    half = hw // 2
    fw = (r.normal(size=(hidden, cout * half * half)) / np.sqrt(cout * half * half)).astype(np.float32)
    fb = r.normal(size=hidden).astype(np.float32)
    b = builder([("x", (cin, hw, hw))], [("pooled", (cout, half, half)), ("y", (hidden,))])
    b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1, W=w.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="x", output_name="c")
    b.add_activation("relu", "RELU", "c", "a")
    b.add_pooling("pool", 2, 2, 2, 2, "MAX", "VALID", "a", "pooled")
    b.add_inner_product("fc", W=fw, b=fb, input_channels=cout * half * half, output_channels=hidden, has_bias=True,
                        input_name="pooled", output_name="y")
    outputs = {o.name: o for o in b.spec.description.output}
    outputs["pooled"].type.multiArrayType.dataType = ft.ArrayFeatureType.FLOAT32
    outputs["y"].type.multiArrayType.dataType = ft.ArrayFeatureType.DOUBLE

    def reference(x):
        conv = dense.conv_ref(x, w.astype(np.float64), bias, pads=dense.same_pads(hw, 3, 1) * 2)
        pooled = dense.pool_ref(np.maximum(conv, 0), "MAX", (2, 2), (2, 2), (0, 0, 0, 0), True, None)
        return pooled, fw.astype(np.float64) @ pooled.reshape(-1) + fb
    return b, reference


@pytest.mark.parametrize("count", [9, 3, 8])
def test_conv_net_rows_split_or_not(count, tmp_path, monkeypatch):
    spec, reference = conv_net()
    xs = [rng(10 + i).normal(size=(3, 12, 12)) for i in range(count)]
    outs = both_ways(spec, [{"x": x} for x in xs], tmp_path, monkeypatch)
    for i, x in enumerate(xs):
        pooled, y = reference(x)
        for split in SPLIT:
            assert_close(outs[split][i]["pooled"], pooled, **dense.GEMM_TOL, what=f"split={split} row {i} pooled")
            assert_close(outs[split][i]["y"], y, **dense.GEMM_TOL, what=f"split={split} row {i} y")
        for name in ("pooled", "y"):
            assert_close(outs["1"][i][name], outs["0"][i][name], rtol=1e-6, atol=1e-6, what=f"row {i} {name}, split vs not")


def test_classifier_rows_split_or_not(tmp_path, monkeypatch):
    """784-64-10 with softmax as a classifier: labels and probabilities per row, 9 rows."""
    r = rng(7)
    labels = [f"class {k}" for k in range(10)]
    w0 = (r.normal(size=(64, 784)) / 28).astype(np.float32)
    b0 = r.normal(size=64).astype(np.float32)
    w1 = (r.normal(size=(10, 64)) / 8).astype(np.float32)
    b = builder([("x", (784,))], [("probs", (10,))], mode="classifier")
    b.add_inner_product("fc0", W=w0, b=b0, input_channels=784, output_channels=64, has_bias=True, input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "r")
    b.add_inner_product("fc1", W=w1, b=None, input_channels=64, output_channels=10, has_bias=False, input_name="r", output_name="z")
    b.add_softmax("softmax", "z", "probs")
    b.set_class_labels(labels, predicted_feature_name="label", prediction_blob="probs")
    xs = [r.normal(size=784) for _ in range(9)]
    outs = both_ways(b, [{"x": x} for x in xs], tmp_path, monkeypatch)
    for i, x in enumerate(xs):
        z = w1.astype(np.float64) @ np.maximum(w0.astype(np.float64) @ x + b0, 0)
        p = np.exp(z - z.max())
        p /= p.sum()
        for split in SPLIT:
            o = outs[split][i]
            assert o["label"] == labels[int(np.argmax(p))], f"split={split} row {i}"
            assert_close([o["probs"][l] for l in labels], p, **dense.GEMM_TOL, what=f"split={split} row {i} probabilities")
