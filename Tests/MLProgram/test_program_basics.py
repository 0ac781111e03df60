"""ML Programs end to end: the package container, planning, fp32 and fp16 programs, and the
element-wise, activation, linear-algebra, reduction and shape op families, against NumPy."""

import math

import numpy as np
import pytest

from milharness import assert_close, convert, ct, inspect, mb, only, predict, rng, run_program

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "abs", "acos", "add", "asin", "atan", "atanh", "cast", "ceil", "clamped_relu", "clip", "concat", "cond", "cos",
    "cosh", "elu", "equal", "erf", "exp", "exp2", "expand_dims", "flatten2d", "floor", "floor_div", "gelu", "greater",
    "greater_equal", "identity", "inverse", "leaky_relu", "less", "less_equal", "linear", "linear_activation", "log",
    "logical_and", "logical_not", "logical_or", "logical_xor", "matmul", "maximum", "minimum", "mod", "mul",
    "not_equal", "pow", "prelu", "real_div", "reduce_argmax", "reduce_argmin", "reduce_l1_norm", "reduce_l2_norm",
    "reduce_log_sum", "reduce_log_sum_exp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
    "reduce_sum_square", "relu", "relu6", "reshape", "round", "rsqrt", "scaled_tanh", "select", "shape", "sigmoid",
    "sigmoid_hard", "sign", "silu", "sin", "sinh", "slice_by_index", "slice_by_size", "softmax", "softplus",
    "softplus_parametric", "softsign", "split", "sqrt", "square", "squeeze", "stack", "sub", "tan", "tanh",
    "threshold", "thresholded_relu", "transpose", "while_loop",
]



def test_linear_relu_concat_fp32(tmp_path):
    r = rng(1)
    w = r.standard_normal((4, 3)).astype(np.float32)
    b = r.standard_normal(4).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS16)
    def prog(x):
        y = mb.relu(x=mb.linear(x=x, weight=w, bias=b))
        return mb.concat(values=[y, x], axis=1)

    x = r.standard_normal((2, 3)).astype(np.float32)
    got = only(run_program(prog, {"x": x}, tmp_path))
    y = np.maximum(x @ w.T + b, 0)
    assert_close(got, np.concatenate([y, x], axis=1), rtol=1e-5, atol=1e-6)


def test_fp16_program_rounds_like_fp16(tmp_path):
    """compute_precision=FLOAT16: weights stored in fp16 in the blob file, casts around the body."""
    r = rng(2)
    w = r.standard_normal((64, 32)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 32))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.tanh(x=mb.linear(x=x, weight=w))

    x = r.standard_normal((4, 32)).astype(np.float32)
    path = convert(prog, tmp_path, precision="fp16")
    assert (path / "Data/com.apple.CoreML/weights/weight.bin").stat().st_size > 64 * 32 * 2
    got = predict(path, [{"x": x}])[0]
    got = only(got)
    x16 = x.astype(np.float16).astype(np.float32)
    w16 = w.astype(np.float16).astype(np.float32)
    ref = np.tanh((x16 @ w16.T).astype(np.float16).astype(np.float32))
    # fp16 storage: one fp16 rounding per op on values of magnitude ≤ 1 after tanh.
    assert_close(got, ref, rtol=2e-3, atol=2e-3)
    info = inspect(path)
    assert "fp16" in info
    assert "Form:          Core ML package (.mlpackage" in info, info


UNARY = {
    "abs": np.abs, "ceil": np.ceil, "cos": np.cos, "cosh": np.cosh, "exp": np.exp, "exp2": np.exp2,
    "floor": np.floor, "round": np.round, "sign": np.sign, "sin": np.sin, "sinh": np.sinh, "square": np.square,
    "tan": np.tan, "tanh": np.tanh, "atan": np.arctan, "erf": np.vectorize(math.erf),
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)), "softsign": lambda x: x / (1 + np.abs(x)), "softplus": lambda x: np.log1p(np.exp(x)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, tmp_path):
    x = (rng(3).standard_normal((2, 5)) * 2).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5))], opset_version=ct.target.iOS15)
    def prog(x):
        return getattr(mb, op)(x=x)

    assert_close(only(run_program(prog, {"x": x}, tmp_path)), UNARY[op](x.astype(np.float64)), rtol=1e-5, atol=1e-5, what=op)


@pytest.mark.parametrize("op,ref,domain", [
    ("sqrt", np.sqrt, "pos"), ("rsqrt", lambda x: 1 / np.sqrt(x + 1e-12), "pos"), ("log", lambda x: np.log(x + 1e-45), "pos"),
    ("inverse", lambda x: 1 / (x + 1e-4), "pos"), ("acos", np.arccos, "unit"), ("asin", np.arcsin, "unit"),
    ("atanh", np.arctanh, "unit"),
])
def test_unary_domains(op, ref, domain, tmp_path):
    r = rng(4)
    x = (r.uniform(0.1, 4, (3, 4)) if domain == "pos" else r.uniform(-0.9, 0.9, (3, 4))).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return getattr(mb, op)(x=x)

    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6, what=op)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "floor_div": np.floor_divide, "mod": np.mod, "pow": None,
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_broadcast(op, tmp_path):
    r = rng(5)
    x = r.uniform(0.5, 3, (2, 1, 4)).astype(np.float32)
    y = r.uniform(0.5, 3, (3, 1)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 1, 4)), mb.TensorSpec(shape=(3, 1))], opset_version=ct.target.iOS15)
    def prog(x, y):
        return getattr(mb, op)(x=x, y=y)

    ref = np.power(x, y) if op == "pow" else BINARY[op](x, y)
    got = only(run_program(prog, {"x": x, "y": y}, tmp_path))
    assert got.shape == (2, 3, 4)
    assert_close(got, ref, rtol=1e-5, atol=1e-5, what=op)


@pytest.mark.parametrize("op,ref", [("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
                                    ("greater_equal", np.greater_equal), ("less", np.less), ("less_equal", np.less_equal)])
def test_comparison_then_select(op, ref, tmp_path):
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    y = np.array([[2, 2, 2, 5]], dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4)), mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS15)
    def prog(x, y):
        return mb.select(cond=getattr(mb, op)(x=x, y=y), a=x, b=mb.mul(x=y, y=-1.0))

    assert_close(only(run_program(prog, {"x": x, "y": y}, tmp_path)), np.where(ref(x, y), x, -y))


def test_logical_ops(tmp_path):
    x = np.array([1, 2, 3, 4], dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(4,))], opset_version=ct.target.iOS15)
    def prog(x):
        a = mb.greater(x=x, y=1.5)
        b = mb.less(x=x, y=3.5)
        c = mb.logical_xor(x=mb.logical_and(x=a, y=b), y=mb.logical_not(x=mb.logical_or(x=a, y=b)))
        return mb.cast(x=c, dtype="fp32")

    a, b = x > 1.5, x < 3.5
    assert_close(only(run_program(prog, {"x": x}, tmp_path)), np.logical_xor(a & b, ~(a | b)).astype(np.float32))


@pytest.mark.parametrize("op,kwargs,ref", [
    ("elu", {"alpha": 0.7}, lambda x: np.where(x > 0, x, 0.7 * (np.exp(x) - 1))),
    ("leaky_relu", {"alpha": 0.1}, lambda x: np.where(x >= 0, x, 0.1 * x)),
    ("clamped_relu", {"alpha": 0.1, "beta": 1.5}, lambda x: np.minimum(1.5, np.where(x >= 0, x, 0.1 * x))),
    ("linear_activation", {"alpha": 2.0, "beta": -1.0}, lambda x: 2 * x - 1),
    ("scaled_tanh", {"alpha": 1.5, "beta": 0.5}, lambda x: 1.5 * np.tanh(0.5 * x)),
    ("sigmoid_hard", {"alpha": 0.3, "beta": 0.4}, lambda x: np.clip(0.3 * x + 0.4, 0, 1)),
    ("thresholded_relu", {"alpha": 0.5}, lambda x: np.where(x > 0.5, x, 0)),
    ("threshold", {"alpha": 0.25}, lambda x: np.maximum(x, 0.25)),
    ("clip", {"alpha": -0.5, "beta": 0.5}, lambda x: np.clip(x, -0.5, 0.5)),
    ("gelu", {"mode": "EXACT"}, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))),
    ("gelu", {"mode": "TANH_APPROXIMATION"}, lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("gelu", {"mode": "SIGMOID_APPROXIMATION"}, lambda x: x / (1 + np.exp(-1.702 * x))),
    ("softmax", {"axis": 1}, lambda x: np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)),
])
def test_activation_parameters(op, kwargs, ref, tmp_path):
    x = (rng(6).standard_normal((2, 3, 4)) * 2).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return getattr(mb, op)(x=x, **kwargs)

    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref(x.astype(np.float64)), rtol=1e-5, atol=1e-5, what=op)


def test_prelu_and_softplus_parametric(tmp_path):
    r = rng(7)
    x = r.standard_normal((1, 3, 2, 2)).astype(np.float32)
    alpha = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    beta = np.array([1.0, 2.0, 0.5], dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 2, 2))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.prelu(x=x, alpha=alpha), mb.softplus_parametric(x=x, alpha=alpha, beta=beta)

    out = run_program(prog, {"x": x}, tmp_path)
    a, b = alpha.reshape(1, 3, 1, 1), beta.reshape(1, 3, 1, 1)
    p, s = list(out.values())
    assert_close(p, np.where(x >= 0, x, a * x))
    assert_close(s, a * np.log1p(np.exp(b * x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_batched_broadcast(tx, ty, tmp_path):
    r = rng(8)
    xs = (2, 1, 5, 3) if tx else (2, 1, 3, 5)
    ys = (4, 6, 5) if ty else (4, 5, 6)
    x = r.standard_normal(xs).astype(np.float32)
    y = r.standard_normal(ys).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=xs), mb.TensorSpec(shape=ys)], opset_version=ct.target.iOS15)
    def prog(x, y):
        return mb.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty)

    a = np.swapaxes(x, -1, -2) if tx else x
    b = np.swapaxes(y, -1, -2) if ty else y
    assert_close(only(run_program(prog, {"x": x, "y": y}, tmp_path)), np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_matmul_vector_and_constant_weight(tmp_path):
    r = rng(9)
    w = r.standard_normal((5, 3)).astype(np.float32)
    v = r.standard_normal((3, 1)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(5,))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.matmul(x=mb.matmul(x=x, y=w), y=v)

    x = r.standard_normal(5).astype(np.float32)
    got = only(run_program(prog, {"x": x}, tmp_path))
    assert_close(got.reshape(-1), np.array([(x @ w) @ v]).reshape(-1), rtol=1e-5, atol=1e-5)


REDUCE = {
    "reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_prod": np.prod, "reduce_max": np.max, "reduce_min": np.min,
    "reduce_l1_norm": lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims),
    "reduce_l2_norm": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
    "reduce_sum_square": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "reduce_log_sum": lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)),
    "reduce_log_sum_exp": lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)),
}


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("axes,keep", [([1], False), ([0, 2], True), (None, False)])
def test_reductions(op, axes, keep, tmp_path):
    x = rng(10).uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return getattr(mb, op)(x=x, axes=axes, keep_dims=keep)

    ref = REDUCE[op](x.astype(np.float64), axis=None if axes is None else tuple(axes), keepdims=keep)
    got = only(run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-5, atol=1e-5, what=op)


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("axes,keep", [([2, 3], False), ([-1], True), ([1, 2, 3], True)])
def test_reductions_over_trailing_axes(op, axes, keep, tmp_path):
    """Trailing axes (a global pool's H and W, the last axis) take the interpreter's contiguous
    path, sums in 16 lanes: runs of 63, 9 and 315 values (whole vectors and a remainder). rtol
    and atol 1e-5 against float64 NumPy."""
    x = rng(11).uniform(0.5, 1.5, (2, 5, 7, 9)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5, 7, 9))], opset_version=ct.target.iOS15)
    def prog(x):
        return getattr(mb, op)(x=x, axes=axes, keep_dims=keep)

    ref = REDUCE[op](x.astype(np.float64), axis=tuple(axes), keepdims=keep)
    got = only(run_program(prog, {"x": x}, tmp_path))
    assert_close(got, ref, rtol=1e-5, atol=1e-5, what=op)


@pytest.mark.parametrize("op,ref", [("reduce_argmax", np.argmax), ("reduce_argmin", np.argmin)])
def test_arg_reductions(op, ref, tmp_path):
    x = rng(11).standard_normal((3, 5)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(3, 5))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.cast(x=getattr(mb, op)(x=x, axis=1), dtype="fp32")

    assert_close(only(run_program(prog, {"x": x}, tmp_path)), ref(x, axis=1))


def test_shape_ops(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        t = mb.transpose(x=x, perm=[2, 0, 1])                        # 4,2,3
        r = mb.reshape(x=t, shape=[4, -1])                            # 4,6
        e = mb.expand_dims(x=r, axes=[0, -1])                         # 1,4,6,1
        s = mb.squeeze(x=e, axes=[0])                                 # 4,6,1
        f = mb.flatten2d(x=s, axis=1)                                 # 4,6
        a, b = mb.split(x=f, split_sizes=[2, 4], axis=1)
        st = mb.stack(values=[a, a], axis=0)                          # 2,4,2
        sl = mb.slice_by_index(x=x, begin=[1, 0, 3], end=[2, 3, 0], stride=[1, 2, -2], squeeze_mask=[True, False, False])
        sz = mb.slice_by_size(x=x, begin=[0, 1, 1], size=[-1, 2, 2])
        sh = mb.cast(x=mb.shape(x=st), dtype="fp32")
        return mb.identity(x=b), st, sl, sz, sh

    out = list(run_program(prog, {"x": x}, tmp_path).values())
    f = np.transpose(x, (2, 0, 1)).reshape(4, 6)
    assert_close(out[0], f[:, 2:])
    assert_close(out[1], np.stack([f[:, :2], f[:, :2]]))
    assert_close(out[2], x[1, 0:3:2, 3:0:-2])
    assert_close(out[3], x[:, 1:3, 1:3])
    assert_close(out[4], [2, 4, 2])


def test_concat_interleave_and_cast_int(tmp_path):
    x = np.array([[1.7, -2.5], [3.2, 4.9]], dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 2))], opset_version=ct.target.iOS15)
    def prog(x):
        i = mb.cast(x=x, dtype="int32")
        return mb.concat(values=[x, mb.mul(x=x, y=10.0)], axis=1, interleave=True), mb.cast(x=i, dtype="fp32")

    a, b = run_program(prog, {"x": x}, tmp_path).values()
    assert_close(a, np.stack([x, 10 * x], axis=2).reshape(2, 4))
    assert_close(b, x.astype(np.int32))


def test_cond_and_while_loop(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1,))], opset_version=ct.target.iOS15)
    def prog(x):
        def true_fn():
            return mb.mul(x=x, y=2.0)

        def false_fn():
            return mb.sub(x=x, y=1.0)

        c = mb.cond(pred=mb.squeeze(x=mb.greater(x=x, y=0.0)), _true_fn=true_fn, _false_fn=false_fn)

        def cond(v, i):
            return mb.less(x=i, y=5)

        def body(v, i):
            return mb.add(x=v, y=v), mb.add(x=i, y=1)

        v, _ = mb.while_loop(_cond=cond, _body=body, loop_vars=(c, 0))
        return v

    for value in (3.0, -3.0):
        x = np.array([value], dtype=np.float32)
        c = 2 * x if value > 0 else x - 1
        assert_close(only(run_program(prog, {"x": x}, tmp_path)), c * 32)


def test_folding_at_load(tmp_path):
    """Ops whose inputs are all constants run once at load: inspect reports them."""
    w = np.ones((3, 3), dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS15)
    def prog(x):
        w2 = mb.transpose(x=mb.mul(x=w, y=2.0), perm=[1, 0])
        return mb.matmul(x=x, y=w2)

    path = convert(prog, tmp_path)
    assert "2 computed at load" in inspect(path)
    x = np.array([[1, 2, 3]], dtype=np.float32)
    assert_close(only(predict(path, [{"x": x}])[0]), x @ (2 * w).T)
