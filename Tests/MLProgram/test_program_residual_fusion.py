"""Residual blocks in ML Programs: `relu(conv(x) + skip)` run as one convolution.

A `conv` whose only reader is an `add` of a tensor of the same declared shape computed before
it (and, optionally, a `relu` that alone reads the sum) is planned as one convolution that adds
`skip` in its epilogue and then applies the ReLU: on the direct kernel (ungrouped convolutions
on the AVX-512 and AVX2 paths) while each block of the output is in cache; on the depthwise
kernel and on the portable path (im2col + OpenBLAS) right after the convolution. A
`batch_norm` with constant statistics after a convolution (left by coremltools when its
default passes do not run) is folded into the convolution's weights and bias first.

Each case is checked against a NumPy reference written from the op definitions (conv: the sum
over input channels and kernel taps of weight × zero-padded input, plus bias; add; relu;
batch_norm: (x − mean)·gamma/√(var + ε) + beta) in float64, rtol 1e-4, atol 1e-4 (sums of up
to 432 fp32 products), on every kernel path the machine has (CORTADO_ISA), with the batch in
the program's shape (the residual read per image). `cortado inspect` shows what was fused, so
a case cannot pass by not fusing; the cases that must NOT fuse (the convolution's output read
twice, an add that broadcasts, a ReLU before the add, a skip computed after the convolution)
check that too. `cortado predict` uses every core (two threads on the CI hosts), so the
kernels' splitting of the output is exercised. These are the interpreter's own fusions, so the
module runs with `CORTADO_MIL_LOWERING=0` (with it on, these runs go to the neural-network
engine: test_program_lowering.py).
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from milharness import assert_close, convert, ct, inspect, mb, only, predict

_spec = importlib.util.spec_from_file_location("nn_isa_paths", Path(__file__).resolve().parent.parent / "NeuralNetwork" / "test_isa_paths.py")
_isa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_isa)

# The paths this CPU has, narrowest first ("portable" always).
PATHS = _isa.ORDER[:_isa.ORDER.index(_isa.cpu_best()) + 1]
RTOL = ATOL = 1e-4


@pytest.fixture(autouse=True)
def interpreter_only(monkeypatch):
    monkeypatch.setenv("CORTADO_MIL_LOWERING", "0")


def use_isa(monkeypatch, isa):
    monkeypatch.setenv("CORTADO_ISA", isa)
    monkeypatch.delenv("CORTADO_GEMM", raising=False)
    monkeypatch.delenv("CORTADO_CONV", raising=False)


def conv_ref(x, w, b, stride=1, pad=0, groups=1):
    """2-D convolution, NCHW, from the definition: out[n, o, i, j] = b[o] + Σ_{c in o's group,
    p, q} w[o, c, p, q] · xpad[n, c, i·s + p, j·s + q]."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin, h, wd = x.shape
    cout, per, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, cout, oh, ow))
    og = cout // groups
    for g in range(groups):
        xs = xp[:, g * per:(g + 1) * per]
        for p in range(kh):
            for q in range(kw):
                win = xs[:, :, p:p + (oh - 1) * stride + 1:stride, q:q + (ow - 1) * stride + 1:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("oc,nchw->nohw", w[g * og:(g + 1) * og, :, p, q], win)
    return out if b is None else out + b.astype(np.float64)[None, :, None, None]


def relu(v):
    return np.maximum(v, 0)


def weights(r, cout, per, k):
    w = (r.standard_normal((cout, per, k, k)) / np.sqrt(per * k * k)).astype(np.float32)
    return w, (r.standard_normal(cout) * 0.1).astype(np.float32)


# name: (batch, channels, size, kernel, groups, relu after the add, skip as the add's x)
BLOCKS = {
    "pw24_relu": (1, 24, 20, 1, 1, True, False),
    "k3_c32_relu_skip_first": (1, 32, 9, 3, 1, True, True),
    "pw48_no_relu": (1, 48, 7, 1, 1, False, False),
    "k3_c16_batch2": (2, 16, 13, 3, 1, True, False),
    "depthwise24_relu": (1, 24, 17, 3, 24, True, False),
}
_models = {}


def block_model(case, tmp_path_factory):
    """The program of a case (converted once for every path) and its reference."""
    if case not in _models:
        n, c, hw, k, groups, act, skip_first = BLOCKS[case]
        r = np.random.default_rng(len(case) + c)
        w, b = weights(r, c, c // groups, k)
        pad = (k - 1) // 2

        @mb.program(input_specs=[mb.TensorSpec(shape=(n, c, hw, hw))], opset_version=ct.target.iOS16)
        def prog(x):
            h = mb.conv(x=x, weight=w, bias=b, pad_type="custom", pad=[pad] * 4, groups=groups)
            s = mb.add(x=x, y=h) if skip_first else mb.add(x=h, y=x)
            return mb.relu(x=s) if act else s

        path = convert(prog, tmp_path_factory.mktemp(case))
        x = r.standard_normal((n, c, hw, hw)).astype(np.float32)
        want = conv_ref(x, w, b, pad=pad, groups=groups) + x
        _models[case] = (path, x, relu(want) if act else want, "conv+add+relu ×1" if act else "conv+add ×1")
    return _models[case]


@pytest.mark.parametrize("isa", PATHS)
@pytest.mark.parametrize("case", sorted(BLOCKS))
def test_residual_block_matches_numpy(case, isa, tmp_path_factory, monkeypatch):
    use_isa(monkeypatch, isa)
    path, x, want, fused = block_model(case, tmp_path_factory)
    text = inspect(path)
    assert fused in text, text
    assert "1 operations per prediction" in text, text
    got = only(predict(path, [{"x": x}])[0])
    assert_close(got, want, rtol=RTOL, atol=ATOL, what=f"{case} on {isa}")


def run(prog, tmp_path, inputs, outputs=None):
    path = convert(prog, tmp_path)
    got = predict(path, [inputs])[0]
    return inspect(path), got if outputs else only(got)


def test_output_read_twice_is_not_fused(tmp_path):
    """The convolution's value is also a program output: the add may not take it over."""
    r = np.random.default_rng(6)
    w, b = weights(r, 24, 24, 1)
    x = r.standard_normal((1, 24, 8, 8)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        h = mb.conv(x=x, weight=w, bias=b, name="h")
        return mb.relu(x=mb.add(x=h, y=x), name="y"), h

    text, got = run(prog, tmp_path, {"x": x}, outputs=True)
    assert "conv+add" not in text, text
    h = conv_ref(x, w, b)
    assert_close(got["h"], h, rtol=RTOL, atol=ATOL, what="h")
    assert_close(got["y"], relu(h + x), rtol=RTOL, atol=ATOL, what="y")


def test_add_that_broadcasts_is_not_fused(tmp_path):
    """A [1, C, 1, 1] convolution (over a global mean) added to a [1, C, H, W] tensor: the
    convolution's output is not the sum's shape, so the add stays an op of its own."""
    r = np.random.default_rng(5)
    w, b = weights(r, 32, 32, 1)
    x = r.standard_normal((1, 32, 6, 6)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        h = mb.conv(x=mb.reduce_mean(x=x, axes=[2, 3], keep_dims=True), weight=w, bias=b)
        return mb.relu(x=mb.add(x=h, y=x))

    text, got = run(prog, tmp_path, {"x": x})
    assert "conv+add" not in text, text
    want = relu(conv_ref(x.astype(np.float64).mean(axis=(2, 3), keepdims=True), w, b) + x)
    assert_close(got, want, rtol=RTOL, atol=ATOL, what="broadcast add")


def test_relu_before_the_add_stays_before_it(tmp_path):
    """conv → relu → add: the ReLU folds into the convolution; the add (which the kernel would
    apply before the activation) stays an op."""
    r = np.random.default_rng(7)
    w, b = weights(r, 24, 24, 1)
    x = r.standard_normal((1, 24, 8, 8)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.add(x=mb.relu(x=mb.conv(x=x, weight=w, bias=b)), y=x)

    text, got = run(prog, tmp_path, {"x": x})
    assert "conv+relu ×1" in text and "conv+add" not in text, text
    assert_close(got, relu(conv_ref(x, w, b)) + x, rtol=RTOL, atol=ATOL, what="relu before add")


def test_skip_computed_after_the_conv_is_not_fused(tmp_path):
    """The skip tensor is written between the convolution and the add: the convolution cannot
    read it in its epilogue, so nothing is fused and the answer stays right."""
    r = np.random.default_rng(8)
    w, b = weights(r, 24, 24, 1)
    x = r.standard_normal((1, 24, 8, 8)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        h = mb.conv(x=x, weight=w, bias=b)
        s = mb.mul(x=x, y=np.float32(2))
        return mb.relu(x=mb.add(x=h, y=s))

    text, got = run(prog, tmp_path, {"x": x})
    assert "conv+add" not in text, text
    assert_close(got, relu(conv_ref(x, w, b) + 2 * x.astype(np.float64)), rtol=RTOL, atol=ATOL, what="late skip")


@pytest.mark.parametrize("isa", PATHS)
def test_batch_norm_folds_then_the_residual_fuses(isa, tmp_path, monkeypatch):
    """conv → batch_norm → add → relu, saved without coremltools' passes (which would fold
    the batch norm themselves): the batch norm folds into the weights at load and the
    residual block then fuses; both show in inspect."""
    use_isa(monkeypatch, isa)
    r = np.random.default_rng(9)
    c = 32
    w, b = weights(r, c, c, 3)
    mean, beta = (r.standard_normal(c) * 0.1).astype(np.float32), (r.standard_normal(c) * 0.1).astype(np.float32)
    var, gamma = r.uniform(0.5, 1.5, c).astype(np.float32), r.uniform(0.5, 1.5, c).astype(np.float32)
    x = r.standard_normal((1, c, 10, 10)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        h = mb.conv(x=x, weight=w, bias=b, pad_type="custom", pad=[1, 1, 1, 1])
        h = mb.batch_norm(x=h, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=1e-3)
        return mb.relu(x=mb.add(x=h, y=x))

    text, got = run(prog, tmp_path, {"x": x})
    assert "conv+batch_norm ×1" in text and "conv+add+relu ×1" in text, text
    f64 = lambda v: v.astype(np.float64)[None, :, None, None]  # noqa: E731
    bn = (conv_ref(x, w, b, pad=1) - f64(mean)) * f64(gamma) / np.sqrt(f64(var) + 1e-3) + f64(beta)
    assert_close(got, relu(bn + x), rtol=RTOL, atol=ATOL, what=f"conv+bn+add+relu on {isa}")
