"""The neural-network kernels on every kernel path, and the C kernels built for aarch64.

Cortado's kernels come per instruction set (Sources/CGemm: cg_avx512.c, cg_avx2.c,
cg_portable.c), chosen once from the CPU's features; `CORTADO_ISA=avx512|avx2|portable`
forces a narrower path, never a wider one. The convolution and inner-product cases of
test_dense.py and test_gemm_paths.py run again here with the AVX2 path forced (both
convolution kernels: the direct one and the packed GEMM) and with the portable one (which
hands the layers to OpenBLAS), against the same NumPy references and tolerances. On a CPU
without AVX2 the forced path falls back to the portable one and the cases still check the
results. The Swift unit tests (CortadoGemmTests, CortadoDirectConvTests) run each path's
kernels directly against naive references.

The kernels and the plugin ABI are also compiled for aarch64 with Debian's cross compiler
(gcc-aarch64-linux-gnu, installed by scripts/setup.sh) here; test_neon_kernels.py runs the
NEON path's kernels under qemu-aarch64.
"""
import json
import shutil
import subprocess

import numpy as np
import pytest

import test_dense as dense
import test_gemm_paths as gemm_paths
from nnharness import REPO, array_json, assert_close, builder, cortado_command, cpu_best, predict, rng, save

ORDER = ["portable", "avx2", "avx512"]


def use_isa(monkeypatch, isa, conv=None):
    monkeypatch.setenv("CORTADO_ISA", isa)
    monkeypatch.delenv("CORTADO_GEMM", raising=False)
    if conv:
        monkeypatch.setenv("CORTADO_CONV", conv)
    else:
        monkeypatch.delenv("CORTADO_CONV", raising=False)


# ---------------------------------------------------------------- the path in use

def report_of_small_model(tmp_path):
    """`cortado report --json` of a one-layer model, in this process's environment."""
    b = builder([("x", (8,))], [("y", (4,))])
    b.add_inner_product("fc", rng(3).normal(size=(4, 8)), None, 8, 4, has_bias=False, input_name="x", output_name="y")
    model = save(b, tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"x": array_json(rng(4).normal(size=8))}) + "\n")
    done = subprocess.run(cortado_command() + ["report", str(model), "--input", str(rows), "--iterations", "2", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("isa", ORDER)
def test_report_names_the_forced_path(isa, tmp_path, monkeypatch):
    """`cortado report --json` says which path ran: the one asked for, or the CPU's widest
    when that is narrower."""
    monkeypatch.setenv("CORTADO_ISA", isa)
    got = report_of_small_model(tmp_path)
    want = ORDER[min(ORDER.index(isa), ORDER.index(cpu_best()))]
    assert got["kernelPath"] == want
    assert got["cpu"]


def test_an_avx2_host_is_detected_from_cpuid(tmp_path, monkeypatch):
    """On a CPU that can fault `cpuid` (flag cpuid_fault), bench/avx2_host.c, preloaded, hides
    AVX-512 as an AVX2-only host (AMD Zen 3) lacks it: Cortado then picks the avx2 path from the
    CPU's features alone, with no CORTADO_ISA, and a convolution with its folded steps still
    agrees with NumPy. `bench/nn_vs_onnxruntime.py --avx2-host` times every engine so."""
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    if "avx512f" not in flags or "cpuid_fault" not in flags:
        pytest.skip("needs an AVX-512 CPU that can fault cpuid")
    library = tmp_path / "avx2_host.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(REPO / "bench" / "avx2_host.c")], check=True)
    monkeypatch.delenv("CORTADO_ISA", raising=False)
    monkeypatch.setenv("LD_PRELOAD", str(library))
    assert report_of_small_model(tmp_path)["kernelPath"] == "avx2"
    gemm_paths.test_small_convolution_with_folded_steps("direct", 40, 13, 70, 3, 1, tmp_path, monkeypatch)


# ---------------------------------------------------------------- AVX2 forced

@pytest.mark.parametrize("conv", ["direct", "gemm"])
@pytest.mark.parametrize("case", sorted(dense.CONV_CASES))
def test_convolution_on_avx2(case, conv, tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2", conv)
    dense.test_convolution(case, tmp_path)


@pytest.mark.parametrize("conv", ["direct", "gemm"])
@pytest.mark.parametrize("cin,hw,cout,k,stride", [(40, 13, 70, 3, 1), (3, 9, 33, 3, 2), (300, 13, 125, 1, 1)])
def test_small_convolution_with_folded_steps_on_avx2(conv, cin, hw, cout, k, stride, tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2")
    gemm_paths.test_small_convolution_with_folded_steps(conv, cin, hw, cout, k, stride, tmp_path, monkeypatch)


@pytest.mark.parametrize("shape", [(3, 101, 99, 6), (16, 30, 64, 20), (5, 12, 11, 7)])
def test_conv_then_max_pool_on_avx2(shape, tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2", "direct")
    dense.test_conv_folds_following_max_pool(*shape, tmp_path)


def test_fused_conv_bn_leaky_on_avx2(tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2")
    dense.test_fused_conv_bn_leaky_matches_unfused(tmp_path)


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_in_place_convolution_on_avx2(padding, tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2")
    gemm_paths.test_in_place_convolution_dilated_and_strided("default", padding, tmp_path, monkeypatch)


def test_banded_convolution_on_avx2(tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2")
    gemm_paths.test_banded_convolution_with_folded_steps("default", tmp_path, monkeypatch)


@pytest.mark.parametrize("rows", [1, 7, 256])
def test_inner_product_on_avx2(rows, tmp_path, monkeypatch):
    use_isa(monkeypatch, "avx2")
    dense.test_inner_product(rows, tmp_path)


# ---------------------------------------------------------------- portable forced

@pytest.mark.parametrize("case", ["3x3_valid", "5x3_stride2", "depthwise", "pointwise_large", "banded_stride2"])
def test_convolution_on_portable(case, tmp_path, monkeypatch):
    use_isa(monkeypatch, "portable")
    dense.test_convolution(case, tmp_path)


@pytest.mark.parametrize("rows", [1, 256])
def test_inner_product_on_portable(rows, tmp_path, monkeypatch):
    use_isa(monkeypatch, "portable")
    dense.test_inner_product(rows, tmp_path)


# ---------------------------------------------------------------- depthwise 3×3 on every path

DEPTHWISE_CASES = {
    # name: (channels, h, w, stride, border, activation)
    "same_s1_relu": (24, 17, 13, (1, 1), "same", "RELU"),
    "same_s2_leaky": (16, 20, 21, (2, 2), "same", "LEAKYRELU"),
    "valid_unpadded": (7, 9, 30, (1, 1), "valid", None),
    "stride_2x1_sigmoid": (5, 11, 12, (2, 1), "same", "SIGMOID"),
}


@pytest.mark.parametrize("isa", ["default", "avx2", "portable"])
@pytest.mark.parametrize("case", sorted(DEPTHWISE_CASES))
def test_depthwise_convolution(case, isa, tmp_path, monkeypatch):
    """Depthwise 3×3 (groups = channels) with a folded bias, batch norm and activation: the
    depthwise kernel on the vector paths (the sigmoid is no kernel epilogue: a pass of its own
    after the kernel), the grouped GEMM path on portable, against NumPy."""
    if isa == "default":
        monkeypatch.delenv("CORTADO_ISA", raising=False)
    else:
        monkeypatch.setenv("CORTADO_ISA", isa)
    c, h, w, stride, border, act = DEPTHWISE_CASES[case]
    r = rng(len(case))
    w_spec = r.normal(size=(c, 1, 3, 3)).astype(np.float32)
    bias = r.normal(size=c).astype(np.float32)
    gamma, beta, mean = r.normal(size=c), r.normal(size=c), r.normal(size=c)
    var = r.uniform(0.5, 2, size=c)
    x = r.normal(size=(c, h, w))
    pads = (dense.same_pads(h, 3, stride[0]) + dense.same_pads(w, 3, stride[1])) if border == "same" else (0, 0, 0, 0)
    conv = dense.conv_ref(x, w_spec.astype(np.float64), bias, stride=stride, pads=pads, groups=c)
    bn = gamma[:, None, None] * (conv - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) + beta[:, None, None]
    expected = {"RELU": np.maximum(bn, 0), "LEAKYRELU": np.where(bn >= 0, bn, 0.1 * bn),
                "SIGMOID": 1 / (1 + np.exp(-bn)), None: bn}[act]
    b = builder([("x", (c, h, w))], [("y", expected.shape)])
    b.add_convolution("dw", 1, c, 3, 3, stride[0], stride[1], border, c, W=w_spec.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="x", output_name="c")
    b.add_batchnorm("bn", c, gamma, beta, mean, var, input_name="c", output_name="n" if act else "y")
    if act:
        b.add_activation("act", act, "n", "y", params=[0.1] if act == "LEAKYRELU" else None)
    out = predict(b, {"x": x}, tmp_path)
    assert_close(out["y"], expected, **dense.GEMM_TOL, what=f"{case} on {isa}")


# ---------------------------------------------------------------- aarch64 (compile only)

CROSS = "aarch64-linux-gnu-gcc"


def cross():
    cc = shutil.which(CROSS)
    assert cc, f"{CROSS} is missing: scripts/setup.sh (make setup) installs gcc-aarch64-linux-gnu"
    return cc


def elf_machine(path):
    out = subprocess.run(["readelf", "-h", str(path)], capture_output=True, text=True, check=True).stdout
    return next(l.split(":", 1)[1].strip() for l in out.splitlines() if l.strip().startswith("Machine:"))


def defined_symbols(path):
    out = subprocess.run(["aarch64-linux-gnu-nm", "-D", "--defined-only", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return {l.split()[-1] for l in out.splitlines() if l.strip()}


def test_kernels_build_for_aarch64(tmp_path):
    """Every C file of Sources/CGemm compiles for aarch64 with warnings as errors (the x86
    paths compile to nothing there) and links into a shared library whose public functions
    are all defined, with the NEON path's table."""
    cc = cross()
    src = REPO / "Sources" / "CGemm"
    objects = []
    for c in sorted(src.glob("*.c")):
        o = tmp_path / (c.stem + ".o")
        done = subprocess.run([cc, "-std=gnu11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
                               "-I", str(src / "include"), "-c", str(c), "-o", str(o)], capture_output=True, text=True)
        assert done.returncode == 0, f"{c.name}: {done.stderr}"
        objects.append(str(o))
    lib = tmp_path / "libcgemm.so"
    done = subprocess.run([cc, "-shared", "-Wl,--no-undefined", "-o", str(lib), *objects, "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert elf_machine(lib) == "AArch64"
    symbols = defined_symbols(lib)
    for name in ["cg_isa", "cg_isa_best", "cg_set_isa", "cg_isa_name", "cg_available", "cg_gemm", "cg_gemm_rows", "cg_gemv",
                 "cg_pack_a", "cg_pack_b", "cg_pack_conv", "cg_conv_rows", "cg_direct_conv", "cg_max_pool_2x2_row"]:
        assert name in symbols, f"{name} is not defined in the aarch64 build"
    assert not any("avx" in s for s in symbols), sorted(s for s in symbols if "avx" in s)
    assert "cg_kernels_neon" in symbols, "the NEON path (cg_neon.c) is missing from the aarch64 build"


def test_plugin_abi_builds_for_aarch64(tmp_path):
    """The plugin ABI header and the example C plugin (Plugins/Swish) build for aarch64 as
    Package.swift builds them for the host: hidden visibility, one exported entry point."""
    cc = cross()
    lib = tmp_path / "libswish.so"
    done = subprocess.run([cc, "-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Werror",
                           "-I", str(REPO / "Plugins" / "include"), str(REPO / "Plugins" / "Swish" / "swish.c"), "-o", str(lib),
                           "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert elf_machine(lib) == "AArch64"
    assert "cortado_plugin_entry" in defined_symbols(lib)
