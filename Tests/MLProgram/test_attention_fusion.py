"""Attention in ML Programs: `matmul(Q, Kᵀ) → scale → softmax → matmul(·, V)` run as one op.

The planner fuses the chain (each value read only by the next op; the scale a constant scalar
`mul` or `real_div`, or none; the softmax over the last axis; Q, K, V of one declared batch
shape) into an op that computes softmax(Q·Kᵀ·s)·V a block of 32 query rows at a time and never
writes the whole score tensor. Each case is checked against NumPy in float64 written from the
op definitions (scores = Q·Kᵀ·s; softmax = exp(scores − max) / Σ exp(…) over the last axis;
out = softmax·V), rtol 1e-4, atol 1e-5, on every kernel path the machine has (CORTADO_ISA:
Cortado's GEMM on AVX-512 / AVX2, OpenBLAS on portable), at the shapes of
bench/transformer_vs_onnxruntime.py (64 tokens, 4 heads of 32) and at ones whose rows do not
fill whole blocks. `cortado inspect` shows the fusion; the cases that must not fuse (the
softmax's result also an output, a softmax over another axis) check that too.
"""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from milharness import assert_close, convert, ct, inspect, mb, predict

_spec = importlib.util.spec_from_file_location("nn_isa_paths", Path(__file__).resolve().parent.parent / "NeuralNetwork" / "test_isa_paths.py")
_isa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_isa)

PATHS = _isa.ORDER[:_isa.ORDER.index(_isa.cpu_best()) + 1]
RTOL, ATOL = 1e-4, 1e-5
FUSED = "matmul+softmax+matmul (attention) ×1"


def reference(q, k, v, scale, key_transposed=False):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    kt = k if key_transposed else np.swapaxes(k, -1, -2)
    s = (q @ kt) * scale
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


# name: (Q shape, K shape, V shape, how the scale is written, K given as [.., E, S])
CASES = {
    "bench_heads_mul": ((1, 4, 64, 32), (1, 4, 64, 32), (1, 4, 64, 32), "mul", False),
    "partial_blocks_real_div": ((2, 70, 16), (2, 50, 16), (2, 50, 24), "real_div", False),
    "key_pre_transposed_no_scale": ((3, 33, 8), (3, 8, 40), (3, 40, 8), None, True),
}
_models = {}


def model(case, tmp_path_factory):
    if case not in _models:
        qs, ks, vs, how, key_transposed = CASES[case]
        e = qs[-1]

        @mb.program(input_specs=[mb.TensorSpec(shape=qs), mb.TensorSpec(shape=ks), mb.TensorSpec(shape=vs)],
                    opset_version=ct.target.iOS16)
        def prog(q, k, v):
            s = mb.matmul(x=q, y=k, transpose_y=not key_transposed)
            if how == "mul":
                s = mb.mul(x=s, y=np.float32(1 / np.sqrt(e)))
            elif how == "real_div":
                s = mb.real_div(x=s, y=np.float32(np.sqrt(e)))
            return mb.matmul(x=mb.softmax(x=s, axis=-1), y=v)

        r = np.random.default_rng(len(case))
        inputs = {n: r.standard_normal(s).astype(np.float32) for n, s in (("q", qs), ("k", ks), ("v", vs))}
        scale = 1 / np.sqrt(e) if how else 1.0
        _models[case] = (convert(prog, tmp_path_factory.mktemp(case)), inputs,
                         reference(inputs["q"], inputs["k"], inputs["v"], scale, key_transposed))
    return _models[case]


@pytest.mark.parametrize("isa", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_matches_numpy(case, isa, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CORTADO_ISA", isa)
    path, inputs, want = model(case, tmp_path_factory)
    text = inspect(path)
    assert FUSED in text and "1 operations per prediction" in text, text
    got = next(iter(predict(path, [inputs])[0].values()))
    assert_close(got, want, rtol=RTOL, atol=ATOL, what=f"{case} on {isa}")


def test_softmax_read_twice_is_not_fused(tmp_path):
    """The attention weights are an output too: they must be computed whole, so the chain
    stays as written."""
    r = np.random.default_rng(3)
    q, k, v = (r.standard_normal((2, 10, 8)).astype(np.float32) for _ in range(3))

    @mb.program(input_specs=[mb.TensorSpec(shape=q.shape) for _ in range(3)], opset_version=ct.target.iOS16)
    def prog(q, k, v):
        p = mb.softmax(x=mb.matmul(x=q, y=k, transpose_y=True), axis=-1, name="p")
        return mb.matmul(x=p, y=v, name="o"), p

    path = convert(prog, tmp_path)
    assert "attention" not in inspect(path)
    got = predict(path, [{"q": q, "k": k, "v": v}])[0]
    assert_close(got["o"], reference(q, k, v, 1.0), rtol=RTOL, atol=ATOL, what="o")


def test_softmax_over_another_axis_is_not_fused(tmp_path):
    r = np.random.default_rng(4)
    q, k, v = (r.standard_normal((2, 10, 8)).astype(np.float32) for _ in range(3))

    @mb.program(input_specs=[mb.TensorSpec(shape=q.shape) for _ in range(3)], opset_version=ct.target.iOS16)
    def prog(q, k, v):
        return mb.matmul(x=mb.softmax(x=mb.matmul(x=q, y=k, transpose_y=True), axis=-2), y=v)

    path = convert(prog, tmp_path)
    assert "attention" not in inspect(path)
    s = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2)
    e = np.exp(s - s.max(axis=-2, keepdims=True))
    want = (e / e.sum(axis=-2, keepdims=True)) @ v.astype(np.float64)
    got = next(iter(predict(path, [{"q": q, "k": k, "v": v}])[0].values()))
    assert_close(got, want, rtol=RTOL, atol=ATOL, what="softmax over axis -2")
