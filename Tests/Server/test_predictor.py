"""cortado.v1.Predictor and grpc.health.v1.Health over grpcio, against a running `cortado serve`.

Answers are compared with the libraries that trained the models (conftest.py states the
tolerances); every error test checks the status code, that the message names the thing at
fault, and that a good call succeeds afterwards. Transport abuse (undecodable messages,
unknown paths, oversized and compressed messages, expired deadlines, raw sockets that send
half a frame and vanish) must leave the server serving everyone else.
"""
import re
import socket
import struct
import threading
import urllib.request

import grpc
import numpy as np
import pytest

from grpc_health.v1 import health_pb2 as health_pb
from grpc_health.v1 import health_pb2_grpc
from protos import load_predictor

P = load_predictor()
# The module's server loads and unloads models (model control is off by default).
SERVER_ARGS = ["--model-control", "explicit"]
pb = P.predictor_pb2

ARRAY_TYPES = {
    np.dtype(np.float16): pb.FLOAT16,
    np.dtype(np.float32): pb.FLOAT32,
    np.dtype(np.float64): pb.DOUBLE,
    np.dtype(np.int32): pb.INT32,
}
WIRE_DTYPES = {pb.FLOAT16: "<f2", pb.FLOAT32: "<f4", pb.DOUBLE: "<f8", pb.INT32: "<i4"}


# ----------------------------------------------------------------------------- helpers

def encode(value):
    if isinstance(value, dict):
        return pb.FeatureValue(dictionary=pb.Dictionary(string_keys=list(value), values=list(value.values())))
    if isinstance(value, str):
        return pb.FeatureValue(string_value=value)
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return pb.FeatureValue(multi_array=pb.MultiArray(
            data_type=ARRAY_TYPES[a.dtype], shape=list(a.shape), data=a.astype(a.dtype.newbyteorder("<")).tobytes()))
    if isinstance(value, (int, np.integer)):
        return pb.FeatureValue(int64_value=int(value))
    return pb.FeatureValue(double_value=float(value))


def decode(fv):
    kind = fv.WhichOneof("kind")
    if kind == "double_value":
        return fv.double_value
    if kind == "int64_value":
        return fv.int64_value
    if kind == "string_value":
        return fv.string_value
    if kind == "dictionary":
        keys = list(fv.dictionary.string_keys) or list(fv.dictionary.int64_keys)
        return dict(zip(keys, fv.dictionary.values))
    if kind == "multi_array":
        a = fv.multi_array
        return np.frombuffer(a.data, dtype=WIRE_DTYPES[a.data_type]).reshape(tuple(a.shape))
    raise AssertionError(f"unexpected feature value kind {kind}: {fv}")


def row_features(case, i, rename=None):
    rename = rename or {}
    return [pb.Feature(name=rename.get(n, n), value=encode(v[i])) for n, v in case.inputs.items()]


def check_outputs(case, i, outputs):
    """outputs: name -> decoded value, for row i of the case."""
    for name, want in case.expected.items():
        assert name in outputs, f"{case.name}: output {name} missing from {sorted(outputs)}"
        got = outputs[name]
        if case.name == "half":
            assert got.dtype == np.dtype("<f2") and got.shape == (2, 3)
            assert got.tobytes() == np.ascontiguousarray(want[i]).tobytes(), \
                f"row {i}: {got.view(np.uint16)} != {want[i].view(np.uint16)}"
        elif name == "species":
            assert got == want[i], f"row {i}"
        elif name == "classProbability":
            assert sorted(got) == sorted(case.labels)
            np.testing.assert_allclose([got[label] for label in case.labels], want[i], rtol=case.rtol, atol=case.atol,
                                       err_msg=f"row {i}")
        else:
            np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want[i], rtol=case.rtol, atol=case.atol,
                                       err_msg=f"{case.name} row {i} output {name}")


def as_dict(features):
    return {f.name: decode(f.value) for f in features}


@pytest.fixture(scope="module")
def channel(server):
    with server.channel() as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel):
    return P.predictor_pb2_grpc.PredictorStub(channel)


def good_call(stub, repo, row=0):
    """A Predict that must succeed with the right answer (used after every error)."""
    case = repo.cases["logreg"]
    reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, row)), timeout=10)
    check_outputs(case, row, as_dict(reply.outputs))
    return reply


def expect_error(fn, code, *names):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    err = info.value
    assert err.code() == code, f"expected {code}, got {err.code()}: {err.details()}"
    for name in names:
        assert name in (err.details() or ""), f"message does not name {name!r}: {err.details()!r}"
    return err


MODELS = ["logreg", "xgb", "dictlin", "half", "scaler", "scaler32"]


# ----------------------------------------------------------------------------- predictions

@pytest.mark.parametrize("model", MODELS)
def test_predict_matches_the_library(stub, repo, model):
    case = repo.cases[model]
    for i in range(4):
        reply = stub.Predict(pb.PredictRequest(model=model, inputs=row_features(case, i)), timeout=10)
        assert (reply.model, reply.version) == (model, "1")
        check_outputs(case, i, as_dict(reply.outputs))


@pytest.mark.parametrize("model", MODELS)
def test_predict_batch_matches_the_library(stub, repo, model):
    case = repo.cases[model]
    n = len(next(iter(case.expected.values())))
    rows = [pb.Row(features=row_features(case, i)) for i in range(n)]
    reply = stub.PredictBatch(pb.PredictBatchRequest(model=model, rows=rows), timeout=10)
    assert (reply.model, reply.version) == (model, "1")
    assert len(reply.rows) == n
    for i, row in enumerate(reply.rows):
        check_outputs(case, i, as_dict(row.features))


def test_float16_round_trip_is_bit_exact_as_2_byte_values(stub, repo):
    x = repo.cases["half"].inputs["x"]
    for i in range(len(x)):
        sent = np.ascontiguousarray(x[i]).astype("<f2")
        request = pb.PredictRequest(model="half", inputs=[pb.Feature(name="x", value=encode(sent))])
        assert len(request.inputs[0].value.multi_array.data) == 12  # 2 bytes an element on the wire
        reply = stub.Predict(request, timeout=10)
        (out,) = reply.outputs
        assert out.name == "x"
        a = out.value.multi_array
        assert a.data_type == pb.FLOAT16 and list(a.shape) == [2, 3]
        assert len(a.data) == 12 and a.data == sent.tobytes(), \
            f"row {i}: sent {sent.view(np.uint16).ravel()} got {np.frombuffer(a.data, '<u2')}"


def test_requested_outputs_subset(stub, repo):
    case = repo.cases["logreg"]
    reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 1), outputs=["species"]), timeout=10)
    assert [f.name for f in reply.outputs] == ["species"]
    assert reply.outputs[0].value.string_value == case.expected["species"][1]
    reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 1), outputs=["classProbability"]),
                         timeout=10)
    assert [f.name for f in reply.outputs] == ["classProbability"]


def test_list_shows_every_model_ready(stub):
    reply = stub.List(pb.ListRequest(), timeout=10)
    by_name = {m.name: m for m in reply.models}
    assert set(MODELS) <= set(by_name), sorted(by_name)
    for name in MODELS:
        assert by_name[name].state == pb.READY, by_name[name]
        assert by_name[name].version == "1"
    assert by_name["logreg"].spec_type == "pipelineClassifier"
    assert by_name["half"].spec_type == "identity"
    assert by_name["scaler"].spec_type == "scaler"


def test_describe(stub, repo):
    d = stub.Describe(pb.DescribeRequest(model="logreg"), timeout=10)
    assert d.status.name == "logreg" and d.status.state == pb.READY
    assert [i.name for i in d.inputs] == ["f0", "f1", "f2", "f3"]
    assert all(i.type == "double" for i in d.inputs), d.inputs
    assert [(o.name, o.type) for o in d.outputs] == [("species", "string"), ("classProbability", "dictionary")]
    assert list(d.class_labels) == repo.cases["logreg"].labels
    assert (d.predicted_feature_name, d.predicted_probabilities_name) == ("species", "classProbability")
    assert d.user_defined["com.github.apple.coremltools.source"].startswith("scikit-learn")

    h = stub.Describe(pb.DescribeRequest(model="half"), timeout=10)
    assert h.specification_version == 4
    for f in list(h.inputs) + list(h.outputs):
        assert (f.name, f.type, f.data_type, list(f.shape)) == ("x", "multiArray", pb.FLOAT16, [2, 3])

    s = stub.Describe(pb.DescribeRequest(model="scaler32"), timeout=10)
    assert (s.inputs[0].data_type, list(s.inputs[0].shape)) == (pb.FLOAT32, [5])
    assert (s.outputs[0].data_type, list(s.outputs[0].shape)) == (pb.DOUBLE, [5])

    expect_error(lambda: stub.Describe(pb.DescribeRequest(model="nosuchmodel"), timeout=10), grpc.StatusCode.NOT_FOUND,
                 "nosuchmodel")
    good_call(stub, repo)


def test_unload_load_and_reload(stub, repo):
    case = repo.cases["scaler"]
    request = pb.PredictRequest(model="scaler", inputs=row_features(case, 0))
    check_outputs(case, 0, as_dict(stub.Predict(request, timeout=10).outputs))

    stub.Unload(pb.UnloadRequest(model="scaler"), timeout=30)
    try:
        expect_error(lambda: stub.Predict(request, timeout=10), grpc.StatusCode.NOT_FOUND, "scaler")
        listed = {m.name: m for m in stub.List(pb.ListRequest(), timeout=10).models}
        assert listed["scaler"].state == pb.UNAVAILABLE, listed["scaler"]
        expect_error(lambda: stub.Unload(pb.UnloadRequest(model="scaler"), timeout=30), grpc.StatusCode.NOT_FOUND, "scaler")
    finally:
        loaded = stub.Load(pb.LoadRequest(model="scaler"), timeout=30)
    assert (loaded.status.name, loaded.status.version, loaded.status.state) == ("scaler", "1", pb.READY)
    check_outputs(case, 0, as_dict(stub.Predict(request, timeout=10).outputs))

    # Loading a model that is already loaded replaces it.
    again = stub.Load(pb.LoadRequest(model="scaler"), timeout=30)
    assert again.status.state == pb.READY
    check_outputs(case, 1, as_dict(stub.Predict(pb.PredictRequest(model="scaler", inputs=row_features(case, 1)),
                                                timeout=10).outputs))

    expect_error(lambda: stub.Load(pb.LoadRequest(model="nosuchmodel"), timeout=30), grpc.StatusCode.NOT_FOUND,
                 "nosuchmodel")
    expect_error(lambda: stub.Unload(pb.UnloadRequest(model="nosuchmodel"), timeout=30), grpc.StatusCode.NOT_FOUND,
                 "nosuchmodel")
    good_call(stub, repo)


def test_health(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ["", "cortado.v1.Predictor", "inference.GRPCInferenceService", "grpc.health.v1.Health", "logreg"]:
        assert health.Check(health_pb.HealthCheckRequest(service=service), timeout=10).status == \
            health_pb.HealthCheckResponse.SERVING, service
    expect_error(lambda: health.Check(health_pb.HealthCheckRequest(service="no.such.Service"), timeout=10),
                 grpc.StatusCode.NOT_FOUND, "no.such.Service")


# ----------------------------------------------------------------------------- bad requests

def test_unknown_model_is_not_found(stub, repo):
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="nosuchmodel"), timeout=10),
                 grpc.StatusCode.NOT_FOUND, "nosuchmodel")
    expect_error(lambda: stub.PredictBatch(pb.PredictBatchRequest(model="nosuchmodel", rows=[pb.Row()]), timeout=10),
                 grpc.StatusCode.NOT_FOUND, "nosuchmodel")
    case = repo.cases["logreg"]
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="logreg", version="7", inputs=row_features(case, 0)),
                                      timeout=10), grpc.StatusCode.NOT_FOUND, "logreg", "7")
    good_call(stub, repo)


def test_wrong_input_name(stub, repo):
    case = repo.cases["logreg"]
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 0, {"f2": "petal"})),
                                      timeout=10), grpc.StatusCode.INVALID_ARGUMENT, "petal", "'logreg'")
    good_call(stub, repo)


def test_missing_input(stub, repo):
    case = repo.cases["logreg"]
    inputs = [f for f in row_features(case, 0) if f.name != "f3"]
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="logreg", inputs=inputs), timeout=10),
                 grpc.StatusCode.INVALID_ARGUMENT, "f3", "'logreg'")
    good_call(stub, repo)


def test_wrong_input_type(stub, repo):
    case = repo.cases["logreg"]
    inputs = row_features(case, 0)
    inputs[1] = pb.Feature(name="f1", value=pb.FeatureValue(string_value="wide"))
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="logreg", inputs=inputs), timeout=10),
                 grpc.StatusCode.INVALID_ARGUMENT, "f1", "'logreg'")
    # A number where the model wants a dictionary.
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="dictlin", inputs=[pb.Feature(name="features", value=encode(1.5))]),
                                      timeout=10), grpc.StatusCode.INVALID_ARGUMENT, "features")
    good_call(stub, repo)


def test_wrong_shape(stub, repo):
    short = np.arange(4, dtype=np.float64)
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="scaler", inputs=[pb.Feature(name="input", value=encode(short))]),
                                      timeout=10), grpc.StatusCode.INVALID_ARGUMENT, "input", "'scaler'")
    # Data that does not fill the declared shape.
    value = pb.FeatureValue(multi_array=pb.MultiArray(data_type=pb.DOUBLE, shape=[5], data=b"\0" * 24))
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="scaler", inputs=[pb.Feature(name="input", value=value)]),
                                      timeout=10), grpc.StatusCode.INVALID_ARGUMENT, "input")
    # A batch row with the wrong shape is named by its row.
    case = repo.cases["scaler"]
    rows = [pb.Row(features=row_features(case, 0)), pb.Row(features=[pb.Feature(name="input", value=encode(short))])]
    expect_error(lambda: stub.PredictBatch(pb.PredictBatchRequest(model="scaler", rows=rows), timeout=10),
                 grpc.StatusCode.INVALID_ARGUMENT, "input")
    good_call(stub, repo)


def test_unknown_output_name(stub, repo):
    case = repo.cases["logreg"]
    expect_error(lambda: stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 0), outputs=["bogus"]),
                                      timeout=10), grpc.StatusCode.INVALID_ARGUMENT, "bogus")
    good_call(stub, repo)


def raw_call(channel, path, payload, **kwargs):
    return channel.unary_unary(path, request_serializer=None, response_deserializer=None)(payload, timeout=10, **kwargs)


@pytest.mark.parametrize("path", ["/cortado.v1.Predictor/Predict", "/cortado.v1.Predictor/Describe",
                                  "/grpc.health.v1.Health/Check"])
def test_undecodable_protobuf_is_invalid_argument(channel, stub, repo, path):
    # Field 1 (length-delimited) claiming 2^32 bytes: no protobuf parser accepts it.
    payload = b"\x0a\xff\xff\xff\xff\x0f\x01"
    expect_error(lambda: raw_call(channel, path, payload), grpc.StatusCode.INVALID_ARGUMENT)
    good_call(stub, repo)


def test_unknown_method_and_service_are_unimplemented(channel, stub, repo):
    expect_error(lambda: raw_call(channel, "/cortado.v1.Predictor/Explode", b""), grpc.StatusCode.UNIMPLEMENTED, "Explode")
    expect_error(lambda: raw_call(channel, "/cortado.v9.Nothing/Predict", b""), grpc.StatusCode.UNIMPLEMENTED,
                 "cortado.v9.Nothing")
    good_call(stub, repo)


def test_message_larger_than_the_limit_is_resource_exhausted(repo, start_server):
    small = start_server(repo.path, "--max-message-size", "4096")
    case = repo.cases["logreg"]
    with small.channel() as ch:
        s = P.predictor_pb2_grpc.PredictorStub(ch)
        rows = [pb.Row(features=row_features(case, i % 12)) for i in range(120)]
        request = pb.PredictBatchRequest(model="logreg", rows=rows)
        assert request.ByteSize() > 4096
        expect_error(lambda: s.PredictBatch(request, timeout=10), grpc.StatusCode.RESOURCE_EXHAUSTED, "4096")
        good_call(s, repo)
        # Under the limit still works on the same connection.
        few = pb.PredictBatchRequest(model="logreg", rows=rows[:6])
        assert few.ByteSize() < 4096
        reply = s.PredictBatch(few, timeout=10)
        for i, row in enumerate(reply.rows):
            check_outputs(case, i, as_dict(row.features))
        expect_error(lambda: s.PredictBatch(request, timeout=10), grpc.StatusCode.RESOURCE_EXHAUSTED)
        good_call(s, repo, row=3)


def test_gzip_compressed_call_is_refused_clearly(server, stub, repo):
    # gRPC core sends a message uncompressed when gzip would not make it smaller, so the
    # request must be compressible: the same row many times over.
    case = repo.cases["logreg"]
    request = pb.PredictBatchRequest(model="logreg", rows=[pb.Row(features=row_features(case, 0))] * 64)
    expect_error(lambda: stub.PredictBatch(request, timeout=10, compression=grpc.Compression.Gzip),
                 grpc.StatusCode.UNIMPLEMENTED, "compress")
    good_call(stub, repo)
    # The same request uncompressed is fine.
    reply = stub.PredictBatch(request, timeout=10)
    assert len(reply.rows) == 64
    check_outputs(case, 0, as_dict(reply.rows[63].features))
    # A channel that compresses everything: refused each time, the connection stays usable.
    with grpc.insecure_channel(server.address, options=[("grpc.enable_http_proxy", 0)],
                               compression=grpc.Compression.Gzip) as ch:
        s = P.predictor_pb2_grpc.PredictorStub(ch)
        for _ in range(3):
            expect_error(lambda: s.PredictBatch(request, timeout=10), grpc.StatusCode.UNIMPLEMENTED, "compress")
        good_call(s, repo)  # small: sent uncompressed
    good_call(stub, repo)


def heavy_batch(repo, rows=5000):
    """A PredictBatch that takes the server tens of milliseconds at least (5000 logistic rows)."""
    rng = np.random.RandomState(99)
    X = rng.randn(rows, 4)
    return pb.PredictBatchRequest(model="logreg", rows=[
        pb.Row(features=[pb.Feature(name=f"f{j}", value=pb.FeatureValue(double_value=x[j])) for j in range(4)]) for x in X])


def test_expired_deadline(stub, repo):
    # gRPC core rounds tiny timeouts up to about a millisecond, and a single Predict may be
    # answered within it: a call that needs longer than its deadline fails deterministically.
    heavy = heavy_batch(repo)
    expect_error(lambda: stub.PredictBatch(heavy, timeout=1e-6), grpc.StatusCode.DEADLINE_EXCEEDED)
    good_call(stub, repo)
    expect_error(lambda: stub.PredictBatch(heavy, timeout=1e-3), grpc.StatusCode.DEADLINE_EXCEEDED)
    good_call(stub, repo)
    reply = stub.PredictBatch(heavy, timeout=60)
    assert len(reply.rows) == len(heavy.rows)


def test_deadline_passed_before_running_is_answered_deadline_exceeded(server, stub, repo):
    """grpc-timeout 1n: the deadline has passed when a worker takes the call, so the server
    answers DEADLINE_EXCEEDED (trailers only) instead of running the model."""
    before = metric_count(server, "logreg", "predictor", "DEADLINE_EXCEEDED")
    c = RawH2(server)
    c.send(PREFACE + SETTINGS + grpc_headers("/cortado.v1.Predictor/Predict", 1, timeout="1n")
           + h2frame(0x0, 0x1, 1, predict_message(repo)))
    frames = c.read_until(lambda fs: stream_ended(fs, 1))
    c.close()
    assert stream_ended(frames, 1), frames
    assert not [f for f in frames if f[0] == 0x0 and f[2] == 1 and f[3]], "a response message was sent"
    assert metric_count(server, "logreg", "predictor", "DEADLINE_EXCEEDED") == before + 1
    good_call(stub, repo)


def test_cancelled_calls_leave_the_channel_usable(stub, repo):
    heavy = heavy_batch(repo, rows=2000)
    futures = [stub.PredictBatch.future(heavy, timeout=60) for _ in range(6)]
    bystander = stub.Predict.future(pb.PredictRequest(model="logreg", inputs=row_features(repo.cases["logreg"], 0)), timeout=60)
    # Wait for the first answer so the others have been sent (cancelling a call whose
    # headers were not yet written is the separate test below), then cancel the rest.
    assert len(futures[0].result().rows) == 2000
    for f in futures[1:]:
        f.cancel()
    check_outputs(repo.cases["logreg"], 0, as_dict(bystander.result().outputs))
    for f in futures[1:]:
        try:
            assert len(f.result().rows) == 2000
        except grpc.FutureCancelledError:
            pass
    good_call(stub, repo)


# ----------------------------------------------------------------------------- raw sockets

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


SETTINGS = h2frame(0x4, 0, 0, b"")


def hpack_literal(name, value):
    """A literal header field without indexing, new name, no Huffman coding (short strings)."""
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_headers(path, stream=1, timeout=None):
    headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "127.0.0.1"),
               ("content-type", "application/grpc"), ("te", "trailers")]
    if timeout:
        headers.append(("grpc-timeout", timeout))
    return h2frame(0x1, 0x4, stream, b"".join(hpack_literal(n, v) for n, v in headers))  # HEADERS, END_HEADERS


def predict_message(repo):
    case = repo.cases["logreg"]
    body = pb.PredictRequest(model="logreg", inputs=row_features(case, 0)).SerializeToString()
    return b"\x00" + struct.pack(">I", len(body)) + body


class RawH2:
    """A hand-written HTTP/2 client: sends bytes, reads frames as (type, flags, stream, payload)."""

    def __init__(self, server):
        host, port = server.address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.buffer = b""

    def send(self, data):
        self.sock.sendall(data)

    def read_until(self, done, limit=2000):
        frames = []
        for _ in range(limit):  # bounded: each recv waits at most the socket timeout (5 s)
            while len(self.buffer) >= 9:
                n = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + n:
                    break
                kind, flags = self.buffer[3], self.buffer[4]
                stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
                frames.append((kind, flags, stream, self.buffer[9:9 + n]))
                self.buffer = self.buffer[9 + n:]
            if done(frames):
                return frames
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, ConnectionError):
                return frames
            if not data:
                return frames
            self.buffer += data
        return frames

    def close(self):
        self.sock.close()


def stream_ended(frames, stream):
    return any(f[2] == stream and f[0] in (0x0, 0x1) and f[1] & 0x1 for f in frames) or \
        any(f[2] == stream and f[0] == 0x3 for f in frames)


def goaways(frames):
    """(last stream id, error code, debug text) of each GOAWAY."""
    return [(int.from_bytes(f[3][:4], "big") & 0x7FFFFFFF, int.from_bytes(f[3][4:8], "big"), f[3][8:].decode(errors="replace"))
            for f in frames if f[0] == 0x7]


def metric_count(server, model, service, code):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(server.metrics_url + "/metrics", timeout=10).read().decode()
    m = re.search(r'^cortado_requests_total\{model="%s",service="%s",code="%s"\} (\d+)$' % (model, service, code), text, re.M)
    return int(m.group(1)) if m else 0


def _raw_clients(repo):
    message = predict_message(repo)
    path = "/cortado.v1.Predictor/Predict"
    return {
        "garbage-without-preface": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)),
        "preface-then-garbage": PREFACE + bytes(range(255, -1, -1)) * 4,
        "preface-then-half-a-frame-header": PREFACE + SETTINGS + b"\x00\x00\x40\x00",
        "headers-then-half-a-frame": PREFACE + SETTINGS + grpc_headers(path)[:20],
        "message-cut-short": PREFACE + SETTINGS + grpc_headers(path) + h2frame(0x0, 0, 1, message[: len(message) // 2]),
        "complete-call-then-gone": PREFACE + SETTINGS + grpc_headers(path) + h2frame(0x0, 0x1, 1, message),
        "data-on-stream-0": PREFACE + SETTINGS + h2frame(0x0, 0x1, 0, message),
        "frame-larger-than-max-frame-size": PREFACE + SETTINGS + grpc_headers(path) + h2frame(0x0, 0, 1, b"\0" * 20000),
    }


@pytest.mark.parametrize("kind", ["garbage-without-preface", "preface-then-garbage", "preface-then-half-a-frame-header",
                                  "headers-then-half-a-frame", "message-cut-short", "complete-call-then-gone",
                                  "data-on-stream-0", "frame-larger-than-max-frame-size"])
def test_raw_client_that_vanishes_leaves_the_server_serving(server, stub, repo, kind):
    data = _raw_clients(repo)[kind]
    with server.channel() as other:  # a client connected before, during and after
        other_stub = P.predictor_pb2_grpc.PredictorStub(other)
        good_call(other_stub, repo, row=2)
        c = RawH2(server)
        c.send(data)
        good_call(other_stub, repo, row=4)  # while the bad client is still connected
        # Close with RST (linger 0): the peer sees an abrupt end, as when a client process dies.
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        good_call(other_stub, repo, row=5)
    good_call(stub, repo)


def test_stalled_raw_clients_do_not_block_others(server, stub, repo):
    clients = []
    try:
        for _ in range(5):
            c = RawH2(server)
            c.send(PREFACE + SETTINGS + grpc_headers("/cortado.v1.Predictor/Predict") + h2frame(0x0, 0, 1, b"\x00\x00\x00"))
            clients.append(c)
        for row in range(6):
            good_call(stub, repo, row=row)
    finally:
        for c in clients:
            c.close()
    good_call(stub, repo)


def test_raw_client_gets_a_complete_answer(server, repo):
    """The hand-written client is right: a well-formed call gets HEADERS, DATA, trailers."""
    c = RawH2(server)
    c.send(PREFACE + SETTINGS + grpc_headers("/cortado.v1.Predictor/Predict", 1) + h2frame(0x0, 0x1, 1, predict_message(repo)))
    frames = c.read_until(lambda fs: stream_ended(fs, 1))
    c.close()
    data = b"".join(f[3] for f in frames if f[0] == 0x0 and f[2] == 1)
    assert stream_ended(frames, 1) and len(data) > 5, frames
    reply = pb.PredictResponse.FromString(data[5:])
    check_outputs(repo.cases["logreg"], 0, as_dict(reply.outputs))


def _headers(stream, fields):
    return h2frame(0x1, 0x4, stream, b"".join(hpack_literal(n, v) for n, v in fields))  # HEADERS, END_HEADERS


_GOOD_FIELDS = [(":method", "POST"), (":scheme", "http"), (":path", "/cortado.v1.Predictor/Predict"), (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"), ("te", "trailers")]


def _malformed_requests(message):
    """Requests RFC 9113 §8.1.1 calls malformed (the server checks headers itself), by name:
    (header fields, body bytes)."""
    good = _GOOD_FIELDS
    return {
        "upper-case name": (good + [("X-Trace", "1")], message),
        "name with a space": (good + [("x trace", "1")], message),
        "value with a line feed": (good + [("x-trace", "a\nb")], message),
        "value with a NUL": (good + [("x-trace", "a\0b")], message),
        "long value with a carriage return": (good + [("x-trace", "0123456789abcdef\r0123456789")], message),
        "value with a trailing space": (good + [("x-trace", "ab ")], message),
        "pseudo-header after a regular one": (good[:2] + [("content-type", "application/grpc"), (":path", "/cortado.v1.Predictor/Predict")], message),
        "unknown pseudo-header": (good + [(":protocol", "grpc")], message),
        "duplicate :path": (good[:3] + [(":path", "/cortado.v1.Predictor/Predict")] + good[3:], message),
        "no :path": ([f for f in good if f[0] != ":path"], message),
        "no :method": ([f for f in good if f[0] != ":method"], message),
        "no :scheme": ([f for f in good if f[0] != ":scheme"], message),
        "empty :path": ([(n, "" if n == ":path" else v) for n, v in good], message),
        "connection header": (good + [("connection", "keep-alive")], message),
        "te other than trailers": ([(n, "gzip" if n == "te" else v) for n, v in good], message),
        "content-length larger than the body": (good + [("content-length", str(len(message) + 1))], message),
        "content-length smaller than the body": (good + [("content-length", str(len(message) - 1))], message),
        "content-length not a number": (good + [("content-length", "12a")], message),
    }


@pytest.mark.parametrize("kind", list(_malformed_requests(b"").keys()))
def test_malformed_request_is_reset_and_the_connection_goes_on(server, repo, kind):
    """A malformed request gets RST_STREAM(PROTOCOL_ERROR) and no answer; a good call on the
    same connection right after it is answered."""
    message = predict_message(repo)
    fields, body = _malformed_requests(message)[kind]
    c = RawH2(server)
    c.send(PREFACE + SETTINGS + _headers(1, fields) + h2frame(0x0, 0x1, 1, body)
           + _headers(3, _GOOD_FIELDS) + h2frame(0x0, 0x1, 3, message))
    frames = c.read_until(lambda fs: (stream_ended(fs, 1) and stream_ended(fs, 3)) or goaways(fs))
    c.close()
    resets = [int.from_bytes(f[3][:4], "big") for f in frames if f[0] == 0x3 and f[2] == 1]
    assert resets == [0x1], (kind, frames)  # PROTOCOL_ERROR
    assert not [f for f in frames if f[0] == 0x0 and f[2] == 1], (kind, frames)
    assert not goaways(frames), goaways(frames)
    data = b"".join(f[3] for f in frames if f[0] == 0x0 and f[2] == 3)
    assert stream_ended(frames, 3) and len(data) > 5, (kind, frames)
    check_outputs(repo.cases["logreg"], 0, as_dict(pb.PredictResponse.FromString(data[5:]).outputs))


def test_well_formed_extras_are_accepted(server, repo):
    """What the checks must let through: a matching content-length, metadata with token
    characters, a value with inner spaces, an empty :authority-less request with a host-less
    client (no :authority is allowed)."""
    message = predict_message(repo)
    fields = [f for f in _GOOD_FIELDS if f[0] != ":authority"] + [("content-length", str(len(message))), ("x-b3_trace!id", "a b\tc")]
    c = RawH2(server)
    c.send(PREFACE + SETTINGS + _headers(1, fields) + h2frame(0x0, 0x1, 1, message))
    frames = c.read_until(lambda fs: stream_ended(fs, 1))
    c.close()
    assert not [f for f in frames if f[0] == 0x3], frames
    data = b"".join(f[3] for f in frames if f[0] == 0x0 and f[2] == 1)
    assert stream_ended(frames, 1) and len(data) > 5, frames
    check_outputs(repo.cases["logreg"], 0, as_dict(pb.PredictResponse.FromString(data[5:]).outputs))


def test_rst_stream_for_a_stream_never_opened_does_not_end_the_connection(server, repo):
    """gRPC core clients (grpcio 1.71) send RST_STREAM for a stream whose HEADERS never left when
    a call is cancelled or times out first (grpc/grpc#19655). HTTP/2 makes that a connection
    error; the server drops such frames so the other calls on the connection go on."""
    message = predict_message(repo)
    path = "/cortado.v1.Predictor/Predict"
    c = RawH2(server)
    c.send(PREFACE + SETTINGS
           + grpc_headers(path, 1) + h2frame(0x0, 0x1, 1, message)
           + h2frame(0x3, 0, 3, struct.pack(">I", 8))  # RST_STREAM(CANCEL) on stream 3, never opened
           + grpc_headers(path, 5) + h2frame(0x0, 0x1, 5, message))
    frames = c.read_until(lambda fs: (stream_ended(fs, 1) and stream_ended(fs, 5)) or goaways(fs))
    c.close()
    assert not [g for g in goaways(frames) if g[1] != 0], goaways(frames)
    for stream in (1, 5):
        data = b"".join(f[3] for f in frames if f[0] == 0x0 and f[2] == stream)
        assert stream_ended(frames, stream) and len(data) > 5, (stream, frames)


# ----------------------------------------------------------------------------- concurrency

def _requests(repo, n):
    out = []
    for i in range(n):
        model = MODELS[i % len(MODELS)]
        case = repo.cases[model]
        row = (i // len(MODELS)) % len(next(iter(case.expected.values())))
        out.append((case, row, pb.PredictRequest(model=model, inputs=row_features(case, row))))
    return out


def test_200_concurrent_calls_on_one_channel(stub, repo):
    requests = _requests(repo, 200)
    futures = [(case, row, stub.Predict.future(req, timeout=60)) for case, row, req in requests]
    for case, row, f in futures:
        reply = f.result()
        assert reply.model == case.name
        check_outputs(case, row, as_dict(reply.outputs))


def test_200_concurrent_calls_on_8_channels(server, repo):
    requests = _requests(repo, 200)
    channels = [server.channel() for _ in range(8)]
    try:
        stubs = [P.predictor_pb2_grpc.PredictorStub(c) for c in channels]
        futures = [(case, row, stubs[i % 8].Predict.future(req, timeout=60)) for i, (case, row, req) in enumerate(requests)]
        for case, row, f in futures:
            reply = f.result()
            assert reply.model == case.name
            check_outputs(case, row, as_dict(reply.outputs))
    finally:
        for c in channels:
            c.close()


def test_concurrent_threads_with_batches(server, repo):
    """8 threads, each with its own channel, alternating Predict and PredictBatch."""
    errors = []

    def worker(k):
        try:
            with server.channel() as ch:
                s = P.predictor_pb2_grpc.PredictorStub(ch)
                for j in range(10):
                    case = repo.cases[MODELS[(k + j) % len(MODELS)]]
                    rows = [pb.Row(features=row_features(case, i)) for i in range(8)]
                    reply = s.PredictBatch(pb.PredictBatchRequest(model=case.name, rows=rows), timeout=30)
                    for i, row in enumerate(reply.rows):
                        check_outputs(case, i, as_dict(row.features))
        except Exception as e:  # reported below
            errors.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
