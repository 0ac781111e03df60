"""ML Program tensor ops against NumPy references written here from the op definitions:
construction and rearrangement (tile, pad, reverse, fill, range_1d, band_part, one_hot, …),
gather and scatter, sorting (topk, argsort, non_maximum_suppression), lists and random ops.

Tensors reach each op through program inputs, so the MIL builder cannot fold the op away and
it runs in Cortado."""

import numpy as np
import pytest

from milharness import assert_close, ct, mb, only, predict, rng, types
from milharness import convert as convert_any

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "add", "argsort", "band_part", "cast", "cumsum", "fill", "fill_like", "gather", "gather_along_axis", "gather_nd",
    "identity", "less", "list_gather", "list_length", "list_read", "list_scatter", "list_write", "make_list", "mul",
    "non_maximum_suppression", "non_zero", "one_hot", "pad", "random_bernoulli", "random_categorical",
    "random_normal", "random_uniform", "range_1d", "reshape_like", "reverse", "reverse_sequence", "scatter",
    "scatter_along_axis", "scatter_nd", "slice_by_index", "slice_update", "squeeze", "sub", "tile", "topk",
    "while_loop",
]


I32 = types.int32


def spec(shape, dtype=types.fp32):
    return mb.TensorSpec(shape=shape, dtype=dtype)


def convert(prog, tmp_path, precision="fp32"):
    """Converts for the program's own opset (the converter refuses newer ops otherwise)."""
    return convert_any(prog, tmp_path, precision=precision, minimum_deployment_target=prog.functions["main"].opset_version)


def run_program(prog, inputs, tmp_path, precision="fp32"):
    return predict(convert(prog, tmp_path, precision), [inputs])[0]


def check(got, ref, rtol=1e-6, atol=1e-6, what="output"):
    """Values and shape (assert_close alone reshapes to the reference's shape)."""
    ref = np.asarray(ref)
    assert tuple(np.shape(got)) == ref.shape, f"{what}: shape {np.shape(got)}, expected {ref.shape}"
    assert_close(got, ref, rtol=rtol, atol=atol, what=what)


# ---------------------------------------------------------------- construction / rearrangement

def test_tile(tmp_path):
    x = rng(1).standard_normal((2, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((2, 3))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.tile(x=x, reps=[2, 3])

    check(only(run_program(prog, {"x": x}, tmp_path)), np.tile(x, (2, 3)))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
@pytest.mark.parametrize("opset", [ct.target.iOS15, ct.target.iOS17])
def test_pad(mode, opset, tmp_path):
    x = rng(2).standard_normal((2, 3, 4)).astype(np.float32)

    @mb.program(input_specs=[spec((2, 3, 4))], opset_version=opset)
    def prog(x):
        kw = dict(constant_val=np.float32(1.5)) if mode == "constant" else {}
        # Two padded axes of three: pad applies to the last ones.
        return mb.pad(x=x, pad=np.array([1, 2, 3, 0], np.int32), mode=mode, **kw)

    widths = [(0, 0), (1, 2), (3, 0)]
    ref = np.pad(x, widths, mode="constant", constant_values=1.5) if mode == "constant" else \
        np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
    check(only(run_program(prog, {"x": x}, tmp_path)), ref)


def test_pad_amounts_from_an_input(tmp_path):
    x = rng(3).standard_normal((3, 4)).astype(np.float32)

    @mb.program(input_specs=[spec((3, 4)), spec((4,), I32)], opset_version=ct.target.iOS16)
    def prog(x, p):
        return mb.pad(x=x, pad=p, mode="reflect")

    p = np.array([2, 1, 0, 3], np.int32)
    check(only(run_program(prog, {"x": x, "p": p}, tmp_path)), np.pad(x, [(2, 1), (0, 3)], mode="reflect"))


@pytest.mark.parametrize("axes", [None, [0, -1], [1]])
def test_reverse(axes, tmp_path):
    x = rng(4).standard_normal((2, 3, 4)).astype(np.float32)

    @mb.program(input_specs=[spec((2, 3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.reverse(x=x, axes=axes) if axes is not None else mb.reverse(x=x)

    ref = np.flip(x, axis=None if axes is None else tuple(axes))
    check(only(run_program(prog, {"x": x}, tmp_path)), ref)


def test_reverse_sequence(tmp_path):
    x = rng(5).standard_normal((5, 3, 2)).astype(np.float32)
    lengths = np.array([5, 2, 0], np.int32)

    @mb.program(input_specs=[spec((5, 3, 2)), spec((3,), I32)], opset_version=ct.target.iOS15)
    def prog(x, lengths):
        return mb.reverse_sequence(x=x, lengths=lengths, seq_axis=0, batch_axis=1)

    ref = x.copy()
    for b, n in enumerate(lengths):
        ref[:n, b] = x[:n, b][::-1]
    check(only(run_program(prog, {"x": x, "lengths": lengths}, tmp_path)), ref)


def test_fill_with_a_shape_from_an_input(tmp_path):
    @mb.program(input_specs=[spec((3,), I32)], opset_version=ct.target.iOS15)
    def prog(s):
        return mb.fill(shape=s, value=2.5)

    check(only(run_program(prog, {"s": np.array([2, 1, 3], np.int32)}, tmp_path)), np.full((2, 1, 3), 2.5))


def test_fill_like(tmp_path):
    @mb.program(input_specs=[spec((2, 5))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.fill_like(ref_tensor=x, value=np.int32(7))

    check(only(run_program(prog, {"x": np.zeros((2, 5), np.float32)}, tmp_path)), np.full((2, 5), 7))


def test_reshape_like(tmp_path):
    x = rng(6).standard_normal((12, 14)).astype(np.float32)

    @mb.program(input_specs=[spec((12, 14)), spec((2, 3, 5)), spec((1, 4, 7))], opset_version=ct.target.iOS16)
    def prog(x, a, b):
        return mb.reshape_like(x=x, ref_tensors=(a, b), begins=(0, 1), ends=(2, 0), end_masks=(False, True))

    inputs = {"x": x, "a": np.zeros((2, 3, 5), np.float32), "b": np.zeros((1, 4, 7), np.float32)}
    check(only(run_program(prog, inputs, tmp_path)), x.reshape(2, 3, 4, 7))


@pytest.mark.parametrize("start,end,step", [(1.5, 7.0, 0.75), (5.0, -2.0, -1.5), (3.0, 1.0, 1.0)])
def test_range_1d_float(start, end, step, tmp_path):
    @mb.program(input_specs=[spec((1,)), spec((1,)), spec((1,))], opset_version=ct.target.iOS15)
    def prog(a, b, c):
        return mb.range_1d(start=mb.squeeze(x=a), end=mb.squeeze(x=b), step=mb.squeeze(x=c))

    f = lambda v: np.array([v], np.float32)
    got = only(run_program(prog, {"a": f(start), "b": f(end), "c": f(step)}, tmp_path))
    check(got, np.arange(start, end, step, dtype=np.float64), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("start,end,step", [(2, 11, 3), (4, -5, -2), (6, 6, 1), (9, 2, 2)])
def test_range_1d_int(start, end, step, tmp_path):
    @mb.program(input_specs=[spec((1,), I32), spec((1,), I32), spec((1,), I32)], opset_version=ct.target.iOS15)
    def prog(a, b, c):
        return mb.range_1d(start=mb.squeeze(x=a), end=mb.squeeze(x=b), step=mb.squeeze(x=c))

    f = lambda v: np.array([v], np.int32)
    got = only(run_program(prog, {"a": f(start), "b": f(end), "c": f(step)}, tmp_path))
    check(got, np.arange(start, end, step))


@pytest.mark.parametrize("lower,upper", [(-1, 0), (0, -1), (0, 0), (1, 2), (-1, -1)])
def test_band_part(lower, upper, tmp_path):
    x = rng(7).standard_normal((2, 4, 5)).astype(np.float32)

    @mb.program(input_specs=[spec((2, 4, 5))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.band_part(x=x, lower=lower, upper=upper)

    m, n = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    band = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    check(only(run_program(prog, {"x": x}, tmp_path)), x * band)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis, tmp_path):
    idx = np.array([[0, 3, 1], [4, 2, 7]], np.int32)  # 4 and 7 are out of range: all off

    @mb.program(input_specs=[spec((2, 3), I32)], opset_version=ct.target.iOS15)
    def prog(i):
        return mb.one_hot(indices=i, one_hot_vector_size=4, axis=axis, on_value=5.0, off_value=-1.0)

    hot = np.where(idx[..., None] == np.arange(4), 5.0, -1.0)  # axis -1
    ref = np.moveaxis(hot, -1, axis if axis >= 0 else hot.ndim + axis)
    check(only(run_program(prog, {"i": idx}, tmp_path)), ref)


def test_non_zero(tmp_path):
    x = np.array([[0, 1.5, 0], [2, 0, -3]], np.float32)

    @mb.program(input_specs=[spec((2, 3))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.non_zero(x=x)

    check(only(run_program(prog, {"x": x}, tmp_path)), np.transpose(np.nonzero(x)))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(exclusive, reverse, tmp_path):
    x = rng(8).standard_normal((3, 4, 2)).astype(np.float32)

    @mb.program(input_specs=[spec((3, 4, 2))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.cumsum(x=x, axis=1, exclusive=exclusive, reverse=reverse)

    v = np.flip(x, 1) if reverse else x
    c = np.cumsum(v.astype(np.float64), axis=1)
    if exclusive:
        c = np.concatenate([np.zeros_like(c[:, :1]), c[:, :-1]], axis=1)
    ref = np.flip(c, 1) if reverse else c
    check(only(run_program(prog, {"x": x}, tmp_path)), ref, rtol=1e-5, atol=1e-5)


def test_cumsum_int(tmp_path):
    x = np.array([[3, -1, 4], [1, 5, -9]], np.int32)

    @mb.program(input_specs=[spec((2, 3), I32)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.cumsum(x=x, axis=-1)

    check(only(run_program(prog, {"x": x}, tmp_path)), np.cumsum(x, axis=-1))


def test_fp16_program_pads_gathers_and_sums(tmp_path):
    """compute_precision=FLOAT16: the ops run on fp16 values and their results are stored as fp16."""
    x = rng(33).standard_normal((3, 5)).astype(np.float32)
    idx = np.array([4, -5, 2], np.int32)

    @mb.program(input_specs=[spec((3, 5)), spec((3,), I32)], opset_version=ct.target.iOS16)
    def prog(x, i):
        y = mb.pad(x=x, pad=np.array([0, 0, 1, 1], np.int32), mode="replicate")
        return mb.cumsum(x=mb.gather(x=y, indices=i, axis=1), axis=1)

    f16 = lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float64)
    y = np.pad(f16(x), [(0, 0), (1, 1)], mode="edge")
    g = y[:, np.where(idx < 0, idx + 7, idx)]
    ref = np.cumsum(g, axis=1)
    # Three fp16 roundings of sums of magnitude ≤ about 8.
    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path, precision="fp16")), ref, rtol=3e-3, atol=1e-2)


def test_slice_update(tmp_path):
    x = rng(9).standard_normal((4, 6)).astype(np.float32)
    u = rng(10).standard_normal((2, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((4, 6)), spec((2, 3))], opset_version=ct.target.iOS18)
    def prog(x, u):
        return mb.slice_update(x=x, update=u, begin=[1, 0], end=[3, 6], stride=[1, 2])

    ref = x.copy()
    ref[1:3, 0:6:2] = u
    check(only(run_program(prog, {"x": x, "u": u}, tmp_path)), ref)


def test_slice_update_masks(tmp_path):
    x = rng(11).standard_normal((3, 4, 5)).astype(np.float32)
    u = rng(12).standard_normal((4, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((3, 4, 5)), spec((4, 3))], opset_version=ct.target.iOS18)
    def prog(x, u):
        return mb.slice_update(x=x, update=u, begin=[2, 0, 4], end=[0, 0, 0], stride=[1, 1, -2],
                               begin_mask=[False, True, False], end_mask=[False, True, True],
                               squeeze_mask=[True, False, False])

    ref = x.copy()
    ref[2, :, 4::-2] = u
    check(only(run_program(prog, {"x": x, "u": u}, tmp_path)), ref)


# ---------------------------------------------------------------- gather / scatter

def np_gather(x, idx, axis, batch_dims=0):
    """tf.gather with batch_dims, written from the op's definition."""
    if batch_dims == 0:
        return np.take(x, idx, axis=axis)
    return np.stack([np_gather(x[b], idx[b], axis - 1, batch_dims - 1) for b in range(x.shape[0])])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_negative_indices(axis, tmp_path):
    x = rng(13).standard_normal((3, 4, 5)).astype(np.float32)
    n = x.shape[axis]
    idx = np.array([[0, -1], [n - 2, -n]], np.int32)

    @mb.program(input_specs=[spec((3, 4, 5)), spec((2, 2), I32)], opset_version=ct.target.iOS15)
    def prog(x, i):
        return mb.gather(x=x, indices=i, axis=axis)

    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), np.take(x, idx, axis=axis))


@pytest.mark.parametrize("axis,batch_dims", [(1, 1), (2, 1), (2, 2)])
def test_gather_batch_dims(axis, batch_dims, tmp_path):
    x = rng(14).standard_normal((2, 3, 4)).astype(np.float32)
    shape = (2, 3, 2)[:batch_dims] + (2,)
    idx = rng(15).integers(0, x.shape[axis], size=shape).astype(np.int32)

    @mb.program(input_specs=[spec((2, 3, 4)), spec(shape, I32)], opset_version=ct.target.iOS16)
    def prog(x, i):
        return mb.gather(x=x, indices=i, axis=axis, batch_dims=batch_dims)

    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), np_gather(x, idx, axis, batch_dims))


def test_gather_int_values_iOS17(tmp_path):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    idx = np.array([2, 0, 2], np.int32)

    @mb.program(input_specs=[spec((3, 4), I32), spec((3,), I32)], opset_version=ct.target.iOS17)
    def prog(x, i):
        return mb.gather(x=x, indices=i, axis=0, validate_indices=True)

    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), x[idx])


@pytest.mark.parametrize("opset,validate,idx", [
    (ct.target.iOS15, False, [0, 3]),     # past the end
    (ct.target.iOS17, True, [0, -1]),     # iOS17: negative is out of bounds when validated
])
def test_gather_out_of_range_fails(opset, validate, idx, tmp_path):
    @mb.program(input_specs=[spec((3, 2)), spec((2,), I32)], opset_version=opset)
    def prog(x, i):
        kw = dict(validate_indices=validate) if opset >= ct.target.iOS17 else {}
        return mb.gather(x=x, indices=i, axis=0, **kw)

    path = convert(prog, tmp_path)
    _, err = predict(path, [{"x": np.zeros((3, 2), np.float32), "i": np.array(idx, np.int32)}], expect_failure=True)
    assert "out of range" in err


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_along_axis(axis, tmp_path):
    x = rng(16).standard_normal((3, 4, 5)).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = 6
    idx = rng(17).integers(-x.shape[axis], x.shape[axis], size=shape).astype(np.int32)

    @mb.program(input_specs=[spec((3, 4, 5)), spec(tuple(shape), I32)], opset_version=ct.target.iOS15)
    def prog(x, i):
        return mb.gather_along_axis(x=x, indices=i, axis=axis)

    pos = np.where(idx < 0, idx + x.shape[axis], idx)
    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), np.take_along_axis(x, pos, axis=axis))


def test_gather_nd(tmp_path):
    x = rng(18).standard_normal((3, 4, 5)).astype(np.float32)
    idx = np.array([[[0, 1], [2, 3]], [[1, 0], [2, -1]]], np.int32)  # (2, 2, 2): pairs into the first two axes

    @mb.program(input_specs=[spec((3, 4, 5)), spec((2, 2, 2), I32)], opset_version=ct.target.iOS15)
    def prog(x, i):
        return mb.gather_nd(x=x, indices=i)

    ref = np.array([[x[tuple(p)] for p in row] for row in idx])
    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), ref)


def test_gather_nd_batch_dims(tmp_path):
    x = rng(19).standard_normal((2, 3, 4, 5)).astype(np.float32)
    idx = np.array([[[0, 1], [2, 3], [1, 1]], [[2, 0], [0, 3], [1, 2]]], np.int32)  # (2, 3, 2)

    @mb.program(input_specs=[spec((2, 3, 4, 5)), spec((2, 3, 2), I32)], opset_version=ct.target.iOS16)
    def prog(x, i):
        return mb.gather_nd(x=x, indices=i, batch_dims=1)

    ref = np.array([[x[b][tuple(p)] for p in idx[b]] for b in range(2)])
    check(only(run_program(prog, {"x": x, "i": idx}, tmp_path)), ref)


COMBINE = {
    "update": lambda a, b: b, "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "max": max, "min": min,
}
MODES = sorted(COMBINE)


@pytest.mark.parametrize("mode", MODES)
def test_scatter(mode, tmp_path):
    data = rng(20).standard_normal((3, 5)).astype(np.float32)
    idx = np.array([4, 0, 2] if mode == "update" else [4, 0, 4], np.int32)  # repeats where order does not matter
    upd = rng(21).uniform(0.5, 2, (3, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((3, 5)), spec((3,), I32), spec((3, 3))], opset_version=ct.target.iOS15)
    def prog(d, i, u):
        return mb.scatter(data=d, indices=i, updates=u, axis=1, mode=mode)

    ref = data.astype(np.float64)
    for k, j in enumerate(idx):
        for r in range(3):
            ref[r, j] = COMBINE[mode](ref[r, j], upd[r, k])
    check(only(run_program(prog, {"d": data, "i": idx, "u": upd}, tmp_path)), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_along_axis(mode, tmp_path):
    data = rng(22).standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[3, 0, 1], [1, 2, 1]], np.int32) if mode == "update" else np.array([[3, 0, 1], [3, 0, -3]], np.int32)
    upd = rng(23).uniform(0.5, 2, (2, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((4, 3)), spec((2, 3), I32), spec((2, 3))], opset_version=ct.target.iOS16)
    def prog(d, i, u):
        return mb.scatter_along_axis(data=d, indices=i, updates=u, axis=0, mode=mode)

    ref = data.astype(np.float64)
    for r in range(2):
        for c in range(3):
            j = idx[r, c] % 4
            ref[j, c] = COMBINE[mode](ref[j, c], upd[r, c])
    check(only(run_program(prog, {"d": data, "i": idx, "u": upd}, tmp_path)), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_nd(mode, tmp_path):
    data = rng(24).standard_normal((3, 4, 2)).astype(np.float32)
    idx = np.array([[0, 1], [2, 3], [1, 0]] if mode == "update" else [[0, 1], [2, 3], [0, 1]], np.int32)
    upd = rng(25).uniform(0.5, 2, (3, 2)).astype(np.float32)

    @mb.program(input_specs=[spec((3, 4, 2)), spec((3, 2), I32), spec((3, 2))], opset_version=ct.target.iOS17)
    def prog(d, i, u):
        return mb.scatter_nd(data=d, indices=i, updates=u, mode=mode, validate_indices=True)

    ref = data.astype(np.float64)
    for k, (a, b) in enumerate(idx):
        for c in range(2):
            ref[a, b, c] = COMBINE[mode](ref[a, b, c], upd[k, c])
    check(only(run_program(prog, {"d": data, "i": idx, "u": upd}, tmp_path)), ref, rtol=1e-5, atol=1e-6)


def test_scatter_int(tmp_path):
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    idx = np.array([1, 1], np.int32)
    upd = np.array([[10, 20, 30], [1, 2, 3]], np.int32)

    @mb.program(input_specs=[spec((2, 3), I32), spec((2,), I32), spec((2, 3), I32)], opset_version=ct.target.iOS15)
    def prog(d, i, u):
        return mb.scatter(data=d, indices=i, updates=u, axis=0, mode="add")

    ref = data.copy()
    ref[1] += upd[0] + upd[1]
    check(only(run_program(prog, {"d": data, "i": idx, "u": upd}, tmp_path)), ref)


# ---------------------------------------------------------------- sorting and selection

def np_order(x, axis, ascending):
    """Stable order: ties keep index order in both directions."""
    return np.argsort(x if ascending else -x, axis=axis, kind="stable")


@pytest.mark.parametrize("ascending", [False, True])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk(ascending, axis, tmp_path):
    x = rng(26).permutation(24).reshape(4, 6).astype(np.float32) / 4

    @mb.program(input_specs=[spec((4, 6))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.topk(x=x, k=3, axis=axis, ascending=ascending, name="top")

    out = run_program(prog, {"x": x}, tmp_path)
    values, indices = out["top_0"], out["top_1"]
    order = np.take(np_order(x, axis, ascending), np.arange(3), axis=axis)
    check(indices, order, what="indices")
    check(values, np.take_along_axis(x, order, axis=axis), what="values")


def test_topk_values_only_iOS16(tmp_path):
    x = rng(27).permutation(20).reshape(2, 10).astype(np.float32)

    @mb.program(input_specs=[spec((2, 10))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.topk(x=x, k=4, sort=True, return_indices=False)

    check(only(run_program(prog, {"x": x}, tmp_path)), -np.sort(-x, axis=-1)[:, :4])


def test_topk_whole_axis_with_uint16_indices_iOS17(tmp_path):
    x = rng(28).permutation(15).reshape(3, 5).astype(np.int32)

    @mb.program(input_specs=[spec((3, 5), I32)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.topk(x=x, k=5, ascending=True, output_indices_dtype="uint16", name="top")

    out = run_program(prog, {"x": x}, tmp_path)
    check(out["top_0"], np.sort(x, axis=-1), what="values")
    check(out["top_1"], np.argsort(x, axis=-1), what="indices")


@pytest.mark.parametrize("ascending", [False, True])
def test_argsort(ascending, tmp_path):
    x = rng(29).permutation(12).reshape(3, 4).astype(np.float32) - 5

    @mb.program(input_specs=[spec((3, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.argsort(x=x, axis=0, ascending=ascending)

    check(only(run_program(prog, {"x": x}, tmp_path)), np_order(x, 0, ascending))


def np_nms(boxes, scores, iou_thr, score_thr, max_boxes, per_class):
    """Greedy NMS from the op's definition: centre-size boxes, a box scores its best class."""
    def iou(a, b):
        w = min(a[0] + a[2] / 2, b[0] + b[2] / 2) - max(a[0] - a[2] / 2, b[0] - b[2] / 2)
        h = min(a[1] + a[3] / 2, b[1] + b[3] / 2) - max(a[1] - a[3] / 2, b[1] - b[3] / 2)
        inter = max(w, 0) * max(h, 0)
        union = a[2] * a[3] + b[2] * b[3] - inter
        return inter / union if union > 0 else 0
    n, k = len(boxes), scores.shape[1]
    out_b, out_s, out_i = np.zeros((max_boxes, 4)), np.zeros((max_boxes, k)), -np.ones(max_boxes)
    best, label = scores.max(axis=1), scores.argmax(axis=1)
    kept = []
    for i in sorted((i for i in range(n) if best[i] >= score_thr), key=lambda i: (-best[i], i)):
        if not any((not per_class or label[j] == label[i]) and iou(boxes[j], boxes[i]) > iou_thr for j in kept):
            kept.append(i)
    kept = kept[:max_boxes]
    for s, i in enumerate(kept):
        out_b[s], out_s[s], out_i[s] = boxes[i], scores[i], i
    return out_b, out_s, out_i, len(kept)


def nms_inputs():
    r = rng(30)
    centres = r.uniform(0, 4, (2, 8, 2))
    sizes = r.uniform(1, 2.5, (2, 8, 2))
    boxes = np.concatenate([centres, sizes], axis=-1).astype(np.float32)
    scores = r.uniform(0, 1, (2, 8, 3)).astype(np.float32)
    return boxes, scores


@pytest.mark.parametrize("per_class", [False, True])
def test_non_maximum_suppression_iOS15(per_class, tmp_path):
    boxes, scores = nms_inputs()

    @mb.program(input_specs=[spec((2, 8, 4)), spec((2, 8, 3))], opset_version=ct.target.iOS15)
    def prog(b, s):
        return mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.2, score_threshold=0.3,
                                          max_boxes=7, per_class_suppression=per_class)

    out = run_program(prog, {"b": boxes, "s": scores}, tmp_path)
    names = sorted(out)
    got_b, got_s, got_i, got_n = (out[n] for n in names)
    refs = [np_nms(boxes[b], scores[b], 0.2, 0.3, 7, per_class) for b in range(2)]
    assert any(0 < r[3] < 7 for r in refs), "the inputs should leave some rows padded"
    check(got_n, [r[3] for r in refs], what="counts")
    check(got_i, [r[2] for r in refs], what="indices")
    check(got_b, [r[0] for r in refs], rtol=1e-6, atol=1e-6, what="boxes")
    check(got_s, [r[1] for r in refs], rtol=1e-6, atol=1e-6, what="scores")


def test_non_maximum_suppression_iOS17(tmp_path):
    boxes, scores = nms_inputs()

    @mb.program(input_specs=[spec((2, 4, 8)), spec((2, 3, 8))], opset_version=ct.target.iOS17)
    def prog(b, s):
        return mb.non_maximum_suppression(boxes=b, scores=s, iou_threshold=0.2, max_boxes=5)

    out = run_program(prog, {"b": boxes.transpose(0, 2, 1).copy(), "s": scores.transpose(0, 2, 1).copy()}, tmp_path)
    got_b, got_s, got_i = (out[n] for n in sorted(out))
    refs = [np_nms(boxes[b], scores[b], 0.2, -np.inf, 5, False) for b in range(2)]
    check(got_i, [r[2] for r in refs], what="indices")
    check(got_b, [r[0].T for r in refs], what="boxes")
    check(got_s, [r[1].T for r in refs], what="scores")


# ---------------------------------------------------------------- lists

def test_list_ops(tmp_path):
    x = rng(31).standard_normal((2, 3)).astype(np.float32)

    @mb.program(input_specs=[spec((2, 3)), spec((1,), I32)], opset_version=ct.target.iOS15)
    def prog(x, i):
        ls = mb.make_list(init_length=2, elem_shape=[3], dtype="fp32", dynamic_length=True)
        row = mb.slice_by_index(x=x, begin=[1, 0], end=[2, 3], squeeze_mask=[True, False])
        ls = mb.list_write(ls=ls, index=mb.squeeze(x=i), value=row)
        ls = mb.list_scatter(ls=ls, indices=[3, 1], value=x)  # index 3 grows the list
        return (mb.list_length(ls=ls, name="length"), mb.list_read(ls=ls, index=0, name="first"),
                mb.list_gather(ls=ls, indices=[3, 1, 2, 0], name="all"))

    out = run_program(prog, {"x": x, "i": np.array([0], np.int32)}, tmp_path)
    check(out["length"], np.array(4), what="length")
    check(out["first"], x[1], what="first")
    check(out["all"], np.stack([x[0], x[1], np.zeros(3), x[1]]), what="gathered")


def test_list_filled_in_a_loop(tmp_path):
    """A TensorArray-style loop: row k of the result is k times the input row."""
    @mb.program(input_specs=[spec((1, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        ls = mb.make_list(init_length=1, elem_shape=[1, 4], dtype="fp32")

        def cond(k, ls):
            return mb.less(x=k, y=5)

        def body(k, ls):
            v = mb.mul(x=x, y=mb.cast(x=k, dtype="fp32"))
            return mb.add(x=k, y=1), mb.list_write(ls=ls, index=k, value=v)

        _, ls = mb.while_loop(_cond=cond, _body=body, loop_vars=(np.int32(0), ls))
        return mb.list_gather(ls=ls, indices=np.arange(5, dtype=np.int32))

    x = rng(32).standard_normal((1, 4)).astype(np.float32)
    check(only(run_program(prog, {"x": x}, tmp_path)), np.arange(5)[:, None, None] * x, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- random

N = 4000


def random_program(op, opset=ct.target.iOS15, **kw):
    @mb.program(input_specs=[spec((1,))], opset_version=opset)
    def prog(x):
        # The input keeps the program well-formed; the op itself only reads constants.
        return getattr(mb, op)(shape=np.array([N // 40, 40], np.int32), **kw), mb.identity(x=x)
    return prog


def draws(prog, tmp_path, rows=2):
    path = convert(prog, tmp_path)
    out = predict(path, [{"x": np.zeros(1, np.float32)}] * rows)
    key = [k for k in out[0] if not k.startswith("identity")][0]
    return [o[key] for o in out]


def test_random_uniform(tmp_path):
    a, b = draws(random_program("random_uniform", low=-2.0, high=3.0, seed=7), tmp_path)
    assert a.shape == (N // 40, 40)
    assert a.min() >= -2 and a.max() < 3
    # Mean of N uniform draws on [-2, 3): sd 5/sqrt(12 N) ≈ 0.023; allow about 6 sd.
    assert abs(a.mean() - 0.5) < 0.15
    assert abs(a.std() - 5 / np.sqrt(12)) < 0.1
    np.testing.assert_array_equal(a, b)  # seeded: every prediction draws the same values


def test_random_normal(tmp_path):
    a, b = draws(random_program("random_normal", mean=1.5, stddev=0.5, seed=3), tmp_path)
    assert a.shape == (N // 40, 40)
    assert abs(a.mean() - 1.5) < 0.05     # sd of the mean ≈ 0.008
    assert abs(a.std() - 0.5) < 0.05
    assert abs(np.mean(np.abs(a - 1.5) < 0.5) - 0.6827) < 0.05  # one-sigma mass
    np.testing.assert_array_equal(a, b)


def test_random_bernoulli_unseeded_differs(tmp_path):
    a, b = draws(random_program("random_bernoulli", prob=0.3), tmp_path)
    assert set(np.unique(a)) <= {0.0, 1.0}
    assert abs(a.mean() - 0.3) < 0.05     # sd ≈ 0.007
    assert not np.array_equal(a, b), "unseeded draws repeated across predictions"


@pytest.mark.parametrize("mode", ["logits", "probs"])
def test_random_categorical(mode, tmp_path):
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.2, 0.1]], np.float32)
    x = np.log(np.maximum(p, 1e-30)) + 1.0 if mode == "logits" else p

    @mb.program(input_specs=[spec((2, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.random_categorical(x=x, mode=mode, size=N, seed=11)

    got = only(run_program(prog, {"x": x.astype(np.float32)}, tmp_path))
    assert got.shape == (2, N)
    for row in range(2):
        freq = np.bincount(got[row].astype(int), minlength=4) / N
        assert_close(freq, p[row], atol=0.04, rtol=0, what=f"row {row} frequencies")  # sd ≤ 0.008
