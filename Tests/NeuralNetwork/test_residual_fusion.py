"""A residual add (and the ReLU after it) folded into the convolution before it.

In a ResNet or MobileNet block, `y = relu(conv(x) + skip)`: the convolution, the add and the
activation are three layers, and the add and the ReLU each read and write the whole tensor
once more. On the direct convolution kernel's path (ungrouped convolutions whose output
channels fill blocks of 16 lanes: 24, 32, 48, 96, …) the graph folds the add into the
convolution, which adds `skip` to each finished block while it is in cache, then applies the
ReLU. These cases check it against NumPy references written from the layer definitions
(rtol 1e-4, atol 1e-5), on every kernel path the machine has (CORTADO_ISA; the portable
path has no direct kernel, so nothing is folded there and the answers must still agree),
with one and two threads, a batch of rows, and the shapes where the fold must not happen or
must fall back: an add that broadcasts, an output read by another layer too, a ReLU before
the add. `cortado inspect` shows whether it was folded, so a case cannot pass by not folding.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from nnharness import array_json, assert_close, builder, cortado_command, rng, save
from test_dense import conv_ref
from test_isa_paths import ORDER, cpu_best


def paths():
    return ORDER[:ORDER.index(cpu_best()) + 1]


def inspect_text(path, env):
    done = subprocess.run(cortado_command() + ["inspect", str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def isa_env(isa):
    env = dict(os.environ, CORTADO_ISA=isa)
    env.pop("CORTADO_GEMM", None)
    env.pop("CORTADO_CONV", None)
    return env


def relu(v):
    return np.maximum(v, 0)


def leaky(v, alpha=0.1):
    return np.where(v < 0, alpha * v, v)


def block(c, hw, k, activation, seed):
    """x [c, hw, hw] → conv k×k (same padding, bias) → + x → activation (None, RELU or LEAKYRELU)."""
    r = rng(seed)
    w = (r.normal(size=(c, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    bias = r.normal(size=c).astype(np.float32) * 0.1
    b = builder([("x", (c, hw, hw))], [("y", (c, hw, hw))])
    p = (k - 1) // 2
    b.add_convolution("conv", c, c, k, k, 1, 1, "valid", 1, W=w.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="x", output_name="h", padding_top=p, padding_bottom=p, padding_left=p, padding_right=p)
    out = "y" if activation is None else "s"
    b.add_elementwise("add", ["h", "x"], out, "ADD")
    if activation == "RELU":
        b.add_activation("act", "RELU", "s", "y")
    elif activation == "LEAKYRELU":
        b.add_activation("act", "LEAKYRELU", "s", "y", params=[0.1])
    act = {None: lambda v: v, "RELU": relu, "LEAKYRELU": leaky}[activation]

    def reference(x):
        return act(conv_ref(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64), pads=(p, p, p, p)) + x)
    return b, reference


def predict_rows(path, xs, env, batch, output="y"):
    """`cortado predict --batch` on rows of one input "x"; the outputs as float64 arrays."""
    rows = write_rows(path.parent / "rows.jsonl", xs)
    done = subprocess.run(cortado_command() + ["predict", str(path), "--input", str(rows), "--batch", str(batch)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    out = [json.loads(l)[output] for l in done.stdout.splitlines() if l.strip()]
    assert len(out) == len(xs), done.stdout[:2000]
    return [np.asarray(o["data"], dtype=np.float64).reshape(o["shape"]) for o in out]


def write_rows(path, xs):
    with open(path, "w") as f:
        for x in xs:
            f.write(json.dumps({"x": array_json(x)}) + "\n")
    return path


@pytest.mark.parametrize("isa", paths())
@pytest.mark.parametrize("c,hw,k,activation", [(24, 20, 1, "RELU"), (32, 9, 3, "LEAKYRELU"), (48, 7, 1, None), (24, 33, 3, "RELU")])
def test_residual_block_matches_numpy(isa, c, hw, k, activation, tmp_path):
    b, reference = block(c, hw, k, activation, seed=c + hw + k)
    path = save(b, tmp_path)
    env = isa_env(isa)
    text = inspect_text(path, env)
    # The direct kernel exists on the vector paths only; the ReLU after the add folds too.
    assert ("residual add" in text) == (isa != "portable"), text
    if isa != "portable":
        assert "+ add (add)" in text, text
        if activation:
            assert "act (activation)" in text and "add (add) + act (activation)" in text, text
    xs = [rng(c + i).normal(size=(c, hw, hw)) for i in range(3)]
    # One row at a time, and the three as one batch (the residual read per image).
    for batch in (1, 3):
        for x, got in zip(xs, predict_rows(path, xs, env, batch)):
            assert_close(got, reference(x), what=f"{isa}, batch {batch}")


def test_add_that_broadcasts_falls_back_and_matches_numpy(tmp_path):
    """A 1×1 map of 32 channels (a convolution over a global pooling) added to a 32×6×6
    tensor: the fold happens at load, the shapes are only known later, and the layer falls
    back to the convolution, then the broadcasting add and the ReLU."""
    r = rng(5)
    c, hw = 32, 6
    w = (r.normal(size=(c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    bias = r.normal(size=c).astype(np.float32)
    b = builder([("x", (c, hw, hw))], [("y", (c, hw, hw))])
    b.add_pooling("gap", 1, 1, 1, 1, "AVERAGE", "VALID", "x", "p", is_global=True)
    b.add_convolution("conv", c, c, 1, 1, 1, 1, "valid", 1, W=w.transpose(2, 3, 1, 0), b=bias, has_bias=True,
                      input_name="p", output_name="h")
    b.add_elementwise("add", ["h", "x"], "s", "ADD")
    b.add_activation("act", "RELU", "s", "y")
    path = save(b, tmp_path)
    env = isa_env(cpu_best())
    if cpu_best() != "portable":
        assert "residual add" in inspect_text(path, env)
    xs = [r.normal(size=(c, hw, hw)) for _ in range(2)]
    for batch in (1, 2):
        for x, got in zip(xs, predict_rows(path, xs, env, batch)):
            pooled = x.mean(axis=(1, 2), keepdims=True)
            want = relu(np.einsum("oc,chw->ohw", w[:, :, 0, 0].astype(np.float64), pooled) + bias[:, None, None] + x)
            assert_close(got, want, what=f"batch {batch}")


def test_output_read_twice_is_not_folded(tmp_path):
    """The convolution's output also goes to the model's second output: the add must not
    take it over (the plain value is needed), and both outputs are right."""
    r = rng(6)
    c, hw = 24, 8
    w = (r.normal(size=(c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = builder([("x", (c, hw, hw))], [("y", (c, hw, hw)), ("h", (c, hw, hw))])
    b.add_convolution("conv", c, c, 1, 1, 1, 1, "valid", 1, W=w.transpose(2, 3, 1, 0), b=None, has_bias=False,
                      input_name="x", output_name="h")
    b.add_elementwise("add", ["h", "x"], "y", "ADD")
    path = save(b, tmp_path)
    env = isa_env(cpu_best())
    assert "residual add" not in inspect_text(path, env)
    x = r.normal(size=(c, hw, hw))
    h = np.einsum("oc,chw->ohw", w[:, :, 0, 0].astype(np.float64), x)
    assert_close(predict_rows(path, [x], env, 1)[0], h + x)
    assert_close(predict_rows(path, [x], env, 1, output="h")[0], h)


def test_relu_before_the_add_stays_before_it(tmp_path):
    """conv → ReLU → add: the ReLU folds into the convolution, the add may not follow it into
    the kernel (which adds before the activation), so it stays a layer of its own."""
    r = rng(7)
    c, hw = 24, 8
    w = (r.normal(size=(c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = builder([("x", (c, hw, hw))], [("y", (c, hw, hw))])
    b.add_convolution("conv", c, c, 1, 1, 1, 1, "valid", 1, W=w.transpose(2, 3, 1, 0), b=None, has_bias=False,
                      input_name="x", output_name="h")
    b.add_activation("act", "RELU", "h", "r")
    b.add_elementwise("add", ["r", "x"], "y", "ADD")
    path = save(b, tmp_path)
    env = isa_env(cpu_best())
    assert "residual add" not in inspect_text(path, env)
    x = r.normal(size=(c, hw, hw))
    want = relu(np.einsum("oc,chw->ohw", w[:, :, 0, 0].astype(np.float64), x)) + x
    assert_close(predict_rows(path, [x], env, 1)[0], want)
