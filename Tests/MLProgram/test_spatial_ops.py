"""ML Programs: convolution, pooling, normalization, resizing and space-rearranging ops against
NumPy references written from coremltools 9's op definitions (conv.py, pool.py,
normalization.py, image_resizing.py, tensor_transformation.py), plus a small ResNet-style CNN.

Tolerances: the references compute in float64 and Cortado in float32, so single ops are held to
rtol=1e-5/atol=1e-5 when they only move or blend a few values (pooling, resizing, rearranging)
and rtol=1e-4/atol=1e-4 when they sum many products (convolutions, normalizations). Copies
are held to 1e-6: outputs come back as shortest decimal fp32 strings."""

import itertools
import math

import numpy as np
import pytest

import milharness
from milharness import assert_close, ct, mb, only, rng

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "add", "affine", "avg_pool", "batch_norm", "batch_to_space", "conv", "conv_transpose", "crop", "crop_resize",
    "depth_to_space", "instance_norm", "l2_norm", "l2_pool", "layer_norm", "linear", "local_response_norm",
    "max_pool", "pad", "pixel_shuffle", "pixel_unshuffle", "reduce_mean", "relu", "resample", "resize",
    "resize_bilinear", "resize_nearest_neighbor", "shape", "sliding_windows", "space_to_batch", "space_to_depth",
    "upsample_bilinear", "upsample_nearest_neighbor",
]


F32 = np.float32


def run_program(prog, inputs, tmp_path, **kwargs):
    """milharness.run_program with the program's own opset as the deployment target (the
    converter refuses newer ops otherwise)."""
    opset = prog.functions["main"].opset_version
    return milharness.run_program(prog, inputs, tmp_path, minimum_deployment_target=opset, **kwargs)


def same_pads(pad_type, size, effective, stride):
    """_utils.aggregated_pad: total = max(0, s·ceil(i/s) - i + k - s); "same" puts the odd
    element after, "same_lower" before."""
    total = max(0, stride * math.ceil(size / stride) - size + effective - stride)
    small = total // 2
    return (small, total - small) if pad_type == "same" else (total - small, small)


def window_pads(pad_type, spatial, kernel, strides, dilations, pad=None):
    before, after = [], []
    for d, (i, k, s, dl) in enumerate(zip(spatial, kernel, strides, dilations)):
        eff = (k - 1) * dl + 1
        if pad_type == "valid":
            b, a = 0, 0
        elif pad_type == "custom":
            b, a = pad[2 * d], pad[2 * d + 1]
        else:
            b, a = same_pads(pad_type, i, eff, s)
        before.append(b)
        after.append(a)
    return before, after


def conv_ref(x, w, bias, strides, dilations, groups, before, after):
    """Direct loops: every output element is the sum over its group's input channels and kernel
    taps of weight × (zero-padded) input."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, cin = x.shape[:2]
    cout = w.shape[0]
    kernel = w.shape[2:]
    r = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)))
    out_sp = [(xp.shape[2 + d] - ((kernel[d] - 1) * dilations[d] + 1)) // strides[d] + 1 for d in range(r)]
    out = np.zeros((n, cout, *out_sp))
    cg, og = cin // groups, cout // groups
    for b in range(n):
        for co in range(cout):
            g = co // og
            for pos in np.ndindex(*out_sp):
                acc = 0.0
                for ci in range(cg):
                    for tap in np.ndindex(*kernel):
                        idx = tuple(pos[d] * strides[d] + tap[d] * dilations[d] for d in range(r))
                        acc += xp[(b, g * cg + ci) + idx] * w[(co, ci) + tap]
                out[(b, co) + pos] = acc + (0 if bias is None else bias[co])
    return out


CONV_CASES = {
    # name: (x shape, weight shape, kwargs, opset)
    "2d_valid": ((1, 3, 6, 7), (4, 3, 3, 3), dict(pad_type="valid"), ct.target.iOS15),
    "2d_same_stride2": ((2, 3, 7, 8), (5, 3, 4, 3), dict(pad_type="same", strides=[2, 2]), ct.target.iOS15),
    "2d_same_lower_stride2": ((1, 2, 7, 8), (3, 2, 4, 2), dict(pad_type="same_lower", strides=[2, 3]), ct.target.iOS16),
    "2d_custom_dilated": ((1, 2, 9, 8), (3, 2, 3, 2), dict(pad_type="custom", pad=[2, 0, 1, 3], dilations=[2, 3], strides=[1, 2]), ct.target.iOS15),
    "2d_groups": ((1, 4, 6, 6), (6, 2, 3, 3), dict(pad_type="same", groups=2), ct.target.iOS15),
    "2d_depthwise_multiplier": ((1, 3, 6, 5), (6, 1, 3, 3), dict(pad_type="custom", pad=[1, 1, 1, 1], groups=3, strides=[2, 1]), ct.target.iOS15),
    "2d_pointwise": ((2, 5, 4, 3), (3, 5, 1, 1), dict(), ct.target.iOS15),
    "1d_same": ((2, 3, 11), (4, 3, 4), dict(pad_type="same", strides=[2]), ct.target.iOS15),
    "1d_dilated_groups": ((1, 4, 12), (4, 2, 3), dict(pad_type="valid", dilations=[3], groups=2), ct.target.iOS17),
    "3d_custom": ((1, 2, 4, 5, 5), (3, 2, 2, 3, 2), dict(pad_type="custom", pad=[1, 0, 1, 1, 0, 1], strides=[1, 2, 2]), ct.target.iOS15),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv(case, with_bias, tmp_path):
    xs, ws, kw, opset = CONV_CASES[case]
    r = rng(10)
    x = r.standard_normal(xs).astype(F32)
    w = r.standard_normal(ws).astype(F32)
    b = r.standard_normal(ws[0]).astype(F32) if with_bias else None
    args = dict(kw)
    if b is not None:
        args["bias"] = b

    @mb.program(input_specs=[mb.TensorSpec(shape=xs)], opset_version=opset)
    def prog(x):
        return mb.conv(x=x, weight=w, **args)

    rank = len(xs) - 2
    strides = kw.get("strides", [1] * rank)
    dilations = kw.get("dilations", [1] * rank)
    before, after = window_pads(kw.get("pad_type", "valid"), xs[2:], ws[2:], strides, dilations, kw.get("pad"))
    ref = conv_ref(x, w, b, strides, dilations, kw.get("groups", 1), before, after)
    got = only(run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-4, atol=1e-4, what=case)


def test_conv_weight_from_input(tmp_path):
    """A weight that is not a constant (conv.py allows it without dilations)."""
    r = rng(11)
    x = r.standard_normal((1, 2, 5, 5)).astype(F32)
    w = r.standard_normal((3, 2, 2, 2)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=w.shape)], opset_version=ct.target.iOS16)
    def prog(x, w):
        return mb.conv(x=x, weight=w, pad_type="valid", strides=[2, 1])

    got = only(run_program(prog, {"x": x, "w": w}, tmp_path))
    assert_close(got, conv_ref(x, w, None, [2, 1], [1, 1], 1, [0, 0], [0, 0]), rtol=1e-4, atol=1e-4)


def conv_transpose_ref(x, w, bias, strides, dilations, groups, crop, out_sp):
    """Each input element scatters weight × value onto the full `(D-1)·s + K_eff` output; the
    result is that output from `crop` on, `out_sp` long (zeros past its end)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, cin = x.shape[:2]
    og = w.shape[1]
    cout = og * groups
    kernel = w.shape[2:]
    r = len(kernel)
    full = [(x.shape[2 + d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 for d in range(r)]
    size = [max(full[d], crop[d] + out_sp[d]) for d in range(r)]
    big = np.zeros((n, cout, *size))
    cg = cin // groups
    for b in range(n):
        for ci in range(cin):
            g = ci // cg
            for pos in np.ndindex(*x.shape[2:]):
                for co in range(og):
                    for tap in np.ndindex(*kernel):
                        idx = tuple(pos[d] * strides[d] + tap[d] * dilations[d] for d in range(r))
                        big[(b, g * og + co) + idx] += x[(b, ci) + pos] * w[(ci, co) + tap]
    out = big[(slice(None), slice(None)) + tuple(slice(crop[d], crop[d] + out_sp[d]) for d in range(r))]
    if bias is not None:
        out = out + bias.reshape((1, cout) + (1,) * r)
    return out


CONV_T_CASES = {
    # name: (x shape, weight shape, kwargs, crop, output spatial)
    "2d_valid_stride2": ((1, 3, 3, 4), (3, 2, 3, 3), dict(pad_type="valid", strides=[2, 2]), [0, 0], [7, 9]),
    "2d_custom_pad": ((2, 2, 4, 3), (2, 3, 3, 2), dict(pad_type="custom", pad=[1, 1, 0, 1], strides=[2, 1]), [1, 0], [7, 3]),
    "2d_groups_dilated": ((1, 4, 3, 3), (4, 1, 2, 2), dict(pad_type="valid", groups=2, dilations=[2, 1]), [0, 0], [5, 4]),
    # PyTorch's output_padding: the declared shape runs one past the computed one.
    "2d_output_shape": ((1, 2, 3, 3), (2, 2, 3, 3), dict(pad_type="custom", pad=[1, 1, 1, 1], strides=[2, 2], output_shape=[1, 2, 6, 6]), [1, 1], [6, 6]),
    "2d_same": ((1, 2, 3, 4), (2, 3, 4, 3), dict(pad_type="same", strides=[2, 2]), [1, 0], [6, 8]),
    "1d": ((1, 3, 5), (3, 2, 3), dict(pad_type="valid", strides=[3]), [0], [15]),
}


@pytest.mark.parametrize("case", sorted(CONV_T_CASES))
def test_conv_transpose(case, tmp_path):
    xs, ws, kw, crop, out_sp = CONV_T_CASES[case]
    r = rng(12)
    x = r.standard_normal(xs).astype(F32)
    w = r.standard_normal(ws).astype(F32)
    groups = kw.get("groups", 1)
    b = r.standard_normal(ws[1] * groups).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=xs)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.conv_transpose(x=x, weight=w, bias=b, **kw)

    rank = len(xs) - 2
    ref = conv_transpose_ref(x, w, b, kw.get("strides", [1] * rank), kw.get("dilations", [1] * rank), groups, crop, out_sp)
    got = only(run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-4, atol=1e-4, what=case)


def pool_ref(x, kind, kernel, strides, before, after, ceil_mode=False, exclude=False):
    """Windows over the zero-padded input; padding never enters a max or a sum. An average
    divides by the window clipped to the padded input, or by the input elements it covers."""
    x = x.astype(np.float64)
    sp = x.shape[2:]
    r = len(sp)
    out_sp = []
    for d in range(r):
        padded = sp[d] + before[d] + after[d]
        if ceil_mode:
            o = (padded - kernel[d] + strides[d] - 1) // strides[d] + 1
            if (o - 1) * strides[d] >= sp[d] + (before[d] + after[d]) / 2 and before[d] + after[d] > 0:
                o -= 1
        else:
            o = (padded - kernel[d]) // strides[d] + 1
        out_sp.append(o)
    out = np.zeros(x.shape[:2] + tuple(out_sp))
    for pos in np.ndindex(*out_sp):
        starts = [pos[d] * strides[d] - before[d] for d in range(r)]
        lo = [max(s, 0) for s in starts]
        hi = [min(s + kernel[d], sp[d]) for d, s in enumerate(starts)]
        window = x[(slice(None), slice(None)) + tuple(slice(lo[d], hi[d]) for d in range(r))].reshape(x.shape[0], x.shape[1], -1)
        if kind == "max":
            v = window.max(axis=-1)
        elif kind == "l2":
            v = np.sqrt((window ** 2).sum(axis=-1))
        else:
            count = window.shape[-1] if exclude else np.prod([min(s + kernel[d], sp[d] + after[d]) - s for d, s in enumerate(starts)])
            v = window.sum(axis=-1) / count
        out[(slice(None), slice(None)) + pos] = v
    return out


POOL_CASES = {
    # name: (op, x shape, kwargs, opset)
    "max_2d_valid": ("max_pool", (2, 3, 7, 6), dict(kernel_sizes=[3, 2], strides=[2, 2], pad_type="valid"), ct.target.iOS15),
    "max_2d_same": ("max_pool", (1, 2, 7, 7), dict(kernel_sizes=[3, 3], strides=[2, 2], pad_type="same"), ct.target.iOS15),
    "max_2d_same_lower": ("max_pool", (1, 2, 6, 7), dict(kernel_sizes=[2, 4], strides=[1, 2], pad_type="same_lower"), ct.target.iOS16),
    "max_2d_ceil": ("max_pool", (1, 2, 8, 7), dict(kernel_sizes=[3, 3], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], ceil_mode=True), ct.target.iOS15),
    "max_1d": ("max_pool", (2, 3, 10), dict(kernel_sizes=[3], strides=[3], pad_type="valid"), ct.target.iOS15),
    "max_3d": ("max_pool", (1, 2, 4, 5, 6), dict(kernel_sizes=[2, 2, 3], strides=[2, 1, 2], pad_type="custom", pad=[0, 1, 1, 0, 1, 1]), ct.target.iOS15),
    "avg_2d_same_include": ("avg_pool", (1, 3, 7, 6), dict(kernel_sizes=[3, 3], strides=[2, 2], pad_type="same", exclude_padding_from_average=False), ct.target.iOS15),
    "avg_2d_same_exclude": ("avg_pool", (1, 3, 7, 6), dict(kernel_sizes=[3, 3], strides=[2, 2], pad_type="same", exclude_padding_from_average=True), ct.target.iOS15),
    "avg_2d_ceil_include": ("avg_pool", (1, 2, 7, 8), dict(kernel_sizes=[3, 2], strides=[2, 3], pad_type="custom", pad=[1, 1, 0, 0], ceil_mode=True), ct.target.iOS15),
    "avg_2d_ceil_exclude": ("avg_pool", (1, 2, 7, 8), dict(kernel_sizes=[3, 2], strides=[2, 3], pad_type="custom", pad=[1, 1, 0, 0], ceil_mode=True, exclude_padding_from_average=True), ct.target.iOS15),
    "avg_1d_custom": ("avg_pool", (2, 2, 9), dict(kernel_sizes=[4], strides=[2], pad_type="custom", pad=[2, 1]), ct.target.iOS15),
    "avg_3d_valid": ("avg_pool", (1, 2, 4, 4, 5), dict(kernel_sizes=[2, 2, 2], strides=[2, 2, 2], pad_type="valid"), ct.target.iOS15),
    "l2_2d_custom": ("l2_pool", (1, 3, 6, 6), dict(kernel_sizes=[2, 3], strides=[2, 2], pad_type="custom", pad=[1, 0, 1, 1]), ct.target.iOS15),
    "l2_1d_valid": ("l2_pool", (1, 2, 8), dict(kernel_sizes=[3], strides=[2], pad_type="valid"), ct.target.iOS15),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool(case, tmp_path):
    op, xs, kw, opset = POOL_CASES[case]
    x = rng(13).standard_normal(xs).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=xs)], opset_version=opset)
    def prog(x):
        return getattr(mb, op)(x=x, **kw)

    rank = len(xs) - 2
    strides = kw.get("strides", [1] * rank)
    before, after = window_pads(kw["pad_type"], xs[2:], kw["kernel_sizes"], strides, [1] * rank, kw.get("pad"))
    ref = pool_ref(x, op.split("_")[0], kw["kernel_sizes"], strides, before, after, kw.get("ceil_mode", False),
                   kw.get("exclude_padding_from_average", False))
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5, what=case)


# Normalizations ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,opset", [((2, 3, 4, 5), ct.target.iOS15), ((2, 4, 6), ct.target.iOS17)])
def test_batch_norm(shape, opset, tmp_path):
    r = rng(20)
    c = shape[1]
    x = r.standard_normal(shape).astype(F32)
    mean, var = r.standard_normal(c).astype(F32), r.uniform(0.5, 2, c).astype(F32)
    gamma, beta = r.standard_normal(c).astype(F32), r.standard_normal(c).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=opset)
    def prog(x):
        return mb.batch_norm(x=x, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=F32(1e-3))

    b = (1, c) + (1,) * (len(shape) - 2)
    ref = (x - mean.reshape(b)) / np.sqrt(var.reshape(b) + 1e-3) * gamma.reshape(b) + beta.reshape(b)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


def test_batch_norm_defaults(tmp_path):
    r = rng(21)
    x = r.standard_normal((1, 3, 4)).astype(F32)
    mean, var = r.standard_normal(3).astype(F32), r.uniform(0.5, 2, 3).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.batch_norm(x=x, mean=mean, variance=var)

    ref = (x - mean.reshape(1, 3, 1)) / np.sqrt(var.reshape(1, 3, 1) + 1e-5)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7)])
def test_instance_norm(shape, tmp_path):
    r = rng(22)
    c = shape[1]
    x = (r.standard_normal(shape) * 3 + 1).astype(F32)
    gamma, beta = r.standard_normal(c).astype(F32), r.standard_normal(c).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.instance_norm(x=x, gamma=gamma, beta=beta, epsilon=F32(1e-4))

    axes = tuple(range(2, len(shape)))
    xd = x.astype(np.float64)
    b = (1, c) + (1,) * (len(shape) - 2)
    ref = (xd - xd.mean(axis=axes, keepdims=True)) / np.sqrt(xd.var(axis=axes, keepdims=True) + 1e-4) * gamma.reshape(b) + beta.reshape(b)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axes,affine", [([-1], True), ([1, 3], True), ([0, 1, 2, 3], False), ([2], False)])
def test_layer_norm(axes, affine, tmp_path):
    r = rng(23)
    shape = (2, 3, 4, 5)
    x = (r.standard_normal(shape) * 2 - 1).astype(F32)
    pos = sorted(a % 4 for a in axes)
    norm_shape = [shape[a] for a in pos]
    gamma = r.standard_normal(norm_shape).astype(F32) if affine else None
    beta = r.standard_normal(norm_shape).astype(F32) if affine else None
    kw = dict(axes=axes)
    if affine:
        kw.update(gamma=gamma, beta=beta)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.layer_norm(x=x, epsilon=F32(1e-5), **kw)

    xd = x.astype(np.float64)
    t = tuple(pos)
    ref = (xd - xd.mean(axis=t, keepdims=True)) / np.sqrt(xd.var(axis=t, keepdims=True) + 1e-5)
    if affine:
        bshape = [shape[a] if a in pos else 1 for a in range(4)]
        ref = ref * gamma.reshape(bshape) + beta.reshape(bshape)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 2, 4)])
def test_l2_norm(shape, tmp_path):
    x = rng(24).standard_normal(shape).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.l2_norm(x=x, epsilon=F32(1e-3))

    flat = x.astype(np.float64).reshape(int(np.prod(shape[:-3])), -1)
    ref = (flat / np.sqrt((flat ** 2).sum(axis=1, keepdims=True) + 1e-3)).reshape(shape)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size,alpha,beta,k", [(3, 1e-2, 0.75, 1.0), (5, 0.5, 0.6, 2.0), (1, 1e-4, 0.75, 1.0)])
def test_local_response_norm(size, alpha, beta, k, tmp_path):
    shape = (2, 6, 3, 4)
    x = (rng(25).standard_normal(shape) * 2).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.local_response_norm(x=x, size=size, alpha=F32(alpha), beta=F32(beta), k=F32(k))

    xd = x.astype(np.float64)
    ref = np.empty_like(xd)
    c = shape[1]
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + size // 2)
        s = (xd[:, lo:hi + 1] ** 2).sum(axis=1)
        ref[:, ch] = xd[:, ch] / (k + alpha / size * s) ** beta
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


# Resizing ------------------------------------------------------------------------------------

def grid_points(mode, xin, xout, a=0.0, b=None):
    """resize_bilinear's sampling modes over [a, b] (default the whole axis [0, Xin-1])."""
    b = xin - 1 if b is None else b
    span = b - a
    i = np.arange(xout, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if xout == 1:
            p = np.array([a + span / 2 if mode == "ALIGN_CORNERS" else a])
        else:
            p = a + i * span / (xout - 1)
    elif mode == "DEFAULT":
        p = a + i * (span + 1) / xout
    elif mode == "OFFSET_CORNERS":
        delta = max(1, span) / xout
        p = a + 0.5 * delta + i * delta
    else:  # UNALIGN_CORNERS
        spacing = (span + 1) / xout
        p = a + i * spacing + 0.5 * spacing - 0.5
    return np.clip(p, min(a, b), max(a, b))


def lerp_axis(x, axis, points):
    n = x.shape[axis]
    p = np.clip(points, 0, n - 1)
    lo = np.floor(p).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    f = (p - lo).reshape([-1 if d == axis % x.ndim else 1 for d in range(x.ndim)])
    return np.take(x, lo, axis=axis) * (1 - f) + np.take(x, hi, axis=axis) * f


def bilinear_ref(x, rows, cols):
    return lerp_axis(lerp_axis(x.astype(np.float64), -2, rows), -1, cols)


@pytest.mark.parametrize("sh,sw", [(2, 3), (1.5, 2.0), (1, 1)])
def test_upsample_nearest_neighbor(sh, sw, tmp_path):
    x = rng(30).standard_normal((1, 2, 4, 3)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.upsample_nearest_neighbor(x=x, scale_factor_height=sh, scale_factor_width=sw)

    oh, ow = int(4 * sh), int(3 * sw)
    rows = np.minimum(np.floor(np.arange(oh) / sh).astype(int), 3)
    cols = np.minimum(np.floor(np.arange(ow) / sw).astype(int), 2)
    ref = x[:, :, rows][:, :, :, cols]
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("align,half,opset,scale", [
    (True, None, ct.target.iOS15, (2.0, 3.0)), (False, None, ct.target.iOS15, (2.0, 1.5)),
    (False, False, ct.target.iOS16, (2.0, 2.5)), (False, True, ct.target.iOS16, (3.0, 2.0)), (True, False, ct.target.iOS16, (0.5, 2.0)),
])
def test_upsample_bilinear(align, half, opset, scale, tmp_path):
    x = rng(31).standard_normal((2, 2, 4, 5)).astype(F32)
    kw = dict(scale_factor_height=scale[0], scale_factor_width=scale[1], align_corners=align)
    if half is not None:
        kw["half_pixel_centers"] = half

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=opset)
    def prog(x):
        return mb.upsample_bilinear(x=x, **kw)

    half_pixel = (not align) if half is None else half
    mode = "STRICT_ALIGN_CORNERS" if align else ("UNALIGN_CORNERS" if half_pixel else "DEFAULT")
    oh, ow = int(4 * scale[0]), int(5 * scale[1])
    ref = bilinear_ref(x, grid_points(mode, 4, oh), grid_points(mode, 5, ow))
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


MODES = ["STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", [(7, 9), (2, 1)])
def test_resize_bilinear(mode, target, tmp_path):
    x = rng(32).standard_normal((1, 3, 4, 5)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.resize_bilinear(x=x, target_size_height=target[0], target_size_width=target[1], sampling_mode=mode)

    ref = bilinear_ref(x, grid_points(mode, 4, target[0]), grid_points(mode, 5, target[1]))
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", [(8, 7), (3, 2)])
def test_resize_nearest_neighbor(target, tmp_path):
    """TensorFlow's half-pixel nearest neighbour (what the converters map to this op)."""
    x = rng(33).standard_normal((2, 2, 4, 5)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.resize_nearest_neighbor(x=x, target_size_height=target[0], target_size_width=target[1])

    rows = np.minimum(np.floor((np.arange(target[0]) + 0.5) * 4 / target[0]).astype(int), 3)
    cols = np.minimum(np.floor((np.arange(target[1]) + 0.5) * 5 / target[1]).astype(int), 4)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), x[:, :, rows][:, :, :, cols], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("interp,mode", [("LINEAR", m) for m in MODES] + [("NEAREST_NEIGHBOR", "DEFAULT"), ("NEAREST_NEIGHBOR", "ALIGN_CORNERS")])
def test_resize_ios17(interp, mode, tmp_path):
    x = rng(34).standard_normal((1, 2, 3, 4)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.resize(x=x, shape=np.array([2, 0, 6, 7], dtype=np.int32), resized_dims=np.uint32(3),
                         interpolation_mode=interp, sampling_mode=mode)

    # Output [1, 2, 6, 7]: the resized axes are the last three, the first of them kept (0).
    rows, cols = grid_points(mode, 3, 6), grid_points(mode, 4, 7)
    if interp == "LINEAR":
        ref = bilinear_ref(x, rows, cols)
    else:
        ri = np.minimum(np.floor(rows + 0.5).astype(int), 2)
        ci = np.minimum(np.floor(cols + 0.5).astype(int), 3)
        ref = x[:, :, ri][:, :, :, ci]
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


def test_resize_nearest_matches_definition_example(tmp_path):
    """The example coremltools' own iOS17 test gives: [a, b] over three rows → a, b, b."""
    x = np.array([-6.174, 9.371], dtype=F32).reshape(1, 1, 1, 2, 1)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.resize(x=x, shape=[1, 1, 3, 2], resized_dims=np.uint32(2), interpolation_mode="NEAREST_NEIGHBOR", sampling_mode="DEFAULT")

    ref = np.array([-6.174, -6.174, 9.371, 9.371, 9.371, 9.371]).reshape(1, 1, 1, 3, 2)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-6, atol=1e-6)


def test_crop(tmp_path):
    x = rng(35).standard_normal((2, 3, 6, 7)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.crop(x=x, crop_height=[1, 2], crop_width=[0, 3])

    assert_close(only(run_program(prog, {"x": x}, tmp_path)), x[:, :, 1:4, 0:4], rtol=1e-6, atol=1e-6)


def box_corners(box, mode):
    if mode == "CORNERS_HEIGHT_FIRST":
        return box[0], box[1], box[2], box[3]
    if mode == "CORNERS_WIDTH_FIRST":
        return box[1], box[0], box[3], box[2]
    if mode == "CENTER_SIZE_HEIGHT_FIRST":
        return box[0] - box[2] / 2, box[1] - box[3] / 2, box[0] + box[2] / 2, box[1] + box[3] / 2
    return box[1] - box[3] / 2, box[0] - box[2] / 2, box[1] + box[3] / 2, box[0] + box[2] / 2


def crop_ref(img, box, th, tw, mode, box_mode, normalized=False, scale=1.0, pad_value=None):
    """img [C, H, W]: the box's sampling grid, bilinear inside the image, pad_value outside."""
    c, h, w = img.shape
    h0, w0, h1, w1 = box_corners([float(v) for v in box], box_mode)
    sh = (h - 1 if normalized else 1) * scale
    sw = (w - 1 if normalized else 1) * scale
    rows = grid_points(mode, None, th, h0 * sh, h1 * sh)
    cols = grid_points(mode, None, tw, w0 * sw, w1 * sw)
    out = bilinear_ref(img, rows, cols)
    if pad_value is not None:
        out[:, (rows < 0) | (rows > h - 1), :] = pad_value
        out[:, :, (cols < 0) | (cols > w - 1)] = pad_value
    return out


@pytest.mark.parametrize("mode,box_mode", [("ALIGN_CORNERS", "CORNERS_HEIGHT_FIRST"), ("DEFAULT", "CORNERS_WIDTH_FIRST"),
                                           ("OFFSET_CORNERS", "CENTER_SIZE_HEIGHT_FIRST"), ("UNALIGN_CORNERS", "CENTER_SIZE_WIDTH_FIRST"),
                                           ("STRICT_ALIGN_CORNERS", "CORNERS_HEIGHT_FIRST")])
def test_crop_resize_ios15_roi4(mode, box_mode, tmp_path):
    r = rng(36)
    x = r.standard_normal((2, 3, 7, 8)).astype(F32)
    boxes = np.array([[1, 1, 5, 6], [0.5, 2, 4.5, 3.5]], dtype=F32)
    if box_mode.startswith("CENTER"):
        boxes = np.array([[3, 3.5, 4, 5], [2.5, 2.5, 3, 2]], dtype=F32)
    roi = boxes.reshape(2, 1, 4, 1, 1)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.crop_resize(x=x, roi=roi, target_height=4, target_width=3, sampling_mode=mode, box_coordinate_mode=box_mode)

    ref = np.stack([np.stack([crop_ref(x[b], boxes[n], 4, 3, mode, box_mode) for b in range(2)]) for n in range(2)])
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


def test_crop_resize_ios16_roi5_normalized(tmp_path):
    r = rng(37)
    x = r.standard_normal((1, 2, 6, 9)).astype(F32)
    boxes = np.array([[0, 0.1, 0.2, 0.8, 0.9], [0, 0.0, 0.5, 0.5, 1.0], [0, 0.3, 0.1, 0.6, 0.4]], dtype=F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.crop_resize(x=x, roi=boxes.reshape(3, 1, 5, 1, 1), target_height=3, target_width=5, normalized_coordinates=True,
                              sampling_mode="ALIGN_CORNERS", spatial_scale=F32(1.0))

    ref = np.stack([crop_ref(x[0], b[1:], 3, 5, "ALIGN_CORNERS", "CORNERS_HEIGHT_FIRST", normalized=True)[None] for b in boxes])
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


def test_crop_resize_ios17_boxes_pad_value(tmp_path):
    """iOS17 form: boxes [N, 4] with box_indices; a box reaching outside the image samples
    pad_value there; spatial_scale scales the box coordinates."""
    r = rng(38)
    x = r.standard_normal((2, 2, 6, 7)).astype(F32)
    boxes = np.array([[2, 2, 10, 8], [-2, 0, 6, 12], [0, 0, 10, 12]], dtype=F32)
    idx = np.array([1, 0, 1], dtype=np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.crop_resize(x=x, boxes=boxes, box_indices=idx, target_height=5, target_width=4, spatial_scale=F32(0.5),
                              sampling_mode="ALIGN_CORNERS", pad_value=F32(-3.0))

    ref = np.stack([crop_ref(x[i], b, 5, 4, "ALIGN_CORNERS", "CORNERS_HEIGHT_FIRST", scale=0.5, pad_value=-3.0) for b, i in zip(boxes, idx)])
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


def padded_index(i, n, padding):
    if 0 <= i < n:
        return i
    if padding == "border":
        return min(max(i, 0), n - 1)
    if padding == "reflection":
        if n == 1:
            return 0
        period = 2 * (n - 1)
        m = i % period
        return m if m < n else period - m
    if padding == "symmetric":
        period = 2 * n
        m = i % period
        return m if m < n else period - 1 - m
    return None


def resample_ref(x, coords, sampling, padding, pad_value, coord_mode, align):
    b, c, h, w = x.shape
    _, oh, ow, _ = coords.shape
    out = np.zeros((b, c, oh, ow))

    def pixel(v, n):
        if coord_mode == "unnormalized":
            return v
        if coord_mode == "normalized_minus_one_to_one":
            return (v + 1) / 2 * (n - 1) if align else ((v + 1) * n - 1) / 2
        return v * (n - 1) if align else v * n - 0.5

    def at(img, yi, xi):
        sy, sx = padded_index(yi, h, padding), padded_index(xi, w, padding)
        return pad_value * np.ones(c) if sy is None or sx is None else x[img, :, sy, sx]

    for img, i, j in itertools.product(range(b), range(oh), range(ow)):
        px, py = pixel(float(coords[img, i, j, 0]), w), pixel(float(coords[img, i, j, 1]), h)
        if sampling == "nearest":
            out[img, :, i, j] = at(img, int(math.floor(py + 0.5)), int(math.floor(px + 0.5)))
        else:
            y0, x0 = math.floor(py), math.floor(px)
            fy, fx = py - y0, px - x0
            out[img, :, i, j] = ((1 - fy) * (1 - fx) * at(img, y0, x0) + (1 - fy) * fx * at(img, y0, x0 + 1)
                                 + fy * (1 - fx) * at(img, y0 + 1, x0) + fy * fx * at(img, y0 + 1, x0 + 1))
    return out


@pytest.mark.parametrize("sampling,padding,coord_mode,align", [
    ("bilinear", "constant", "normalized_minus_one_to_one", True),
    ("bilinear", "border", "normalized_minus_one_to_one", False),
    ("bilinear", "reflection", "unnormalized", False),
    ("bilinear", "symmetric", "normalized_zero_to_one", True),
    ("nearest", "constant", "normalized_zero_to_one", False),
    ("nearest", "reflection", "unnormalized", True),
])
def test_resample(sampling, padding, coord_mode, align, tmp_path):
    r = rng(39)
    x = r.standard_normal((2, 2, 4, 5)).astype(F32)
    if coord_mode == "unnormalized":
        coords = r.uniform(-3, 8, (2, 3, 4, 2)).astype(F32)
    elif coord_mode == "normalized_zero_to_one":
        coords = r.uniform(-0.6, 1.6, (2, 3, 4, 2)).astype(F32)
    else:
        coords = r.uniform(-1.6, 1.6, (2, 3, 4, 2)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=coords.shape)], opset_version=ct.target.iOS16)
    def prog(x, coords):
        return mb.resample(x=x, coordinates=coords, sampling_mode=sampling, padding_mode=padding, padding_value=F32(0.5),
                           coordinates_mode=coord_mode, align_corners=align)

    ref = resample_ref(x.astype(np.float64), coords, sampling, padding, 0.5, coord_mode, align)
    assert_close(only(run_program(prog, {"x": x, "coords": coords}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


def test_affine(tmp_path):
    """affine (iOS15): the output grid spans [-1, 1] corner to corner; each point (x, y) maps to
    (a0·x + a1·y + a2, b0·x + b1·y + b2) and is sampled bilinearly, zero outside."""
    r = rng(40)
    x = r.standard_normal((2, 2, 5, 6)).astype(F32)
    m = np.array([[0.9, 0.2, 0.1, -0.3, 1.1, 0.05], [1.2, 0.0, -0.4, 0.1, 0.8, 0.3]], dtype=F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.affine(x=x, transform_matrix=m, output_height=4, output_width=7, sampling_mode="bilinear",
                         padding_mode="constant", padding_value=F32(0), coordinates_mode="normalized_minus_one_to_one", align_corners=True)

    gy, gx = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 7), indexing="ij")
    coords = np.stack([np.stack([a[0] * gx + a[1] * gy + a[2], a[3] * gx + a[4] * gy + a[5]], axis=-1) for a in m.astype(np.float64)])
    ref = resample_ref(x.astype(np.float64), coords, "bilinear", "constant", 0.0, "normalized_minus_one_to_one", True)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-4, atol=1e-4)


# Space rearrangements ------------------------------------------------------------------------

def test_depth_to_space_and_back(tmp_path):
    x = rng(50).standard_normal((2, 8, 3, 2)).astype(F32)
    b = 2

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        y = mb.depth_to_space(x=x, block_size=b, name="d2s")
        return y, mb.space_to_depth(x=y, block_size=b, name="s2d")

    out = run_program(prog, {"x": x}, tmp_path)
    n, c, h, w = x.shape
    cs = c // (b * b)
    ref = np.zeros((n, cs, h * b, w * b))
    for nn, cc, hh, ww, i, j in itertools.product(range(n), range(cs), range(h), range(w), range(b), range(b)):
        ref[nn, cc, hh * b + i, ww * b + j] = x[nn, (i * b + j) * cs + cc, hh, ww]
    assert_close(out["d2s"], ref, rtol=1e-6, atol=1e-6, what="depth_to_space")
    assert_close(out["s2d"], x, rtol=1e-6, atol=1e-6, what="space_to_depth")


def test_space_to_depth_block3(tmp_path):
    x = rng(51).standard_normal((1, 2, 6, 3)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.space_to_depth(x=x, block_size=3)

    ref = np.zeros((1, 18, 2, 1))
    for c, h, w, i, j in itertools.product(range(2), range(2), range(1), range(3), range(3)):
        ref[0, (i * 3 + j) * 2 + c, h, w] = x[0, c, h * 3 + i, w * 3 + j]
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-6, atol=1e-6)


def test_pixel_shuffle_and_unshuffle(tmp_path):
    x = rng(52).standard_normal((2, 18, 2, 3)).astype(F32)
    f = 3

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        y = mb.pixel_shuffle(x=x, upscale_factor=f, name="shuffled")
        return y, mb.pixel_unshuffle(x=y, downscale_factor=np.uint32(f), name="unshuffled")

    out = run_program(prog, {"x": x}, tmp_path)
    n, c, h, w = x.shape
    cs = c // (f * f)
    ref = np.zeros((n, cs, h * f, w * f))
    for nn, cc, hh, ww, i, j in itertools.product(range(n), range(cs), range(h), range(w), range(f), range(f)):
        ref[nn, cc, hh * f + i, ww * f + j] = x[nn, cc * f * f + i * f + j, hh, ww]
    assert_close(out["shuffled"], ref, rtol=1e-6, atol=1e-6, what="pixel_shuffle")
    assert_close(out["unshuffled"], x, rtol=1e-6, atol=1e-6, what="pixel_unshuffle")


def test_space_to_batch_and_back(tmp_path):
    x = rng(53).standard_normal((2, 3, 3, 5)).astype(F32)
    block, pads, crops = [2, 3], [[1, 0], [0, 1]], [[1, 0], [0, 1]]

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        y = mb.space_to_batch(x=x, block_shape=np.array(block, dtype=np.int32), paddings=np.array(pads, dtype=np.int32), name="s2b")
        return y, mb.batch_to_space(x=y, block_shape=np.array(block, dtype=np.int32), crops=np.array(crops, dtype=np.int32), name="b2s")

    out = run_program(prog, {"x": x}, tmp_path)
    n, c, h, w = x.shape
    padded = np.pad(x, [(0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])])
    bh, bw = block
    oh, ow = padded.shape[2] // bh, padded.shape[3] // bw
    ref = np.zeros((n * bh * bw, c, oh, ow))
    for i, j, nn, hh, ww in itertools.product(range(bh), range(bw), range(n), range(oh), range(ow)):
        ref[(i * bw + j) * n + nn, :, hh, ww] = padded[nn, :, hh * bh + i, ww * bw + j]
    assert_close(out["s2b"], ref, rtol=1e-6, atol=1e-6, what="space_to_batch")
    assert_close(out["b2s"], x, rtol=1e-6, atol=1e-6, what="batch_to_space")


@pytest.mark.parametrize("axis,size,stride", [(1, 3, 1), (-1, 2, 2), (0, 4, 3)])
def test_sliding_windows(axis, size, stride, tmp_path):
    x = rng(54).standard_normal((7, 5, 6)).astype(F32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.sliding_windows(x=x, axis=axis, size=size, stride=stride)

    a = axis % 3
    windows = (x.shape[a] - size) // stride + 1
    ref = np.stack([np.take(x, np.arange(k * stride, k * stride + size), axis=a) for k in range(windows)], axis=a)
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-6, atol=1e-6)


# A small ResNet ------------------------------------------------------------------------------

def resnet_weights(seed):
    r = rng(seed)

    def conv(cout, cin, k):
        return (r.standard_normal((cout, cin, k, k)) * math.sqrt(2 / (cin * k * k))).astype(F32)

    def bn(c):
        return dict(mean=(r.standard_normal(c) * 0.1).astype(F32), variance=r.uniform(0.5, 1.5, c).astype(F32),
                    gamma=r.uniform(0.5, 1.5, c).astype(F32), beta=(r.standard_normal(c) * 0.1).astype(F32))

    return dict(stem=conv(8, 3, 3), stem_bn=bn(8),
                b1c1=conv(8, 8, 3), b1n1=bn(8), b1c2=conv(8, 8, 3), b1n2=bn(8),
                b2c1=conv(16, 8, 3), b2n1=bn(16), b2c2=conv(16, 16, 3), b2n2=bn(16), b2proj=conv(16, 8, 1), b2projn=bn(16),
                fc=(r.standard_normal((10, 16)) * 0.25).astype(F32), fc_b=(r.standard_normal(10) * 0.1).astype(F32))


def resnet_program(wt):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 16, 16))], opset_version=ct.target.iOS16)
    def prog(x):
        def cbr(v, w, bn, stride=1, relu=True, pad="same"):
            v = mb.conv(x=v, weight=w, strides=[stride, stride], pad_type=pad)
            v = mb.batch_norm(x=v, epsilon=F32(1e-5), **bn)
            return mb.relu(x=v) if relu else v

        v = cbr(x, wt["stem"], wt["stem_bn"])
        v = mb.max_pool(x=v, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")
        y = cbr(v, wt["b1c1"], wt["b1n1"])
        y = cbr(y, wt["b1c2"], wt["b1n2"], relu=False)
        v = mb.relu(x=mb.add(x=v, y=y))
        y = cbr(v, wt["b2c1"], wt["b2n1"], stride=2)
        y = cbr(y, wt["b2c2"], wt["b2n2"], relu=False)
        shortcut = cbr(v, wt["b2proj"], wt["b2projn"], stride=2, relu=False, pad="valid")
        v = mb.relu(x=mb.add(x=shortcut, y=y))
        v = mb.reduce_mean(x=v, axes=[2, 3], keep_dims=False)
        return mb.linear(x=v, weight=wt["fc"], bias=wt["fc_b"])

    return prog


def resnet_ref(x, wt):
    def cbr(v, w, bn, stride=1, relu=True, pad="same"):
        before, after = window_pads(pad, v.shape[2:], w.shape[2:], [stride] * 2, [1, 1])
        v = conv_ref(v, w, None, [stride] * 2, [1, 1], 1, before, after)
        s = (1, -1, 1, 1)
        v = (v - bn["mean"].reshape(s)) / np.sqrt(bn["variance"].reshape(s) + 1e-5) * bn["gamma"].reshape(s) + bn["beta"].reshape(s)
        return np.maximum(v, 0) if relu else v

    v = cbr(x, wt["stem"], wt["stem_bn"])
    v = pool_ref(v, "max", [2, 2], [2, 2], [0, 0], [0, 0])
    y = cbr(cbr(v, wt["b1c1"], wt["b1n1"]), wt["b1c2"], wt["b1n2"], relu=False)
    v = np.maximum(v + y, 0)
    y = cbr(cbr(v, wt["b2c1"], wt["b2n1"], stride=2), wt["b2c2"], wt["b2n2"], relu=False)
    v = np.maximum(cbr(v, wt["b2proj"], wt["b2projn"], stride=2, relu=False, pad="valid") + y, 0)
    return v.mean(axis=(2, 3)) @ wt["fc"].T.astype(np.float64) + wt["fc_b"]


def test_resnet_fp32(tmp_path):
    wt = resnet_weights(60)
    x = rng(61).standard_normal((2, 3, 16, 16)).astype(F32)
    ref = resnet_ref(x, wt)
    got = only(run_program(resnet_program(wt), {"x": x}, tmp_path))
    # float32 sums over at most 144 products per conv through six layers.
    assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_resnet_fp16(tmp_path):
    """compute_precision=FLOAT16 with the default passes (conv+batch_norm fused, weights in fp16).
    Its convolution run is lowered to the neural-network engine (fp16 values kept in fp32
    inside it: test_program_lowering.py); the tolerance below, for rounding after every op,
    holds for the lowered program (fewer roundings) and with CORTADO_MIL_LOWERING=0 alike."""
    wt = resnet_weights(60)
    x = rng(61).standard_normal((2, 3, 16, 16)).astype(F32)
    ref = resnet_ref(x, wt)
    got = only(run_program(resnet_program(wt), {"x": x}, tmp_path, precision="fp16"))
    # fp16 keeps 11 significant bits (relative rounding 2^-11 ≈ 5e-4 per op); through about a
    # dozen rounded ops the logits are allowed 2% of their largest magnitude.
    scale = np.abs(ref).max()
    assert_close(got, ref, rtol=2e-2, atol=2e-2 * scale)
