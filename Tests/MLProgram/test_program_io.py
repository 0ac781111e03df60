"""ML Program inputs and outputs as Core ML declares them: image inputs with the program's own
preprocessing, classifier outputs, fp16 and int32 tensors, flexible shapes; and bad packages."""

import json
import shutil
import struct

import numpy as np
import pytest
from PIL import Image

from coremltools.converters.mil.mil import get_new_symbol

from milharness import assert_close, convert, ct, inspect, mb, only, predict, rng

OPS = ["classify", "const"]


def test_image_input_classifier(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 4, 5))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.softmax(x=mb.reduce_mean(x=x, axes=[2, 3]), axis=1)

    labels = ["cat", "dog", "cow"]
    path = convert(prog, tmp_path, inputs=[ct.ImageType(name="x", shape=(1, 3, 4, 5), scale=1 / 255.0, bias=[-0.5, -0.4, -0.3],
                                                        color_layout=ct.colorlayout.BGR)],
                   classifier_config=ct.ClassifierConfig(labels))
    pixels = rng(1).integers(0, 256, (4, 5, 3), dtype=np.uint8)  # RGB
    png = tmp_path / "in.png"
    Image.fromarray(pixels, "RGB").save(png)
    out = predict(path, [{"x": {"path": str(png)}}])[0]
    bgr = pixels[:, :, ::-1].astype(np.float64).transpose(2, 0, 1)
    pre = bgr / 255.0 + np.array([-0.5, -0.4, -0.3]).reshape(3, 1, 1)
    m = pre.mean(axis=(1, 2))
    p = np.exp(m) / np.exp(m).sum()
    assert out["classLabel"] == labels[int(np.argmax(p))]
    probs = out["classLabel_probs"]
    assert_close([probs[l] for l in labels], p, rtol=1e-5, atol=1e-6)


def test_int_labels_classifier(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.softmax(x=x, axis=1)

    path = convert(prog, tmp_path, classifier_config=ct.ClassifierConfig([10, 20, 30, 40]))
    x = np.array([[0.1, 3.0, 0.2, 0.4]], dtype=np.float32)
    out = predict(path, [{"x": x}])[0]
    assert out["classLabel"] == 20
    p = np.exp(x[0]) / np.exp(x[0]).sum()
    assert_close([out["classLabel_probs"][str(k)] for k in (10, 20, 30, 40)], p, rtol=1e-5)


def test_fp16_inputs_and_outputs(tmp_path):
    """iOS16 programs may take and return fp16 tensors: they arrive and leave as FLOAT16."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3), dtype=ct.converters.mil.mil.types.fp16)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.mul(x=x, y=np.float16(3.0))

    path = convert(prog, tmp_path, precision="fp16", inputs=[ct.TensorType(name="x", shape=(2, 3), dtype=np.float16)],
                   outputs=[ct.TensorType(name="y", dtype=np.float16)], minimum_deployment_target=ct.target.iOS16)
    desc = inspect(path)
    assert "FLOAT16" in desc
    x = np.array([[0.1, 0.2, 0.3], [1000, -2, 7.5]], dtype=np.float16)
    out = only(predict(path, [{"x": x}])[0])
    # JSON carries the fp16 values as decimals; read back as fp16 they are exactly fp16(3x).
    assert np.array_equal(out.astype(np.float16), (x.astype(np.float32) * 3).astype(np.float16))


def test_int32_input(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(4,), dtype=ct.converters.mil.mil.types.int32)], opset_version=ct.target.iOS15)
    def prog(x):
        return mb.cast(x=mb.mul(x=x, y=3), dtype="fp32")

    x = np.array([1, -2, 3, 40000], dtype=np.int32)
    assert_close(only(predict(convert(prog, tmp_path), [{"x": x}])[0]), x.astype(np.float64) * 3)


def test_flexible_shape_range(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, get_new_symbol()))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.reduce_sum(x=mb.mul(x=x, y=2.0), axes=[1], keep_dims=True)

    path = convert(prog, tmp_path, inputs=[ct.TensorType(name="x", shape=(1, ct.RangeDim(1, 50, default=3)))])
    rows = [{"x": np.ones((1, n), dtype=np.float32) * n} for n in (1, 3, 17)]
    out = predict(path, rows)
    for n, o in zip((1, 3, 17), out):
        assert_close(only(o), [[2.0 * n * n]])


def test_flexible_shape_enumerated(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, get_new_symbol()))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.transpose(x=x, perm=[0, 2, 1])

    path = convert(prog, tmp_path, inputs=[ct.TensorType(name="x", shape=ct.EnumeratedShapes(shapes=[(1, 2, 2), (1, 2, 4)], default=(1, 2, 2)))])
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    assert_close(only(predict(path, [{"x": x}])[0]), x.transpose(0, 2, 1))


def simple_package(tmp_path):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.linear(x=x, weight=w)

    return convert(prog, tmp_path)


def load_error(path):
    _, err = predict(path, [{"x": np.ones((1, 3), dtype=np.float32)}], expect_failure=True)
    return err


def test_bad_packages(tmp_path):
    """Each broken package is a load error naming the file, and the op where one is involved."""
    base = simple_package(tmp_path)
    weights = "Data/com.apple.CoreML/weights/weight.bin"

    def variant(name, change):
        p = tmp_path / f"{name}.mlpackage"
        shutil.copytree(base, p)
        change(p)
        return p

    def drop_root_item(p):
        m = json.loads((p / "Manifest.json").read_text())
        m["rootModelIdentifier"] = "missing-id"
        (p / "Manifest.json").write_text(json.dumps(m))

    err = load_error(variant("noroot", drop_root_item))
    assert "Manifest.json" in err and "missing-id" in err

    def bad_sentinel(p):
        b = bytearray((p / weights).read_bytes())
        b[64:68] = struct.pack("<I", 0x12345678)
        (p / weights).write_bytes(bytes(b))

    err = load_error(variant("sentinel", bad_sentinel))
    assert "sentinel" in err and "weight.bin" in err and "linear" in err

    def bad_dtype(p):
        b = bytearray((p / weights).read_bytes())
        b[68:72] = struct.pack("<I", 99)
        (p / weights).write_bytes(bytes(b))

    err = load_error(variant("dtype", bad_dtype))
    assert "unknown blob data type 99" in err

    def past_end(p):
        b = bytearray((p / weights).read_bytes())
        b[80:88] = struct.pack("<Q", len(b) + 4096)
        (p / weights).write_bytes(bytes(b))

    err = load_error(variant("pastend", past_end))
    assert "past the end" in err

    def truncate(p):
        (p / weights).write_bytes((p / weights).read_bytes()[:100])

    err = load_error(variant("truncated", truncate))
    assert "past the end" in err or "fewer" in err

    def no_weights(p):
        (p / weights).unlink()

    err = load_error(variant("noweights", no_weights))
    assert "weight.bin" in err and "does not exist" in err


def test_unsupported_op_names_op(tmp_path):
    """An op Cortado does not run is a load error naming the op, never a failed request."""
    from coremltools.converters.mil.mil import Builder as mb2  # noqa: F401
    path = simple_package(tmp_path)
    spec = ct.utils.load_spec(str(path))
    fn = spec.mlProgram.functions["main"]
    block = fn.block_specializations[fn.opset]
    for op in block.operations:
        if op.type == "linear":
            op.type = "no_such_op"
    (path / "Data/com.apple.CoreML/model.mlmodel").write_bytes(spec.SerializeToString())
    err = load_error(path)
    assert "no_such_op" in err
