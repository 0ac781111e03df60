"""cortado.v1.Predictor Update (Core ML's MLUpdateTask over gRPC), variants and their limits,
called from grpcio.

The model is a coremltools NeuralNetworkBuilder network, x[16] -> dense 32 (fixed) -> ReLU ->
dense 3 (updatable) -> softmax, cross-entropy loss, SGD, shuffling off: the head-over-a-base
shape of per-user variants. The truth is Tests/Update's NumPy re-implementation of the training
(updharness.Reference, itself checked against `cortado update`): the loss per epoch, and the
predictions of the trained variant, at rtol 1e-4 (float32 kernels; training in double).
"""

import sys
import threading
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

P = load_predictor()
pb = P.predictor_pb2
CONTROL = ["--model-control", "explicit"]
RTOL, ATOL = 1e-4, 1e-6
CIN, HIDDEN, CLASSES = 16, 32, 3
LR, BATCH = 0.1, 4


def softmax():
    def f(z):
        e = np.exp(z - z.max())
        return e / e.sum()
    return Fn(f, None)


def head_network(hidden=HIDDEN, seed=3, updatable=True):
    rng = np.random.default_rng(seed)
    b = NeuralNetworkBuilder([("x", datatypes.Array(CIN))], [("probs", None)])
    b.add_inner_product("body", W=rng.normal(size=(hidden, CIN)) * 0.3, b=rng.normal(size=hidden) * 0.1,
                        input_channels=CIN, output_channels=hidden, has_bias=True, input_name="x", output_name="h")
    b.add_activation("relu", "RELU", "h", "hr")
    b.add_inner_product("head", W=rng.normal(size=(CLASSES, hidden)) * 0.3, b=np.zeros(CLASSES),
                        input_channels=hidden, output_channels=CLASSES, has_bias=True, input_name="hr", output_name="z")
    b.add_softmax("sm", "z", "probs")
    if updatable:
        b.make_updatable(["head"])
        b.set_categorical_cross_entropy_loss("loss", "probs")
        p = SgdParams(lr=LR, batch=BATCH)
        p.set_batch(BATCH, [1, 2, 4, 8, 16, 32])
        b.set_sgd_optimizer(p)
        b.set_epochs(2, allowed_set=[1, 2, 3, 5, 10, 1000])
        b.spec.neuralNetwork.updateParams.shuffle.defaultValue = False
    return b.spec


def reference(spec):
    return Reference([Dense("body", *weights(spec, "body"), False), relu(), Dense("head", *weights(spec, "head"), True),
                      softmax()], "ce")


def write(root, name, spec, version="1"):
    folder = Path(root) / name / version
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.mlmodel").write_bytes(spec.SerializeToString(deterministic=True))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("update-repo")
    spec = head_network()
    write(root, "head", spec)
    write(root, "big", head_network(hidden=512, seed=4))
    write(root, "fixed", head_network(updatable=False))
    from coremltools.models.nearest_neighbors import KNearestNeighborsClassifierBuilder
    k = KNearestNeighborsClassifierBuilder(input_name="x", output_name="label", number_of_dimensions=2,
                                           default_class_label="none", number_of_neighbors=1)
    k.is_updatable = True
    k.add_samples(np.array([[0, 0], [10, 10]], dtype=np.float32), ["a", "b"])
    write(root, "knn", k.spec)
    return root, spec


def array(a, dtype=np.float32):
    a = np.ascontiguousarray(np.asarray(a, dtype=dtype))
    kind = {np.dtype(np.float32): pb.FLOAT32, np.dtype(np.float64): pb.DOUBLE, np.dtype(np.int32): pb.INT32}[a.dtype]
    return pb.FeatureValue(multi_array=pb.MultiArray(data_type=kind, shape=list(a.shape), data=a.astype(a.dtype.newbyteorder("<")).tobytes()))


def training_rows(X, T):
    return [pb.Row(features=[pb.Feature(name="x", value=array(x)), pb.Feature(name="probs_true", value=array([t], np.int32))])
            for x, t in zip(X, T)]


def data(n, seed=10):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=CIN).astype(np.float32).astype(np.float64) for _ in range(n)]
    T = [int(t) for t in rng.integers(0, CLASSES, n)]
    return X, T


def values(fv):
    a = fv.multi_array
    return np.frombuffer(a.data, dtype="<f4" if a.data_type == pb.FLOAT32 else "<f8").reshape(-1)


def predict(stub, x, variant="", model="head"):
    reply = stub.Predict(pb.PredictRequest(model=model, variant=variant, inputs=[pb.Feature(name="x", value=array(x))]), timeout=30)
    out = {f.name: f.value for f in reply.outputs}
    return values(out["probs"]), reply.version


def update(stub, rows, variant="", model="head", timeout=120, **params):
    """(progress events, result) of a completed Update."""
    events = list(stub.Update(pb.UpdateRequest(model=model, variant=variant, rows=rows,
                                               parameters=pb.UpdateParameters(**params)), timeout=timeout))
    assert events and events[-1].WhichOneof("event") == "result", events
    return [e.progress for e in events[:-1]], events[-1].result


def expect_error(fn, code, *words):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    err = info.value
    assert err.code() == code, f"expected {code}, got {err.code()}: {err.details()}"
    for w in words:
        assert w in (err.details() or ""), f"{w!r} not in {err.details()!r}"
    return err


def variants(stub, model=""):
    return {(v.model, v.variant): v for v in stub.ListVariants(pb.ListVariantsRequest(model=model), timeout=10).variants}


@pytest.fixture
def served(start_server, repo, tmp_path):
    # Each test stores its variants in a folder of its own (the repository is the module's).
    def start(*args):
        server = start_server(repo[0], *CONTROL, "--variant-store", tmp_path / "variants", *args)
        channel = server.channel()
        return server, P.predictor_pb2_grpc.PredictorStub(channel)
    return start


# ---------------------------------------------------------------- variants and versions


def test_variant_trains_as_the_reference_and_base_is_unchanged(served, repo):
    _, spec = repo
    server, stub = served()
    X, T = data(12)
    probe, _ = data(5, seed=99)
    before = [predict(stub, x)[0] for x in probe]

    progress, result = update(stub, training_rows(X, T), variant="alice", epochs=3)
    ref = reference(spec)
    losses = ref.train(X, T, 3, BATCH, LR)
    assert [p.epoch for p in progress] == [0, 1, 2] and all(p.epochs == 3 for p in progress)
    np.testing.assert_allclose([p.loss for p in progress], losses, rtol=RTOL)
    assert (result.model, result.variant, result.version, result.examples, result.epochs) == ("head", "alice", "1", 12, 3)
    assert "epochs=3" in result.parameters and "shuffle=false" in result.parameters

    untrained = reference(spec)
    for x, old in zip(probe, before):
        got, version = predict(stub, x, variant="alice")
        assert version == "1"
        np.testing.assert_allclose(got, ref.predict(x), rtol=RTOL, atol=ATOL)
        # The model itself still answers as before.
        np.testing.assert_allclose(predict(stub, x)[0], old, rtol=0, atol=0)
        np.testing.assert_allclose(old, untrained.predict(x), rtol=RTOL, atol=ATOL)
    batch = stub.PredictBatch(pb.PredictBatchRequest(model="head", variant="alice", rows=[
        pb.Row(features=[pb.Feature(name="x", value=array(x))]) for x in probe]), timeout=30)
    for row, x in zip(batch.rows, probe):
        got = values(row.features[0].value)
        np.testing.assert_allclose(got, ref.predict(x), rtol=RTOL, atol=ATOL)

    listed = variants(stub, "head")
    assert list(listed) == [("head", "alice")]
    assert listed["head", "alice"].loaded and listed["head", "alice"].base_version == "1"
    assert listed["head", "alice"].updates == 1

    # A second update of the variant trains on from its own weights.
    update(stub, training_rows(X, T), variant="alice", epochs=2)
    ref.train(X, T, 2, BATCH, LR)
    np.testing.assert_allclose(predict(stub, probe[0], variant="alice")[0], ref.predict(probe[0]), rtol=RTOL, atol=ATOL)
    assert variants(stub)["head", "alice"].updates == 2
    expect_error(lambda: predict(stub, probe[0], variant="bob"), grpc.StatusCode.NOT_FOUND, "bob")

    stub.DeleteVariant(pb.DeleteVariantRequest(model="head", variant="alice"), timeout=10)
    assert variants(stub) == {}
    expect_error(lambda: predict(stub, probe[0], variant="alice"), grpc.StatusCode.NOT_FOUND, "alice")


def test_update_without_variant_serves_a_new_version(served, repo):
    _, spec = repo
    server, stub = served()
    X, T = data(8, seed=5)
    _, result = update(stub, training_rows(X, T), epochs=1)
    assert (result.version, result.variant) == ("2", "")
    ref = reference(spec)
    ref.train(X, T, 1, BATCH, LR)
    got, version = predict(stub, X[0])
    assert version == "2"
    np.testing.assert_allclose(got, ref.predict(X[0]), rtol=RTOL, atol=ATOL)
    listed = {m.name: m.version for m in stub.List(pb.ListRequest(), timeout=10).models}
    assert listed["head"] == "2"


def test_variants_are_evicted_beyond_the_bound_and_reload(served, repo):
    _, spec = repo
    server, stub = served("--max-variants", "2")
    probe = data(3, seed=42)[0]
    answers = {}
    for i, name in enumerate(["a", "b", "c"]):
        X, T = data(8, seed=20 + i)
        update(stub, training_rows(X, T), variant=name, epochs=1)
        ref = reference(spec)
        ref.train(X, T, 1, BATCH, LR)
        answers[name] = [ref.predict(x) for x in probe]
    listed = variants(stub, "head")
    assert sorted(v for _, v in listed) == ["a", "b", "c"]
    assert [listed["head", v].loaded for v in "abc"] == [False, True, True]
    # The evicted variant loads again on use, with its trained weights; the least recently
    # used one goes.
    for x, want in zip(probe, answers["a"]):
        np.testing.assert_allclose(predict(stub, x, variant="a")[0], want, rtol=RTOL, atol=ATOL)
    listed = variants(stub, "head")
    assert [listed["head", v].loaded for v in "abc"] == [True, False, True]
    for name in "bc":
        for x, want in zip(probe, answers[name]):
            np.testing.assert_allclose(predict(stub, x, variant=name)[0], want, rtol=RTOL, atol=ATOL)
    assert sum(v.loaded for v in variants(stub).values()) == 2


def test_knn_variant_learns_its_examples(served, tmp_path):
    """Another kind through the same RPC: a k-NN classifier's variant holds the examples sent;
    stored as its whole spec (the kind's default head), it answers the same after a restart."""
    server, stub = served()

    def label(x, variant=""):
        reply = stub.Predict(pb.PredictRequest(model="knn", variant=variant, inputs=[pb.Feature(name="x", value=array(x))]),
                             timeout=30)
        return {f.name: f.value for f in reply.outputs}["label"].string_value

    rows = [pb.Row(features=[pb.Feature(name="x", value=array(x)), pb.Feature(name="label", value=pb.FeatureValue(string_value=l))])
            for x, l in [([20, 0], "c"), ([0, 20], "d")]]
    progress, result = update(stub, rows, variant="u1", model="knn")
    assert result.examples == 2 and not result.HasField("loss") and not progress[0].HasField("loss")
    assert [label(x, "u1") for x in ([19, 1], [1, 19], [1, 1])] == ["c", "d", "a"]
    assert [label(x) for x in ([19, 1], [1, 19])] == ["b", "b"]
    assert result.stored
    head = ct.proto.Model_pb2.Model.FromString((tmp_path / "variants" / "knn" / "variants" / "u1.head").read_bytes())
    assert head.WhichOneof("Type") == "kNearestNeighborsClassifier" and len(head.description.input) == 1
    assert head.description.metadata.userDefined["cortado.variant.base-version"] == "1"
    assert server.stop() == 0
    server, stub = served()
    assert [label(x, "u1") for x in ([19, 1], [1, 19], [1, 1])] == ["c", "d", "a"]


# ---------------------------------------------------------------- under load, cancelled


def test_update_under_prediction_load_fails_no_prediction(served, repo):
    server, stub = served()
    X, T = data(64, seed=7)
    probe = data(1, seed=8)[0][0]
    want = predict(stub, probe, model="big")[0]
    stop = threading.Event()
    counts = {"ok": 0, "failed": [], "during": 0}
    updating = threading.Event()

    def load():
        with server.channel() as ch:
            s = P.predictor_pb2_grpc.PredictorStub(ch)
            while not stop.is_set():
                try:
                    got, _ = predict(s, probe, model="big")
                    np.testing.assert_allclose(got, want, rtol=0, atol=0)
                    counts["ok"] += 1
                    if updating.is_set():
                        counts["during"] += 1
                except Exception as e:  # noqa: BLE001 (every failure counts)
                    counts["failed"].append(repr(e))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        updating.set()
        progress, result = update(stub, training_rows(X, T), variant="busy", model="big", epochs=10)
        updating.clear()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(progress) == 10 and result.variant == "busy"
    assert counts["failed"] == []
    assert counts["during"] > 0, "no prediction ran while the update trained"


def test_cancel_mid_update_keeps_serving_and_creates_nothing(served, repo):
    server, stub = served()
    X, T = data(512, seed=9)
    rows = training_rows(X, T)
    call = stub.Update(pb.UpdateRequest(model="big", variant="gone", rows=rows,
                                        parameters=pb.UpdateParameters(epochs=1000, mini_batch_size=1)), timeout=120)
    first = next(call)
    assert first.WhichOneof("event") == "progress" and first.progress.epoch == 0
    call.cancel()
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # The server goes on serving, made no variant, and frees the update's place (one update
    # at a time by default): another update runs once the cancelled one has stopped.
    predict(stub, X[0], model="big")
    deadline = time.monotonic() + 30
    while True:
        try:
            update(stub, training_rows(X[:4], T[:4]), variant="after", model="big", epochs=1)
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline, e.details()
            time.sleep(0.2)
    assert list(variants(stub, "big")) == [("big", "after")]
    assert "update cancelled" in server.stderr()


# ---------------------------------------------------------------- refusals


def test_update_needs_model_control(start_server, repo, tmp_path):
    server = start_server(repo[0], "--variant-store", tmp_path / "variants")
    with server.channel() as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        X, T = data(4)
        expect_error(lambda: update(stub, training_rows(X, T), variant="v"), grpc.StatusCode.PERMISSION_DENIED,
                     "Update", "--model-control")
        expect_error(lambda: stub.DeleteVariant(pb.DeleteVariantRequest(model="head", variant="v"), timeout=10),
                     grpc.StatusCode.PERMISSION_DENIED, "--model-control")
        assert variants(stub) == {}


def test_bad_updates_change_nothing(served, repo):
    server, stub = served("--max-update-rows", "100")
    X, T = data(8)
    probe = X[0]
    want = predict(stub, probe)[0]
    rows = training_rows(X, T)
    no_target = [pb.Row(features=[pb.Feature(name="x", value=array(x))]) for x in X]
    wrong_shape = [pb.Row(features=[pb.Feature(name="x", value=array(np.zeros(CIN + 1))),
                                    pb.Feature(name="probs_true", value=array([0], np.int32))])]
    bad_class = training_rows(X[:1], [CLASSES])
    # A NaN in the second mini-batch: the first one has been applied when the loss goes NaN.
    diverging = training_rows(X[:4] + [np.full(CIN, np.nan)] * 4, T[:4] + [0, 1, 2, 0])
    cases = [
        (dict(rows=no_target, variant="v"), grpc.StatusCode.INVALID_ARGUMENT, ["probs_true", "missing"]),
        (dict(rows=wrong_shape, variant="v"), grpc.StatusCode.INVALID_ARGUMENT, ["training row 0", "x"]),
        (dict(rows=bad_class, variant="v"), grpc.StatusCode.INVALID_ARGUMENT, ["class index"]),
        (dict(rows=rows, variant="v", parameters=pb.UpdateParameters(learning_rate=-0.1)), grpc.StatusCode.INVALID_ARGUMENT,
         ["learningRate"]),
        (dict(rows=rows, variant="v", parameters=pb.UpdateParameters(epochs=0)), grpc.StatusCode.INVALID_ARGUMENT, ["epochs"]),
        (dict(rows=diverging, variant="v", parameters=pb.UpdateParameters(epochs=1)), grpc.StatusCode.INVALID_ARGUMENT,
         ["diverged", "nothing was changed"]),
        (dict(rows=rows, model="fixed", variant="v"), grpc.StatusCode.FAILED_PRECONDITION, ["not updatable"]),
        (dict(rows=rows, variant="no/slash"), grpc.StatusCode.INVALID_ARGUMENT, ["variant name"]),
        (dict(rows=[], variant="v"), grpc.StatusCode.INVALID_ARGUMENT, ["no training rows"]),
        (dict(rows=training_rows(X * 13, T * 13), variant="v"), grpc.StatusCode.INVALID_ARGUMENT, ["--max-update-rows"]),
        (dict(rows=rows, model="nope", variant="v"), grpc.StatusCode.NOT_FOUND, ["nope"]),
    ]
    for kwargs, code, words in cases:
        request = pb.UpdateRequest(model=kwargs.get("model", "head"), variant=kwargs.get("variant", ""), rows=kwargs["rows"],
                                   parameters=kwargs.get("parameters"))
        expect_error(lambda: list(stub.Update(request, timeout=60)), code, *words)
        assert variants(stub) == {}, kwargs
        got, version = predict(stub, probe)
        assert version == "1"
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
