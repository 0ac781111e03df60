"""Shared helpers for the neural-network tests: build a network with coremltools'
NeuralNetworkBuilder, run it through `cortado predict`, compare with a NumPy reference.

Environment: CORTADO_BIN (default .build/debug/cortado under the repository root).
"""

import base64
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent.parent


def cortado_command():
    env = os.environ.get("CORTADO_BIN")
    argv = shlex.split(env) if env else [str(REPO / ".build" / "debug" / "cortado")]
    if not Path(argv[0]).exists() and not (REPO / argv[0]).exists():
        pytest.skip(f"cortado executable not found: {argv[0]} (set CORTADO_BIN or build it)")
    if not Path(argv[0]).is_absolute():
        argv[0] = str(REPO / argv[0]) if (REPO / argv[0]).exists() else argv[0]
    return argv


def builder(inputs, outputs, **kwargs):
    """A NeuralNetworkBuilder for float32 multi-array inputs and outputs given as (name, shape)."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    ins = [(n, datatypes.Array(*s)) for n, s in inputs]
    outs = [(n, datatypes.Array(*s) if s is not None else None) for n, s in outputs]
    return NeuralNetworkBuilder(ins, outs, **kwargs)


def tensor_builder(inputs, outputs=(("y", None),)):
    """A builder for a network of rank-N tensors (EXACT_ARRAY_MAPPING, the Core ML 3 layers);
    outputs default to one output "y" of unstated shape."""
    return builder(inputs, list(outputs), disable_rank5_shape_mapping=True)


def save(spec, folder, name="model"):
    """Writes a spec (or a builder's spec) to folder/name.mlmodel and returns the path."""
    spec = getattr(spec, "spec", spec)
    path = Path(folder) / f"{name}.mlmodel"
    path.write_bytes(spec.SerializeToString(deterministic=True))
    return path


def array_json(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "dataType": "DOUBLE", "data": a.reshape(-1).tolist()}


def encode_input(v):
    if isinstance(v, np.ndarray):
        return array_json(v)
    return v


def decode_output(v):
    if isinstance(v, dict) and "shape" in v and "data" in v:
        return np.asarray(v["data"], dtype=np.float64).reshape(v["shape"])
    return v


def run_cortado(model_path, rows, extra_args=(), expect_failure=False, timeout=300, encode=None, decode=None):
    """Runs `cortado predict` on rows (dicts of feature → ndarray or JSON value). Returns the
    decoded output rows, or (returncode, stderr) when expect_failure. `encode` / `decode`
    replace how a value is written to and read from JSON (default: arrays as DOUBLE)."""
    encode, decode = encode or encode_input, decode or decode_output
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "rows.jsonl"
        with inp.open("w") as f:
            for row in rows:
                f.write(json.dumps({k: encode(v) for k, v in row.items()}) + "\n")
        proc = subprocess.run(cortado_command() + ["predict", str(model_path), "--input", str(inp), *extra_args],
                              capture_output=True, text=True, timeout=timeout)
    if expect_failure:
        assert proc.returncode != 0, f"expected a failure, got output:\n{proc.stdout[:2000]}"
        return proc.returncode, proc.stderr
    assert proc.returncode == 0, f"cortado predict failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    assert len(lines) == len(rows), f"{len(rows)} rows in, {len(lines)} lines out:\n{proc.stdout[:2000]}"
    return [{k: decode(v) for k, v in json.loads(l).items()} for l in lines]


def predict(spec, rows, tmp_path, **kwargs):
    """Saves spec into tmp_path and runs it on rows (a dict or a list of dicts)."""
    single = isinstance(rows, dict)
    out = run_cortado(save(spec, tmp_path), [rows] if single else rows, **kwargs)
    return out[0] if single else out


def load_error(spec, tmp_path, rows=None):
    """Runs a model that must fail to load; returns stderr."""
    path = save(spec, tmp_path)
    rows = rows or [{}]
    _, err = run_cortado(path, rows, expect_failure=True)
    return err


def assert_close(got, expected, rtol=1e-4, atol=1e-5, what="output"):
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.size == expected.size, f"{what}: {got.size} values (shape {got.shape}), expected {expected.size} (shape {expected.shape})"
    got = got.reshape(expected.shape)
    bad = ~np.isclose(got, expected, rtol=rtol, atol=atol)
    if bad.any():
        idx = np.argwhere(bad)[:10]
        details = "\n".join(f"  at {tuple(i)}: got {got[tuple(i)]!r}, expected {expected[tuple(i)]!r}" for i in idx)
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} values differ beyond rtol={rtol}, atol={atol} "
                             f"(max |diff| {np.max(np.abs(got - expected)):.3g}):\n{details}")


def rng(seed=0):
    return np.random.default_rng(seed)


def cpu_best():
    """The widest path /proc/cpuinfo's flags allow (as cg_isa_best decides it)."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return "portable"
    if {"avx512f", "avx512vl", "fma"} <= set(flags):
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= set(flags) else "portable"
