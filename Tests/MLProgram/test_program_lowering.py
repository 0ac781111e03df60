"""ML Program convolution runs on the neural-network engine (`MILLowering`).

At load, each maximal run of consecutive fp32 or fp16 ops that the NeuralNetwork format
expresses exactly (conv, relu / relu6 / leaky_relu / sigmoid / tanh, add of two same-shaped
tensors, max_pool / avg_pool, concat along channels, reduce_mean as a global average pool) and
holds a convolution is compiled as a neural network and run as one step;
`CORTADO_MIL_LOWERING=0` keeps every op on the interpreter (`=fp32` lowers fp32 ops only). Every case runs with lowering on and off against a
float64 NumPy reference written from the op definitions (test_spatial_ops.py's convolution and
pooling, with MIL's padding for each pad_type), and `cortado inspect` says how many ops ran on
the neural-network engine in how many segments, so a case cannot pass by not lowering (or by
lowering what it must not).

Each mapped-op case runs in three precisions (`PRECISIONS`):
- fp32: rtol 1e-4, atol 1e-4 (sums of up to 216 fp32 products, Winograd's transforms among the
  algorithms the network may pick);
- fp16, converted as coremltools does by default (compute_precision=FLOAT16 and its passes:
  fp16 weights, a cast to fp16 after each fp32 input and to fp32 before each output), and
  fp16-io, the same with FLOAT16 model inputs and outputs (no casts). Weights and inputs are
  drawn on fp16's grid (`half`), so the conversion and the casts change no value and the
  reference is exact. Lowered, a segment computes in fp32 and rounds to fp16 only at its
  outputs: every output must be an fp16 value within one fp16 spacing (the final rounding,
  which may fall either side where fp32's sums sit at a midpoint) plus 1e-4 of the output's
  scale (the fp32 sums) of the reference. On the interpreter every op's result is rounded
  (2^-11 relative each, through at most 7 ops): within 1e-2 of the output's scale, and the
  lowered output within that of the interpreter's too.
"""
import json
import re
import subprocess

import numpy as np
import pytest

import test_spatial_ops as spatial
from milharness import array_json, assert_close, convert, cortado_command, ct, inspect, mb, predict

RTOL = ATOL = 1e-4
FP16_SCALE_TOL = 1e-2
MODES = ["on", "off"]
PRECISIONS = ["fp32", "fp16", "fp16-io"]


def lowering(monkeypatch, mode):
    if mode == "off":
        monkeypatch.setenv("CORTADO_MIL_LOWERING", "0")
    elif mode == "fp32":
        monkeypatch.setenv("CORTADO_MIL_LOWERING", "fp32")
    else:
        monkeypatch.delenv("CORTADO_MIL_LOWERING", raising=False)


def half(a):
    """float32 values on fp16's grid: an fp16 program holds them exactly."""
    return np.asarray(a, dtype=np.float32).astype(np.float16).astype(np.float32)


def normal(r, shape):
    return half(r.standard_normal(shape))


# ---------------------------------------------------------------- references (float64, NCHW)
# test_spatial_ops.py's, written from conv.py and pool.py (`window_pads`: MIL's padding for
# each pad_type, the odd element of `same` after).

def conv_ref(x, w, b, strides=(1, 1), dilations=(1, 1), groups=1, pad_type="valid", pad=None):
    before, after = spatial.window_pads(pad_type, x.shape[2:], w.shape[2:], strides, dilations, pad)
    return spatial.conv_ref(x, w, b, strides, dilations, groups, before, after)


def pool_ref(x, kind, kernel, strides, pad_type, pad=None, exclude=False, ceil_mode=False):
    before, after = spatial.window_pads(pad_type, x.shape[2:], kernel, strides, (1, 1), pad)
    return spatial.pool_ref(x, kind, kernel, strides, before, after, ceil_mode=ceil_mode, exclude=exclude)


# name: (the op on v, its reference)
ACTIVATIONS = {
    "relu": (lambda v: mb.relu(x=v, name="y"), lambda v: np.maximum(v, 0)),
    "relu6": (lambda v: mb.relu6(x=v, name="y"), lambda v: np.clip(v, 0, 6)),
    "leaky_relu": (lambda v: mb.leaky_relu(x=v, alpha=0.25, name="y"), lambda v: np.where(v >= 0, v, 0.25 * v)),
    "sigmoid": (lambda v: mb.sigmoid(x=v, name="y"), lambda v: 1 / (1 + np.exp(-v))),
    "tanh": (lambda v: mb.tanh(x=v, name="y"), np.tanh),
}


def weights(r, cout, per, kh, kw=None, bias=True):
    """A convolution's weight and bias, on fp16's grid (fp16 programs hold them exactly)."""
    kw = kw or kh
    w = half(r.standard_normal((cout, per, kh, kw)) / np.sqrt(per * kh * kw))
    return w, (half(r.standard_normal(cout) * 0.1) if bias else None)


def conv_op(v, w, b, **kw):
    return mb.conv(x=v, weight=w, bias=b, **kw) if b is not None else mb.conv(x=v, weight=w, **kw)


_models = {}


def model(name, tmp_path_factory, build, precision="fp32"):
    """A case's program in `precision` (PRECISIONS), converted once (for both modes) with its
    input (FLOAT16 arrays for fp16-io) and reference."""
    key = f"{name}/{precision}"
    if key not in _models:
        prog, inputs, want = build(np.random.default_rng(sum(map(ord, name))))
        folder = tmp_path_factory.mktemp(key.replace("/", "_"))
        path = convert(prog, folder, precision=precision[:4])
        if precision == "fp16-io":
            # coremltools' own rewrite of a converted program's fp32 inputs and outputs into
            # fp16 ones (the casts go; each output is renamed NAME_to_fp16).
            from coremltools.proto import FeatureTypes_pb2
            half_io = ct.utils.change_input_output_tensor_type(
                ct.models.MLModel(str(path), skip_model_load=True), from_type=FeatureTypes_pb2.ArrayFeatureType.FLOAT32,
                to_type=FeatureTypes_pb2.ArrayFeatureType.FLOAT16, input_names=list(inputs), output_names=list(want))
            path = folder / "io16.mlpackage"
            half_io.save(str(path))
            inputs = {k: v.astype(np.float16) for k, v in inputs.items()}
            want = dict(zip([o.name for o in half_io.get_spec().description.output], want.values()))
        _models[key] = (path, inputs, want)
    return _models[key]


def check(path, inputs, want, mode, what, expect, precision="fp32", monkeypatch=None):
    """Runs one row; checks every output against `want` and `inspect` against `expect` (the
    line's text with lowering on, as for the fp32 program; an fp16 program converted with fp32
    inputs and outputs has a cast more per input and output; with lowering off, the switch's
    line). fp16 programs are held to the tolerances of the module's docstring; lowered, they
    are also run with lowering off (`monkeypatch` sets the switch) and compared."""
    text = inspect(path)
    if mode == "off":
        assert "neural-network engine: off" in text, text
    else:
        if precision == "fp16":
            casts = len(inputs) + len(want)
            expect = re.sub(r"of (\d+) operations", lambda m: f"of {int(m.group(1)) + casts} operations", expect)
        assert expect in text, text
        if precision != "fp32":
            assert "fp16 values computed in fp32, rounded to fp16 at its outputs" in text, text
    got = predict(path, [inputs])[0]
    assert set(got) == set(want), (sorted(got), sorted(want))
    label = f"{what} ({precision}) '{{}}', lowering {mode}"
    if precision == "fp32":
        for k, v in want.items():
            assert_close(got[k], v, rtol=RTOL, atol=ATOL, what=label.format(k))
        return text
    for k, v in want.items():
        # JSON carries the shortest decimals of the output's own type: read back as that type
        # (a FLOAT16 output's values are fp16 values by its type; an fp32 output's, after the
        # cast from fp16, must be).
        g, scale = np.asarray(got[k]).astype(np.float16 if precision == "fp16-io" else np.float32).astype(np.float64), np.abs(v).max()
        assert np.array_equal(g.astype(np.float16).astype(np.float64), g), f"{label.format(k)}: not fp16 values"
        if mode == "off":
            assert_close(g, v, rtol=FP16_SCALE_TOL, atol=FP16_SCALE_TOL * scale, what=label.format(k))
        else:
            # Rounded once, at the segment's output.
            spacing = np.spacing(np.abs(v).astype(np.float16)).astype(np.float64)
            err = np.abs(g - v) - spacing - ATOL * scale
            assert err.max() <= 0, f"{label.format(k)}: {np.count_nonzero(err > 0)} values over one fp16 spacing + 1e-4 of the scale " \
                f"(worst |diff| {np.abs(g - v).max():.3g}, scale {scale:.3g})"
    if mode == "on":
        lowering(monkeypatch, "off")
        per_op = predict(path, [inputs])[0]
        lowering(monkeypatch, "on")
        for k, v in want.items():
            assert_close(got[k], per_op[k], rtol=FP16_SCALE_TOL, atol=FP16_SCALE_TOL * np.abs(v).max(),
                         what=f"{label.format(k)} against lowering off")
    return text


# ---------------------------------------------------------------- each mapped op

# name: (input [N, C, H, W], out channels, kernel (h, w), groups, strides, dilations, pad_type, custom pad, bias)
CONVS = {
    "valid_s1": ((1, 8, 11, 11), 16, (3, 3), 1, (1, 1), (1, 1), "valid", None, True),
    "valid_s2": ((1, 8, 12, 12), 16, (3, 3), 1, (2, 2), (1, 1), "valid", None, True),
    "same_s1": ((1, 8, 11, 11), 16, (3, 3), 1, (1, 1), (1, 1), "same", None, True),
    "same_s2_odd_padding": ((1, 8, 12, 12), 16, (3, 3), 1, (2, 2), (1, 1), "same", None, True),
    "custom_asymmetric_s2": ((1, 8, 11, 10), 16, (3, 3), 1, (2, 2), (1, 1), "custom", [0, 2, 1, 0], True),
    "dilated_same": ((1, 8, 13, 13), 16, (3, 3), 1, (1, 1), (2, 2), "same", None, True),
    "depthwise_s1": ((1, 16, 10, 10), 16, (3, 3), 16, (1, 1), (1, 1), "custom", [1, 1, 1, 1], True),
    "depthwise_s2": ((1, 32, 13, 13), 32, (3, 3), 32, (2, 2), (1, 1), "same", None, True),
    "grouped": ((1, 8, 9, 9), 12, (3, 3), 2, (1, 1), (1, 1), "valid", None, True),
    "pointwise_s2_no_bias": ((1, 24, 10, 10), 32, (1, 1), 1, (2, 2), (1, 1), "valid", None, False),
    "rect_kernel_stride": ((1, 6, 12, 11), 16, (5, 3), 1, (2, 1), (1, 1), "same", None, True),
    "batch2": ((2, 16, 9, 9), 16, (3, 3), 1, (1, 1), (1, 1), "same", None, True),
}


def conv_case(case):
    shape, cout, (kh, kw), groups, strides, dilations, pad_type, pad, bias = CONVS[case]

    def build(r):
        w, b = weights(r, cout, shape[1] // groups, kh, kw, bias)
        extra = dict(pad=pad) if pad_type == "custom" else {}

        @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS16)
        def prog(x):
            h = conv_op(x, w, b, strides=list(strides), dilations=list(dilations), pad_type=pad_type, groups=groups, **extra)
            return mb.relu(x=h, name="y")

        x = normal(r, shape)
        want = np.maximum(conv_ref(x, w, b, strides, dilations, groups, pad_type, pad), 0)
        return prog, {"x": x}, {"y": want}
    return build


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(CONVS))
def test_convolution(case, mode, precision, tmp_path_factory, monkeypatch):
    lowering(monkeypatch, mode)
    path, inputs, want = model(f"conv/{case}", tmp_path_factory, conv_case(case), precision)
    check(path, inputs, want, mode, case, "neural-network engine: 2 of 2 operations in 1 segment", precision, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_activation_after_conv(act, mode, precision, tmp_path_factory, monkeypatch):
    lowering(monkeypatch, mode)
    op, ref = ACTIVATIONS[act]

    def build(r):
        w, b = weights(r, 16, 8, 3)
        w *= 4  # values past 6 and well below 0, so relu6 and the saturating curves clip

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 9, 9))], opset_version=ct.target.iOS16)
        def prog(x):
            return op(mb.conv(x=x, weight=w, bias=b, pad_type="same"))

        x = normal(r, (1, 8, 9, 9))
        return prog, {"x": x}, {"y": ref(conv_ref(x, w, b, pad_type="same"))}

    path, inputs, want = model(f"act/{act}", tmp_path_factory, build, precision)
    check(path, inputs, want, mode, act, "neural-network engine: 2 of 2 operations in 1 segment", precision, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("skip_first", [False, True])
def test_residual_block(skip_first, mode, precision, tmp_path_factory, monkeypatch):
    """A 1×1 stem, then relu(conv_1x1(relu(conv_dw(h))) + h): a depthwise then a 1×1
    convolution, the add reading the block's input (as its x or its y), the ReLU after. On the
    vector paths the network runs the block in the channel-blocked layout, the depthwise and
    the 1×1 as one step, the add in the 1×1's epilogue (blobs of rank 4, as the program's)."""
    lowering(monkeypatch, mode)

    def build(r):
        c = 24
        ws, bs = weights(r, c, 8, 1)
        wd, bd = weights(r, c, 1, 3)
        wp, bp = weights(r, c, c, 1)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 14, 14))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=ws, bias=bs))
            g = mb.relu(x=mb.conv(x=h, weight=wd, bias=bd, pad_type="custom", pad=[1] * 4, groups=c))
            g = mb.conv(x=g, weight=wp, bias=bp)
            s = mb.add(x=h, y=g) if skip_first else mb.add(x=g, y=h)
            return mb.relu(x=s, name="y")

        x = normal(r, (1, 8, 14, 14))
        h = np.maximum(conv_ref(x, ws, bs), 0)
        g = np.maximum(conv_ref(h, wd, bd, groups=c, pad_type="custom", pad=[1] * 4), 0)
        return prog, {"x": x}, {"y": np.maximum(conv_ref(g, wp, bp) + h, 0)}

    path, inputs, want = model(f"residual/{skip_first}", tmp_path_factory, build, precision)
    text = check(path, inputs, want, mode, "residual", "neural-network engine: 7 of 7 operations in 1 segment", precision,
                 monkeypatch)
    if mode == "on" and re.search(r"Kernel path:\s+(avx512|avx2) ", text):
        assert "then residual add, ReLU" in text, text
        assert re.search(r"channel-blocked layout \(NCHW16c\): \d+ layers \([^)]* \+ ", text), text


# name: (op, kernel, strides, pad_type, custom pad, exclude padding, ceil mode)
POOLS = {
    "max_2x2_s2": ("max_pool", (2, 2), (2, 2), "valid", None, False, False),
    "max_3x3_s2_same": ("max_pool", (3, 3), (2, 2), "same", None, False, False),
    "max_3x3_s1_custom": ("max_pool", (3, 3), (1, 1), "custom", [1, 1, 0, 2], False, False),
    "avg_3x3_s1_custom": ("avg_pool", (3, 3), (1, 1), "custom", [1, 1, 1, 1], False, False),
    "avg_3x3_s2_exclude": ("avg_pool", (3, 3), (2, 2), "custom", [1, 1, 1, 1], True, False),
    "avg_2x2_s2_ceil_same_size": ("avg_pool", (2, 2), (2, 2), "valid", None, False, True),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(POOLS))
def test_pooling_after_conv(case, mode, precision, tmp_path_factory, monkeypatch):
    lowering(monkeypatch, mode)
    op, kernel, strides, pad_type, pad, exclude, ceil = POOLS[case]

    def build(r):
        w, b = weights(r, 16, 8, 3)
        extra = dict(pad=pad) if pad_type == "custom" else {}
        if op == "avg_pool":
            extra["exclude_padding_from_average"] = exclude

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 12, 12))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.conv(x=x, weight=w, bias=b, pad_type="same")
            return getattr(mb, op)(x=h, kernel_sizes=list(kernel), strides=list(strides), pad_type=pad_type, ceil_mode=ceil,
                                   name="y", **extra)

        x = normal(r, (1, 8, 12, 12))
        h = conv_ref(x, w, b, pad_type="same")
        return prog, {"x": x}, {"y": pool_ref(h, op[:3], kernel, strides, pad_type, pad, exclude, ceil)}

    path, inputs, want = model(f"pool/{case}", tmp_path_factory, build, precision)
    check(path, inputs, want, mode, case, "neural-network engine: 2 of 2 operations in 1 segment", precision, monkeypatch)


@pytest.mark.parametrize("mode", MODES)
def test_ceil_mode_that_adds_a_window_stays_here(mode, tmp_path_factory, monkeypatch):
    """A 2×2 stride-2 max pool over 11×11 in ceil mode has a sixth, clipped window the layer
    would not compute: the pool runs on the interpreter, the convolution before it is lowered."""
    lowering(monkeypatch, mode)

    def build(r):
        w, b = weights(r, 8, 4, 3)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 11, 11))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=w, bias=b, pad_type="same"))
            return mb.max_pool(x=h, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid", ceil_mode=True, name="y")

        x = normal(r, (1, 4, 11, 11))
        h = np.maximum(conv_ref(x, w, b, pad_type="same"), 0)
        return prog, {"x": x}, {"y": pool_ref(h, "max", (2, 2), (2, 2), "valid", ceil_mode=True)}

    path, inputs, want = model("pool/ceil_adds_window", tmp_path_factory, build)
    check(path, inputs, want, mode, "ceil mode", "neural-network engine: 2 of 3 operations in 1 segment")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
def test_concat_along_channels(mode, precision, tmp_path_factory, monkeypatch):
    """Two branches (a 1×1 and a 3×3 convolution of x) joined along the channels, then a 1×1
    convolution over both, as an Inception-style block."""
    lowering(monkeypatch, mode)

    def build(r):
        w1, b1 = weights(r, 8, 8, 1)
        w3, b3 = weights(r, 12, 8, 3)
        wo, bo = weights(r, 16, 20, 1)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 10, 10))], opset_version=ct.target.iOS16)
        def prog(x):
            a = mb.relu(x=mb.conv(x=x, weight=w1, bias=b1))
            c = mb.relu(x=mb.conv(x=x, weight=w3, bias=b3, pad_type="same"))
            return mb.conv(x=mb.concat(values=[a, c], axis=1), weight=wo, bias=bo, name="y")

        x = normal(r, (1, 8, 10, 10))
        a = np.maximum(conv_ref(x, w1, b1), 0)
        c = np.maximum(conv_ref(x, w3, b3, pad_type="same"), 0)
        return prog, {"x": x}, {"y": conv_ref(np.concatenate([a, c], axis=1), wo, bo)}

    path, inputs, want = model("concat", tmp_path_factory, build, precision)
    check(path, inputs, want, mode, "concat", "neural-network engine: 6 of 6 operations in 1 segment", precision, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axes", [(2, 3), (-1, -2)])
def test_global_average_pool(axes, mode, precision, tmp_path_factory, monkeypatch):
    """reduce_mean over H and W with keep_dims (PyTorch's AdaptiveAvgPool2d(1)) after a
    convolution and a ReLU: the global average pooling layer, in the same segment. Without
    keep_dims (rank 2) it stays here: test_head_without_keep_dims."""
    lowering(monkeypatch, mode)

    def build(r):
        w, b = weights(r, 16, 8, 3)

        @mb.program(input_specs=[mb.TensorSpec(shape=(2, 8, 9, 7))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=w, bias=b, pad_type="same"))
            return mb.reduce_mean(x=h, axes=list(axes), keep_dims=True, name="y")

        x = normal(r, (2, 8, 9, 7))
        return prog, {"x": x}, {"y": np.maximum(conv_ref(x, w, b, pad_type="same"), 0).mean(axis=(2, 3), keepdims=True)}

    path, inputs, want = model(f"gap/{axes}", tmp_path_factory, build, precision)
    check(path, inputs, want, mode, "global average pool", "neural-network engine: 3 of 3 operations in 1 segment", precision, monkeypatch)


def test_head_without_keep_dims(tmp_path_factory, monkeypatch):
    """reduce_mean over H and W without keep_dims writes a rank-2 value: it and the linear
    head after it stay here, the convolution before is lowered."""
    lowering(monkeypatch, "on")

    def build(r):
        w, b = weights(r, 16, 8, 3)
        fc = half(r.standard_normal((4, 16)) * 0.25)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 9, 9))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=w, bias=b, pad_type="same"))
            return mb.linear(x=mb.reduce_mean(x=h, axes=[2, 3]), weight=fc, name="y")

        x = normal(r, (1, 8, 9, 9))
        return prog, {"x": x}, {"y": np.maximum(conv_ref(x, w, b, pad_type="same"), 0).mean(axis=(2, 3)) @ fc.T.astype(np.float64)}

    path, inputs, want = model("gap/no_keep_dims", tmp_path_factory, build)
    check(path, inputs, want, "on", "head", "neural-network engine: 2 of 4 operations in 1 segment")


# ---------------------------------------------------------------- segment boundaries

@pytest.mark.parametrize("mode", MODES)
def test_value_read_inside_and_after_the_segment(mode, tmp_path_factory, monkeypatch):
    """h = relu(conv(x)) feeds a second convolution inside the segment and a reduce_max
    after it (which does not map): the segment writes h as well as its last value."""
    lowering(monkeypatch, mode)

    def build(r):
        w1, b1 = weights(r, 16, 8, 3)
        w2, b2 = weights(r, 16, 16, 1)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 9, 9))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=w1, bias=b1, pad_type="same"), name="h")
            y = mb.conv(x=h, weight=w2, bias=b2, name="y")
            m = mb.reduce_max(x=h, axes=[2, 3], keep_dims=True)
            return mb.add(x=y, y=m, name="out")

        x = normal(r, (1, 8, 9, 9))
        h = np.maximum(conv_ref(x, w1, b1, pad_type="same"), 0)
        return prog, {"x": x}, {"out": conv_ref(h, w2, b2) + h.max(axis=(2, 3), keepdims=True)}

    path, inputs, want = model("boundary/read_after", tmp_path_factory, build)
    text = check(path, inputs, want, mode, "read after", "neural-network engine: 3 of 5 operations in 1 segment")
    if mode == "on":
        assert "writes h, y" in text, text


@pytest.mark.parametrize("mode", MODES)
def test_segment_values_that_are_function_outputs(mode, tmp_path_factory, monkeypatch):
    """The convolution's value is read inside the segment (by the ReLU) and is a function
    output too; the segment's last value is the other output."""
    lowering(monkeypatch, mode)

    def build(r):
        w, b = weights(r, 16, 8, 3)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 9, 9))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.conv(x=x, weight=w, bias=b, pad_type="same", name="h")
            return mb.relu(x=h, name="y"), h

        x = normal(r, (1, 8, 9, 9))
        h = conv_ref(x, w, b, pad_type="same")
        return prog, {"x": x}, {"y": np.maximum(h, 0), "h": h}

    path, inputs, want = model("boundary/function_outputs", tmp_path_factory, build)
    text = check(path, inputs, want, mode, "function outputs", "neural-network engine: 2 of 2 operations in 1 segment")
    if mode == "on":
        assert "writes h, y" in text, text


@pytest.mark.parametrize("mode", MODES)
def test_two_segments_around_an_op_that_does_not_map(mode, tmp_path_factory, monkeypatch):
    """conv → relu, then a multiplication by a constant (no exact layer here), then conv →
    add(·, first segment's value) → relu: two segments, the second reading the first's value
    across the op between them."""
    lowering(monkeypatch, mode)

    def build(r):
        w1, b1 = weights(r, 16, 8, 3)
        w2, b2 = weights(r, 16, 16, 3)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 10, 10))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.relu(x=mb.conv(x=x, weight=w1, bias=b1, pad_type="same"))
            m = mb.mul(x=h, y=np.float32(0.5))
            g = mb.conv(x=m, weight=w2, bias=b2, strides=[1, 1], pad_type="custom", pad=[1, 1, 1, 1])
            return mb.relu(x=mb.add(x=g, y=h), name="y")

        x = normal(r, (1, 8, 10, 10))
        h = np.maximum(conv_ref(x, w1, b1, pad_type="same"), 0)
        return prog, {"x": x}, {"y": np.maximum(conv_ref(0.5 * h, w2, b2, pad_type="same") + h, 0)}

    path, inputs, want = model("boundary/two_segments", tmp_path_factory, build)
    check(path, inputs, want, mode, "two segments", "neural-network engine: 5 of 6 operations in 2 segments")


@pytest.mark.parametrize("precision", ["fp16", "fp16-io"])
def test_switch_fp32_keeps_fp16_ops_here(precision, tmp_path_factory, monkeypatch):
    """CORTADO_MIL_LOWERING=fp32 lowers fp32 ops only: an fp16 program keeps every op here
    (rounded after each, within the interpreter's fp16 tolerance of the reference) and says
    why; the fp32 program of the same case is still lowered."""
    lowering(monkeypatch, "fp32")
    path, inputs, want = model("conv/same_s1", tmp_path_factory, conv_case("same_s1"), precision)
    text = inspect(path)
    assert "neural-network engine: no segment (CORTADO_MIL_LOWERING=fp32: fp16 ops stay here)" in text, text
    (name, y), = want.items()
    got = predict(path, [inputs])[0][name]
    assert_close(got, y, rtol=FP16_SCALE_TOL, atol=FP16_SCALE_TOL * np.abs(y).max(), what="fp16, lowering fp32")
    path, inputs, want = model("conv/same_s1", tmp_path_factory, conv_case("same_s1"))
    check(path, inputs, want, "fp32", "same_s1", "neural-network engine: 2 of 2 operations in 1 segment")


def test_fp16_input_given_fp32_values(tmp_path_factory, monkeypatch):
    """An fp16 function input read by a segment alone, sent as FLOAT32 values off fp16's grid:
    it is rounded to fp16 on the way in as any fp16 input (the request's array does not go to
    the network as it is), so the result is the one of the rounded values, to the bit."""
    lowering(monkeypatch, "on")
    path, inputs, want = model("conv/same_s1", tmp_path_factory, conv_case("same_s1"), "fp16-io")
    assert "neural-network engine: 2 of 2 operations in 1 segment" in inspect(path)
    x = inputs["x"].astype(np.float32)
    # 3/8 of a spacing away from zero: off the grid, and rounding back to x.
    off_grid = x + np.sign(x) * np.spacing(np.abs(inputs["x"])).astype(np.float32) * 0.375
    assert not np.array_equal(half(off_grid), off_grid) and np.array_equal(half(off_grid), x)
    got = predict(path, [{"x": off_grid}, inputs])
    (name, y), = want.items()
    assert np.array_equal(got[0][name], got[1][name])
    assert_close(got[1][name], y, rtol=FP16_SCALE_TOL, atol=FP16_SCALE_TOL * np.abs(y).max(), what="fp16 input")


def test_program_without_convolutions_says_nothing(tmp_path):
    """A program with no convolution has no lowering line (and its add and relu stay here)."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 3, 3))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.relu(x=mb.add(x=x, y=x))

    assert "neural-network engine" not in inspect(convert(prog, tmp_path))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_input_read_by_the_segment_and_after_it(dtype, tmp_path_factory, monkeypatch):
    """x feeds the segment and a multiplication after it (so it is converted to a tensor as
    usual), z only the segment (so a float32 array goes in as the request holds it; a float64
    one is converted first); both give the reference."""
    lowering(monkeypatch, "on")

    def build(r):
        w, b = weights(r, 8, 8, 3)

        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8, 7, 7)), mb.TensorSpec(shape=(1, 8, 7, 7))], opset_version=ct.target.iOS16)
        def prog(x, z):
            s = mb.relu(x=mb.add(x=mb.conv(x=x, weight=w, bias=b, pad_type="same"), y=z))
            return mb.mul(x=s, y=x, name="y")

        x = normal(r, (1, 8, 7, 7))
        z = normal(r, (1, 8, 7, 7))
        want = np.maximum(conv_ref(x, w, b, pad_type="same") + z, 0) * x
        return prog, {"x": x, "z": z}, {"y": want}

    path, inputs, want = model("boundary/inputs", tmp_path_factory, build)
    inputs = {k: v.astype(dtype) for k, v in inputs.items()}
    check(path, inputs, want, "on", f"inputs as {dtype.__name__}", "neural-network engine: 3 of 4 operations in 1 segment")


def test_report_layers_nests_the_networks_under_their_segments(tmp_path, monkeypatch):
    """`cortado report --layers`: each segment is one top-level entry (the top-level shares add
    up to 100%) followed by its network's layers, indented; with lowering off the program's
    own ops are the entries and nothing is nested."""
    r = np.random.default_rng(31)
    w1, b1 = weights(r, 8, 4, 3)
    w2, b2 = weights(r, 8, 8, 1)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 8, 8))], opset_version=ct.target.iOS16)
    def prog(x):
        h = mb.mul(x=mb.relu(x=mb.conv(x=x, weight=w1, bias=b1, pad_type="same", name="first")), y=np.float32(0.5), name="half")
        return mb.relu(x=mb.conv(x=h, weight=w2, bias=b2, name="second"), name="y")

    path = convert(prog, tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"x": array_json(normal(r, (1, 4, 8, 8)))}) + "\n")
    entry = re.compile(r"^(  +)(\S.*?)\s+([\d.]+) µs\s+([\d.]+)%\s+(.*)$")

    def table():
        done = subprocess.run(cortado_command() + ["report", str(path), "--input", str(rows), "--iterations", "3", "--layers"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        lines = done.stdout[done.stdout.index("layers "):].splitlines()[2:]
        found = [entry.match(l) for l in lines]
        assert all(found), lines
        top = {m.group(2): float(m.group(4)) for m in found if len(m.group(1)) == 2}
        nested = [(m.group(2), m.group(5)) for m in found if len(m.group(1)) == 4]
        assert abs(sum(top.values()) - 100) < 0.5, lines
        return lines, top, nested

    lowering(monkeypatch, "on")
    lines, top, nested = table()
    assert set(top) == {"neural network 1", "neural network 2", "half"}, lines
    assert {name for name, _ in nested} == {"first", "second"} and all(t.startswith("convolution") for _, t in nested), lines
    lowering(monkeypatch, "off")
    lines, top, nested = table()
    assert not nested and {"first", "half", "second"} <= set(top), lines


def test_function_of_a_multifunction_model(tmp_path, monkeypatch):
    """A convolution function picked with --function in a two-function model: its segment
    compiles as a network of its own (which has one function), and each function gives its
    reference."""
    lowering(monkeypatch, "on")
    r = np.random.default_rng(41)
    w1, b1 = weights(r, 8, 4, 3)
    w2, b2 = weights(r, 8, 4, 1)
    paths = []
    for name, (w, b, pad_type) in {"a": (w1, b1, "same"), "b": (w2, b2, "valid")}.items():
        @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4, 6, 6))], opset_version=ct.target.iOS18)
        def prog(x):
            return mb.relu(x=mb.conv(x=x, weight=w, bias=b, pad_type=pad_type), name="y")
        paths.append(convert(prog, tmp_path, name=name, minimum_deployment_target=ct.target.iOS18))
    desc = ct.utils.MultiFunctionDescriptor()
    desc.add_function(str(paths[0]), src_function_name="main", target_function_name="wide")
    desc.add_function(str(paths[1]), src_function_name="main", target_function_name="pointwise")
    desc.default_function_name = "pointwise"
    path = tmp_path / "multi.mlpackage"
    ct.utils.save_multifunction(desc, str(path))

    x = normal(r, (1, 4, 6, 6))
    assert_close(predict(path, [{"x": x}])[0]["y"], np.maximum(conv_ref(x, w2, b2), 0), rtol=RTOL, atol=ATOL, what="default")
    got = predict(path, [{"x": x}], extra_args=["--function", "wide"])[0]["y"]
    assert_close(got, np.maximum(conv_ref(x, w1, b1, pad_type="same"), 0), rtol=RTOL, atol=ATOL, what="--function wide")
    assert "neural-network engine: 2 of 2 operations in 1 segment" in inspect(path, "--function", "wide")
