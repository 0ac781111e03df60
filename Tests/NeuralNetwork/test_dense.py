"""Convolution, deconvolution, inner product, batch norm and pooling against NumPy references
written here from NeuralNetwork.proto's semantics.

Tolerances: rtol 1e-4, atol 1e-4 for GEMM-backed layers (float32 sums of up to a few hundred
products against float64 references); rtol 1e-5, atol 1e-5 for pooling; fused vs unfused
convolution + batch norm + leaky ReLU: rtol 1e-4, atol 1e-5.
"""

import math

import numpy as np
import pytest

from nnharness import assert_close, builder, load_error, predict, rng

# Layer types this module tests (docs/layers.md).
LAYERS = ["convolution", "innerProduct", "batchnorm", "pooling"]

GEMM_TOL = dict(rtol=1e-4, atol=1e-4)
POOL_TOL = dict(rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- references

def same_pads(size, k, stride, dilation=1, top_left_heavy=False):
    kd = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + kd - size)
    small = total // 2
    return (total - small, small) if top_left_heavy else (small, total - small)


def conv_ref(x, w, b=None, stride=(1, 1), dilation=(1, 1), pads=(0, 0, 0, 0), groups=1):
    """x [Cin, H, W], w [Cout, Cin/groups, kh, kw] (the spec's layout), pads (top, bottom, left, right)."""
    cout, cin_g, kh, kw = w.shape
    t, bt, l, r = pads
    xp = np.pad(x, ((0, 0), (t, bt), (l, r)))
    hp, wp = xp.shape[1:]
    kdh, kdw = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh, ow = (hp - kdh) // stride[0] + 1, (wp - kdw) // stride[1] + 1
    mg = cout // groups
    y = np.zeros((cout, oh, ow))
    for co in range(cout):
        g = co // mg
        xs = xp[g * cin_g:(g + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                hi, wj = i * dilation[0], j * dilation[1]
                patch = xs[:, hi:hi + (oh - 1) * stride[0] + 1:stride[0], wj:wj + (ow - 1) * stride[1] + 1:stride[1]]
                y[co] += np.tensordot(w[co, :, i, j], patch, axes=1)
    if b is not None:
        y += b[:, None, None]
    return y


def deconv_ref(x, w, b=None, stride=(1, 1), dilation=(1, 1), crop=(0, 0), out_hw=None, groups=1):
    """Transposed convolution: x [Cin, H, W], w [Cin, Cout/groups, kh, kw]. The full output
    ((H-1)·s + kd) is cropped from (crop_top, crop_left), out_hw rows/columns (zeros past the end)."""
    cin, cout_g, kh, kw = w.shape
    _, h, wd = x.shape
    cin_g = cin // groups
    kdh, kdw = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    fh, fw = (h - 1) * stride[0] + kdh, (wd - 1) * stride[1] + kdw
    oh, ow = out_hw
    full = np.zeros((cout_g * groups, max(fh, crop[0] + oh), max(fw, crop[1] + ow)))
    for g in range(groups):
        xs = x[g * cin_g:(g + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("co,chw->ohw", w[g * cin_g:(g + 1) * cin_g, :, i, j], xs)
                hi, wj = i * dilation[0], j * dilation[1]
                full[g * cout_g:(g + 1) * cout_g, hi:hi + (h - 1) * stride[0] + 1:stride[0],
                     wj:wj + (wd - 1) * stride[1] + 1:stride[1]] += contrib
    y = full[:, crop[0]:crop[0] + oh, crop[1]:crop[1] + ow]
    if b is not None:
        y = y + b[:, None, None]
    return y


def pool_ref(x, kind, k, s, pads, exclude=True, clip_end=None):
    """Windows over [C, H, W]; pads (top, bottom, left, right). Padding never wins a max and adds
    nothing to a sum; an average divides by the window's cells inside the input (exclude) or
    inside the padded input."""
    c, h, w = x.shape
    t, bt, l, r = pads
    oh, ow = clip_end if clip_end else ((h + t + bt - k[0]) // s[0] + 1, (w + l + r - k[1]) // s[1] + 1)
    y = np.zeros((c, oh, ow))
    for i in range(oh):
        hs = i * s[0] - t
        h0, h1 = max(hs, 0), min(hs + k[0], h)
        for j in range(ow):
            ws = j * s[1] - l
            w0, w1 = max(ws, 0), min(ws + k[1], w)
            win = x[:, h0:h1, w0:w1].reshape(c, -1)
            if kind == "MAX":
                y[:, i, j] = win.max(axis=1)
            elif kind == "L2":
                y[:, i, j] = np.sqrt((win ** 2).sum(axis=1))
            else:
                n = win.shape[1] if exclude else (min(hs + k[0], h + bt) - hs) * (min(ws + k[1], w + r) - ws)
                y[:, i, j] = win.sum(axis=1) / n
    return y


def builder_weights(w_spec, deconv=False):
    """The spec layout back to NeuralNetworkBuilder's (kh, kw, kernel_channels, out) layout."""
    return w_spec.transpose(2, 3, 1, 0) if not deconv else w_spec.transpose(2, 3, 0, 1)


def conv_model(cin, h, w, cout, k, w_spec, bias=None, stride=(1, 1), dilation=(1, 1), border="valid",
               pads=(0, 0, 0, 0), groups=1, mode="BOTTOM_RIGHT_HEAVY", out_shape=None, deconv=False, output_shape=None):
    b = builder([("x", (cin, h, w))], [("y", out_shape)])
    b.add_convolution("conv", kernel_channels=w_spec.shape[0] if deconv else w_spec.shape[1], output_channels=cout,
                      height=k[0], width=k[1], stride_height=stride[0], stride_width=stride[1],
                      border_mode=border, groups=groups, W=builder_weights(w_spec, deconv), b=bias,
                      has_bias=bias is not None, is_deconv=deconv, output_shape=output_shape,
                      input_name="x", output_name="y", dilation_factors=list(dilation),
                      padding_top=pads[0], padding_bottom=pads[1], padding_left=pads[2], padding_right=pads[3],
                      same_padding_asymmetry_mode=mode)
    return b


# ---------------------------------------------------------------- convolution

CONV_CASES = {
    # name: (cin, h, w, cout, k, stride, dilation, border, pads, groups, mode)
    "3x3_valid": (3, 9, 8, 5, (3, 3), (1, 1), (1, 1), "valid", (0, 0, 0, 0), 1, None),
    "3x3_padded_asym": (4, 7, 9, 6, (3, 3), (1, 1), (1, 1), "valid", (1, 2, 0, 3), 1, None),
    "5x3_stride2": (3, 11, 10, 4, (5, 3), (2, 3), (1, 1), "valid", (2, 1, 1, 1), 1, None),
    "dilated": (2, 12, 11, 3, (3, 3), (1, 1), (2, 3), "valid", (0, 0, 0, 0), 1, None),
    "same_br": (3, 8, 7, 4, (4, 4), (2, 2), (1, 1), "same", None, 1, "BOTTOM_RIGHT_HEAVY"),
    "same_tl": (3, 8, 7, 4, (4, 4), (2, 2), (1, 1), "same", None, 1, "TOP_LEFT_HEAVY"),
    "same_tl_dilated_stride": (2, 9, 10, 3, (2, 3), (3, 2), (2, 1), "same", None, 1, "TOP_LEFT_HEAVY"),
    "groups": (6, 7, 7, 9, (3, 3), (1, 1), (1, 1), "same", None, 3, "BOTTOM_RIGHT_HEAVY"),
    "depthwise": (5, 8, 9, 5, (3, 3), (2, 1), (1, 1), "valid", (1, 1, 1, 1), 5, None),
    "depthwise_multiplier": (3, 6, 6, 6, (3, 3), (1, 1), (1, 1), "same", None, 3, "BOTTOM_RIGHT_HEAVY"),
    "pointwise": (8, 6, 5, 7, (1, 1), (1, 1), (1, 1), "valid", (0, 0, 0, 0), 1, None),
    "pointwise_large": (4, 80, 70, 6, (1, 1), (1, 1), (1, 1), "valid", (0, 0, 0, 0), 1, None),
    "banded_large": (3, 90, 75, 8, (3, 3), (1, 1), (1, 1), "same", None, 1, "BOTTOM_RIGHT_HEAVY"),
    "banded_stride2": (2, 150, 130, 4, (3, 3), (2, 2), (1, 1), "valid", (1, 0, 1, 0), 1, None),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_convolution(case, tmp_path):
    cin, h, w, cout, k, stride, dil, border, pads, groups, mode = CONV_CASES[case]
    r = rng(hash(case) % 1000)
    w_spec = r.normal(size=(cout, cin // groups, *k)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    x = r.normal(size=(cin, h, w))
    if border == "same":
        pads = same_pads(h, k[0], stride[0], dil[0], mode == "TOP_LEFT_HEAVY") + \
               same_pads(w, k[1], stride[1], dil[1], mode == "TOP_LEFT_HEAVY")
    expected = conv_ref(x, w_spec.astype(np.float64), bias, stride, dil, pads, groups)
    if border == "same":
        assert expected.shape[1:] == (math.ceil(h / stride[0]), math.ceil(w / stride[1]))
    m = conv_model(cin, h, w, cout, k, w_spec, bias, stride, dil, border, pads, groups, mode or "BOTTOM_RIGHT_HEAVY",
                   out_shape=expected.shape)
    out = predict(m, {"x": x}, tmp_path)
    assert out["y"].shape[-2:] == expected.shape[-2:], f"shape {out['y'].shape} vs {expected.shape}"
    assert_close(out["y"], expected, **GEMM_TOL, what=case)


def test_convolution_without_bias_batch_of_rows(tmp_path):
    cin, h, w, cout = 3, 10, 9, 4
    r = rng(7)
    w_spec = r.normal(size=(cout, cin, 3, 3)).astype(np.float32)
    m = conv_model(cin, h, w, cout, (3, 3), w_spec, None, border="same", out_shape=(cout, h, w))
    xs = [r.normal(size=(cin, h, w)) for _ in range(5)]
    outs = predict(m, [{"x": x} for x in xs], tmp_path)
    pads = same_pads(h, 3, 1) + same_pads(w, 3, 1)
    for i, (x, o) in enumerate(zip(xs, outs)):
        assert_close(o["y"], conv_ref(x, w_spec.astype(np.float64), None, pads=pads), **GEMM_TOL, what=f"row {i}")


def test_banded_convolution_batch_of_rows(tmp_path):
    """Large images take the banded path; several rows run as one batch along B."""
    cin, h, w, cout = 2, 70, 64, 5
    r = rng(8)
    w_spec = r.normal(size=(cout, cin, 3, 3)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    m = conv_model(cin, h, w, cout, (3, 3), w_spec, bias, out_shape=(cout, h - 2, w - 2))
    xs = [r.normal(size=(cin, h, w)) for _ in range(3)]
    outs = predict(m, [{"x": x} for x in xs], tmp_path)
    for i, (x, o) in enumerate(zip(xs, outs)):
        assert_close(o["y"], conv_ref(x, w_spec.astype(np.float64), bias), **GEMM_TOL, what=f"row {i}")


def test_quantized_convolution_weights(tmp_path):
    """8-bit linearly quantized weights (read through NNWeights) give the dequantized convolution."""
    cin, h, w, cout = 2, 6, 6, 3
    r = rng(9)
    codes = r.integers(0, 256, size=(cout, cin, 3, 3)).astype(np.uint8)
    scale, qbias = 0.01, -1.2
    b = builder([("x", (cin, h, w))], [("y", (cout, h - 2, w - 2))])
    b.add_convolution("conv", kernel_channels=cin, output_channels=cout, height=3, width=3, stride_height=1,
                      stride_width=1, border_mode="valid", groups=1, W=codes.transpose(2, 3, 1, 0).tobytes(),
                      b=None, has_bias=False, input_name="x", output_name="y",
                      quantization_type="linear", nbits=8, quant_scale=np.array([scale], dtype=np.float32),
                      quant_bias=np.array([qbias], dtype=np.float32))
    x = r.normal(size=(cin, h, w))
    out = predict(b, {"x": x}, tmp_path)
    w_real = codes.astype(np.float64) * np.float32(scale) + np.float32(qbias)
    assert_close(out["y"], conv_ref(x, w_real), **GEMM_TOL)


# ---------------------------------------------------------------- deconvolution

DECONV_CASES = {
    # name: (cin, h, w, cout, k, stride, dilation, border, pads, groups, mode, output_shape)
    "valid_stride2": (3, 4, 5, 2, (3, 3), (2, 2), (1, 1), "valid", (0, 0, 0, 0), 1, None, None),
    "valid_padded": (2, 5, 4, 3, (4, 3), (2, 1), (1, 1), "valid", (1, 2, 1, 0), 1, None, None),
    "same_br": (2, 4, 5, 3, (4, 4), (2, 2), (1, 1), "same", None, 1, "BOTTOM_RIGHT_HEAVY", None),
    "same_tl": (2, 4, 5, 3, (3, 3), (2, 2), (1, 1), "same", None, 1, "TOP_LEFT_HEAVY", None),
    "groups_dilated": (4, 5, 4, 6, (3, 2), (1, 2), (2, 1), "valid", (0, 0, 0, 0), 2, None, None),
    "output_shape_valid": (3, 4, 4, 2, (3, 3), (2, 2), (1, 1), "valid", (0, 0, 0, 0), 1, None, (10, 10)),
    "output_shape_same": (3, 5, 4, 2, (3, 3), (2, 2), (1, 1), "same", None, 1, "BOTTOM_RIGHT_HEAVY", (9, 7)),
}


@pytest.mark.parametrize("case", sorted(DECONV_CASES))
def test_deconvolution(case, tmp_path):
    cin, h, w, cout, k, stride, dil, border, pads, groups, mode, oshape = DECONV_CASES[case]
    r = rng(100 + hash(case) % 1000)
    w_spec = r.normal(size=(cin, cout // groups, *k)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    x = r.normal(size=(cin, h, w))
    kdh, kdw = (k[0] - 1) * dil[0] + 1, (k[1] - 1) * dil[1] + 1
    fh, fw = (h - 1) * stride[0] + kdh, (w - 1) * stride[1] + kdw
    if border == "valid":
        out_hw = oshape or (fh - pads[0] - pads[1], fw - pads[2] - pads[3])
        crop = (pads[0], pads[2])
    else:
        out_hw = oshape or (h * stride[0], w * stride[1])
        th, tw = max(0, fh - out_hw[0]), max(0, fw - out_hw[1])
        tl = mode == "TOP_LEFT_HEAVY"
        crop = (th - th // 2 if tl else th // 2, tw - tw // 2 if tl else tw // 2)
    expected = deconv_ref(x, w_spec.astype(np.float64), bias, stride, dil, crop, out_hw, groups)
    m = conv_model(cin, h, w, cout, k, w_spec, bias, stride, dil, border, pads or (0, 0, 0, 0), groups,
                   mode or "BOTTOM_RIGHT_HEAVY", out_shape=expected.shape, deconv=True, output_shape=oshape)
    out = predict(m, {"x": x}, tmp_path)
    assert out["y"].shape[-2:] == expected.shape[-2:], f"shape {out['y'].shape} vs {expected.shape}"
    assert_close(out["y"], expected, **GEMM_TOL, what=case)


# ---------------------------------------------------------------- inner product

@pytest.mark.parametrize("rows", [1, 7, 256])
def test_inner_product(rows, tmp_path):
    cin, cout = 300, 70
    r = rng(rows)
    w = r.normal(size=(cout, cin)).astype(np.float32) / np.sqrt(cin)
    bias = r.normal(size=cout).astype(np.float32)
    b = builder([("x", (cin,))], [("y", (cout,))])
    b.add_inner_product("fc", W=w, b=bias, input_channels=cin, output_channels=cout, has_bias=True,
                        input_name="x", output_name="y")
    xs = [r.normal(size=(cin,)) for _ in range(rows)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    got = np.stack([o["y"].reshape(-1) for o in outs])
    assert_close(got, np.stack(xs) @ w.T.astype(np.float64) + bias, **GEMM_TOL)


def test_inner_product_chain_relu_no_bias(tmp_path):
    """An MLP: inner products with a folded ReLU, the last one without bias."""
    r = rng(3)
    w1 = r.normal(size=(40, 30)).astype(np.float32) / 5
    b1 = r.normal(size=40).astype(np.float32)
    w2 = r.normal(size=(10, 40)).astype(np.float32) / 6
    b = builder([("x", (30,))], [("y", (10,))])
    b.add_inner_product("fc1", W=w1, b=b1, input_channels=30, output_channels=40, has_bias=True, input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "hr")
    b.add_inner_product("fc2", W=w2, b=None, input_channels=40, output_channels=10, has_bias=False, input_name="hr", output_name="y")
    xs = [r.normal(size=(30,)) for _ in range(4)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    for x, o in zip(xs, outs):
        assert_close(o["y"], np.maximum(w1 @ x + b1, 0) @ w2.T, **GEMM_TOL)


def test_inner_product_on_image_input(tmp_path):
    """A [C, H, W] input is read as C·H·W values."""
    r = rng(4)
    w = r.normal(size=(5, 24)).astype(np.float32)
    b = builder([("x", (2, 3, 4))], [("y", (5,))])
    b.add_inner_product("fc", W=w, b=None, input_channels=24, output_channels=5, has_bias=False, input_name="x", output_name="y")
    x = r.normal(size=(2, 3, 4))
    out = predict(b, {"x": x}, tmp_path)
    assert_close(out["y"], w @ x.reshape(-1), **GEMM_TOL)


# ---------------------------------------------------------------- batch norm

def test_batchnorm(tmp_path):
    c, h, w = 4, 5, 3
    r = rng(11)
    gamma, beta, mean = r.normal(size=c), r.normal(size=c), r.normal(size=c)
    var = r.uniform(0.5, 2, size=c)
    b = builder([("x", (c, h, w))], [("y", (c, h, w))])
    b.add_batchnorm("bn", c, gamma, beta, mean, var, input_name="x", output_name="y", epsilon=1e-3)
    xs = [r.normal(size=(c, h, w)) for _ in range(3)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    sh = lambda a: a[:, None, None]
    for x, o in zip(xs, outs):
        assert_close(o["y"], sh(gamma) * (x - sh(mean)) / np.sqrt(sh(var) + 1e-3) + sh(beta), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("instance", [True, False])
def test_batchnorm_compute_mean_var(instance, tmp_path):
    c, h, w = 3, 6, 5
    r = rng(12)
    gamma, beta = r.normal(size=c), r.normal(size=c)
    b = builder([("x", (c, h, w))], [("y", (c, h, w))])
    b.add_batchnorm("bn", c, gamma, beta, input_name="x", output_name="y", compute_mean_var=True,
                    instance_normalization=True, epsilon=1e-5)
    # The builder refuses batch statistics without instance normalization; set the flag by hand.
    # With one image per row (S = 1) both modes normalise each row's channels over H×W, and
    # rows batched along B stay independent.
    b.spec.neuralNetwork.layers[0].batchnorm.instanceNormalization = instance
    xs = [r.normal(size=(c, h, w)) * 3 + 1 for _ in range(2)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    for x, o in zip(xs, outs):
        mean = x.mean(axis=(1, 2), keepdims=True)
        var = x.var(axis=(1, 2), keepdims=True)
        expected = gamma[:, None, None] * (x - mean) / np.sqrt(var + 1e-5) + beta[:, None, None]
        assert_close(o["y"], expected, rtol=1e-4, atol=1e-4)


def test_fused_conv_bn_leaky_matches_unfused(tmp_path):
    """conv → BN → leaky ReLU folds into the convolution; the same layers with the
    intermediate blobs kept as outputs cannot fold. Both must match the NumPy reference."""
    cin, h, w, cout = 3, 12, 11, 6
    r = rng(13)
    w_spec = r.normal(size=(cout, cin, 3, 3)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    gamma, beta, mean = r.normal(size=cout), r.normal(size=cout), r.normal(size=cout)
    var = r.uniform(0.5, 2, size=cout)
    x = r.normal(size=(cin, h, w))
    pads = same_pads(h, 3, 1) + same_pads(w, 3, 1)
    conv = conv_ref(x, w_spec.astype(np.float64), bias, pads=pads)
    bn = gamma[:, None, None] * (conv - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) + beta[:, None, None]
    expected = np.where(bn >= 0, bn, 0.1 * bn)

    def model(keep):
        outs = [("y", (cout, h, w))] + ([("c", (cout, h, w)), ("n", (cout, h, w))] if keep else [])
        b = builder([("x", (cin, h, w))], outs)
        b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1, W=w_spec.transpose(2, 3, 1, 0), b=bias,
                          has_bias=True, input_name="x", output_name="c")
        b.add_batchnorm("bn", cout, gamma, beta, mean, var, input_name="c", output_name="n")
        b.add_activation("leaky", "LEAKYRELU", "n", "y", params=[0.1])
        return b

    fused = predict(model(False), {"x": x}, tmp_path)
    (tmp_path / "unfused").mkdir()
    unfused = predict(model(True), {"x": x}, tmp_path / "unfused")
    assert_close(fused["y"], expected, **GEMM_TOL, what="fused")
    assert_close(unfused["y"], expected, **GEMM_TOL, what="unfused")
    assert_close(unfused["c"], conv, **GEMM_TOL, what="unfused conv")
    assert_close(fused["y"], unfused["y"], rtol=1e-4, atol=1e-5, what="fused vs unfused")


@pytest.mark.parametrize("cin,h,w,cout", [(3, 101, 99, 6), (16, 64, 70, 20), (3, 81, 128, 16), (16, 30, 64, 20), (5, 12, 11, 7)])
def test_conv_folds_following_max_pool(cin, h, w, cout, tmp_path):
    """conv → leaky ReLU → max pool 2×2 stride 2 (valid) folds the pool into the convolution
    (AVX-512 CPUs): 101×99 (3 channels) and 64×70 (16) take the banded path, 81×128 and 30×64
    (rows a multiple of 32 wide) the path that reads the input in place, 12×11 the small-image
    one; odd sizes leave the last row or column out. Keeping the convolution's
    output as a model output stops the folding. Two rows (a batch of two images). Both forms
    must match the NumPy reference (GEMM tolerance) and each other exactly: the same sums in
    the same order, then the same maximum."""
    r = rng(31 + cin)
    w_spec = r.normal(size=(cout, cin, 3, 3)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32)
    xs = [r.normal(size=(cin, h, w)) for _ in range(2)]
    pads = same_pads(h, 3, 1) + same_pads(w, 3, 1)
    ph, pw = h // 2, w // 2

    def model(keep):
        outs = [("y", (cout, ph, pw))] + ([("a", (cout, h, w))] if keep else [])
        b = builder([("x", (cin, h, w))], outs)
        b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1, W=w_spec.transpose(2, 3, 1, 0), b=bias,
                          has_bias=True, input_name="x", output_name="c")
        b.add_activation("leaky", "LEAKYRELU", "c", "a", params=[0.1])
        b.add_pooling("pool", 2, 2, 2, 2, "MAX", "VALID", "a", "y")
        return b

    fused = predict(model(False), [{"x": x} for x in xs], tmp_path)
    (tmp_path / "unfused").mkdir()
    unfused = predict(model(True), [{"x": x} for x in xs], tmp_path / "unfused")
    for x, f, u in zip(xs, fused, unfused):
        conv = conv_ref(x, w_spec.astype(np.float64), bias, pads=pads)
        expected = pool_ref(np.where(conv >= 0, conv, 0.1 * conv), "MAX", (2, 2), (2, 2), (0, 0, 0, 0), True, None)
        assert expected.shape == (cout, ph, pw)
        assert_close(f["y"], expected, **GEMM_TOL, what="folded")
        assert_close(u["y"], expected, **GEMM_TOL, what="separate")
        assert np.array_equal(np.asarray(f["y"]), np.asarray(u["y"])), "folded and separate pooling differ"


# ---------------------------------------------------------------- pooling

POOL_CASES = {
    # name: (kind, k, s, padding_type, pads, exclude, mode)
    "max_2x2_s2": ("MAX", (2, 2), (2, 2), "VALID", (0, 0, 0, 0), True, None),
    "max_3x3_s2_padded": ("MAX", (3, 3), (2, 2), "VALID", (1, 1, 1, 2), True, None),
    "avg_exclude": ("AVERAGE", (3, 3), (2, 2), "VALID", (1, 1, 1, 1), True, None),
    "avg_include": ("AVERAGE", (3, 3), (2, 2), "VALID", (1, 1, 1, 1), False, None),
    "l2_3x2": ("L2", (3, 2), (1, 2), "VALID", (0, 1, 0, 0), True, None),
    "max_same_br": ("MAX", (2, 2), (1, 1), "SAME", None, True, "BOTTOM_RIGHT_HEAVY"),
    "max_3x2_s1_same_tl": ("MAX", (3, 2), (1, 1), "SAME", None, True, "TOP_LEFT_HEAVY"),
    "max_2x2_s3_padded": ("MAX", (2, 2), (3, 3), "VALID", (1, 1, 1, 0), True, None),
    "avg_same_tl": ("AVERAGE", (4, 3), (3, 2), "SAME", None, False, "TOP_LEFT_HEAVY"),
    "avg_same_br_exclude": ("AVERAGE", (4, 3), (3, 2), "SAME", None, True, "BOTTOM_RIGHT_HEAVY"),
    "max_last_pixel": ("MAX", (3, 3), (2, 2), "INCLUDE_LAST_PIXEL", (0, 0, 0, 0), True, None),
    "avg_last_pixel_padded": ("AVERAGE", (3, 3), (2, 2), "INCLUDE_LAST_PIXEL", (1, 1, 1, 1), False, None),
    "avg_last_pixel_exclude": ("AVERAGE", (3, 2), (2, 3), "INCLUDE_LAST_PIXEL", (1, 1, 0, 0), True, None),
}


def last_pixel_out(size, k, s, p):
    out = -(-(size + 2 * p - k) // s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return out


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pooling(case, tmp_path):
    kind, k, s, ptype, pads, exclude, mode = POOL_CASES[case]
    c, h, w = 3, 9, 10
    x = rng(hash(case) % 1000).normal(size=(c, h, w))
    clip = None
    if ptype == "SAME":
        pads = same_pads(h, k[0], s[0], 1, mode == "TOP_LEFT_HEAVY") + same_pads(w, k[1], s[1], 1, mode == "TOP_LEFT_HEAVY")
    elif ptype == "INCLUDE_LAST_PIXEL":
        clip = (last_pixel_out(h, k[0], s[0], pads[0]), last_pixel_out(w, k[1], s[1], pads[2]))
    expected = pool_ref(x, kind, k, s, pads, exclude, clip)
    if ptype == "SAME":
        assert expected.shape[1:] == (math.ceil(h / s[0]), math.ceil(w / s[1]))
    b = builder([("x", (c, h, w))], [("y", expected.shape)])
    b.add_pooling("pool", k[0], k[1], s[0], s[1], kind, ptype, "x", "y", exclude_pad_area=exclude,
                  padding_top=pads[0], padding_bottom=pads[1], padding_left=pads[2], padding_right=pads[3],
                  same_padding_asymmetry_mode=mode or "BOTTOM_RIGHT_HEAVY")
    out = predict(b, {"x": x}, tmp_path)
    assert out["y"].shape[-2:] == expected.shape[-2:], f"shape {out['y'].shape} vs {expected.shape}"
    assert_close(out["y"], expected, **POOL_TOL, what=case)


def test_last_pixel_adds_a_window():
    """The reference's ceil mode really differs from floor mode for this case (the test can fail)."""
    assert last_pixel_out(9, 3, 2, 0) == 4 and (9 - 3) // 2 + 1 == 4
    assert last_pixel_out(10, 3, 2, 0) == 5 and (10 - 3) // 2 + 1 == 4


@pytest.mark.parametrize("kind", ["MAX", "AVERAGE", "L2"])
def test_global_pooling_batch(kind, tmp_path):
    c, h, w = 4, 5, 6
    b = builder([("x", (c, h, w))], [("y", (c, 1, 1))])
    b.add_pooling("gp", 1, 1, 1, 1, kind, "VALID", "x", "y", is_global=True)
    xs = [rng(20 + i).normal(size=(c, h, w)) for i in range(3)]
    outs = predict(b, [{"x": x} for x in xs], tmp_path)
    for x, o in zip(xs, outs):
        flat = x.reshape(c, -1)
        ref = {"MAX": flat.max(1), "AVERAGE": flat.mean(1), "L2": np.sqrt((flat ** 2).sum(1))}[kind]
        assert_close(o["y"], ref, **POOL_TOL)


# ---------------------------------------------------------------- bad parameters fail the load

def test_conv_weight_count_mismatch(tmp_path):
    b = conv_model(3, 8, 8, 4, (3, 3), np.zeros((4, 3, 3, 3), np.float32), out_shape=(4, 6, 6))
    del b.spec.neuralNetwork.layers[0].convolution.weights.floatValue[-5:]
    err = load_error(b, tmp_path, [{"x": np.zeros((3, 8, 8))}])
    assert "conv" in err and "weights" in err


def test_conv_kernel_larger_than_padded_input(tmp_path):
    b = conv_model(2, 4, 4, 3, (5, 5), np.zeros((3, 2, 5, 5), np.float32), pads=(0, 0, 0, 0), out_shape=(3, 1, 1))
    err = load_error(b, tmp_path, [{"x": np.zeros((2, 4, 4))}])
    assert "'conv'" in err and "larger" in err


def test_conv_channel_mismatch(tmp_path):
    b = conv_model(3, 6, 6, 4, (3, 3), np.zeros((4, 3, 3, 3), np.float32), out_shape=(4, 4, 4))
    b.spec.description.input[0].type.multiArrayType.shape[0] = 5
    err = load_error(b, tmp_path, [{"x": np.zeros((5, 6, 6))}])
    assert "'conv'" in err and "channels" in err


def test_conv_groups_not_dividing(tmp_path):
    b = conv_model(4, 6, 6, 4, (3, 3), np.zeros((4, 2, 3, 3), np.float32), groups=2, out_shape=(4, 4, 4))
    b.spec.neuralNetwork.layers[0].convolution.nGroups = 3
    err = load_error(b, tmp_path, [{"x": np.zeros((4, 6, 6))}])
    assert "'conv'" in err and "nGroups" in err


def test_inner_product_bad_shapes(tmp_path):
    b = builder([("x", (10,))], [("y", (4,))])
    b.add_inner_product("fc", W=np.zeros((4, 12)), b=None, input_channels=12, output_channels=4, has_bias=False,
                        input_name="x", output_name="y")
    err = load_error(b, tmp_path, [{"x": np.zeros(10)}])
    assert "'fc'" in err and "inputChannels" in err


def test_inner_product_bias_count(tmp_path):
    b = builder([("x", (6,))], [("y", (4,))])
    b.add_inner_product("fc", W=np.zeros((4, 6)), b=np.zeros(4), input_channels=6, output_channels=4, has_bias=True,
                        input_name="x", output_name="y")
    del b.spec.neuralNetwork.layers[0].innerProduct.bias.floatValue[-1]
    err = load_error(b, tmp_path, [{"x": np.zeros(6)}])
    assert "'fc'" in err and "bias" in err


def test_batchnorm_channel_mismatch(tmp_path):
    b = builder([("x", (3, 2, 2))], [("y", (3, 2, 2))])
    b.add_batchnorm("bn", 4, np.ones(4), np.zeros(4), np.zeros(4), np.ones(4), input_name="x", output_name="y")
    err = load_error(b, tmp_path, [{"x": np.zeros((3, 2, 2))}])
    assert "'bn'" in err and "channels" in err


def test_pool_window_larger_than_input(tmp_path):
    b = builder([("x", (2, 3, 3))], [("y", (2, 1, 1))])
    b.add_pooling("pool", 4, 4, 1, 1, "MAX", "VALID", "x", "y")
    err = load_error(b, tmp_path, [{"x": np.zeros((2, 3, 3))}])
    assert "'pool'" in err and "larger" in err
