"""Winograd F(4×4, 3×3) and F(2×2, 3×3) convolution and the convolution algorithm chosen by measurement.

3×3, stride-1, ungrouped convolutions may run as Winograd (Sources/CGemm/cortado_winograd.c,
F(4×4, 3×3), algorithm `winograd`; cortado_winograd2.c, F(2×2, 3×3), algorithm `winograd2`);
which algorithm a layer runs (GEMM, direct, either Winograd) is measured when its first plan is made,
or forced with CORTADO_CONV_ALGO. Each case here is a NeuralNetwork model built with
coremltools' builder: odd map sizes (not multiples of the 4×4 tile, 1×1 maps, rows of more than 16
tiles), channel counts 1, 3, 8, 17, 32, 64, every padding mode (valid with asymmetric borders, same in both asymmetry
modes), bias, folded batch norm and activations, a folded residual add and a folded 2×2 max
pooling. Each is checked against a float64 NumPy reference written from the layer definitions,
rtol 1e-4 and atol 1e-4 × the largest reference value, with the algorithm forced to each Winograd on
every kernel path the CPU has (CORTADO_ISA; the portable path has no packed kernels, so the
layers go to OpenBLAS there and the answers must still agree) and left to the measurement.
`cortado inspect` shows which algorithm a layer runs, so a forced case cannot pass by not
running Winograd.
"""
import importlib.util
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location("nn_winograd_harness", Path(__file__).resolve().parent / "nnharness.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

from test_isa_paths import ORDER, cpu_best  # noqa: E402  (the kernel paths, as cg_isa_best picks them)


PATHS = ORDER[:ORDER.index(cpu_best()) + 1]


def conv3x3(x, w, bias, pads):
    """Cross-correlation of x [C, H, W] with w [M, C, 3, 3], stride 1, zero borders
    pads = (top, bottom, left, right), in float64."""
    c, h, wd = x.shape
    top, bottom, left, right = pads
    xp = np.zeros((c, h + top + bottom, wd + left + right))
    xp[:, top:top + h, left:left + wd] = x
    oh, ow = xp.shape[1] - 2, xp.shape[2] - 2
    y = np.zeros((w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("mc,chw->mhw", w[:, :, i, j], xp[:, i:i + oh, j:j + ow])
    if bias is not None:
        y += bias[:, None, None]
    return y


# name: (cin, cout, h, w, padding, extras)
#   padding: ("valid", top, bottom, left, right) or ("same", top_left_heavy)
#   extras: subset of {"bias", "relu", "leaky", "sigmoid", "bn", "residual", "pool"}
CASES = {
    "c1_5x6_same": (1, 1, 5, 6, ("same", False), set()),
    "c3_7x9_valid_bias": (3, 17, 7, 9, ("valid", 0, 0, 0, 0), {"bias"}),
    "c17_10x11_asym_relu": (17, 17, 10, 11, ("valid", 2, 1, 0, 2), {"bias", "relu"}),
    "c17_1x1_map": (17, 33, 1, 1, ("same", False), {"bias"}),
    "c64_13x13_bn_leaky": (64, 64, 13, 13, ("same", True), {"bn", "leaky"}),
    "c32_9x10_residual": (32, 32, 9, 10, ("same", False), {"bias", "residual", "relu"}),
    "c16_14x13_pool": (16, 32, 14, 13, ("same", False), {"bias", "pool"}),
    "c64_26x26_measured": (64, 64, 26, 26, ("same", False), {"bias", "relu"}),
    # More than one group of 8 blocks of 16 output channels (F(2×2)'s units), the last partial.
    "c40_150_13x13_groups": (40, 150, 13, 13, ("same", False), {"bias", "relu"}),
    # Rows of more than 16 tiles of 4×4 (F(4×4)'s input transform takes 16 to a register, the
    # last group partial), bands of tiles that end inside a row of tiles, the residual added as
    # those rows are finished, and a second block of 16 output channels with 8 lanes.
    "c32_70x70_bands_residual": (32, 32, 70, 70, ("same", False), {"bias", "residual", "relu"}),
    "c8_24_67x66_asym_bn": (8, 24, 67, 66, ("valid", 1, 2, 2, 0), {"bn", "relu"}),
    # The 2×2 max pooling folded into the finishing of each row of tiles (the full-size output
    # is never written): odd map sizes (the last row and column are dropped; F(4×4)'s last row
    # of tiles gives one pooled row), a last block of 8 lanes, batch norm (negative scales, so
    # the epilogue must come before the maximum) and leaky ReLU.
    "c20_40_15x17_pool_bn_leaky": (20, 40, 15, 17, ("same", True), {"bn", "leaky", "pool"}),
    # Pooled with asymmetric borders: a 37 × 42 output, F(4×4) bands that end inside a row of
    # tiles (the pooled runs are cut there), several F(2×2) bands of whole rows of tiles.
    "c24_40_38x42_pool_asym": (24, 40, 38, 42, ("valid", 0, 1, 2, 1), {"bias", "relu", "pool"}),
    # A step the kernels do not fold (sigmoid): the pooling runs on the whole output afterwards.
    "c16_24_11x14_pool_sigmoid": (16, 24, 11, 14, ("same", False), {"bias", "sigmoid", "pool"}),
    # F(2×2)'s products in pieces of consecutive tiles that cross rows of tiles (7 tiles a row
    # on a 13 × 13 map, pieces of 5 and 6 on AVX2), 5 blocks of output channels.
    "c96_80_13x13_pieces": (96, 80, 13, 13, ("same", False), {"bias", "leaky"}),
    # More than 384 input channels: F(4×4)'s products run chunk by chunk of 48 channels (the last
    # one partial), all the pieces of tiles on each chunk; two blocks of output channels, the
    # second of 8 lanes.
    "c400_24_13x11_chunks": (400, 24, 13, 11, ("same", False), {"bias", "relu"}),
}


def build(case):
    """The model and its float64 reference output for one case."""
    cin, cout, h, w, padding, extras = CASES[case]
    r = harness.rng(sum(map(ord, case)))
    weights = (r.normal(size=(cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    bias = r.normal(size=cout).astype(np.float32) if "bias" in extras else None
    x = r.normal(size=(cin, h, w)).astype(np.float32)
    if padding[0] == "valid":
        pads = padding[1:]
    else:
        pads = (1, 1, 1, 1)
    y = conv3x3(x.astype(np.float64), weights.astype(np.float64), None if bias is None else bias.astype(np.float64), pads)
    oh, ow = y.shape[1:]
    out_shape = (cout, oh // 2, ow // 2) if "pool" in extras else (cout, oh, ow)
    b = harness.builder([("x", (cin, h, w))], [("y", out_shape)])
    kwargs = dict(W=weights.transpose(2, 3, 1, 0), b=bias, has_bias=bias is not None, input_name="x", output_name="c")
    if padding[0] == "valid":
        b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "valid", 1, padding_top=pads[0], padding_bottom=pads[1],
                          padding_left=pads[2], padding_right=pads[3], **kwargs)
    else:
        b.add_convolution("conv", cin, cout, 3, 3, 1, 1, "same", 1,
                          same_padding_asymmetry_mode="TOP_LEFT_HEAVY" if padding[1] else "BOTTOM_RIGHT_HEAVY", **kwargs)
    last = "c"
    if "bn" in extras:
        gamma, beta, mean = r.normal(size=cout), r.normal(size=cout), r.normal(size=cout)
        var = r.uniform(0.5, 2, size=cout)
        b.add_batchnorm("bn", cout, gamma, beta, mean, var, input_name=last, output_name="n")
        y = gamma[:, None, None] * (y - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) + beta[:, None, None]
        last = "n"
    if "residual" in extras:
        b.add_elementwise("add", [last, "x"], "s", "ADD")
        y = y + x.astype(np.float64)
        last = "s"
    if "relu" in extras:
        b.add_activation("act", "RELU", last, "a")
        y = np.maximum(y, 0)
        last = "a"
    if "leaky" in extras:
        b.add_activation("act", "LEAKYRELU", last, "a", params=[0.1])
        y = np.where(y < 0, 0.1 * y, y)
        last = "a"
    if "sigmoid" in extras:
        b.add_activation("act", "SIGMOID", last, "a")
        y = 1 / (1 + np.exp(-y))
        last = "a"
    if "pool" in extras:
        b.add_pooling("pool", 2, 2, 2, 2, "MAX", "VALID", last, "p")
        y = y[:, :oh // 2 * 2, :ow // 2 * 2].reshape(cout, oh // 2, 2, ow // 2, 2).max(axis=(2, 4))
        last = "p"
    # The last layer writes y.
    spec = b.spec
    spec.neuralNetwork.layers[-1].output[0] = "y"
    return b, x, y


def env_for(isa, algo):
    env = dict(os.environ, CORTADO_ISA=isa, CORTADO_CONV_ALGO=algo)
    for name in ("CORTADO_GEMM", "CORTADO_CONV"):
        env.pop(name, None)
    return env


def run(case, isa, algo, tmp_path, monkeypatch):
    b, x, expected = build(case)
    for name, value in env_for(isa, algo).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CORTADO_GEMM", raising=False)
    monkeypatch.delenv("CORTADO_CONV", raising=False)
    out = harness.predict(b, {"x": x}, tmp_path)
    scale = float(np.max(np.abs(expected))) or 1.0
    harness.assert_close(out["y"], expected, rtol=1e-4, atol=1e-4 * scale, what=f"{case} ({algo} on {isa})")
    return tmp_path / "model.mlmodel"


def conv_line(model, isa, algo):
    done = subprocess.run(harness.cortado_command() + ["inspect", str(model)], capture_output=True, text=True, timeout=120,
                          env=env_for(isa, algo))
    assert done.returncode == 0, done.stderr
    lines = [l for l in done.stdout.splitlines() if "convolution 3×3" in l]
    assert lines, done.stdout
    return lines[0]


@pytest.mark.parametrize("algo", ["winograd", "winograd2"])
@pytest.mark.parametrize("isa", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_winograd_forced(case, isa, algo, tmp_path, monkeypatch):
    """Winograd forced, F(4×4, 3×3) (`winograd`) or F(2×2, 3×3) (`winograd2`), on each kernel
    path: the reference's answers, and inspect says so."""
    model = run(case, isa, algo, tmp_path, monkeypatch)
    if isa != "portable":
        assert f"algorithm {algo} (forced)" in conv_line(model, isa, algo)


@pytest.mark.parametrize("case", sorted(CASES))
def test_algorithm_chosen_by_measurement(case, tmp_path, monkeypatch):
    """Left to the measurement (auto), on the CPU's widest path: the reference's answers, and
    inspect names the algorithm chosen and how (large layers are measured; small ones take the
    fixed rule)."""
    isa = PATHS[-1]
    model = run(case, isa, "auto", tmp_path, monkeypatch)
    if isa != "portable":
        line = conv_line(model, isa, "auto")
        assert "algorithm " in line, line
        cin, cout, h, w, _, _ = CASES[case]
        if cin * cout * 9 * h * w >= 1 << 24:
            assert "(measured" in line, line
        else:
            assert "(rule)" in line, line


@pytest.mark.parametrize("algo", ["gemm", "direct"])
def test_other_algorithms_forced(algo, tmp_path, monkeypatch):
    """The other two algorithms forced on a Winograd-shaped layer agree with the reference and
    inspect names them."""
    isa = PATHS[-1]
    model = run("c17_10x11_asym_relu", isa, algo, tmp_path, monkeypatch)
    if isa != "portable":
        assert f"algorithm {algo} (forced)" in conv_line(model, isa, algo)


def test_compiled_form_keeps_the_choice(tmp_path, monkeypatch):
    """`cortado compile` stores each measured choice (section nn.conv-algorithms): the compiled
    model runs it without timing and answers as the reference. A compiled file without the
    section (here: compiled with the algorithm forced, so nothing was measured; as files
    written before the section existed) still loads and measures."""
    isa = PATHS[-1]
    if isa == "portable":
        pytest.skip("no packed kernels on the portable path")
    b, x, expected = build("c64_26x26_measured")
    model = harness.save(b, tmp_path)
    compiled, plain = tmp_path / "model.cortado", tmp_path / "forced.cortado"
    for out, algo in ((compiled, "auto"), (plain, "gemm")):
        done = subprocess.run(harness.cortado_command() + ["compile", str(model), str(out)], capture_output=True, text=True,
                              timeout=300, env=env_for(isa, algo))
        assert done.returncode == 0, done.stderr
    assert b"nn.conv-algorithms" in compiled.read_bytes()
    assert b"nn.conv-algorithms" not in plain.read_bytes()
    assert "(stored by cortado compile)" in conv_line(compiled, isa, "auto")
    assert "(measured" in conv_line(plain, isa, "auto")
    for name, value in env_for(isa, "auto").items():
        monkeypatch.setenv(name, value)
    rows = harness.run_cortado(compiled, [{"x": x}])
    scale = float(np.max(np.abs(expected)))
    harness.assert_close(rows[0]["y"], expected, rtol=1e-4, atol=1e-4 * scale, what="compiled model")
