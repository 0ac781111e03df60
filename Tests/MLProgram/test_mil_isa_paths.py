"""ML Program convolutions and linear layers on every kernel path (`CORTADO_ISA`), and depthwise
3×3 convolutions on the depthwise kernel.

The 2-D convolution cases of test_spatial_ops.py run again with the AVX2 path forced (the
direct kernel and the GEMM on ymm registers) and with the portable one (OpenBLAS), against the
same NumPy references; depthwise convolutions (groups = channels, strides 1 and 2, bias, a
folded ReLU) run on the default path, AVX2 and portable; a linear layer large enough for
several GEMM panels runs on each path. On a CPU without AVX2 the forced path falls back to
the portable one and the cases still check the results. Tolerances as test_spatial_ops.py's
for sums of products (rtol=1e-4, atol=1e-4). The interpreter's kernels are what these check, so
the module runs with `CORTADO_MIL_LOWERING=0` (lowered convolutions: test_program_lowering.py)."""
import numpy as np
import pytest

import test_spatial_ops as spatial
from milharness import assert_close, ct, mb, only, rng

ISAS = ["avx2", "portable"]


@pytest.fixture(autouse=True)
def interpreter_only(monkeypatch):
    monkeypatch.setenv("CORTADO_MIL_LOWERING", "0")
CASES_2D = sorted(c for c in spatial.CONV_CASES if c.startswith("2d"))


def use_isa(monkeypatch, isa):
    if isa == "default":
        monkeypatch.delenv("CORTADO_ISA", raising=False)
    else:
        monkeypatch.setenv("CORTADO_ISA", isa)


@pytest.mark.parametrize("isa,case", [("avx2", c) for c in CASES_2D] + [("portable", "2d_valid"), ("portable", "2d_same_stride2")])
def test_conv_on_path(case, isa, tmp_path, monkeypatch):
    use_isa(monkeypatch, isa)
    spatial.test_conv(case, True, tmp_path)


DEPTHWISE = {
    # name: (x shape, strides, pad_type)
    "s1_same": ((1, 24, 17, 13), [1, 1], "same"),
    "s2_same_batch2": ((2, 16, 20, 21), [2, 2], "same"),
    "s1_valid": ((1, 7, 9, 30), [1, 1], "valid"),
}


@pytest.mark.parametrize("isa", ["default"] + ISAS)
@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_depthwise_conv_relu(case, isa, tmp_path, monkeypatch):
    use_isa(monkeypatch, isa)
    xs, strides, pad_type = DEPTHWISE[case]
    c = xs[1]
    r = rng(21)
    x = r.standard_normal(xs).astype(np.float32)
    w = r.standard_normal((c, 1, 3, 3)).astype(np.float32)
    b = r.standard_normal(c).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=xs)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.relu(x=mb.conv(x=x, weight=w, bias=b, strides=strides, pad_type=pad_type, groups=c))

    before, after = spatial.window_pads(pad_type, xs[2:], [3, 3], strides, [1, 1])
    ref = np.maximum(spatial.conv_ref(x, w, b, strides, [1, 1], c, before, after), 0)
    got = only(spatial.run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"{case} on {isa}")


LINEAR = {
    # name: (rows, inputs, outputs, bias, relu). The bias and the ReLU are the GEMM's epilogue;
    # 4 rows × 600 outputs split over the workers by columns (the bias from each share's first).
    "rows37_relu": (37, 300, 70, True, True),
    "rows4_wide_relu": (4, 300, 600, True, True),
    "rows13_no_bias_relu": (13, 520, 45, False, True),
    "rows25_bias_only": (25, 33, 50, True, False),
}


@pytest.mark.parametrize("isa", ["default"] + ISAS)
@pytest.mark.parametrize("case", sorted(LINEAR))
def test_linear_relu_on_path(case, isa, tmp_path, monkeypatch):
    use_isa(monkeypatch, isa)
    rows, din, dout, with_bias, relu = LINEAR[case]
    r = rng(22)
    w = (r.standard_normal((dout, din)) / np.sqrt(din)).astype(np.float32)
    b = r.standard_normal(dout).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(rows, din))], opset_version=ct.target.iOS16)
    def prog(x):
        y = mb.linear(x=x, weight=w, bias=b) if with_bias else mb.linear(x=x, weight=w)
        return mb.relu(x=y) if relu else y

    x = r.standard_normal((rows, din)).astype(np.float32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + (b if with_bias else 0)
    if relu:
        ref = np.maximum(ref, 0)
    got = only(spatial.run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-4, atol=1e-4, what=f"{case} on {isa}")
