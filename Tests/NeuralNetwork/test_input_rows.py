"""Network inputs read where the request holds them: float32 rows into an inner product.

When a network input's only readers are inner products (as their input), a batch of float32
arrays is not copied into the workspace: the GEMM reads each request's array through a row
pointer (`cg_gemm_rows`). Rows of another data type, or a mix, are converted and copied in as
before; an input another kind of layer also reads, or that is also an output, is always
copied. `cortado inspect` names the inputs read in place (only with Cortado's own GEMM on the
AVX-512 or AVX2 path: on the portable or NEON path, or with CORTADO_GEMM=openblas, every input is
copied).

Each case checks every row against NumPy (test_dense's GEMM_TOL), for batches of 1 (copied:
under 4096 floats a copy is cheaper than the row pointers), 13 (a partial 12-row panel) and
30 rows (split over both threads), and checks the float32 and the DOUBLE runs of the same
values against each other to 1e-6.
"""
import os
import subprocess

import numpy as np
import pytest
from coremltools.proto import FeatureTypes_pb2 as ft

import test_dense as dense
from nnharness import assert_close, builder, cortado_command, cpu_best, predict, rng, save

# The path Cortado takes here (CORTADO_ISA can only narrow it) has the in-place row kernels.
IN_PLACE = cpu_best() in ("avx2", "avx512") and os.environ.get("CORTADO_ISA", "").lower() not in ("portable", "neon")


def float32_input(b):
    for f in b.spec.description.input:
        f.type.multiArrayType.dataType = ft.ArrayFeatureType.FLOAT32


def mlp(k=400, hidden=24, out=5, seed=1):
    """k → hidden (ReLU) → out, FLOAT32 input declared."""
    r = rng(seed)
    w0 = (r.normal(size=(hidden, k)) / np.sqrt(k)).astype(np.float32)
    b0 = r.normal(size=hidden).astype(np.float32)
    w1 = (r.normal(size=(out, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = builder([("x", (k,))], [("y", (out,))])
    b.add_inner_product("fc0", W=w0, b=b0, input_channels=k, output_channels=hidden, has_bias=True, input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "r")
    b.add_inner_product("fc1", W=w1, b=None, input_channels=hidden, output_channels=out, has_bias=False, input_name="r", output_name="y")
    float32_input(b)
    return b, lambda x: w1.astype(np.float64) @ np.maximum(w0.astype(np.float64) @ x + b0, 0)


def inspect(spec, tmp_path, env=None):
    path = save(spec, tmp_path, "inspected")
    done = subprocess.run(cortado_command() + ["inspect", str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows_of(xs, data_type):
    return [{"x": {"shape": list(x.shape), "dataType": data_type, "data": x.reshape(-1).tolist()}} for x in xs]


@pytest.mark.parametrize("count", [1, 13, 30])
def test_float32_rows_read_in_place_match_numpy(count, tmp_path):
    spec, reference = mlp()
    r = rng(20 + count)
    # Values exact in float32, so the float32 and DOUBLE runs see the same inputs.
    xs = [r.normal(size=400).astype(np.float32).astype(np.float64) for _ in range(count)]
    out32 = predict(spec, rows_of(xs, "FLOAT32"), tmp_path)
    out64 = predict(spec, rows_of(xs, "DOUBLE"), tmp_path)
    # A mix: every other row DOUBLE, so the batch is copied and converted.
    mixed = [row64 if i % 2 else row32 for i, (row32, row64) in enumerate(zip(rows_of(xs, "FLOAT32"), rows_of(xs, "DOUBLE")))]
    out_mixed = predict(spec, mixed, tmp_path)
    for i, x in enumerate(xs):
        y = reference(x)
        for what, out in (("float32", out32), ("double", out64), ("mixed", out_mixed)):
            assert_close(out[i]["y"], y, **dense.GEMM_TOL, what=f"{what} rows, row {i}")
        assert_close(out32[i]["y"], out64[i]["y"], rtol=1e-6, atol=1e-6, what=f"row {i}, float32 vs double rows")
    assert ("read where the request holds them (float32 arrays, not copied): x" in inspect(spec, tmp_path)) == IN_PLACE


def test_image_shaped_input_read_in_place(tmp_path):
    """A [C, H, W] input flattened by the inner product: each request row is one image."""
    r = rng(5)
    w = (r.normal(size=(7, 16 * 6 * 6)) / 24).astype(np.float32)
    bias = r.normal(size=7).astype(np.float32)
    b = builder([("x", (16, 6, 6))], [("y", (7,))])
    b.add_inner_product("fc", W=w, b=bias, input_channels=576, output_channels=7, has_bias=True, input_name="x", output_name="y")
    float32_input(b)
    xs = [r.normal(size=(16, 6, 6)).astype(np.float32).astype(np.float64) for _ in range(17)]
    out = predict(b, rows_of(xs, "FLOAT32"), tmp_path)
    for i, x in enumerate(xs):
        assert_close(out[i]["y"], w.astype(np.float64) @ x.reshape(-1) + bias, **dense.GEMM_TOL, what=f"row {i}")
    assert ("not copied): x" in inspect(b, tmp_path)) == IN_PLACE


def test_input_with_another_reader_is_copied(tmp_path):
    """x feeds an inner product and a ReLU that is an output: the blob must hold x."""
    r = rng(6)
    w = (r.normal(size=(6, 10)) / 3).astype(np.float32)
    b = builder([("x", (10,))], [("y", (6,)), ("rx", (10,))])
    b.add_inner_product("fc", W=w, b=None, input_channels=10, output_channels=6, has_bias=False, input_name="x", output_name="y")
    b.add_activation("relu", "RELU", "x", "rx")
    float32_input(b)
    xs = [r.normal(size=10).astype(np.float32).astype(np.float64) for _ in range(14)]
    out = predict(b, rows_of(xs, "FLOAT32"), tmp_path)
    for i, x in enumerate(xs):
        assert_close(out[i]["y"], w.astype(np.float64) @ x, **dense.GEMM_TOL, what=f"row {i} y")
        assert_close(out[i]["rx"], np.maximum(x, 0), rtol=0, atol=0, what=f"row {i} rx")
    assert "not copied" not in inspect(b, tmp_path)


def test_openblas_path_copies_and_matches(tmp_path, monkeypatch):
    """CORTADO_GEMM=openblas: no packed weights, so the rows are copied; same answers."""
    spec, reference = mlp(seed=2)
    xs = [rng(40 + i).normal(size=400).astype(np.float32).astype(np.float64) for i in range(13)]
    monkeypatch.setenv("CORTADO_GEMM", "openblas")
    out = predict(spec, rows_of(xs, "FLOAT32"), tmp_path)
    for i, x in enumerate(xs):
        assert_close(out[i]["y"], reference(x), **dense.GEMM_TOL, what=f"row {i}")
    assert "not copied" not in inspect(spec, tmp_path)
