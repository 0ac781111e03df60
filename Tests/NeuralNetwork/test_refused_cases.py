"""Valid networks that Core ML runs and Cortado once refused (issue #18):

- a `copy` layer writing a blob an earlier layer (or the model input) already holds: readers
  listed before the copy see the old value, readers after it and the model outputs the new one;
  any other layer writing an existing blob stays a load error;
- `tile` with empty `reps` and the repetitions given by a second input (specification 5);
- `rangeDynamic` whose range is empty: a zero-length output, passed on to later layers and
  encoded as an empty array;
- weights holding NaN or infinities: the model loads, the values propagate as IEEE arithmetic
  says, and `cortado inspect` warns, naming each such layer.

References are NumPy from the layer definitions. Layers that only move values compare at
rtol 1e-6, atol 1e-6; arithmetic on float32 inputs at rtol 1e-5, atol 1e-5. NaN and infinities
are compared exactly (same positions, same signs).
"""

import json
import subprocess

import numpy as np

from nnharness import assert_close, builder, cortado_command, load_error, predict, rng, save, tensor_builder

LAYERS = ["copy", "tile", "rangeDynamic"]

EXACT = dict(rtol=1e-6, atol=1e-6)
ARITH = dict(rtol=1e-5, atol=1e-5)


def f32(a):
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def inspect_output(spec, tmp_path):
    path = save(spec, tmp_path)
    proc = subprocess.run(cortado_command() + ["inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


# MARK: copy rewriting a blob

def copy_rewrite_network(outputs=(("before", None), ("after", None), ("h", None))):
    """h = 2x; before = h + 1 reads the first h; the copy writes h = 3x; after = h + 1 reads it."""
    b = tensor_builder([("x", (2, 3))], list(outputs))
    b.add_activation("double", "LINEAR", "x", "h", params=[2.0, 0.0])
    b.add_activation("before", "LINEAR", "h", "before", params=[1.0, 1.0])
    b.add_activation("triple", "LINEAR", "x", "t", params=[3.0, 0.0])
    b.add_copy("rewrite", "t", "h")
    b.add_activation("after", "LINEAR", "h", "after", params=[1.0, 1.0])
    return b


def test_copy_rewrites_a_blob_readers_before_see_the_old_value(tmp_path):
    x = rng(11).normal(size=(2, 3))
    out = predict(copy_rewrite_network(), {"x": x}, tmp_path)
    assert_close(out["before"], 2 * f32(x) + 1, **ARITH, what="before (old h)")
    assert_close(out["after"], 3 * f32(x) + 1, **ARITH, what="after (new h)")
    assert_close(out["h"], 3 * f32(x), **ARITH, what="output h (last value)")


def test_copy_rewrite_does_not_depend_on_where_the_copy_source_is_made(tmp_path):
    # The copy's source is made after the first reader of h in file order: a scheduler free to
    # reorder must still run `before` on the first h.
    b = tensor_builder([("x", (2, 3))], [("before", None), ("after", None)])
    b.add_activation("double", "LINEAR", "x", "h", params=[2.0, 0.0])
    b.add_activation("before", "LINEAR", "h", "before", params=[1.0, 1.0])
    b.add_activation("triple", "LINEAR", "h", "t", params=[3.0, 0.0])  # 6x, from the old h
    b.add_copy("rewrite", "t", "h")
    b.add_activation("square", "LINEAR", "h", "after", params=[1.0, -1.0])  # 6x - 1
    x = rng(12).normal(size=(2, 3))
    out = predict(b, {"x": x}, tmp_path)
    assert_close(out["before"], 2 * f32(x) + 1, **ARITH, what="before")
    assert_close(out["after"], 6 * f32(x) - 1, **ARITH, what="after")


def test_copy_rewrites_twice_and_rewrites_a_model_input(tmp_path):
    b = tensor_builder([("x", (4,))], [("y", None), ("first", None)])
    b.add_activation("plus1", "LINEAR", "x", "a", params=[1.0, 1.0])
    b.add_activation("first", "LINEAR", "x", "first", params=[1.0, 0.0])  # the input as given
    b.add_copy("x_is_a", "a", "x")  # x = x + 1
    b.add_activation("plus10", "LINEAR", "x", "c", params=[1.0, 10.0])
    b.add_copy("x_is_c", "c", "x")  # x = x + 11
    b.add_activation("out", "LINEAR", "x", "y", params=[2.0, 0.0])
    x = rng(13).normal(size=(4,))
    out = predict(b, {"x": x}, tmp_path)
    assert_close(out["first"], f32(x), **ARITH, what="first")
    assert_close(out["y"], 2 * (f32(x) + 11), **ARITH, what="y")


def test_copy_rewrite_in_a_classic_network_with_a_batch(tmp_path):
    b = builder([("x", (3,))], [("y", (3,)), ("z", (3,))])
    b.add_activation("relu", "RELU", "x", "h")
    b.add_activation("z", "LINEAR", "h", "z", params=[1.0, 0.5])
    b.add_activation("neg", "LINEAR", "x", "n", params=[-1.0, 0.0])
    b.add_copy("rewrite", "n", "h")
    b.add_activation("y", "LINEAR", "h", "y", params=[4.0, 0.0])
    xs = [rng(20 + i).normal(size=(3,)) for i in range(5)]
    for x, out in zip(xs, predict(b, [{"x": x} for x in xs], tmp_path)):
        assert_close(out["z"], np.maximum(f32(x), 0) + 0.5, **ARITH, what="z")
        assert_close(out["y"], -4 * f32(x), **ARITH, what="y")


def test_only_copy_may_rewrite_a_blob(tmp_path):
    b = copy_rewrite_network()
    rewrite = b.spec.neuralNetwork.layers[3]
    rewrite.activation.linear.alpha = 1.0  # the same blobs, an activation instead of a copy
    assert rewrite.WhichOneof("layer") == "activation"
    err = load_error(b, tmp_path, rows=[{"x": np.zeros((2, 3))}])
    assert "rewrite" in err and "'h'" in err and "double" in err, err


# MARK: tile with the repetitions as an input

def test_tile_reps_from_a_second_input(tmp_path):
    b = tensor_builder([("x", (2, 3)), ("reps", (2,))])
    b.add_tile("tile", ["x", "reps"], "y")
    assert b.spec.specificationVersion >= 5
    assert list(b.spec.neuralNetwork.layers[0].tile.reps) == []
    x = rng(30).normal(size=(2, 3))
    rows = [{"x": x, "reps": np.array([2.0, 3.0])}, {"x": x, "reps": np.array([1.0, 2.0])},
            {"x": x, "reps": np.array([3.0, 1.0])}, {"x": x, "reps": np.array([2.0, 3.0])}]
    for row, out in zip(rows, predict(b, rows, tmp_path)):
        expected = np.tile(f32(x), row["reps"].astype(int))
        assert out["y"].shape == expected.shape, f"shape {out['y'].shape}, expected {expected.shape}"
        assert_close(out["y"], expected, **EXACT)


def test_tile_reps_input_shorter_than_the_rank(tmp_path):
    b = tensor_builder([("x", (2, 2, 3)), ("reps", (1,))])
    b.add_tile("tile", ["x", "reps"], "y")
    x = rng(31).normal(size=(2, 2, 3))
    out = predict(b, {"x": x, "reps": np.array([2.0])}, tmp_path)["y"]
    expected = np.tile(f32(x), (1, 1, 2))
    assert out.shape == expected.shape
    assert_close(out, expected, **EXACT)


def test_tile_reps_input_not_positive_is_a_request_error(tmp_path):
    b = tensor_builder([("x", (2, 3)), ("reps", (2,))])
    b.add_tile("tile", ["x", "reps"], "y")
    _, err = predict(b, [{"x": np.zeros((2, 3)), "reps": np.array([2.0, 0.0])}], tmp_path, expect_failure=True)
    assert "tile" in err and "reps" in err, err


# MARK: empty rangeDynamic

def test_range_dynamic_empty_is_a_zero_length_output(tmp_path):
    b = tensor_builder([("end", (1,)), ("start", (1,))])
    b.add_range_dynamic("range", ["end", "start"], "y", step=1)
    rows = [{"end": np.array([3.0]), "start": np.array([3.0])},   # empty: start == end
            {"end": np.array([5.0]), "start": np.array([2.0])},   # [2, 3, 4]
            {"end": np.array([1.0]), "start": np.array([4.0])}]   # empty: end below start, positive step
    for row, out in zip(rows, predict(b, rows, tmp_path)):
        expected = np.arange(row["start"][0], row["end"][0], 1.0)
        assert out["y"].shape == expected.shape, f"shape {out['y'].shape}, expected {expected.shape}"
        assert_close(out["y"], expected, **EXACT)


def test_range_dynamic_empty_json_output(tmp_path):
    # Read without the harness's decoding: the line itself must say shape [0] and no data.
    b = tensor_builder([("end", (1,))])
    b.add_range_dynamic("range", ["end"], "y", start=0, step=1)
    path = save(b, tmp_path)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"end": {"shape": [1], "dataType": "DOUBLE", "data": [0.0]}}) + "\n")
    proc = subprocess.run(cortado_command() + ["predict", str(path), "--input", str(rows)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    y = json.loads(proc.stdout.strip())["y"]
    assert y["shape"] == [0] and y["data"] == [], y


def test_range_dynamic_empty_flows_into_later_layers(tmp_path):
    # An empty range shifted (still empty), and concatenated with a non-empty tensor.
    b = tensor_builder([("end", (1,)), ("x", (3,))], [("shifted", None), ("joined", None)])
    b.add_range_dynamic("range", ["end"], "r", start=2, step=1)
    b.add_add_broadcastable("shift", ["r", "x1"], "shifted")
    b.add_slice_static("x1", "x", "x1", begin_ids=[0], end_ids=[1], strides=[1], begin_masks=[False], end_masks=[False])
    b.add_concat_nd("join", ["r", "x"], "joined", axis=0)
    x = rng(40).normal(size=(3,))
    rows = [{"end": np.array([2.0]), "x": x}, {"end": np.array([4.0]), "x": x}]
    for row, out in zip(rows, predict(b, rows, tmp_path)):
        r = np.arange(2.0, row["end"][0], 1.0)
        assert out["shifted"].shape == r.shape, out["shifted"].shape
        assert_close(out["shifted"], r + f32(x)[0], **ARITH, what="shifted")
        assert out["joined"].shape == (r.size + 3,), out["joined"].shape
        assert_close(out["joined"], np.concatenate([r, f32(x)]), **EXACT, what="joined")


def test_range_dynamic_empty_known_at_load(tmp_path):
    # The end is a constant: the range is planned at load, and it is empty.
    b = tensor_builder([("x", (2,))], [("y", None), ("z", None)])
    b.add_load_constant_nd("end", "end", constant_value=np.array([1.0]), shape=(1,))
    b.add_range_dynamic("range", ["end"], "y", start=5, step=1)
    b.add_activation("z", "LINEAR", "x", "z", params=[1.0, 1.0])
    x = rng(41).normal(size=(2,))
    out = predict(b, {"x": x}, tmp_path)
    assert out["y"].shape == (0,), out["y"].shape
    assert_close(out["z"], f32(x) + 1, **ARITH)


# MARK: non-finite weights

def nonfinite_network():
    """fc1: 4 → 4 inner product; W holds 2 NaN and 1 +inf, the bias 1 NaN. conv: 1×1 convolution
    whose float16 weights hold 1 -inf. Row 0 of fc1 has a NaN weight, row 1 an inf weight on x[2],
    row 2 a NaN bias, row 3 is finite."""
    W = rng(50).normal(size=(4, 4)).astype(np.float32)
    W[0, 1] = np.nan
    W[0, 3] = np.nan
    W[1, 2] = np.inf
    bias = np.array([0.5, -0.25, np.nan, 1.0], dtype=np.float32)
    b = builder([("x", (4,))], [("y", (4,)), ("c", (2, 1, 1))])
    b.add_inner_product("fc1", W=W, b=bias, input_channels=4, output_channels=4, has_bias=True,
                        input_name="x", output_name="y")
    Wc = rng(51).normal(size=(2, 4, 1, 1)).astype(np.float16)  # Core ML's [out, in, h, w]
    Wc[1, 0, 0, 0] = -np.inf
    b.add_convolution("conv", kernel_channels=4, output_channels=2, height=1, width=1, stride_height=1,
                      stride_width=1, border_mode="valid", groups=1, W=np.zeros((1, 1, 4, 2)), b=None,
                      has_bias=False, input_name="x", output_name="c")
    b.spec.neuralNetwork.layers[1].convolution.weights.ClearField("floatValue")
    b.spec.neuralNetwork.layers[1].convolution.weights.float16Value = Wc.reshape(-1).tobytes()
    return b, W, bias, Wc


def test_nonfinite_weights_load_and_propagate(tmp_path):
    b, W, bias, Wc = nonfinite_network()
    xs = [np.array([0.5, -1.0, 2.0, 0.25]), np.array([-0.5, 1.5, -3.0, 1.0]), np.array([1.0, 1.0, 1.0, -2.0])]
    for x, out in zip(xs, predict(b, [{"x": x} for x in xs], tmp_path)):
        xf = f32(x)
        y = out["y"].reshape(-1)
        assert np.isnan(y[0]), y
        assert y[1] == (np.inf if xf[2] > 0 else -np.inf), y
        assert np.isnan(y[2]), y
        assert_close(y[3], W[3].astype(np.float64) @ xf + bias[3], **ARITH, what="finite row")
        c = out["c"].reshape(-1)
        assert_close(c[0], Wc[0].reshape(-1).astype(np.float64) @ xf, **ARITH, what="finite channel")
        # -inf · x[0] plus finite terms
        assert c[1] == (-np.inf if xf[0] > 0 else np.inf), c


def test_inspect_warns_about_nonfinite_weights(tmp_path):
    b, *_ = nonfinite_network()
    text = inspect_output(b, tmp_path)
    assert "warning: layer 'fc1' weights hold 3 NaN and 1 infinite values" in text, text
    assert "warning: layer 'conv' weights hold 0 NaN and 1 infinite values" in text, text
    assert "Runs:          yes" in text, text


def test_inspect_warns_about_nonfinite_weights_of_a_compiled_model(tmp_path):
    # The compiled form holds the weights decoded; the warning comes from those.
    b, *_ = nonfinite_network()
    path = save(b, tmp_path)
    compiled = tmp_path / "model.cortado"
    proc = subprocess.run(cortado_command() + ["compile", str(path), str(compiled)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(cortado_command() + ["inspect", str(compiled)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "warning: layer 'fc1' weights hold 3 NaN and 1 infinite values" in proc.stdout, proc.stdout
    assert "warning: layer 'conv' weights hold 0 NaN and 1 infinite values" in proc.stdout, proc.stdout


def test_inspect_has_no_weight_warning_for_finite_weights(tmp_path):
    b = builder([("x", (4,))], [("y", (2,))])
    b.add_inner_product("fc", W=rng(52).normal(size=(2, 4)), b=np.zeros(2), input_channels=4, output_channels=2,
                        has_bias=True, input_name="x", output_name="y")
    text = inspect_output(b, tmp_path)
    assert "warning" not in text, text
