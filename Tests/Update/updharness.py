"""Helpers for the update tests: build updatable models with coremltools, run `cortado update`,
and a NumPy re-implementation of the training Cortado documents (NNTrainer.swift), written
independently so that the two can be compared weight by weight.

The reference follows the format's declared training, with Cortado's stated choices where the
format is silent: mini-batch loss and gradients are means over the batch (the last batch may be
smaller), SGD is v <- m*v + g; w <- w - lr*v, Adam is Kingma & Ba with bias correction, MSE is
the mean over elements, cross-entropy is -log softmax(z)[target], shuffling draws from SplitMix64
seeded with `seed` (Fisher-Yates each epoch).
"""

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from nnharness import cortado_command

MASK = (1 << 64) - 1


# ---------------------------------------------------------------- running cortado


def write_rows(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps({k: encode(v) for k, v in row.items()}) + "\n")


def encode(v):
    if isinstance(v, np.ndarray):
        return {"shape": list(v.shape), "dataType": "DOUBLE", "data": v.astype(np.float64).reshape(-1).tolist()}
    return v


def cortado_update(model, rows, output, *args, rows_text=None):
    """Runs `cortado update`; returns the CompletedProcess (text)."""
    with tempfile.TemporaryDirectory() as tmp:
        training = Path(tmp) / "rows.jsonl"
        if rows_text is not None:
            training.write_text(rows_text)
        else:
            write_rows(training, rows)
        return subprocess.run(cortado_command() + ["update", str(model), "--training", str(training), "--output", str(output), *map(str, args)],
                              capture_output=True, text=True, timeout=300)


def cortado_predict(model, rows):
    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "rows.jsonl"
        write_rows(inp, rows)
        proc = subprocess.run(cortado_command() + ["predict", str(model), "--input", str(inp)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        out.append({k: (np.asarray(v["data"]).reshape(v["shape"]) if isinstance(v, dict) and "data" in v else v) for k, v in row.items()})
    return out


def load_spec(path):
    import coremltools as ct
    return ct.utils.load_spec(str(path))


def save(spec, path):
    Path(path).write_bytes(spec.SerializeToString(deterministic=True))
    return path


# ---------------------------------------------------------------- reading weights from a spec


def layers_of(spec):
    kind = spec.WhichOneof("Type")
    return getattr(spec, kind).layers


def weights(spec, name):
    """(W, b) of an innerProduct or convolution layer, as float64, in the spec's layout."""
    for layer in layers_of(spec):
        if layer.name != name:
            continue
        kind = layer.WhichOneof("layer")
        p = getattr(layer, kind)
        w = np.asarray(p.weights.floatValue, dtype=np.float32).astype(np.float64)
        if kind == "innerProduct":
            w = w.reshape(p.outputChannels, p.inputChannels)
        else:
            kh, kw = (list(p.kernelSize) or [3, 3])
            w = w.reshape(p.outputChannels, p.kernelChannels, kh, kw)
        b = np.asarray(p.bias.floatValue, dtype=np.float32).astype(np.float64) if p.hasBias else None
        return w, b
    raise KeyError(name)


# ---------------------------------------------------------------- the reference network


class Dense:
    def __init__(self, name, W, b, updatable):
        self.name, self.W, self.b, self.updatable = name, W.copy(), None if b is None else b.copy(), updatable

    def params(self):
        return [("W", self.W)] + ([("b", self.b)] if self.b is not None else [])

    def forward(self, x):
        y = self.W @ x.reshape(-1)
        return y + self.b if self.b is not None else y

    def backward(self, x, y, dy):
        x = x.reshape(-1)
        return self.W.T @ dy, {"W": np.outer(dy, x), "b": dy.copy()}


class Conv:
    """One group, the spec's (O, C, kh, kw) layout; stride s; padding "valid" or "same"
    (Core ML's default BOTTOM_RIGHT_HEAVY: the odd pixel of padding goes after the data)."""

    def __init__(self, name, W, b, updatable, stride=1, padding="valid"):
        self.name, self.W, self.b, self.updatable = name, W.copy(), None if b is None else b.copy(), updatable
        self.s, self.padding = stride, padding

    def params(self):
        return [("W", self.W)] + ([("b", self.b)] if self.b is not None else [])

    def pad(self, x):
        _, kh, kw = self.W.shape[1:]
        if self.padding == "valid":
            return x, (0, 0)
        _, H, Wd = x.shape
        s = self.s
        th = max(0, (-(-H // s) - 1) * s + kh - H)
        tw = max(0, (-(-Wd // s) - 1) * s + kw - Wd)
        top, left = th // 2, tw // 2
        return np.pad(x, ((0, 0), (top, th - top), (left, tw - left))), (top, left)

    def forward(self, x):
        O, C, kh, kw = self.W.shape
        xp, _ = self.pad(x)
        _, H, Wd = xp.shape
        s = self.s
        oh, ow = (H - kh) // s + 1, (Wd - kw) // s + 1
        y = np.zeros((O, oh, ow))
        for i in range(oh):
            for j in range(ow):
                y[:, i, j] = np.tensordot(self.W, xp[:, i * s:i * s + kh, j * s:j * s + kw], axes=([1, 2, 3], [0, 1, 2]))
        if self.b is not None:
            y += self.b[:, None, None]
        return y

    def backward(self, x, y, dy):
        O, C, kh, kw = self.W.shape
        xp, (top, left) = self.pad(x)
        s = self.s
        dxp = np.zeros_like(xp)
        gW = np.zeros_like(self.W)
        for i in range(dy.shape[1]):
            for j in range(dy.shape[2]):
                gW += dy[:, i, j][:, None, None, None] * xp[None, :, i * s:i * s + kh, j * s:j * s + kw]
                dxp[:, i * s:i * s + kh, j * s:j * s + kw] += np.tensordot(dy[:, i, j], self.W, axes=(0, 0))
        dx = dxp[:, top:top + x.shape[1], left:left + x.shape[2]]
        return dx, {"W": gW, "b": dy.sum(axis=(1, 2))}


class Fn:
    """A layer without parameters: forward f(x), backward g(x, y, dy)."""
    updatable = False

    def __init__(self, f, g):
        self.f, self.g = f, g

    def params(self):
        return []

    def forward(self, x):
        return self.f(x)

    def backward(self, x, y, dy):
        return self.g(x, y, dy), {}


def relu():
    return Fn(lambda x: np.maximum(x, 0), lambda x, y, dy: dy * (x > 0))


def tanh():
    return Fn(np.tanh, lambda x, y, dy: dy * (1 - y * y))


def sigmoid():
    return Fn(lambda x: 1 / (1 + np.exp(-x)), lambda x, y, dy: dy * y * (1 - y))


def batchnorm(gamma, beta, mean, var, eps):
    s = gamma / np.sqrt(var + eps)
    return Fn(lambda x: x * s + (beta - mean * s), lambda x, y, dy: dy * s)


def maxpool2():
    def f(x):
        C, H, W = x.shape
        return x.reshape(C, H // 2, 2, W // 2, 2).max(axis=(2, 4))

    def g(x, y, dy):
        C, H, W = x.shape
        dx = np.zeros_like(x)
        for c in range(C):
            for i in range(H // 2):
                for j in range(W // 2):
                    win = x[c, 2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(-1)
                    k = int(np.argmax(win))  # first maximum, as Cortado
                    dx[c, 2 * i + k // 2, 2 * j + k % 2] += dy[c, i, j]
        return dx
    return Fn(f, g)


def leaky_relu(alpha):
    return Fn(lambda x: np.where(x >= 0, x, alpha * x), lambda x, y, dy: dy * np.where(x >= 0, 1, alpha))


def avgpool2():
    def f(x):
        C, H, W = x.shape
        return x.reshape(C, H // 2, 2, W // 2, 2).mean(axis=(2, 4))
    return Fn(f, lambda x, y, dy: np.repeat(np.repeat(dy, 2, axis=1), 2, axis=2) / 4)


def relu_sigmoid_concat():
    """Two branches on one blob, concatenated: ReLU(x) then sigmoid(x)."""
    def f(x):
        return np.concatenate([np.maximum(x, 0), 1 / (1 + np.exp(-x))])

    def g(x, y, dy):
        n = x.size
        s = 1 / (1 + np.exp(-x))
        return dy[:n] * (x > 0) + dy[n:] * s * (1 - s)
    return Fn(f, g)


def flatten():
    return Fn(lambda x: x.reshape(-1), lambda x, y, dy: dy.reshape(x.shape))


def splitmix64(seed):
    state = seed & MASK
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


class Reference:
    """A sequential network ending in a softmax (loss "ce", the last layer must be the
    softmax) or not (loss "mse"), trained as NNTrainer documents."""

    def __init__(self, layers, loss):
        self.layers, self.loss = layers, loss

    def forward(self, x):
        xs, ys = [], []
        for layer in self.layers:
            xs.append(x)
            x = layer.forward(x)
            ys.append(x)
        return xs, ys

    def predict(self, x):
        return self.forward(x)[1][-1]

    def example(self, x, t):
        """Loss and parameter gradients of one example."""
        xs, ys = self.forward(x)
        grads = {}
        if self.loss == "ce":
            z = xs[-1]
            m = z.max()
            loss = np.log(np.exp(z - m).sum()) + m - z[t]
            dy = ys[-1].copy()
            dy[t] -= 1
            last = len(self.layers) - 2
        else:
            y = ys[-1].reshape(-1)
            d = y - np.asarray(t, dtype=np.float64).reshape(-1)
            loss = np.mean(d * d)
            dy = (2 * d / d.size).reshape(ys[-1].shape)
            last = len(self.layers) - 1
        for k in range(last, -1, -1):
            layer = self.layers[k]
            dy, g = layer.backward(xs[k], ys[k], dy)
            if layer.updatable:
                grads[k] = g
        return loss, grads

    def train(self, X, T, epochs, batch, lr, optimizer="sgd", momentum=0.0, beta1=0.9, beta2=0.999, eps=1e-8,
              shuffle=False, seed=0):
        state = {}
        step = 0
        rng = splitmix64(seed)
        losses = []
        for _ in range(epochs):
            order = list(range(len(X)))
            if shuffle:
                for i in range(len(order) - 1, 0, -1):
                    j = next(rng) % (i + 1)
                    order[i], order[j] = order[j], order[i]
            total = 0.0
            for start in range(0, len(order), batch):
                members = order[start:start + batch]
                sums = {}
                for e in members:
                    loss, grads = self.example(X[e], T[e])
                    total += loss
                    for k, g in grads.items():
                        for name, v in g.items():
                            sums[(k, name)] = sums.get((k, name), 0) + v
                step += 1
                for (k, name), g in sums.items():
                    layer = self.layers[k]
                    p = getattr(layer, name)
                    if p is None:
                        continue
                    g = g / len(members)
                    if optimizer == "sgd":
                        v = momentum * state.get((k, name), 0) + g
                        state[(k, name)] = v
                        p -= lr * v
                    else:
                        m = beta1 * state.get((k, name, "m"), 0) + (1 - beta1) * g
                        s = beta2 * state.get((k, name, "v"), 0) + (1 - beta2) * g * g
                        state[(k, name, "m")], state[(k, name, "v")] = m, s
                        p -= lr * (m / (1 - beta1 ** step)) / (np.sqrt(s / (1 - beta2 ** step)) + eps)
            losses.append(total / len(X))
        return losses
