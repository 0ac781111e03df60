"""Convolution and inner product on both GEMM paths.

On a CPU with AVX-512F, ungrouped convolutions and inner products of 16+ outputs run on
Cortado's own packed GEMM (Sources/CGemm); `CORTADO_GEMM=openblas` puts them back on OpenBLAS,
the path every other CPU takes. The cases of test_dense.py run again here on the OpenBLAS path,
and shapes that reach the packed GEMM's other strategies (images cut into column bands, one
wide row split over the workers) run on both paths against NumPy. Convolutions with many
input channels take the direct kernel (output channels along the lanes) by default:
`CORTADO_CONV=direct` forces it on every ungrouped convolution it supports and
`CORTADO_CONV=gemm` keeps them all on the packed GEMM, so both kernels meet every shape here.
Tolerances: test_dense's GEMM_TOL (float32 sums of a few thousand products against float64
references).
"""
import numpy as np
import pytest

import test_dense as dense
from nnharness import assert_close, builder, predict, rng

PATHS = ["default", "openblas"]
# The packed GEMM's two convolution kernels.
CONV_PATHS = ["direct", "gemm"]


def use_path(monkeypatch, path):
    if path == "openblas":
        monkeypatch.setenv("CORTADO_GEMM", "openblas")
    else:
        monkeypatch.delenv("CORTADO_GEMM", raising=False)
    if path in CONV_PATHS:
        monkeypatch.setenv("CORTADO_CONV", path)
    else:
        monkeypatch.delenv("CORTADO_CONV", raising=False)


@pytest.mark.parametrize("case", sorted(dense.CONV_CASES))
def test_convolution_on_openblas(case, tmp_path, monkeypatch):
    use_path(monkeypatch, "openblas")
    dense.test_convolution(case, tmp_path)


@pytest.mark.parametrize("case", sorted(dense.CONV_CASES))
def test_convolution_on_direct_kernel(case, tmp_path, monkeypatch):
    """Every case of test_dense on the direct kernel (the grouped ones stay on their path;
    strides above 2 across stay on the GEMM)."""
    use_path(monkeypatch, "direct")
    dense.test_convolution(case, tmp_path)


@pytest.mark.parametrize("shape", [(3, 101, 99, 6), (16, 64, 70, 20), (16, 30, 64, 20), (5, 12, 11, 7)])
def test_conv_then_max_pool_on_direct_kernel(shape, tmp_path, monkeypatch):
    """The pooling folded into the direct kernel: same reference, and bit for bit the separate
    pooling (the same sums, then the same maximum)."""
    use_path(monkeypatch, "direct")
    dense.test_conv_folds_following_max_pool(*shape, tmp_path)


@pytest.mark.parametrize("path", CONV_PATHS)
def test_conv_sigmoid_then_max_pool(path, tmp_path, monkeypatch):
    """conv → sigmoid → max pool 2×2 stride 2 at 13×13 with 140 input channels: the sigmoid is
    folded but is not one of the kernels' own epilogues, so it runs as a pass of its own before
    the pooling."""
    use_path(monkeypatch, path)
    cin, hw, cout = 140, 13, 40
    r = rng(41)
    w_spec = (r.normal(size=(cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    b = builder([("x", (cin, hw, hw))], [("y", (cout, hw // 2, hw // 2))])
    b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1, W=w_spec.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="x", output_name="c")
    b.add_activation("sigmoid", "SIGMOID", "c", "a")
    b.add_pooling("pool", 2, 2, 2, 2, "MAX", "VALID", "a", "y")
    xs = [r.normal(size=(cin, hw, hw)) for _ in range(2)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    pads = dense.same_pads(hw, 3, 1) * 2
    for i, (x, o) in enumerate(zip(xs, outs)):
        conv = dense.conv_ref(x, w_spec.astype(np.float64), bias, pads=pads)
        expected = dense.pool_ref(1 / (1 + np.exp(-conv)), "MAX", (2, 2), (2, 2), (0, 0, 0, 0), True, None)
        assert_close(o["y"], expected, **dense.GEMM_TOL, what=f"{path} image {i}")


@pytest.mark.parametrize("rows", [1, 7, 256])
def test_inner_product_on_openblas(rows, tmp_path, monkeypatch):
    use_path(monkeypatch, "openblas")
    dense.test_inner_product(rows, tmp_path)


def test_fused_conv_bn_leaky_on_openblas(tmp_path, monkeypatch):
    use_path(monkeypatch, "openblas")
    dense.test_fused_conv_bn_leaky_matches_unfused(tmp_path)


@pytest.mark.parametrize("shape", [(3, 101, 99, 6), (5, 12, 11, 7)])
def test_conv_then_max_pool_on_openblas(shape, tmp_path, monkeypatch):
    """On OpenBLAS the pooling stays a layer of its own; same reference, same equality."""
    use_path(monkeypatch, "openblas")
    dense.test_conv_folds_following_max_pool(*shape, tmp_path)


@pytest.mark.parametrize("path", PATHS)
def test_banded_convolution_with_folded_steps(path, tmp_path, monkeypatch):
    """16 channels of 50×47 (K = 144, 2350 output columns): the packed GEMM cuts each image into
    bands of columns; two images per batch; bias, batch norm and leaky ReLU folded in."""
    use_path(monkeypatch, path)
    cin, h, w, cout = 16, 50, 47, 20
    r = rng(21)
    w_spec = (r.normal(size=(cout, cin, 3, 3)) / 12).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    gamma, beta, mean = r.normal(size=cout), r.normal(size=cout), r.normal(size=cout)
    var = r.uniform(0.5, 2, size=cout)
    b = builder([("x", (cin, h, w))], [("y", (cout, h, w))])
    b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1, W=w_spec.transpose(2, 3, 1, 0), b=bias,
                      has_bias=True, input_name="x", output_name="c")
    b.add_batchnorm("bn", cout, gamma, beta, mean, var, input_name="c", output_name="n")
    b.add_activation("leaky", "LEAKYRELU", "n", "y", params=[0.1])
    xs = [r.normal(size=(cin, h, w)) for _ in range(2)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    pads = dense.same_pads(h, 3, 1) + dense.same_pads(w, 3, 1)
    for i, (x, o) in enumerate(zip(xs, outs)):
        conv = dense.conv_ref(x, w_spec.astype(np.float64), bias, pads=pads)
        bn = gamma[:, None, None] * (conv - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) + beta[:, None, None]
        assert_close(o["y"], np.where(bn >= 0, bn, 0.1 * bn), **dense.GEMM_TOL, what=f"{path} image {i}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("padding", ["valid", "same"])
def test_in_place_convolution_dilated_and_strided(path, padding, tmp_path, monkeypatch):
    """8 channels of 64×128, 3×3 kernel dilated 2, stride 2 down and 1 across, 20 filters: rows
    of ~124 pixels, which the packed GEMM reads in place from a padded copy of the input
    (windows that start above, left of or past the input read zeros); two images per batch;
    bias and ReLU folded in."""
    use_path(monkeypatch, path)
    cin, h, w, cout = 8, 64, 128, 20
    r = rng(24)
    w_spec = (r.normal(size=(cout, cin, 3, 3)) / 8).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    if padding == "valid":
        pads = (0, 0, 0, 0)
    else:
        pads = dense.same_pads(h, 3, 2, 2) + dense.same_pads(w, 3, 1, 2)
    oh, ow = (h + pads[0] + pads[1] - 5) // 2 + 1, (w + pads[2] + pads[3] - 5) + 1
    b = builder([("x", (cin, h, w))], [("y", (cout, oh, ow))])
    b.add_convolution("conv", cin, cout, 3, 3, 2, 1, padding, 1, W=w_spec.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="x", output_name="c", dilation_factors=[2, 2])
    b.add_activation("relu", "RELU", "c", "y")
    xs = [r.normal(size=(cin, h, w)) for _ in range(2)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    for i, (x, o) in enumerate(zip(xs, outs)):
        conv = dense.conv_ref(x, w_spec.astype(np.float64), bias, stride=(2, 1), dilation=(2, 2), pads=pads)
        assert conv.shape == (cout, oh, ow)
        assert_close(o["y"], np.maximum(conv, 0), **dense.GEMM_TOL, what=f"{path} {padding} image {i}")


@pytest.mark.parametrize("path", PATHS + CONV_PATHS)
@pytest.mark.parametrize("cin,hw,cout,k,stride", [(40, 13, 70, 3, 1), (64, 13, 96, 3, 1), (3, 9, 33, 3, 2), (300, 13, 125, 1, 1),
                                                  (140, 20, 50, 3, 2)])
def test_small_convolution_with_folded_steps(path, cin, hw, cout, k, stride, tmp_path, monkeypatch):
    """Small outputs (13×13; 5×5 and 10×10 at stride 2), which the packed GEMM packs whole and
    splits by output channels and the direct kernel splits by pairs of channel blocks: channel
    counts that end mid-panel or mid-block, K over several blocks (or chunks of input channels),
    two workers' share of the channels (64→96 at 13×13), a 1×1 head; bias, batch norm and leaky
    ReLU folded in; two images per batch."""
    use_path(monkeypatch, path)
    r = rng(23 + cin)
    w_spec = (r.normal(size=(cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    gamma, beta, mean = r.normal(size=cout), r.normal(size=cout), r.normal(size=cout)
    var = r.uniform(0.5, 2, size=cout)
    out = -(-hw // stride)
    b = builder([("x", (cin, hw, hw))], [("y", (cout, out, out))])
    b.add_convolution("conv", cin, cout, k, k, stride, stride, "same", 1, W=w_spec.transpose(2, 3, 1, 0), b=bias,
                      has_bias=True, input_name="x", output_name="c")
    b.add_batchnorm("bn", cout, gamma, beta, mean, var, input_name="c", output_name="n")
    b.add_activation("leaky", "LEAKYRELU", "n", "y", params=[0.1])
    xs = [r.normal(size=(cin, hw, hw)) for _ in range(2)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    pads = dense.same_pads(hw, k, stride) * 2
    for i, (x, o) in enumerate(zip(xs, outs)):
        conv = dense.conv_ref(x, w_spec.astype(np.float64), bias, stride=(stride, stride), pads=pads)
        bn = gamma[:, None, None] * (conv - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) + beta[:, None, None]
        assert_close(o["y"], np.where(bn >= 0, bn, 0.1 * bn), **dense.GEMM_TOL, what=f"{path} image {i}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rows", [1, 13])
def test_wide_inner_product(path, rows, tmp_path, monkeypatch):
    """2100 inputs → 2050 outputs with ReLU: one row is a GEMV large enough to split over the
    workers; 13 rows a GEMM whose rows and columns end mid-panel."""
    use_path(monkeypatch, path)
    cin, cout = 2100, 2050
    r = rng(22 + rows)
    wt = (r.normal(size=(cout, cin)) / np.sqrt(cin)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    b = builder([("x", (cin,))], [("y", (cout,))])
    b.add_inner_product("fc", W=wt, b=bias, input_channels=cin, output_channels=cout, has_bias=True,
                        input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "y")
    xs = [r.normal(size=(cin,)) for _ in range(rows)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    got = np.stack([o["y"].reshape(-1) for o in outs])
    assert_close(got, np.maximum(np.stack(xs) @ wt.T.astype(np.float64) + bias, 0), **dense.GEMM_TOL, what=path)
