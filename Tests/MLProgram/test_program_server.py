"""ML Programs served like any other model: a repository holding `model.mlpackage` folders (and
a package compiled and encrypted), called from tritonclient over the Open Inference Protocol."""

import importlib.util
import subprocess
import warnings

import numpy as np
import pytest

from milharness import REPO_ROOT, assert_close, convert, cortado_command, ct, mb, rng

# The operations this module checks (scripts/ops_table.py reads it for docs/ops.md).
OPS = [
    "add", "linear", "sigmoid", "softmax",
]


warnings.filterwarnings("ignore")
tc = pytest.importorskip("tritonclient.grpc")

_spec = importlib.util.spec_from_file_location("server_conftest", REPO_ROOT / "Tests" / "Server" / "conftest.py")
server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_conftest)

W = rng(20).standard_normal((4, 3)).astype(np.float32)
B = rng(21).standard_normal(4).astype(np.float32)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlprograms")
    work = tmp_path_factory.mktemp("build")

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS16)
    def dense(x):
        return mb.sigmoid(x=mb.linear(x=x, weight=W, bias=B))

    (root / "dense" / "1").mkdir(parents=True)
    convert(dense, work, name="dense").rename(root / "dense" / "1" / "model.mlpackage")

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3), dtype=ct.converters.mil.mil.types.fp16)], opset_version=ct.target.iOS16)
    def half(x):
        return mb.add(x=x, y=np.float16(1))

    path = convert(half, work, name="half", precision="fp16", inputs=[ct.TensorType(name="x", shape=(2, 3), dtype=np.float16)],
                   outputs=[ct.TensorType(name="y", dtype=np.float16)], minimum_deployment_target=ct.target.iOS16)
    path.rename(root / "half.mlpackage")

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS15)
    def probs(x):
        return mb.softmax(x=x, axis=1)

    convert(probs, work, name="labels", classifier_config=ct.ClassifierConfig(["a", "b", "c"])).rename(root / "labels.mlpackage")

    # The dense package compiled, and encrypted: both carry the weights inside.
    (root / "compiled" / "1").mkdir(parents=True)
    subprocess.run(cortado_command() + ["compile", str(root / "dense" / "1" / "model.mlpackage"), str(root / "compiled" / "1" / "model.cortado")],
                   check=True, capture_output=True)
    key = work / "key.hex"
    (root / "sealed" / "1").mkdir(parents=True)
    subprocess.run(cortado_command() + ["encrypt", "--generate-key", str(key), str(root / "dense" / "1" / "model.mlpackage"),
                                        str(root / "sealed" / "1" / "model.cortado-enc")], check=True, capture_output=True)
    server = server_conftest.Server(root, ["--key-file", str(key)], tmp_path_factory.mktemp("server")).start()
    client = tc.InferenceServerClient(server.address)
    yield client
    client.close()
    assert server.stop() == 0


def infer(client, model, name, data, datatype):
    t = tc.InferInput(name, list(data.shape), datatype)
    t.set_data_from_numpy(data)
    return client.infer(model, [t])


@pytest.mark.parametrize("model", ["dense", "compiled", "sealed"])
def test_dense_program_over_oip(served, model):
    x = rng(22).standard_normal((1, 2, 3)).astype(np.float32)  # batch of one row
    out = infer(served, model, "x", x, "FP32")
    name = served.get_model_metadata(model).outputs[0].name
    ref = 1 / (1 + np.exp(-(x @ W.T + B)))
    assert_close(out.as_numpy(name), ref, rtol=1e-5, atol=1e-6)


def test_fp16_program_travels_as_fp16(served):
    meta = served.get_model_metadata("half")
    assert meta.inputs[0].datatype == "FP16" and meta.outputs[0].datatype == "FP16"
    x = np.array([[[0.5, -1.25, 3.0], [100.0, 0.0, -7.5]]], dtype=np.float16)
    got = infer(served, "half", "x", x, "FP16").as_numpy(meta.outputs[0].name)
    assert got.dtype == np.float16
    assert np.array_equal(got, (x.astype(np.float32) + 1).astype(np.float16))


def test_classifier_program_label(served):
    x = np.array([[[0.1, 2.0, 0.3]]], dtype=np.float32)
    out = infer(served, "labels", "x", x, "FP32")
    assert out.as_numpy("classLabel").reshape(-1)[0] == b"b"
    p = np.exp(x[0, 0]) / np.exp(x[0, 0]).sum()
    assert_close(out.as_numpy("classLabel_probs").reshape(-1), p, rtol=1e-5, atol=1e-7)
