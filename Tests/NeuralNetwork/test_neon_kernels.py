"""The NEON kernel path (Sources/CGemm/cg_neon.c) run for real, under qemu-aarch64.

There is no aarch64 host here, so the C kernels and neon/harness.c are cross-compiled for
aarch64 (by gcc-aarch64-linux-gnu, and by the Swift toolchain's clang as SwiftPM would build
them there; statically linked) and run under qemu-user's qemu-aarch64; the cross compiler and
qemu come from scripts/setup.sh. The harness calls CGemm's public entry points (cg_gemm and
cg_gemm_rows in every operand form, cg_gemv, cg_conv_rows, cg_pack_conv + cg_gemm,
cg_direct_conv with residuals and pooling, cg_depthwise3x3, cg_max_pool_2x2_row) with odd sizes,
edge tiles, accumulate on and off and every fused epilogue, once on the portable path and once
on the NEON path, and checks both against naive double-precision references and against each
other: within 1e-5 of the output's scale (its largest |reference| value), the max pool and the
activations' −0 and NaN bit for bit. qemu checks what the kernels compute, not how fast they run:
no figure here says anything about speed on Arm hardware.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
CGEMM = REPO / "Sources" / "CGemm"
HARNESS = Path(__file__).resolve().parent / "neon" / "harness.c"
CROSS = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"


def compile_command(compiler, out):
    """The command that builds the harness for aarch64 with every C file of Sources/CGemm,
    warnings as errors: Debian's cross gcc, or the Swift toolchain's clang (the compiler
    SwiftPM builds CGemm with on an aarch64 host) at the Makefile's -O3, linked by the cross gcc."""
    sources = [*map(str, sorted(CGEMM.glob("*.c"))), str(HARNESS)]
    flags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror", "-I", str(CGEMM / "include"), "-I", str(CGEMM)]
    if compiler == "gcc":
        return [[shutil.which(CROSS), "-O2", "-static", *flags, *sources, "-o", str(out), "-lm"]]
    clang = shutil.which("clang")
    if not clang:
        pytest.skip("clang is missing (the Swift toolchain brings it)")
    sysroot = "/usr/aarch64-linux-gnu"
    objects = [str(out.parent / (Path(s).stem + ".o")) for s in sources]
    return [[clang, "--target=aarch64-linux-gnu", f"--sysroot={sysroot}", "-isystem", f"{sysroot}/include", "-O3", *flags, "-c",
             s, "-o", o] for s, o in zip(sources, objects)] + [[shutil.which(CROSS), "-static", *objects, "-o", str(out), "-lm"]]


@pytest.fixture(scope="module", params=["gcc", "clang"])
def harness(request, tmp_path_factory):
    """The harness built for aarch64 by one compiler."""
    assert shutil.which(CROSS), f"{CROSS} is missing: scripts/setup.sh (make setup) installs gcc-aarch64-linux-gnu"
    if not shutil.which(QEMU):
        pytest.skip(f"{QEMU} is missing, so nothing can run aarch64 code here: scripts/setup.sh (make setup) installs qemu-user")
    out = tmp_path_factory.mktemp(f"neon-{request.param}") / "harness"
    for command in compile_command(request.param, out):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(command[:2])}: {done.stderr}"
    return out


def run(harness, *args, isa=None):
    env = {k: v for k, v in os.environ.items() if k != "CORTADO_ISA"}
    if isa is not None:
        env["CORTADO_ISA"] = isa
    return subprocess.run([QEMU, str(harness), *args], capture_output=True, text=True, env=env, timeout=600)


def test_neon_kernels_match_portable_and_references(harness):
    done = run(harness)
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"neon harness: (\d+) checks, (\d+) failures", done.stdout)
    assert found, done.stdout
    checks, failures = map(int, found.groups())
    assert failures == 0 and "FAIL" not in done.stdout, done.stdout
    assert checks >= 400, f"only {checks} checks ran"


@pytest.mark.parametrize("isa,want", [(None, "neon 1"), ("neon", "neon 1"), ("portable", "portable 0"), ("PORTABLE", "portable 0"),
                                      ("avx2", "neon 1"), ("avx512", "neon 1")])
def test_path_chosen_on_aarch64(harness, isa, want):
    """cg_isa() on aarch64: NEON unless CORTADO_ISA asks for portable; an x86 path is not run
    there (the widest path instead), and cg_available() says the kernels beat the fallback."""
    done = run(harness, "--isa", isa=isa)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == want


def test_unknown_path_is_said_once(harness):
    done = run(harness, "--isa", isa="sve2")
    assert done.returncode == 0
    assert done.stdout.strip() == "neon 1"
    assert done.stderr.count("CORTADO_ISA=sve2 is not avx512, avx2, neon or portable; using neon") == 1
