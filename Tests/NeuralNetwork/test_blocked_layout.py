"""The channel-blocked layout (NCHW16c) through runs of convolutions.

On the vector kernel paths the plan passes blobs between layers that take it as
[ceil(C/16)][H][W][16] (docs/neural-networks.md): convolutions on the direct kernel read it
(when they need no padded copy) and write it, with their bias, ReLU and folded residual add;
depthwise 3×3 layers (stride 1 and 2) run from blocked to blocked, fused with a 1×1 layer
that alone reads their output. A layer that does not take it reads a planar copy (a reorder
step), and a model output is written planar.

The networks here cover each of those, with channel counts that are not multiples of 16 (3,
24, 40), odd map sizes, strides 1 and 2, residual blocks, a blob read by a blocked and a
non-blocked layer, a model output taken from the middle of a blocked run, stems (3×3 stride 2
on inputs of 1 to 4 channels, written blocked: on AVX-512 and AVX2 the stem kernel runs them,
which `inspect` must say, with 8, 24, 27, 40 and 41 channels and paddings 0, 1 and 2), 1×1
layers reading a blocked input and writing a planar model output (27, 29, 41 and 43 channels,
with and without a blocked residual: the pointwise tiles' planar stores), and 8-channel blobs
(the direct algorithm forced). Every answer is
checked against a NumPy reference written from the layer definitions (float64; rtol 1e-4,
atol 1e-5), on every kernel path the machine has (CORTADO_ISA), with the layout on and off
(CORTADO_BLOCKED=0) and without fusing a depthwise layer with the 1×1 layer that reads it
(CORTADO_BLOCKED=unfused), one row (on every core: two threads here) and a batch of three rows
(split over the cores, one thread each). `cortado inspect`
must say the layout was used on the vector paths (and not with it off or on the portable
path, which hands convolutions to OpenBLAS), so a case cannot pass by not running it.
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


def env_for(isa, blocked="1"):
    env = dict(os.environ, CORTADO_ISA=isa)
    for name in ("CORTADO_GEMM", "CORTADO_CONV", "CORTADO_CONV_ALGO"):
        env.pop(name, None)
    env["CORTADO_BLOCKED"] = blocked
    return env


def relu(v):
    return np.maximum(v, 0)


class Net:
    """A network built twice: with coremltools' NeuralNetworkBuilder, and as NumPy steps."""

    def __init__(self, cin, h, w, outputs, seed):
        self.r = rng(seed)
        self.shape = (cin, h, w)
        self.outputs = list(outputs)
        self.b = builder([("x", self.shape)], [(name, None) for name in outputs])
        self.steps = []  # (output blob, function of the blobs so far)
        self.channels = {"x": cin}
        self.n = 0

    def conv(self, src, cout, k, stride, pad, groups=1, act=True, residual=None):
        cin = self.channels[src]
        per = cin // groups
        w = (self.r.normal(size=(cout, per, k, k)) / np.sqrt(per * k * k)).astype(np.float32)
        bias = (self.r.normal(size=cout) * 0.1).astype(np.float32)
        self.n += 1
        name = f"c{self.n}"
        self.b.add_convolution(name, per, cout, k, k, stride, stride, "valid", groups, W=w.transpose(2, 3, 1, 0), b=bias,
                               has_bias=True, input_name=src, output_name=name, padding_top=pad, padding_bottom=pad,
                               padding_left=pad, padding_right=pad)
        self.steps.append((name, lambda v, src=src: conv_ref(v[src], w.astype(np.float64), bias.astype(np.float64),
                                                             (stride, stride), pads=(pad,) * 4, groups=groups)))
        out = name
        if residual is not None:
            self.b.add_elementwise(f"{name}_add", [out, residual], f"{name}_s", "ADD")
            self.steps.append((f"{name}_s", lambda v, out=out: v[out] + v[residual]))
            out = f"{name}_s"
        if act:
            self.b.add_activation(f"{name}_relu", "RELU", out, f"{name}_r")
            self.steps.append((f"{name}_r", lambda v, out=out: relu(v[out])))
            out = f"{name}_r"
        self.channels[out] = cout
        return out

    def rename(self, blob, to):
        """Makes `blob` the model output `to` (a linear activation: the identity)."""
        self.b.add_activation(f"{to}_id", "LINEAR", blob, to, params=[1.0, 0.0])
        self.steps.append((to, lambda v: v[blob]))
        self.channels[to] = self.channels[blob]

    def mean(self, blob, to):
        """A global average pooling: a layer that does not take the blocked layout."""
        self.b.add_pooling(to, 1, 1, 1, 1, "AVERAGE", "VALID", blob, to, is_global=True)
        self.steps.append((to, lambda v: v[blob].mean(axis=(1, 2), keepdims=True)))

    def reference(self, x):
        v = {"x": x.astype(np.float64)}
        for name, f in self.steps:
            v[name] = f(v)
        return v

    def save(self, folder):
        return save(self.b, folder)


def detector_like():
    """A MobileNet-style chain on a 3×33×29 input: stem 3×3 stride 2 (3→24), a depthwise
    separable residual block, a depthwise stride-2 layer, 1×1 24→40, a residual block at 40
    channels, a head 1×1 40→3 (too few channels for the direct kernel: it reads a planar
    copy). "mid" is taken in the middle of the blocked run; "gap", a global pooling of a blob a
    depthwise layer also reads blocked."""
    n = Net(3, 33, 29, ["y", "mid", "gap"], seed=7)
    a = n.conv("x", 24, 3, 2, 1)                        # 24×17×15, planar in, blocked out
    d = n.conv(a, 24, 3, 1, 1, groups=24)               # depthwise stride 1
    b = n.conv(d, 24, 1, 1, 0, residual=a)              # 1×1 + residual + ReLU
    d = n.conv(b, 24, 3, 2, 1, groups=24)               # depthwise stride 2 → 24×9×8
    n.rename(d, "mid")                                  # a model output from the middle
    p = n.conv("mid", 40, 1, 1, 0)                      # 1×1 24→40
    n.mean(p, "gap")                                    # read planar, beside ...
    d = n.conv(p, 40, 3, 1, 1, groups=40)               # ... a depthwise layer reading it blocked
    q = n.conv(d, 40, 1, 1, 0, residual=p)
    y = n.conv(q, 3, 1, 1, 0, act=False)                # head: 3 channels
    n.rename(y, "y")
    return n


def strided_and_odd():
    """Depthwise layers of odd widths and a 1×1 stride-2 convolution reading a blocked input;
    40 channels (two blocks, the second half full), 5×7 and 3×3 maps, a model output written
    by a depthwise layer."""
    n = Net(5, 11, 13, ["y"], seed=11)
    a = n.conv("x", 40, 3, 1, 1)                        # 40×11×13
    d = n.conv(a, 40, 3, 2, 1, groups=40)               # 40×6×7
    b = n.conv(d, 24, 1, 2, 0)                          # 1×1 stride 2 → 24×3×4
    d = n.conv(b, 24, 3, 1, 1, groups=24, act=False)    # the output itself
    n.rename(d, "y")
    return n


def output_in_the_run():
    """A residual block's output that is a model output as it is (no layer after it folded) and
    is read by the next depthwise layer and as the next block's residual: written planar,
    read planar by both, the rest of the run blocked again."""
    n = Net(3, 19, 21, ["y", "c3_r"], seed=13)
    a = n.conv("x", 24, 3, 1, 1)                        # 24×19×21
    d = n.conv(a, 24, 3, 1, 1, groups=24)
    b = n.conv(d, 24, 1, 1, 0, residual=a)              # "c3_r", a model output
    d = n.conv(b, 24, 3, 1, 1, groups=24)
    c = n.conv(d, 24, 1, 1, 0, residual=b)
    d = n.conv(c, 24, 3, 2, 1, groups=24)               # 24×10×11
    y = n.conv(d, 40, 1, 1, 0, act=False)
    n.rename(y, "y")
    return n


def stems():
    """Three stems (3×3 stride 2 on the 3-channel input, written blocked: the stem kernel, 16
    output pixels a vector on AVX-512, 8 on AVX2) of 40 channels (passes of 16 and 24), 24 channels without
    padding and 41 channels with padding 2 (passes of 16, 16 and 9; taps outside the input on
    both sides), on a 23×37 input (odd widths, a last group of fewer than 16 pixels), each read
    by a blocked layer."""
    n = Net(3, 23, 37, ["c3", "c6", "c8"], seed=17)
    a = n.conv("x", 40, 3, 2, 1)                        # c1: 40×12×19
    d = n.conv(a, 40, 3, 1, 1, groups=40)
    n.conv(d, 24, 1, 1, 0, act=False)                   # c3, an output
    c = n.conv("x", 24, 3, 2, 0)                        # c4: 24×11×18
    d = n.conv(c, 24, 3, 1, 1, groups=24)
    n.conv(d, 40, 1, 1, 0, act=False)                   # c6, an output
    e = n.conv("x", 41, 3, 2, 2, act=False)             # c7: 41×13×20
    n.conv(e, 24, 1, 1, 0, act=False)                   # c8, an output
    return n


def few_channel_stems(cin, h, w, first, second, seed):
    """Two stems on a cin-channel h×w input, each read blocked. The first (channels and padding
    `first`) feeds a depthwise separable residual block whose output is a model output: its
    1×1 layer writes planar with the stem's blob, blocked, as the residual. The second (channels,
    padding and the 1×1 layer's channels `second`) is read by a 1×1 layer alone, written planar
    as a model output. Channel counts not a multiple of 8 (27, 29, 41, 43; more than 16 and at
    least 3/4 of their blocks, so the rule puts them on the direct kernel) leave a block, and a
    half block, partly empty."""
    (c1, p1), (c2, p2, c3) = first, second
    n = Net(cin, h, w, ["c3_r", "c5"], seed=seed)
    a = n.conv("x", c1, 3, 2, p1)                       # c1: the first stem
    d = n.conv(a, c1, 3, 1, 1, groups=c1)
    n.conv(d, c1, 1, 1, 0, residual=a)                  # c3_r, an output: planar, residual blocked
    c = n.conv("x", c2, 3, 2, p2, act=False)            # c4: the second stem
    n.conv(c, c3, 1, 1, 0, act=False)                   # c5, an output
    return n


def eight_channels():
    """8-channel blobs, run blocked with CORTADO_CONV_ALGO=direct (the rule puts convolutions of
    16 or fewer filters on the GEMM): a stem of 8 channels (one pass, half a block), a residual
    block whose 1×1 layer reads 8 input channels, a depthwise stride-2 layer, and a 1×1 layer
    8→40 written planar as the model output (blocks of 16, 16 and 8 channels), on a 13×11 input."""
    n = Net(3, 13, 11, ["c5"], seed=19)
    a = n.conv("x", 8, 3, 2, 1)                         # 8×7×6
    d = n.conv(a, 8, 3, 1, 1, groups=8)
    b = n.conv(d, 8, 1, 1, 0, residual=a)
    d = n.conv(b, 8, 3, 2, 1, groups=8)                 # 8×4×3
    n.conv(d, 40, 1, 1, 0, act=False)                   # c5, an output
    return n


NETS = {"detector-like": detector_like, "strided-and-odd": strided_and_odd, "output-in-the-run": output_in_the_run,
        "stems": stems, "eight-channels": eight_channels,
        "stems-1ch": lambda: few_channel_stems(1, 23, 37, (27, 1), (41, 2, 29), seed=23),
        "stems-2ch": lambda: few_channel_stems(2, 24, 21, (24, 0), (40, 1, 43), seed=29),
        "stems-4ch": lambda: few_channel_stems(4, 23, 37, (41, 2), (24, 1, 27), seed=31)}
STEMS = {"detector-like": 1, "stems": 3, "eight-channels": 1, "stems-1ch": 2, "stems-2ch": 2, "stems-4ch": 2}
FORCED_DIRECT = {"eight-channels"}


def inspect_text(path, env):
    done = subprocess.run(cortado_command() + ["inspect", str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def predict_rows(path, xs, env, batch):
    """Predictions for rows xs, sent as FLOAT32 arrays (float32 values: sent exactly), so a
    network input read in place (`read where the request holds them`) is."""
    rows = path.parent / "rows.jsonl"
    with open(rows, "w") as f:
        for x in xs:
            f.write(json.dumps({"x": dict(array_json(x), dataType="FLOAT32")}) + "\n")
    done = subprocess.run(cortado_command() + ["predict", str(path), "--input", str(rows), "--batch", str(batch)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(l) for l in done.stdout.splitlines() if l.strip()]
    assert len(lines) == len(xs), done.stdout[:2000]
    return [{k: np.asarray(o["data"], dtype=np.float64).reshape(o["shape"]) for k, o in line.items()} for line in lines]


@pytest.mark.parametrize("blocked", ["1", "unfused", "0"], ids=["fused", "unfused", "planar"])
@pytest.mark.parametrize("isa", paths())
@pytest.mark.parametrize("net", sorted(NETS))
def test_blocked_runs_match_numpy(net, isa, blocked, tmp_path):
    n = NETS[net]()
    path = n.save(tmp_path)
    env = env_for(isa, blocked)
    if net in FORCED_DIRECT:
        env["CORTADO_CONV_ALGO"] = "direct"
    text = inspect_text(path, env)
    uses = blocked != "0" and isa != "portable"
    assert ("channel-blocked layout" in text) == uses, text
    if uses and net == "detector-like":
        line = next(l for l in text.splitlines() if "channel-blocked layout" in l)
        # A depthwise layer and the 1×1 layer after it run as one step unless told not to.
        assert (" + " in line) == (blocked == "1"), line
        # The global pooling reads a planar copy of the blob the depthwise layer reads blocked.
        reorders = int(line.rsplit(",", 1)[1].split()[0])
        assert reorders >= 1, line
    # The stem kernel (AVX-512 and AVX2) runs each stem that writes a blocked output.
    stems_run = text.count("on the stem kernel")
    assert stems_run == (STEMS.get(net, 0) if uses else 0), text
    # An input only stems read stays in the requests (the stem kernel reads it in place; the
    # batches of three rows below are large enough for that).
    assert ("(float32 arrays, not copied): x" in text) == (stems_run > 0), text
    xs = [rng(100 + i).normal(size=n.shape).astype(np.float32).astype(np.float64) for i in range(3)]
    for batch in (1, 3):
        for x, got in zip(xs, predict_rows(path, xs, env, batch)):
            want = n.reference(x)
            for name in n.outputs:
                assert_close(got[name], want[name], what=f"{net} {name}, {isa}, batch {batch}")
