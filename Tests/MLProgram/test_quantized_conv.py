"""`conv_quantized` (iOS15): uint8 weights decoded linearly (scalar and per-channel scale and
bias) or through a lookup table, then a convolution; against a NumPy direct convolution."""

import numpy as np
import pytest

from milharness import assert_close, ct, mb, only, rng, run_program

OPS = ["conv_quantized"]


def conv2d(x, w, stride=1, pad=0):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out


@pytest.mark.parametrize("per_channel", [False, True])
def test_linear_quantized_weights(per_channel, tmp_path):
    r = rng(40)
    q = r.integers(0, 256, (4, 2, 3, 3)).astype(np.uint8)
    scale = (r.uniform(0.005, 0.02, 4) if per_channel else np.array(0.01)).astype(np.float32)
    bias = (r.uniform(-1.5, -0.5, 4) if per_channel else np.array(-1.25)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 6, 6))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.conv_quantized(x=x, weight=q, quantization_type="linear", nbits=8, quant_scale=scale, quant_bias=bias,
                                 pad_type="custom", pad=[1, 1, 1, 1])

    x = r.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = q.astype(np.float64) * scale.reshape(-1, 1, 1, 1) + bias.reshape(-1, 1, 1, 1)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), conv2d(x.astype(np.float64), w, pad=1), rtol=1e-4, atol=1e-4)


def test_lut_quantized_weights(tmp_path):
    r = rng(41)
    table = r.standard_normal(16).astype(np.float32)
    q = r.integers(0, 16, (3, 2, 2, 2)).astype(np.uint8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 5, 5))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.conv_quantized(x=x, weight=q, quantization_type="lut", nbits=4, quant_scale=table,
                                 quant_bias=np.float32(0), strides=[2, 2])

    x = r.standard_normal((1, 2, 5, 5)).astype(np.float32)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), conv2d(x.astype(np.float64), table[q].astype(np.float64), stride=2),
                 rtol=1e-4, atol=1e-4)
