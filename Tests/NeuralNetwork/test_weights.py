"""Weights in every storage form: float32, float16, and rawValue with linear quantization
(1–8 bits, per-channel scale and bias, symmetric) and lookup tables (linear and k-means), written
by coremltools' own quantizer on inner-product and convolution layers.

Reference: coremltools' dequantizer gives the weights the file stands for; NumPy computes the
layer from them. Tolerance rtol 1e-4, atol 1e-4 (the values are O(1); Cortado and NumPy sum in a
different order in float32 vs float64)."""

import numpy as np
import pytest

from nnharness import assert_close, builder, predict, rng

from coremltools.models.neural_network import quantization_utils as qu
import coremltools as ct

MODES = {
    "linear": ct.models._QUANTIZATION_MODE_LINEAR_QUANTIZATION,
    "linear_symmetric": ct.models._QUANTIZATION_MODE_LINEAR_SYMMETRIC,
    "linear_lut": ct.models._QUANTIZATION_MODE_LOOKUP_TABLE_LINEAR,
    "kmeans_lut": ct.models._QUANTIZATION_MODE_LOOKUP_TABLE_KMEANS,
}

CASES = [(16, "linear")] + [(n, "linear") for n in range(1, 9)] + [(8, "linear_symmetric"),
         (2, "linear_lut"), (5, "linear_lut")]
# coremltools 9.0 (numpy 2.3, scikit-learn 1.5) writes k-means lookup tables with no entries, and
# allows symmetric quantization only at 8 bits; lookup tables are covered by the linear_lut mode.


def quantized(spec, nbits, mode):
    return qu._quantize_spec_weights(spec, nbits, MODES[mode])


def dequantized(wp, shape):
    """The float weights a WeightParams stands for, as coremltools reads them."""
    if len(wp.floatValue):
        return np.asarray(wp.floatValue, dtype=np.float64).reshape(shape)
    if len(wp.float16Value):
        return np.frombuffer(wp.float16Value, dtype=np.float16).astype(np.float64).reshape(shape)
    q = wp.quantization
    n = int(np.prod(shape))
    bits = np.unpackbits(np.frombuffer(wp.rawValue, dtype=np.uint8))[: n * q.numberOfBits]
    codes = bits.reshape(n, q.numberOfBits) @ (1 << np.arange(q.numberOfBits - 1, -1, -1))
    if q.WhichOneof("QuantizationType") == "lookupTableQuantization":
        values = np.asarray(q.lookupTableQuantization.floatValue, dtype=np.float64)[codes]
    else:
        scale = np.asarray(q.linearQuantization.scale, dtype=np.float64)
        bias = np.asarray(q.linearQuantization.bias, dtype=np.float64)
        if len(bias) == 0:
            bias = np.zeros_like(scale)
        channel = np.arange(n) // (n // shape[0]) if len(scale) > 1 else np.zeros(n, dtype=int)
        values = scale[channel] * codes + bias[channel]
    return values.reshape(shape)


def inner_product(cin=24, cout=6):
    b = builder([("x", (cin,))], [("y", (cout,))])
    W = rng(10).normal(size=(cout, cin)).astype(np.float32)
    bias = rng(11).normal(size=(cout,)).astype(np.float32)
    b.add_inner_product("ip", W, bias, cin, cout, True, "x", "y")
    return b.spec, W, bias


@pytest.mark.parametrize("nbits,mode", CASES, ids=[f"{m}-{n}bit" for n, m in CASES])
def test_inner_product_weights(nbits, mode, tmp_path):
    spec, W, bias = inner_product()
    q = quantized(spec, nbits, mode)
    wp = q.neuralNetwork.layers[0].innerProduct.weights
    if nbits == 16:
        assert len(wp.float16Value) > 0
    else:
        assert len(wp.rawValue) > 0 and wp.quantization.numberOfBits == nbits
    Wq = dequantized(wp, W.shape)
    bq = dequantized(q.neuralNetwork.layers[0].innerProduct.bias, bias.shape)
    xs = [rng(20 + i).normal(size=(W.shape[1],)) for i in range(3)]
    out = predict(q, [{"x": x} for x in xs], tmp_path)
    for x, o in zip(xs, out):
        assert_close(o["y"], Wq @ x + bq, rtol=1e-4, atol=1e-4, what=f"{mode} {nbits}-bit")


@pytest.mark.parametrize("nbits,mode", [(16, "linear"), (8, "linear"), (3, "linear"), (4, "linear_lut")])
def test_convolution_weights(nbits, mode, tmp_path):
    cin, cout, k = 3, 5, 3
    b = builder([("x", (cin, 6, 6))], [("y", (cout, 4, 4))])
    W = rng(30).normal(size=(k, k, cin, cout)).astype(np.float32)  # the builder's layout: kH, kW, Cin, Cout
    b.add_convolution("conv", kernel_channels=cin, output_channels=cout, height=k, width=k, stride_height=1, stride_width=1,
                      border_mode="valid", groups=1, W=W, b=None, has_bias=False, input_name="x", output_name="y")
    q = quantized(b.spec, nbits, mode)
    wp = q.neuralNetwork.layers[0].convolution.weights
    Wq = dequantized(wp, (cout, cin, k, k))
    x = rng(31).normal(size=(cin, 6, 6))
    ref = np.zeros((cout, 4, 4))
    for o in range(cout):
        for i in range(4):
            for j in range(4):
                ref[o, i, j] = np.sum(Wq[o] * x[:, i:i + k, j:j + k])
    out = predict(q, {"x": x}, tmp_path)
    assert_close(out["y"], ref, rtol=1e-4, atol=1e-4, what=f"conv {mode} {nbits}-bit")


def test_quantized_weights_of_the_wrong_size_fail_the_load(tmp_path):
    from nnharness import load_error
    spec, W, bias = inner_product()
    q = quantized(spec, 4, "linear")
    wp = q.neuralNetwork.layers[0].innerProduct.weights
    wp.rawValue = wp.rawValue[: len(wp.rawValue) // 2]
    err = load_error(q, tmp_path, rows=[{"x": np.zeros(24)}])
    assert "ip" in err and "4-bit" in err


def test_lookup_table_of_the_wrong_size_fails_the_load(tmp_path):
    from nnharness import load_error
    spec, W, bias = inner_product()
    q = quantized(spec, 3, "linear_lut")
    lut = q.neuralNetwork.layers[0].innerProduct.weights.quantization.lookupTableQuantization
    del lut.floatValue[-1]
    err = load_error(q, tmp_path, rows=[{"x": np.zeros(24)}])
    assert "ip" in err and "lookup table" in err
