"""rnn, gru and lstm against NumPy loops written from coremltools' op definitions (iOS15
recurrent.py; iOS17 fp16; iOS18 gru reset_after and input_bias).

x is [sequence, batch, input]. A "reverse" layer reads x from its end and writes its outputs in
the order it computes them; a bidirectional lstm's backward half of output row t is the
backward pass's state at time t (coremltools' tests check this against PyTorch)."""

import numpy as np
import pytest

from milharness import assert_close, ct, mb, rng, run_program
from coremltools.converters.mil.mil import types

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "gru", "identity", "lstm", "rnn",
]


S, B, I, H = 5, 2, 3, 4

ACT = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh,
    "scaled_tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
    "linear": lambda v: v,
    "hard_sigmoid": lambda v: np.clip(0.2 * v + 0.5, 0, 1),
}
ACT["sigmoid_hard"] = ACT["hard_sigmoid"]


def weights(r, gates, scale=0.5):
    return ((r.standard_normal((gates * H, I)) * scale).astype(np.float32),
            (r.standard_normal((gates * H, H)) * scale).astype(np.float32),
            (r.standard_normal(gates * H) * scale).astype(np.float32))


def inputs(r):
    return r.standard_normal((S, B, I)).astype(np.float32), (r.standard_normal((B, H)) * 0.5).astype(np.float32)


def spec(*shapes, dtype=types.fp32):
    return [mb.TensorSpec(shape=s, dtype=dtype) for s in shapes]


def order(direction):
    return range(S - 1, -1, -1) if direction == "reverse" else range(S)


# ---- rnn -----------------------------------------------------------------------------------

def rnn_ref(x, h, wih, whh, b, direction, act):
    outs = []
    for t in order(direction):
        h = ACT[act](x[t] @ wih.T + h @ whh.T + b)
        outs.append(h)
    return np.stack(outs), h


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
@pytest.mark.parametrize("act", ["tanh", "relu", "sigmoid", "linear", "sigmoid_hard", "scaled_tanh"])
def test_rnn(direction, output_sequence, act, tmp_path):
    r = rng(1)
    wih, whh, b = weights(r, 1)
    x, h0 = inputs(r)

    @mb.program(input_specs=spec((S, B, I), (B, H)), opset_version=ct.target.iOS15)
    def prog(x, h):
        y, hn = mb.rnn(x=x, initial_h=h, weight_ih=wih, weight_hh=whh, bias=b, direction=direction,
                       output_sequence=output_sequence, activation=act)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h")

    out = run_program(prog, {"x": x, "h": h0}, tmp_path)
    seq, hn = rnn_ref(x.astype(np.float64), h0.astype(np.float64), wih, whh, b, direction, act)
    assert_close(out["y"], seq if output_sequence else seq[-1:], rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], hn, rtol=1e-4, atol=1e-5, what="final h")


# ---- gru -----------------------------------------------------------------------------------

def gru_ref(x, h, wih, whh, bias, direction, ract, act, reset_after=False, input_bias=None):
    """Rows stacked as [reset | output | update]. Without reset_after the reset gate scales the
    state before the output gate's recurrent weights; with it, it scales their result plus bias."""
    Wr, Wo, Wz = np.split(wih, 3)
    Rr, Ro, Rz = np.split(whh, 3)
    br, bo, bz = np.split(bias, 3)
    ir, io, iz = np.split(input_bias if input_bias is not None else np.zeros(3 * H), 3)
    outs = []
    for t in order(direction):
        xt = x[t]
        rg = ACT[ract](xt @ Wr.T + ir + h @ Rr.T + br)
        z = ACT[ract](xt @ Wz.T + iz + h @ Rz.T + bz)
        if reset_after:
            o = ACT[act](xt @ Wo.T + io + rg * (h @ Ro.T + bo))
        else:
            o = ACT[act](xt @ Wo.T + io + (rg * h) @ Ro.T + bo)
        h = (1 - z) * o + z * h
        outs.append(h)
    return np.stack(outs), h


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
@pytest.mark.parametrize("acts", [("sigmoid", "tanh"), ("hard_sigmoid", "relu")])
def test_gru(direction, output_sequence, acts, tmp_path):
    r = rng(2)
    wih, whh, b = weights(r, 3)
    x, h0 = inputs(r)

    @mb.program(input_specs=spec((S, B, I), (B, H)), opset_version=ct.target.iOS15)
    def prog(x, h):
        y, hn = mb.gru(x=x, initial_h=h, weight_ih=wih, weight_hh=whh, bias=b, direction=direction,
                       output_sequence=output_sequence, recurrent_activation=acts[0], activation=acts[1])
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h")

    out = run_program(prog, {"x": x, "h": h0}, tmp_path)
    seq, hn = gru_ref(x.astype(np.float64), h0.astype(np.float64), wih, whh, b, direction, *acts)
    assert_close(out["y"], seq if output_sequence else seq[-1:], rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], hn, rtol=1e-4, atol=1e-5, what="final h")


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru_ios18_reset_after_and_input_bias(reset_after, tmp_path):
    r = rng(3)
    wih, whh, b = weights(r, 3)
    ib = (r.standard_normal(3 * H) * 0.5).astype(np.float32)
    x, h0 = inputs(r)

    @mb.program(input_specs=spec((S, B, I), (B, H)), opset_version=ct.target.iOS18)
    def prog(x, h):
        y, hn = mb.gru(x=x, initial_h=h, weight_ih=wih, weight_hh=whh, bias=b, input_bias=ib, reset_after=reset_after,
                       output_sequence=True)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h")

    out = run_program(prog, {"x": x, "h": h0}, tmp_path, minimum_deployment_target=ct.target.iOS18)
    seq, hn = gru_ref(x.astype(np.float64), h0.astype(np.float64), wih, whh, b, "forward", "sigmoid", "tanh",
                      reset_after=reset_after, input_bias=ib)
    assert_close(out["y"], seq, rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], hn, rtol=1e-4, atol=1e-5, what="final h")


def test_gru_pytorch_layout_with_reset_after(tmp_path):
    """reset_after with input_bias is PyTorch's GRU: its gates reordered to [r | n | z]."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    m = torch.nn.GRU(I, H)
    sd = {k: v.detach().numpy() for k, v in m.state_dict().items()}

    def reorder(a):
        rg, z, n = np.split(a, 3)
        return np.concatenate([rg, n, z]).astype(np.float32)

    x, h0 = inputs(rng(4))

    @mb.program(input_specs=spec((S, B, I), (B, H)), opset_version=ct.target.iOS18)
    def prog(x, h):
        y, hn = mb.gru(x=x, initial_h=h, weight_ih=reorder(sd["weight_ih_l0"]), weight_hh=reorder(sd["weight_hh_l0"]),
                       input_bias=reorder(sd["bias_ih_l0"]), bias=reorder(sd["bias_hh_l0"]), reset_after=True, output_sequence=True)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h")

    out = run_program(prog, {"x": x, "h": h0}, tmp_path, minimum_deployment_target=ct.target.iOS18)
    with torch.no_grad():
        ty, th = m(torch.from_numpy(x), torch.from_numpy(h0)[None])
    assert_close(out["y"], ty.numpy(), rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], th.numpy()[0], rtol=1e-4, atol=1e-5, what="final h")


# ---- lstm ----------------------------------------------------------------------------------

def lstm_ref(x, h, c, wih, whh, b, p, reverse, ract="sigmoid", cact="tanh", act="tanh", clip=None):
    """Rows stacked as [input | forget | output | cell]; peepholes [input | forget | output]
    (the output gate's peeks at the new cell state); clip bounds the cell state."""
    Wi, Wf, Wo, Wz = np.split(wih, 4)
    Ri, Rf, Ro, Rz = np.split(whh, 4)
    bi, bf, bo, bz = np.split(b, 4)
    pi, pf, po = np.split(p, 3)
    outs = []
    for t in (range(S - 1, -1, -1) if reverse else range(S)):
        xt = x[t]
        i = ACT[ract](xt @ Wi.T + h @ Ri.T + bi + pi * c)
        f = ACT[ract](xt @ Wf.T + h @ Rf.T + bf + pf * c)
        z = ACT[cact](xt @ Wz.T + h @ Rz.T + bz)
        c = f * c + i * z
        if clip is not None:
            c = np.clip(c, -clip, clip)
        o = ACT[ract](xt @ Wo.T + h @ Ro.T + bo + po * c)
        h = o * ACT[act](c)
        outs.append(h)
    return np.stack(outs), h, c


def lstm_case(r, peephole):
    wih, whh, b = weights(r, 4)
    p = (r.standard_normal(3 * H) * 0.5).astype(np.float32) if peephole else np.zeros(3 * H, np.float32)
    return wih, whh, b, p


@pytest.mark.parametrize("direction", ["forward", "reverse"])
@pytest.mark.parametrize("output_sequence", [True, False])
@pytest.mark.parametrize("peephole", [True, False])
def test_lstm(direction, output_sequence, peephole, tmp_path):
    r = rng(5)
    wih, whh, b, p = lstm_case(r, peephole)
    x, h0 = inputs(r)
    c0 = r.standard_normal((B, H)).astype(np.float32)
    kw = dict(peephole=p) if peephole else {}

    @mb.program(input_specs=spec((S, B, I), (B, H), (B, H)), opset_version=ct.target.iOS15)
    def prog(x, h, c):
        y, hn, cn = mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=wih, weight_hh=whh, bias=b, direction=direction,
                            output_sequence=output_sequence, **kw)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h"), mb.identity(x=cn, name="c")

    out = run_program(prog, {"x": x, "h": h0, "c": c0}, tmp_path)
    seq, hn, cn = lstm_ref(x.astype(np.float64), h0.astype(np.float64), c0.astype(np.float64), wih, whh, b, p, direction == "reverse")
    assert_close(out["y"], seq if output_sequence else seq[-1:], rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], hn, rtol=1e-4, atol=1e-5, what="final h")
    assert_close(out["c"], cn, rtol=1e-4, atol=1e-5, what="final c")


@pytest.mark.parametrize("acts", [("hard_sigmoid", "relu", "linear"), ("sigmoid", "scaled_tanh", "relu")])
def test_lstm_activations_and_clip(acts, tmp_path):
    r = rng(6)
    wih, whh, b, p = lstm_case(r, True)
    wih *= 4  # large pre-activations so the clip bounds the cell state
    x, h0 = inputs(r)
    c0 = r.standard_normal((B, H)).astype(np.float32)

    @mb.program(input_specs=spec((S, B, I), (B, H), (B, H)), opset_version=ct.target.iOS15)
    def prog(x, h, c):
        y, hn, cn = mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=wih, weight_hh=whh, bias=b, peephole=p,
                            recurrent_activation=acts[0], cell_activation=acts[1], activation=acts[2],
                            clip=np.float32(0.7), output_sequence=True)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h"), mb.identity(x=cn, name="c")

    out = run_program(prog, {"x": x, "h": h0, "c": c0}, tmp_path)
    seq, hn, cn = lstm_ref(x.astype(np.float64), h0.astype(np.float64), c0.astype(np.float64), wih, whh, b, p, False,
                           *acts, clip=0.7)
    assert np.abs(cn).max() == pytest.approx(0.7), "the test should reach the clip"
    assert_close(out["y"], seq, rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["c"], cn, rtol=1e-4, atol=1e-5, what="final c")


@pytest.mark.parametrize("output_sequence", [True, False])
def test_lstm_bidirectional(output_sequence, tmp_path):
    r = rng(7)
    fwd = lstm_case(r, True)
    back = lstm_case(r, True)
    x = r.standard_normal((S, B, I)).astype(np.float32)
    h0 = r.standard_normal((B, 2 * H)).astype(np.float32)
    c0 = r.standard_normal((B, 2 * H)).astype(np.float32)

    @mb.program(input_specs=spec((S, B, I), (B, 2 * H), (B, 2 * H)), opset_version=ct.target.iOS15)
    def prog(x, h, c):
        y, hn, cn = mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=fwd[0], weight_hh=fwd[1], bias=fwd[2], peephole=fwd[3],
                            weight_ih_back=back[0], weight_hh_back=back[1], bias_back=back[2], peephole_back=back[3],
                            direction="bidirectional", output_sequence=output_sequence)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h"), mb.identity(x=cn, name="c")

    out = run_program(prog, {"x": x, "h": h0, "c": c0}, tmp_path)
    x64, h64, c64 = (a.astype(np.float64) for a in (x, h0, c0))
    fs, fh, fc = lstm_ref(x64, h64[:, :H], c64[:, :H], *fwd, reverse=False)
    bs, bh, bc = lstm_ref(x64, h64[:, H:], c64[:, H:], *back, reverse=True)
    seq = np.concatenate([fs, bs[::-1]], axis=2)
    y_ref = seq if output_sequence else np.concatenate([fh, bh], axis=1)[None]
    assert_close(out["y"], y_ref, rtol=1e-4, atol=1e-5, what="output")
    assert_close(out["h"], np.concatenate([fh, bh], axis=1), rtol=1e-4, atol=1e-5, what="final h")
    assert_close(out["c"], np.concatenate([fc, bc], axis=1), rtol=1e-4, atol=1e-5, what="final c")


def test_lstm_fp16_ios17(tmp_path):
    """iOS17 allows fp16: inputs, weights and outputs in fp16."""
    r = rng(8)
    wih, whh, b, p = lstm_case(r, True)
    x, h0 = inputs(r)
    c0 = r.standard_normal((B, H)).astype(np.float32)
    f16 = [a.astype(np.float16) for a in (wih, whh, b, p)]

    @mb.program(input_specs=spec((S, B, I), (B, H), (B, H), dtype=types.fp16), opset_version=ct.target.iOS17)
    def prog(x, h, c):
        y, hn, cn = mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=f16[0], weight_hh=f16[1], bias=f16[2], peephole=f16[3],
                            output_sequence=True)
        return mb.identity(x=y, name="y"), mb.identity(x=hn, name="h"), mb.identity(x=cn, name="c")

    feed = {"x": x.astype(np.float16), "h": h0.astype(np.float16), "c": c0.astype(np.float16)}
    out = run_program(prog, feed, tmp_path, minimum_deployment_target=ct.target.iOS17)
    seq, hn, cn = lstm_ref(*(feed[k].astype(np.float64) for k in "xhc"), *(a.astype(np.float64) for a in f16), reverse=False)
    # fp16 inputs and outputs, fp32 arithmetic inside: a few fp16 roundings of values below 4.
    assert_close(out["y"], seq, rtol=4e-3, atol=4e-3, what="output")
    assert_close(out["c"], cn, rtol=4e-3, atol=4e-3, what="final c")
