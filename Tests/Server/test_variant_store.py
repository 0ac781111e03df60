"""Variants stored as heads (cortado.v1.Predictor Update with a variant name), called from grpcio.

A variant is written to `<store>/<model>/variants/<variant>.head`: a Core ML Model message
holding only the layers the update changed, with the base version in its metadata. These tests
restart servers over one repository and check that a variant answers the same after a restart,
that DeleteVariant removes it for good, that heads written by hand in the documented format
serve (the truth: the NumPy forward pass of Tests/Update's reference with those weights), that
bad heads fail only their own calls, and that a store that cannot be written still serves.

The model: x[128] -> dense 512 (fixed) -> ReLU -> dense 3 (updatable) -> softmax, cross-entropy,
SGD, shuffling off; its body holds 65,536 weights, its head 1,536.
"""

import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Update"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "NeuralNetwork"))

from protos import load_predictor  # noqa: E402
from updharness import Dense, Fn, Reference, relu, weights  # noqa: E402

ct = pytest.importorskip("coremltools")
from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder, SgdParams  # noqa: E402
from coremltools.proto import Model_pb2  # noqa: E402

P = load_predictor()
pb = P.predictor_pb2
RTOL, ATOL = 1e-4, 1e-6
CIN, HIDDEN, CLASSES = 128, 512, 3
LR, BATCH = 0.1, 4
BASE_KEY = "cortado.variant.base-version"


def network():
    rng = np.random.default_rng(5)
    b = NeuralNetworkBuilder([("x", datatypes.Array(CIN))], [("probs", None)])
    b.add_inner_product("body", W=rng.normal(size=(HIDDEN, CIN)) / np.sqrt(CIN), b=rng.normal(size=HIDDEN) * 0.1,
                        input_channels=CIN, output_channels=HIDDEN, has_bias=True, input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "hr")
    b.add_inner_product("head", W=rng.normal(size=(CLASSES, HIDDEN)) * 0.05, b=np.zeros(CLASSES),
                        input_channels=HIDDEN, output_channels=CLASSES, has_bias=True, input_name="hr", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["head"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    p = SgdParams(lr=LR, batch=BATCH)
    p.set_batch(BATCH, [1, 2, 4, 8])
    b.set_sgd_optimizer(p)
    b.set_epochs(1, allowed_set=[1, 2, 3])
    b.spec.neuralNetwork.updateParams.shuffle.defaultValue = False
    return b.spec


def softmax():
    def f(z):
        e = np.exp(z - z.max())
        return e / e.sum()
    return Fn(f, None)


def reference(spec, head=None):
    W, b = head if head is not None else weights(spec, "head")
    return Reference([Dense("body", *weights(spec, "body"), False), relu(), Dense("head", W, b, True), softmax()], "ce")


@pytest.fixture(scope="module")
def spec():
    return network()


@pytest.fixture
def repo(tmp_path, spec):
    folder = tmp_path / "repo" / "net" / "1"
    folder.mkdir(parents=True)
    (folder / "model.mlmodel").write_bytes(spec.SerializeToString(deterministic=True))
    return tmp_path / "repo"


def array(a, dtype=np.float32):
    a = np.ascontiguousarray(np.asarray(a, dtype=dtype))
    kind = {np.dtype(np.float32): pb.FLOAT32, np.dtype(np.int32): pb.INT32}[a.dtype]
    return pb.FeatureValue(multi_array=pb.MultiArray(data_type=kind, shape=list(a.shape), data=a.astype(a.dtype.newbyteorder("<")).tobytes()))


def data(n, seed):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=CIN).astype(np.float32).astype(np.float64) for _ in range(n)]
    T = [int(t) for t in rng.integers(0, CLASSES, n)]
    return X, T


def rows(X, T):
    return [pb.Row(features=[pb.Feature(name="x", value=array(x)), pb.Feature(name="probs_true", value=array([t], np.int32))])
            for x, t in zip(X, T)]


def predict(stub, x, variant=""):
    reply = stub.Predict(pb.PredictRequest(model="net", variant=variant, inputs=[pb.Feature(name="x", value=array(x))]), timeout=30)
    a = {f.name: f.value for f in reply.outputs}["probs"].multi_array
    return np.frombuffer(a.data, dtype="<f4" if a.data_type == pb.FLOAT32 else "<f8").astype(np.float64)


def update(stub, X, T, variant, epochs=1):
    events = list(stub.Update(pb.UpdateRequest(model="net", variant=variant, rows=rows(X, T),
                                               parameters=pb.UpdateParameters(epochs=epochs)), timeout=120))
    assert events and events[-1].WhichOneof("event") == "result", events
    return events[-1].result


def listed(stub):
    return {v.variant: v for v in stub.ListVariants(pb.ListVariantsRequest(model="net"), timeout=10).variants}


def expect_error(fn, code, *words):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    err = info.value
    assert err.code() == code, f"expected {code}, got {err.code()}: {err.details()}"
    for w in words:
        assert w in (err.details() or ""), f"{w!r} not in {err.details()!r}"


def serve(start_server, repo, *args):
    server = start_server(repo, "--model-control", "explicit", *args)
    return server, P.predictor_pb2_grpc.PredictorStub(server.channel())


def head_file(spec, W, b, base_version="1", name="head"):
    """A head in the documented format, written by hand: a Core ML Model holding the changed
    layer, marked as a changed-layers head, with the base version in its metadata."""
    head = Model_pb2.Model()
    head.specificationVersion = spec.specificationVersion
    head.description.metadata.userDefined["cortado.variant.head"] = "changed-layers"
    head.description.metadata.userDefined[BASE_KEY] = base_version
    layer = head.neuralNetwork.layers.add()
    layer.CopyFrom(next(l for l in spec.neuralNetwork.layers if l.name == "head"))
    layer.name = name
    del layer.innerProduct.weights.floatValue[:]
    layer.innerProduct.weights.floatValue.extend(np.asarray(W, np.float32).reshape(-1))
    del layer.innerProduct.bias.floatValue[:]
    layer.innerProduct.bias.floatValue.extend(np.asarray(b, np.float32))
    return head.SerializeToString(deterministic=True)


# ---------------------------------------------------------------- restart and delete


def test_variant_survives_a_restart_and_delete_removes_it(start_server, repo, spec):
    probe = data(4, seed=99)[0]
    X, T = data(12, seed=1)
    server, stub = serve(start_server, repo)
    result = update(stub, X, T, "alice")
    assert result.stored and result.store_error == ""
    head = repo / "net" / "variants" / "alice.head"
    assert head.is_file()
    model_bytes = (repo / "net" / "1" / "model.mlmodel").stat().st_size
    # The head holds the 512x3 layer, not the 128x512 body: about 1/40 of the model.
    assert head.stat().st_size * 20 < model_bytes, (head.stat().st_size, model_bytes)
    ref = reference(spec)
    ref.train(X, T, 1, BATCH, LR)
    before = [predict(stub, x, "alice") for x in probe]
    for x, got in zip(probe, before):
        np.testing.assert_allclose(got, ref.predict(x), rtol=RTOL, atol=ATOL)
    assert server.stop() == 0

    server, stub = serve(start_server, repo)
    v = listed(stub)["alice"]
    assert (v.stored, v.loaded) == (True, False)
    # Read on first use: the same answers, bit for bit.
    for x, want in zip(probe, before):
        np.testing.assert_array_equal(predict(stub, x, "alice"), want)
    v = listed(stub)["alice"]
    assert (v.stored, v.loaded, v.base_version, v.updates) == (True, True, "1", 1)
    # The repository still holds one model, at version 1: the variants folder is no version.
    models = {m.name: m.version for m in stub.List(pb.ListRequest(), timeout=10).models}
    assert models == {"net": "1"}

    # An update of the stored variant trains on from its stored weights.
    X2, T2 = data(8, seed=2)
    assert update(stub, X2, T2, "alice").stored
    ref.train(X2, T2, 1, BATCH, LR)
    np.testing.assert_allclose(predict(stub, probe[0], "alice"), ref.predict(probe[0]), rtol=RTOL, atol=ATOL)
    assert listed(stub)["alice"].updates == 2

    stub.DeleteVariant(pb.DeleteVariantRequest(model="net", variant="alice"), timeout=10)
    assert not head.exists()
    expect_error(lambda: predict(stub, probe[0], "alice"), grpc.StatusCode.NOT_FOUND, "alice")
    assert server.stop() == 0

    server, stub = serve(start_server, repo)
    assert listed(stub) == {}
    expect_error(lambda: predict(stub, probe[0], "alice"), grpc.StatusCode.NOT_FOUND, "alice")
    expect_error(lambda: stub.DeleteVariant(pb.DeleteVariantRequest(model="net", variant="alice"), timeout=10),
                 grpc.StatusCode.NOT_FOUND, "alice")


def test_poller_leaves_the_variants_folder_alone(start_server, repo):
    server = start_server(repo, "--model-control", "poll", "--poll-interval", "0.2")
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    X, T = data(4, seed=3)
    assert update(stub, X, T, "polled").stored
    time.sleep(1.0)  # several polls after the head was written
    assert {m.name: m.version for m in stub.List(pb.ListRequest(), timeout=10).models} == {"net": "1"}
    assert "model reloaded" not in server.stderr() and "failed to load" not in server.stderr()
    assert listed(stub)["polled"].loaded


# ---------------------------------------------------------------- heads written by hand, bad heads


def test_heads_written_by_hand_serve_and_bad_heads_fail_only_their_calls(start_server, repo, spec):
    rng = np.random.default_rng(7)
    W, b = rng.normal(size=(CLASSES, HIDDEN)) * 0.05, rng.normal(size=CLASSES) * 0.1
    folder = repo / "net" / "variants"
    folder.mkdir()
    (folder / "hand.head").write_bytes(head_file(spec, W, b))
    (folder / "stale.head").write_bytes(head_file(spec, W, b, base_version="7"))
    (folder / "misfit.head").write_bytes(head_file(spec, W, b, name="nope"))
    (folder / "junk.head").write_bytes(bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    (folder / "notes.txt").write_text("not a head")
    # One variant compiled at a time: a stored one that was dropped is read again on use.
    server, stub = serve(start_server, repo, "--max-variants", "1")
    got = listed(stub)
    assert sorted(got) == ["hand", "junk", "misfit", "stale"]
    assert all(v.stored and not v.loaded for v in got.values())

    x = data(1, seed=4)[0][0]
    base = predict(stub, x)
    want = reference(spec, head=(W.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64))).predict(x)
    np.testing.assert_allclose(predict(stub, x, "hand"), want, rtol=RTOL, atol=ATOL)
    expect_error(lambda: predict(stub, x, "stale"), grpc.StatusCode.FAILED_PRECONDITION, "version 7", str(folder / "stale.head"))
    expect_error(lambda: predict(stub, x, "junk"), grpc.StatusCode.DATA_LOSS, str(folder / "junk.head"))
    expect_error(lambda: predict(stub, x, "misfit"), grpc.StatusCode.DATA_LOSS, str(folder / "misfit.head"), "'nope'")
    # The same errors again (nothing cached that hides them), and the others still serve.
    expect_error(lambda: predict(stub, x, "junk"), grpc.StatusCode.DATA_LOSS, "junk.head")
    np.testing.assert_array_equal(predict(stub, x), base)
    np.testing.assert_allclose(predict(stub, x, "hand"), want, rtol=RTOL, atol=ATOL)
    # An update of a variant whose head cannot be read changes nothing.
    X, T = data(4, seed=5)
    expect_error(lambda: update(stub, X, T, "junk"), grpc.StatusCode.DATA_LOSS, "junk.head")
    assert (folder / "junk.head").read_bytes()[:4] != b""
    got = listed(stub)
    assert got["hand"].loaded and got["hand"].base_version == "1"
    assert not got["junk"].loaded and not got["stale"].loaded

    # A head written while the server runs is found on first use.
    (folder / "late.head").write_bytes(head_file(spec, W, b))
    np.testing.assert_allclose(predict(stub, x, "late"), want, rtol=RTOL, atol=ATOL)
    got = listed(stub)
    assert (got["late"].loaded, got["hand"].loaded) == (True, False)
    np.testing.assert_allclose(predict(stub, x, "hand"), want, rtol=RTOL, atol=ATOL)
    assert sum(v.loaded for v in listed(stub).values()) == 1


# ---------------------------------------------------------------- where the store is


def test_variant_store_flag_and_an_unwritable_store(start_server, repo, tmp_path):
    X, T = data(8, seed=6)
    probe = data(2, seed=7)[0]
    store = tmp_path / "store"
    server, stub = serve(start_server, repo, "--variant-store", store)
    assert update(stub, X, T, "bob").stored
    assert (store / "net" / "variants" / "bob.head").is_file()
    assert not (repo / "net" / "variants").exists()
    answers = [predict(stub, x, "bob") for x in probe]
    assert server.stop() == 0
    server, stub = serve(start_server, repo, "--variant-store", store)
    for x, want in zip(probe, answers):
        np.testing.assert_array_equal(predict(stub, x, "bob"), want)
    assert server.stop() == 0

    # A store whose model folder is a file cannot be written (whoever runs the test, root too).
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "net").write_text("a file where the model's folder would be")
    server, stub = serve(start_server, repo, "--variant-store", blocked)
    result = update(stub, X, T, "carol")
    assert not result.stored
    assert str(blocked / "net") in result.store_error, result.store_error
    for x, want in zip(probe, answers):  # the same rows, the same trained weights as bob
        np.testing.assert_array_equal(predict(stub, x, "carol"), want)
    v = listed(stub)["carol"]
    assert (v.stored, v.loaded, v.base_version) == (False, True, "1")
    assert "variant not stored" in server.stderr()
    stub.DeleteVariant(pb.DeleteVariantRequest(model="net", variant="carol"), timeout=10)
    assert listed(stub) == {}
