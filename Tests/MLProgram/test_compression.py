"""Compressed weights: models compressed with coremltools.optimize.coreml (palettization,
linear quantization, pruning, and their joint forms), plus constexpr ops written directly and
iOS17 quantize/dequantize. Each expected output uses dense weights this file decompresses in
NumPy, from the compressed ops' stored values (read from coremltools' MIL program) and the op
definitions (iOS16 constexpr_ops.py, iOS18 compression.py)."""

import zlib

import numpy as np
import pytest

import coremltools.optimize.coreml as cto
from coremltools.converters.mil.mil import types

from milharness import assert_close, ct, mb, only, predict, rng, run_program

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "add", "cast", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast",
    "constexpr_lut_to_dense", "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale",
    "constexpr_sparse_to_dense", "dequantize", "linear", "mul", "quantize",
]


IN, OUT, BATCH = 64, 32, 3


# ---- NumPy decompression, from the op definitions -------------------------------------------

def unpack_le(packed, nbits, count):
    """Values packed into bytes from the least significant bit up (the iOS16 layout)."""
    bits = np.unpackbits(np.asarray(packed, dtype=np.uint8), bitorder="little")[: count * nbits]
    return (bits.reshape(count, nbits) * (1 << np.arange(nbits))).sum(axis=1)


def expand_blocks(param, shape):
    """Repeats each element of param over its block of a tensor of `shape` (same rank)."""
    for axis, (n, p) in enumerate(zip(shape, param.shape)):
        param = np.repeat(param, n // p, axis=axis)
    return param


def lut_to_dense(indices, lut, vector_axis):
    """iOS18: per-block lookup tables [blocks..., palettes, vector size]."""
    k = indices.ndim
    vs = lut.shape[-1]
    out_shape = list(indices.shape)
    if vs > 1:
        out_shape[vector_axis] *= vs
    out = np.zeros(out_shape, dtype=np.float64)
    block = [n // b for n, b in zip(indices.shape, lut.shape[:k])]
    for pos in np.ndindex(*indices.shape):
        table = lut[tuple(p // s for p, s in zip(pos, block))]
        entry = table[int(indices[pos])]
        for v in range(vs):
            target = list(pos)
            if vs > 1:
                target[vector_axis] = pos[vector_axis] * vs + v
            out[tuple(target)] = entry[v]
    return out


def sparse_to_dense(nonzero, mask):
    out = np.zeros(mask.shape, dtype=np.float64)
    out[mask != 0] = nonzero
    return out


def shift_scale(data, scale, offset):
    data = data.astype(np.float64)
    if offset is not None:
        data = data - expand_blocks(offset.astype(np.float64), data.shape)
    return data * expand_blocks(scale.astype(np.float64), data.shape)


def evaluate(var):
    """The value a variable of the compressed program stands for, decompressed in NumPy."""
    op = var.op
    if op.op_type == "const":
        return np.asarray(var.val)
    outputs = decompress(op)
    return outputs[list(op.outputs).index(var)] if isinstance(outputs, tuple) else outputs


def decompress(op):
    a = {k: evaluate(v) for k, v in op.inputs.items()}
    t = op.op_type
    if t == "constexpr_affine_dequantize":
        q = a["quantized_data"].astype(np.float64)
        shape = [1] * q.ndim
        axis = int(a["axis"]) % q.ndim

        def along(p):
            p = p.astype(np.float64)
            if p.ndim == 0:
                return p
            s = list(shape)
            s[axis] = p.size
            return p.reshape(s)
        return along(a["scale"]) * (q - along(a["zero_point"]))
    if t == "constexpr_cast":
        return a["source_val"].astype(np.float32)
    if t == "constexpr_lut_to_dense":
        if "shape" in a:
            shape = [int(s) for s in a["shape"]]
            nbits = int(np.log2(a["lut"].size))
            return a["lut"].astype(np.float64)[unpack_le(a["indices"], nbits, int(np.prod(shape)))].reshape(shape)
        va = a.get("vector_axis")
        return lut_to_dense(a["indices"], a["lut"].astype(np.float64), None if va is None else int(va) % a["indices"].ndim)
    if t == "constexpr_sparse_to_dense":
        if "shape" in a:
            shape = [int(s) for s in a["shape"]]
            mask = unpack_le(a["mask"], 1, int(np.prod(shape))).reshape(shape)
            return sparse_to_dense(a["nonzero_data"].astype(np.float64), mask)
        return sparse_to_dense(a["nonzero_data"].astype(np.float64), a["mask"])
    if t == "constexpr_blockwise_shift_scale":
        return shift_scale(a["data"], a["scale"], a.get("offset"))
    if t == "constexpr_lut_to_sparse":
        mask = a["indices_mask"]
        indices = np.zeros(mask.shape, dtype=np.int64)
        indices[mask != 0] = a["indices_nonzero_data"]
        va = a.get("vector_axis")
        va = None if va is None else int(va) % mask.ndim
        dense = lut_to_dense(indices, a["lut"].astype(np.float64), va)
        if va is not None:
            mask = np.repeat(mask, a["lut"].shape[-1], axis=va)
        return mask, dense[mask != 0]
    if t == "constexpr_sparse_blockwise_shift_scale":
        mask = a["data_mask"]
        dense = shift_scale(sparse_to_dense(a["nonzero_data"].astype(np.float64), mask), a["scale"], a.get("offset"))
        return mask, dense[mask != 0]
    raise AssertionError(f"no NumPy decompression for {t}")


def dense_weight(model):
    """The dense weight the compressed linear layer stands for, and the op types that hold it."""
    ops = list(model._mil_program.functions["main"].operations)
    linear = next(op for op in ops if op.op_type == "linear")
    kinds = [op.op_type for op in ops if op.op_type.startswith("constexpr_")]
    return evaluate(linear.weight), kinds


# ---- compressed linear layers -----------------------------------------------------------------

def base_model(target, weight, precision="fp32"):
    @mb.program(input_specs=[mb.TensorSpec(shape=(BATCH, IN))], opset_version=target)
    def prog(x):
        return mb.linear(x=x, weight=weight)

    prec = ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32
    return ct.convert(prog, convert_to="mlprogram", compute_precision=prec, minimum_deployment_target=target)


def palettize(nbits, **kw):
    return lambda m: cto.palettize_weights(
        m, cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(mode="kmeans", nbits=nbits, weight_threshold=0, **kw)))


def quantize(**kw):
    return lambda m: cto.linear_quantize_weights(
        m, cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(weight_threshold=0, **kw)))


def magnitude_prune(**kw):
    return lambda m: cto.prune_weights(m, cto.OptimizationConfig(global_config=cto.OpMagnitudePrunerConfig(weight_threshold=0, **kw)))


def threshold_prune(threshold):
    return lambda m: cto.prune_weights(
        m, cto.OptimizationConfig(global_config=cto.OpThresholdPrunerConfig(threshold=threshold, minimum_sparsity_percentile=0.1,
                                                                            weight_threshold=0)))


def joint(first, second_kind, **kw):
    """Compresses with `first`, then compresses the result jointly (iOS18)."""
    def apply(m):
        m = first(m)
        if second_kind == "palettize":
            cfg = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(mode="kmeans", weight_threshold=0, **kw))
            return cto.palettize_weights(m, cfg, joint_compression=True)
        cfg = cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(weight_threshold=0, **kw))
        return cto.linear_quantize_weights(m, cfg, joint_compression=True)
    return apply


iOS16, iOS18 = ct.target.iOS16, ct.target.iOS18

# (name, target, compression, expected constexpr ops, bound on |dense - original| relative to |original|)
CASES = [
    ("pal1_ios16", iOS16, palettize(1), {"constexpr_lut_to_dense"}, 0.9),
    ("pal2_ios16", iOS16, palettize(2), {"constexpr_lut_to_dense"}, 0.6),
    ("pal4_ios16", iOS16, palettize(4), {"constexpr_lut_to_dense"}, 0.2),
    ("pal6_ios16", iOS16, palettize(6), {"constexpr_lut_to_dense"}, 0.06),
    ("pal8_ios16", iOS16, palettize(8), {"constexpr_lut_to_dense"}, 0.02),
    ("q_int8_ios16", iOS16, quantize(mode="linear_symmetric", dtype="int8"), {"constexpr_affine_dequantize"}, 0.02),
    ("q_uint8_ios16", iOS16, quantize(mode="linear", dtype="uint8"), {"constexpr_affine_dequantize"}, 0.02),
    ("prune_mag_ios16", iOS16, magnitude_prune(target_sparsity=0.6), {"constexpr_sparse_to_dense"}, 0.7),
    ("prune_thr_ios16", iOS16, threshold_prune(0.4), {"constexpr_sparse_to_dense"}, 0.5),
    ("pal1_ios18", iOS18, palettize(1), {"constexpr_lut_to_dense"}, 0.9),
    ("pal2_ios18", iOS18, palettize(2), {"constexpr_lut_to_dense"}, 0.6),
    ("pal3_ios18", iOS18, palettize(3), {"constexpr_lut_to_dense"}, 0.4),
    ("pal4_ios18", iOS18, palettize(4), {"constexpr_lut_to_dense"}, 0.2),
    ("pal6_ios18", iOS18, palettize(6), {"constexpr_lut_to_dense"}, 0.06),
    ("pal8_ios18", iOS18, palettize(8), {"constexpr_lut_to_dense"}, 0.02),
    ("pal4_grouped_ios18", iOS18, palettize(4, granularity="per_grouped_channel", group_size=8), {"constexpr_lut_to_dense"}, 0.2),
    ("pal2_grouped_axis1_ios18", iOS18, palettize(2, granularity="per_grouped_channel", group_size=16, channel_axis=1),
     {"constexpr_lut_to_dense"}, 0.6),
    ("pal3_vector_ios18", iOS18, palettize(3, cluster_dim=2), {"constexpr_lut_to_dense"}, 0.8),
    ("pal4_channel_scale_ios18", iOS18, palettize(4, enable_per_channel_scale=True),
     {"constexpr_lut_to_dense", "constexpr_blockwise_shift_scale"}, 0.2),
    ("q_int8_channel_ios18", iOS18, quantize(mode="linear_symmetric", dtype="int8"), {"constexpr_blockwise_shift_scale"}, 0.02),
    ("q_uint8_channel_ios18", iOS18, quantize(mode="linear", dtype="uint8"), {"constexpr_blockwise_shift_scale"}, 0.02),
    ("q_int4_channel_ios18", iOS18, quantize(mode="linear_symmetric", dtype="int4"), {"constexpr_blockwise_shift_scale"}, 0.25),
    ("q_int4_block_ios18", iOS18, quantize(mode="linear", dtype="int4", granularity="per_block", block_size=16),
     {"constexpr_blockwise_shift_scale"}, 0.2),
    ("q_int8_block_ios18", iOS18, quantize(mode="linear_symmetric", dtype="int8", granularity="per_block", block_size=8),
     {"constexpr_blockwise_shift_scale"}, 0.02),
    ("prune_mag_ios18", iOS18, magnitude_prune(target_sparsity=0.5), {"constexpr_sparse_to_dense"}, 0.6),
    ("prune_nm_ios18", iOS18, magnitude_prune(n_m_ratio=(2, 4)), {"constexpr_sparse_to_dense"}, 0.6),
    ("prune_then_pal2_ios18", iOS18, joint(magnitude_prune(target_sparsity=0.5), "palettize", nbits=2),
     {"constexpr_lut_to_sparse", "constexpr_sparse_to_dense"}, 0.7),
    ("prune_then_int8_ios18", iOS18, joint(magnitude_prune(target_sparsity=0.5), "quantize", mode="linear", dtype="int8"),
     {"constexpr_sparse_blockwise_shift_scale", "constexpr_sparse_to_dense"}, 0.6),
    ("prune_then_int4_block_ios18", iOS18,
     joint(magnitude_prune(target_sparsity=0.4), "quantize", mode="linear_symmetric", dtype="int4", granularity="per_block", block_size=16),
     {"constexpr_sparse_blockwise_shift_scale", "constexpr_sparse_to_dense"}, 0.6),
    ("pal4_then_int8_lut_ios18", iOS18, joint(palettize(4), "quantize", mode="linear_symmetric", dtype="int8", granularity="per_tensor"),
     {"constexpr_lut_to_dense", "constexpr_blockwise_shift_scale"}, 0.2),
]


@pytest.mark.parametrize("name,target,compress,kinds,bound", CASES, ids=[c[0] for c in CASES])
def test_compressed_linear(name, target, compress, kinds, bound, tmp_path):
    r = rng(zlib.crc32(name.encode()))
    w = r.standard_normal((OUT, IN)).astype(np.float32)
    model = compress(base_model(target, w))
    dense, found = dense_weight(model)
    assert set(found) == kinds, f"{name}: compressed into {found}"
    assert dense.shape == w.shape
    # The NumPy decompression must stand for the original weight, within the compression's loss.
    rel = np.linalg.norm(dense - w) / np.linalg.norm(w)
    assert rel < bound, f"{name}: NumPy decompression is {rel:.3f} away from the original weight"

    path = tmp_path / "model.mlpackage"
    model.save(str(path))
    x = r.standard_normal((BATCH, IN)).astype(np.float32)
    got = only(predict(path, [{"x": x}])[0])
    assert_close(got, x.astype(np.float64) @ dense.T, rtol=1e-4, atol=1e-4, what=name)


@pytest.mark.parametrize("compress,kinds", [
    (palettize(4), {"constexpr_lut_to_dense"}),
    (quantize(mode="linear", dtype="int4", granularity="per_block", block_size=32), {"constexpr_blockwise_shift_scale"}),
    (joint(magnitude_prune(target_sparsity=0.5), "palettize", nbits=4), {"constexpr_lut_to_sparse", "constexpr_sparse_to_dense"}),
], ids=["pal4", "int4_block", "prune_pal4"])
def test_compressed_fp16_model(compress, kinds, tmp_path):
    """A FLOAT16 model: luts and scales in fp16, the linear layer computing in fp16."""
    r = rng(7)
    w = r.standard_normal((OUT, IN)).astype(np.float32)
    model = compress(base_model(iOS18, w, precision="fp16"))
    dense, found = dense_weight(model)
    assert kinds <= set(found), found
    path = tmp_path / "model.mlpackage"
    model.save(str(path))
    x = r.standard_normal((BATCH, IN)).astype(np.float32)
    got = only(predict(path, [{"x": x}])[0])
    x16 = x.astype(np.float16).astype(np.float64)
    w16 = dense.astype(np.float16).astype(np.float64)
    ref = x16 @ w16.T
    # Sums of 64 products of magnitude ~1 rounded to fp16 (spacing 2^-7 near 8).
    assert_close(got, ref, rtol=5e-3, atol=2e-2)


# ---- constexpr ops written directly ---------------------------------------------------------

def test_constexpr_ops_written_directly(tmp_path):
    """iOS16 forms with hand-packed bytes (indices of 2 bits, a mask with padding bits) and
    constexpr_cast, each folded at load and used by the program."""
    r = rng(11)
    shape = (3, 5)
    lut = np.array([-1.5, 0.25, 2.0, 7.0], dtype=np.float32)
    keys = r.integers(0, 4, size=15)
    packed = np.packbits(((keys[:, None] >> np.arange(2)) & 1).reshape(-1), bitorder="little")
    mask_bits = (r.random(15) < 0.5).astype(np.uint8)
    mask_bits[0] = 1
    mask = np.packbits(mask_bits, bitorder="little")
    nonzero = r.standard_normal(int(mask_bits.sum())).astype(np.float32)
    half = r.standard_normal(shape).astype(np.float16)
    q = r.integers(-128, 128, size=shape).astype(np.int8)
    scale = np.array([0.5, 0.25, 0.125], dtype=np.float32)
    zp = np.array([3, -2, 0], dtype=np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=iOS16)
    def prog(x):
        a = mb.constexpr_lut_to_dense(indices=packed, lut=lut, shape=np.array(shape, dtype=np.uint32))
        b = mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=mask, shape=np.array(shape, dtype=np.uint32))
        c = mb.constexpr_cast(source_val=half, output_dtype="fp32")
        d = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zp, scale=scale, axis=0)
        return mb.add(x=mb.mul(x=x, y=a), y=b, name="lut_sparse"), mb.add(x=c, y=d, name="cast_affine")

    x = r.standard_normal(shape).astype(np.float32)
    out = run_program(prog, {"x": x}, tmp_path, minimum_deployment_target=iOS16)
    got1, got2 = out["lut_sparse"], out["cast_affine"]
    dense_b = np.zeros(15)
    dense_b[mask_bits != 0] = nonzero
    ref1 = x * lut[keys].reshape(shape) + dense_b.reshape(shape)
    ref2 = half.astype(np.float64) + scale[:, None] * (q.astype(np.float64) - zp[:, None])
    assert_close(got1, ref1, rtol=1e-6, atol=1e-6, what="lut and sparse")
    assert_close(got2, ref2, rtol=1e-6, atol=1e-6, what="cast and affine")


def test_ios18_lut_vector_axis_written_directly(tmp_path):
    """iOS18 constexpr_lut_to_dense with a lut of vectors laid along axis 0 and two blocks along
    axis 1, written with the builder (uint2 indices)."""
    r = rng(12)
    indices = r.integers(0, 4, size=(2, 4)).astype(types.np_uint2_dtype)
    lut = r.standard_normal((1, 2, 4, 3)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(6, 4))], opset_version=iOS18)
    def prog(x):
        w = mb.constexpr_lut_to_dense(indices=indices, lut=lut, vector_axis=0)
        return mb.mul(x=x, y=w)

    x = r.standard_normal((6, 4)).astype(np.float32)
    ref = np.zeros((6, 4))
    for i in range(2):
        for j in range(4):
            ref[i * 3:(i + 1) * 3, j] = lut[0, j // 2, int(indices[i, j])]
    assert_close(only(run_program(prog, {"x": x}, tmp_path, minimum_deployment_target=iOS18)), x * ref, rtol=1e-6, atol=1e-6)


def test_ios18_lut_to_sparse_vector_axis_written_directly(tmp_path):
    """constexpr_lut_to_sparse with vectors along axis 1 (coremltools' joint compression cannot
    write this form yet), feeding constexpr_sparse_to_dense."""
    r = rng(15)
    mask = (r.random((3, 2)) < 0.6).astype(types.np_uint1_dtype)
    mask[0, 0] = 1
    n = int(mask.sum())
    keys = r.integers(0, 2, size=n).astype(types.np_uint1_dtype)
    lut = r.standard_normal((1, 1, 2, 2)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(3, 4))], opset_version=iOS18)
    def prog(x):
        m, values = mb.constexpr_lut_to_sparse(indices_mask=mask, indices_nonzero_data=keys, lut=lut, vector_axis=1)
        return mb.add(x=x, y=mb.constexpr_sparse_to_dense(nonzero_data=values, mask=m))

    x = r.standard_normal((3, 4)).astype(np.float32)
    ref = np.zeros((3, 4))
    k = 0
    for i in range(3):
        for j in range(2):
            if mask[i, j]:
                ref[i, 2 * j:2 * j + 2] = lut[0, 0, int(keys[k])]
                k += 1
    assert_close(only(run_program(prog, {"x": x}, tmp_path, minimum_deployment_target=iOS18)), x + ref, rtol=1e-6, atol=1e-6)


# ---- quantize / dequantize (iOS17) ----------------------------------------------------------

@pytest.mark.parametrize("dtype,per_axis", [("int8", False), ("uint8", False), ("int8", True), ("uint8", True)])
def test_quantize_dequantize(dtype, per_axis, tmp_path):
    r = rng(13)
    x = (r.standard_normal((4, 6)) * 3).astype(np.float32)
    # Include exact halves, where rounding goes to the even neighbour.
    x[0, :4] = [0.25, 0.75, -0.25, 1.25]
    lo, hi, np_t = (-128, 127, np.int8) if dtype == "int8" else (0, 255, np.uint8)
    if per_axis:
        scale = np.array([0.5, 0.05, 0.1, 0.02], dtype=np.float32)
        zp = np.array([0, 3, -4, 10] if dtype == "int8" else [128, 100, 0, 255], dtype=np_t)
        kw = dict(axis=0)
        s, z = scale[:, None], zp.astype(np.float64)[:, None]
    else:
        scale = np.float32(0.5)
        zp = np_t(2 if dtype == "int8" else 128)
        kw = {}
        s, z = np.float64(scale), np.float64(zp)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        q = mb.quantize(input=x, scale=scale, zero_point=zp, output_dtype=dtype, **kw)
        return mb.cast(x=q, dtype="int32", name="q"), mb.dequantize(input=q, scale=scale, zero_point=zp, name="dq", **kw)

    out = run_program(prog, {"x": x}, tmp_path, minimum_deployment_target=ct.target.iOS17)
    got_q, got_dq = out["q"], out["dq"]
    q_ref = np.clip(np.round(x.astype(np.float64) / s) + z, lo, hi)
    assert_close(got_q, q_ref, rtol=0, atol=0, what="quantize")
    assert_close(got_dq, s * (q_ref - z), rtol=1e-6, atol=1e-6, what="dequantize")


def test_dequantize_without_zero_point(tmp_path):
    r = rng(14)
    q = r.integers(-128, 128, size=(3, 4)).astype(np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(3, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.mul(x=x, y=mb.dequantize(input=q, scale=np.float32(0.03)))

    x = r.standard_normal((3, 4)).astype(np.float32)
    assert_close(only(run_program(prog, {"x": x}, tmp_path, minimum_deployment_target=ct.target.iOS17)), x * (0.03 * q.astype(np.float64)), rtol=1e-5, atol=1e-6)
