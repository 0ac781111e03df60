"""scaled_dot_product_attention (iOS18), einsum, and a transformer encoder block written with
the MIL builder, against NumPy."""

import math

import numpy as np
import pytest

from milharness import assert_close, convert, ct, inspect, mb, only, predict, rng, run_program
from coremltools.converters.mil.mil import types

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "add", "einsum", "gelu", "linear", "matmul", "mul", "reduce_mean", "reshape", "rsqrt",
    "scaled_dot_product_attention", "softmax", "sub", "transpose",
]



def softmax(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sdpa_ref(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask)
    return softmax(scores) @ v


# ---- scaled_dot_product_attention ----------------------------------------------------------

@pytest.mark.parametrize("batch,L,S,E,EV", [((2,), 3, 5, 4, 6), ((1, 2), 4, 8, 7, 5)], ids=["rank3", "rank4"])
def test_sdpa_without_mask(batch, L, S, E, EV, tmp_path):
    r = rng(1)
    q = r.standard_normal(batch + (L, E)).astype(np.float32)
    k = r.standard_normal(batch + (S, E)).astype(np.float32)
    v = r.standard_normal(batch + (S, EV)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=a.shape) for a in (q, k, v)], opset_version=ct.target.iOS18)
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v)

    got = only(run_program(prog, {"q": q, "k": k, "v": v}, tmp_path, minimum_deployment_target=ct.target.iOS18))
    assert_close(got, sdpa_ref(*(a.astype(np.float64) for a in (q, k, v))), rtol=1e-5, atol=1e-5)


def test_sdpa_bool_causal_mask(tmp_path):
    """A bool mask of shape [L, S] broadcast over [B, heads]: False keys take no part."""
    r = rng(2)
    B, Hh, L, S, E = 2, 2, 4, 4, 8
    q, k, v = (r.standard_normal((B, Hh, L, E)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((L, S), dtype=bool))

    @mb.program(input_specs=[mb.TensorSpec(shape=(B, Hh, L, E)) for _ in range(3)], opset_version=ct.target.iOS18)
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask)

    got = only(run_program(prog, {"q": q, "k": k, "v": v}, tmp_path, minimum_deployment_target=ct.target.iOS18))
    ref = sdpa_ref(*(a.astype(np.float64) for a in (q, k, v)), mask=mask)
    assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # The first query sees only the first key.
    assert_close(got[:, :, 0], v[:, :, 0], rtol=1e-5, atol=1e-5, what="first row")


def test_sdpa_float_mask_as_input(tmp_path):
    """A float mask [B, 1, L, S] fed at prediction time, added to the scores."""
    r = rng(3)
    B, Hh, L, S, E, EV = 2, 3, 5, 6, 4, 4
    q = r.standard_normal((B, Hh, L, E)).astype(np.float32)
    k = r.standard_normal((B, Hh, S, E)).astype(np.float32)
    v = r.standard_normal((B, Hh, S, EV)).astype(np.float32)
    m = (r.standard_normal((B, 1, L, S)) * 2).astype(np.float32)
    m[:, :, :, -1] = -1e4

    @mb.program(input_specs=[mb.TensorSpec(shape=a.shape) for a in (q, k, v, m)], opset_version=ct.target.iOS18)
    def prog(q, k, v, m):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=m)

    got = only(run_program(prog, {"q": q, "k": k, "v": v, "m": m}, tmp_path, minimum_deployment_target=ct.target.iOS18))
    assert_close(got, sdpa_ref(*(a.astype(np.float64) for a in (q, k, v, m))), rtol=1e-5, atol=1e-5)


def test_sdpa_fp16(tmp_path):
    r = rng(4)
    q, k, v = (r.standard_normal((1, 2, 6, 8)).astype(np.float16) for _ in range(3))

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 6, 8), dtype=types.fp16) for _ in range(3)], opset_version=ct.target.iOS18)
    def prog(q, k, v):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=np.tril(np.ones((6, 6), dtype=bool)))

    got = only(run_program(prog, {"q": q, "k": k, "v": v}, tmp_path, minimum_deployment_target=ct.target.iOS18))
    ref = sdpa_ref(*(a.astype(np.float64) for a in (q, k, v)), mask=np.tril(np.ones((6, 6), dtype=bool)))
    # One fp16 rounding of outputs of magnitude below 3 (inputs already fp16).
    assert_close(got, ref, rtol=2e-3, atol=2e-3)


# ---- einsum --------------------------------------------------------------------------------

@pytest.mark.parametrize("equation,xs,ys", [
    ("nchw,nwhu->nchu", (2, 3, 4, 5), (2, 5, 4, 6)),
    ("nchw,nwhu->nchu", (2, 3, 1, 5), (1, 5, 4, 6)),
    ("abcd,adce->abce", (1, 2, 3, 4), (1, 4, 3, 2)),
    ("chw,whr->chr", (3, 4, 5), (5, 4, 2)),
    ("chw,whr->chr", (3, 1, 5), (5, 4, 2)),
    ("ijk,kjl->ijl", (2, 3, 4), (4, 3, 5)),
])
def test_einsum(equation, xs, ys, tmp_path):
    r = rng(5)
    x = r.standard_normal(xs).astype(np.float32)
    y = r.standard_normal(ys).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=xs), mb.TensorSpec(shape=ys)], opset_version=ct.target.iOS15)
    def prog(x, y):
        return mb.einsum(values=(x, y), equation=equation)

    # np.einsum does not broadcast size-1 letters; the op does, so expand them first.
    lhs = equation.split("->")[0].split(",")
    size = {}
    for letters, shape in zip(lhs, (xs, ys)):
        for c, n in zip(letters, shape):
            size[c] = max(size.get(c, 1), n)
    xb = np.broadcast_to(x, [size[c] for c in lhs[0]]).astype(np.float64)
    yb = np.broadcast_to(y, [size[c] for c in lhs[1]]).astype(np.float64)
    got = only(run_program(prog, {"x": x, "y": y}, tmp_path))
    assert_close(got, np.einsum(equation, xb, yb), rtol=1e-5, atol=1e-5, what=equation)


# ---- a transformer encoder block -----------------------------------------------------------

T, D, HEADS, FF = 6, 16, 4, 32
DH = D // HEADS
EPS = 1e-5


def encoder_weights(seed):
    r = rng(seed)

    def lin(o, i):
        return (r.standard_normal((o, i)) / math.sqrt(i)).astype(np.float32), (r.standard_normal(o) * 0.1).astype(np.float32)
    w = {name: lin(D, D) for name in ("q", "k", "v", "o")}
    w["ff1"], w["ff2"] = lin(FF, D), lin(D, FF)
    for n in ("ln1", "ln2"):
        w[n] = ((1 + 0.1 * r.standard_normal(D)).astype(np.float32), (0.1 * r.standard_normal(D)).astype(np.float32))
    return w


def encoder_program(w):
    def norm(x, gamma, beta):
        # Layer normalisation over the last axis from reductions.
        mean = mb.reduce_mean(x=x, axes=[-1], keep_dims=True)
        centred = mb.sub(x=x, y=mean)
        var = mb.reduce_mean(x=mb.mul(x=centred, y=centred), axes=[-1], keep_dims=True)
        scaled = mb.mul(x=centred, y=mb.rsqrt(x=var, epsilon=EPS))
        return mb.add(x=mb.mul(x=scaled, y=gamma), y=beta)

    def heads(x):
        return mb.transpose(x=mb.reshape(x=x, shape=[1, T, HEADS, DH]), perm=[0, 2, 1, 3])

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, T, D))], opset_version=ct.target.iOS16)
    def prog(x):
        q = heads(mb.linear(x=x, weight=w["q"][0], bias=w["q"][1]))
        k = heads(mb.linear(x=x, weight=w["k"][0], bias=w["k"][1]))
        v = heads(mb.linear(x=x, weight=w["v"][0], bias=w["v"][1]))
        scores = mb.mul(x=mb.matmul(x=q, y=k, transpose_y=True), y=np.float32(1 / math.sqrt(DH)))
        att = mb.matmul(x=mb.softmax(x=scores, axis=-1), y=v)
        att = mb.reshape(x=mb.transpose(x=att, perm=[0, 2, 1, 3]), shape=[1, T, D])
        h = norm(mb.add(x=x, y=mb.linear(x=att, weight=w["o"][0], bias=w["o"][1])), *w["ln1"])
        ff = mb.linear(x=mb.gelu(x=mb.linear(x=h, weight=w["ff1"][0], bias=w["ff1"][1]), mode="EXACT"),
                       weight=w["ff2"][0], bias=w["ff2"][1])
        return norm(mb.add(x=h, y=ff), *w["ln2"])

    return prog


def encoder_ref(x, w):
    from math import erf
    w = {k: tuple(a.astype(np.float64) for a in v) for k, v in w.items()}

    def lin(a, p):
        return a @ p[0].T + p[1]

    def norm(a, p):
        mu = a.mean(-1, keepdims=True)
        var = ((a - mu) ** 2).mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(var + EPS) * p[0] + p[1]

    def heads(a):
        return a.reshape(1, T, HEADS, DH).transpose(0, 2, 1, 3)

    q, k, v = (heads(lin(x, w[n])) for n in "qkv")
    att = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(DH)) @ v
    h = norm(x + lin(att.transpose(0, 2, 1, 3).reshape(1, T, D), w["o"]), w["ln1"])
    f = lin(h, w["ff1"])
    f = 0.5 * f * (1 + np.vectorize(erf)(f / math.sqrt(2)))
    return norm(h + lin(f, w["ff2"]), w["ln2"])


def test_transformer_encoder_fp32(tmp_path):
    w = encoder_weights(10)
    x = rng(11).standard_normal((1, T, D)).astype(np.float32)
    got = only(run_program(encoder_program(w), {"x": x}, tmp_path))
    assert_close(got, encoder_ref(x.astype(np.float64), w), rtol=1e-4, atol=1e-4)


def test_transformer_encoder_fp16(tmp_path):
    """compute_precision=FLOAT16 with the default passes (weights stored in fp16), except the
    layer-norm fusion: this block normalises with reductions so it runs without layer_norm."""
    w = encoder_weights(12)
    x = rng(13).standard_normal((1, T, D)).astype(np.float32)
    pipeline = ct.PassPipeline.DEFAULT
    pipeline.remove_passes(["common::fuse_layernorm_or_instancenorm"])
    path = convert(encoder_program(w), tmp_path, precision="fp16", pass_pipeline=pipeline)
    assert "fp16" in inspect(path)
    got = only(predict(path, [{"x": x}])[0])
    w16 = {k: tuple(a.astype(np.float16).astype(np.float32) for a in v) for k, v in w.items()}
    ref = encoder_ref(x.astype(np.float16).astype(np.float64), w16)
    # Outputs are layer-normalised (magnitude up to about 3); every op rounds to fp16 (relative
    # 2^-11), and about twenty of them compound through two normalisations.
    assert_close(got, ref, rtol=1e-2, atol=1e-2)
