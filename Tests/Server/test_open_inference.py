"""inference.GRPCInferenceService (the Open Inference Protocol with Triton's extensions)
through unmodified tritonclient.grpc, against a running `cortado serve`.

Core ML features map to tensors as Sources/CortadoServer/Services/TensorMapping.swift says:
double -> FP64 [-1,1], string -> BYTES [-1,1], a classifier's probabilities -> FP64
[-1,classes] in class-label order, other dictionaries -> BYTES [-1,1] holding the JSON object,
multi-arrays -> their own datatype and shape with a leading -1 batch dimension.
This module never imports our inference protos (tritonclient registers the same messages).
"""
import json
import os

import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

MODELS = ["logreg", "xgb", "dictlin", "half", "scaler", "scaler32"]
# The module's server loads and unloads models and registers shared memory (both off by default).
# Three workers: the config's instance count must be what the scheduler runs at once.
WORKERS = 3
SERVER_ARGS = ["--model-control", "explicit", "--allow-shared-memory", "--workers", str(WORKERS)]

# Input and output tensors per model: (name, datatype, dims without the batch dimension).
SIGNATURES = {
    "logreg": ([(f"f{i}", "FP64", [1]) for i in range(4)], [("species", "BYTES", [1]), ("classProbability", "FP64", [3])]),
    "xgb": ([(f"f{i}", "FP64", [1]) for i in range(4)], [("y", "FP64", [1])]),
    "dictlin": ([("features", "BYTES", [1])], [("y", "FP64", [1])]),
    "half": ([("x", "FP16", [2, 3])], [("x", "FP16", [2, 3])]),
    "scaler": ([("input", "FP64", [5])], [("output", "FP64", [5])]),
    "scaler32": ([("input", "FP32", [5])], [("output", "FP64", [5])]),
}
CONFIG_TYPES = {"FP64": "TYPE_FP64", "FP32": "TYPE_FP32", "FP16": "TYPE_FP16", "BYTES": "TYPE_STRING"}


@pytest.fixture(scope="module")
def client(server):
    c = tc.InferenceServerClient(server.address)
    yield c
    c.close()


def tensors(case, rows):
    """The case's rows as InferInputs with a leading batch dimension (raw contents)."""
    out = []
    for name, values in case.inputs.items():
        if name == "features":  # a dictionary travels as BYTES holding its JSON
            data = np.array([[json.dumps(values[i]).encode()] for i in rows], dtype=np.object_)
            t = tc.InferInput(name, list(data.shape), "BYTES")
        else:
            data = np.asarray(values)[list(rows)]
            if data.ndim == 1:
                data = data.reshape(-1, 1)
            t = tc.InferInput(name, list(data.shape), {np.float64: "FP64", np.float32: "FP32", np.float16: "FP16"}[data.dtype.type])
        t.set_data_from_numpy(data)
        out.append(t)
    return out


def check(case, rows, result):
    n = len(rows)
    for name, want in case.expected.items():
        got = result.as_numpy(name)
        assert got is not None, f"{case.name}: no output {name}"
        if case.name == "half":
            assert got.dtype == np.float16 and got.shape == (n, 2, 3)
            assert got.tobytes() == np.ascontiguousarray(want[list(rows)]).tobytes()
        elif name == "species":
            assert got.shape == (n, 1)
            # BYTES arrive as bytes over gRPC and as str from tritonclient.http's JSON.
            assert [g.decode() if isinstance(g, bytes) else g for g in got[:, 0]] == [want[i] for i in rows]
        else:
            w = np.asarray(want)[list(rows)]
            if w.ndim == 1:
                w = w.reshape(-1, 1)
            assert got.dtype == np.float64 and got.shape == w.shape, (got.dtype, got.shape, w.shape)
            np.testing.assert_allclose(got, w, rtol=case.rtol, atol=case.atol, err_msg=f"{case.name} {name}")


def expect_error(fn, status, *names):
    with pytest.raises(InferenceServerException) as info:
        fn()
    e = info.value
    assert e.status() == f"StatusCode.{status}", f"expected {status}, got {e.status()}: {e.message()}"
    for name in names:
        assert name in (e.message() or ""), f"message does not name {name!r}: {e.message()!r}"
    return e


def good_infer(client, repo):
    case = repo.cases["logreg"]
    check(case, [0, 1], client.infer("logreg", tensors(case, [0, 1]), client_timeout=10))


# ----------------------------------------------------------------------------- server and models

def test_server_live_ready_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "cortado" and meta["version"]
    for ext in ["classification", "model_repository", "model_configuration", "system_shared_memory", "statistics"]:
        assert ext in meta["extensions"], meta
    assert client.is_model_ready("logreg")
    assert not client.is_model_ready("nosuchmodel")


@pytest.mark.parametrize("model", MODELS)
def test_model_metadata_and_config(client, model):
    inputs, outputs = SIGNATURES[model]
    meta = client.get_model_metadata(model, as_json=True)
    assert meta["name"] == model and meta["versions"] == ["1"]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["inputs"]] == \
        [(n, d, [-1] + s) for n, d, s in inputs]
    assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in meta["outputs"]] == \
        [(n, d, [-1] + s) for n, d, s in outputs]

    config = client.get_model_config(model, as_json=True)["config"]
    assert config["name"] == model
    assert int(config["max_batch_size"]) > 1
    assert [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config["input"]] == \
        [(n, CONFIG_TYPES[d], s) for n, d, s in inputs]
    assert [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config["output"]] == \
        [(n, CONFIG_TYPES[d], s) for n, d, s in outputs]
    # No per-model limit: one prediction per worker thread runs at once.
    assert [(g["kind"], int(g["count"])) for g in config["instance_group"]] == [("KIND_CPU", WORKERS)]


def test_unknown_model_metadata_is_not_found(client, repo):
    expect_error(lambda: client.get_model_metadata("nosuchmodel"), "NOT_FOUND", "nosuchmodel")
    expect_error(lambda: client.get_model_config("nosuchmodel"), "NOT_FOUND", "nosuchmodel")
    good_infer(client, repo)


# ----------------------------------------------------------------------------- inference

@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("rows", [[0], [3], list(range(7))], ids=["batch1", "batch1-row3", "batch7"])
def test_infer_matches_the_library(client, repo, model, rows):
    case = repo.cases[model]
    result = client.infer(model, tensors(case, rows), request_id="r-42", client_timeout=10)
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (model, "1", "r-42")
    check(case, rows, result)


def test_requested_outputs_subset(client, repo):
    case = repo.cases["logreg"]
    result = client.infer("logreg", tensors(case, [0, 1, 2]), outputs=[tc.InferRequestedOutput("classProbability")])
    assert [o.name for o in result.get_response().outputs] == ["classProbability"]
    assert result.as_numpy("species") is None
    np.testing.assert_allclose(result.as_numpy("classProbability"), case.expected["classProbability"][:3],
                               rtol=case.rtol, atol=case.atol)


def test_typed_contents_instead_of_raw(client, repo):
    """Inputs in the typed fields (fp64_contents) rather than raw_input_contents."""
    case = repo.cases["xgb"]
    inputs = []
    for name, values in case.inputs.items():
        t = tc.InferInput(name, [3, 1], "FP64")
        t.set_data_from_numpy(values[:3].reshape(-1, 1))
        # tritonclient.grpc always sends raw contents: move them into the typed field.
        raw = t._get_content()
        t._raw_content = None
        t._input.contents.fp64_contents.extend(np.frombuffer(raw, dtype="<f8").tolist())
        inputs.append(t)
    check(case, [0, 1, 2], client.infer("xgb", inputs, client_timeout=10))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_classification_extension(client, repo, k):
    case = repo.cases["logreg"]
    rows = list(range(6))
    result = client.infer("logreg", tensors(case, rows), outputs=[tc.InferRequestedOutput("classProbability", class_count=k)])
    got = result.as_numpy("classProbability")
    assert got.shape == (len(rows), k)
    for r, i in enumerate(rows):
        probs = case.expected["classProbability"][i]
        order = np.argsort(-probs, kind="stable")[:k]
        for j, entry in enumerate(got[r]):
            score, index, label = entry.decode().split(":")
            assert int(index) == order[j] and label == case.labels[order[j]], (entry, probs)
            assert float(score) == pytest.approx(probs[order[j]], rel=1e-6)  # printed as Float
        assert got[r][0].decode().split(":")[2] == case.expected["species"][i]


# ----------------------------------------------------------------------------- repository and statistics

def test_repository_index_load_unload_reload(client, repo):
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert set(MODELS) <= set(index)
    assert all(index[m]["state"] == "READY" and index[m]["version"] == "1" for m in MODELS), index

    case = repo.cases["xgb"]
    client.unload_model("xgb")
    try:
        assert not client.is_model_ready("xgb")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["xgb"]["state"] == "UNAVAILABLE"
        expect_error(lambda: client.infer("xgb", tensors(case, [0])), "NOT_FOUND", "xgb")
        expect_error(lambda: client.unload_model("xgb"), "NOT_FOUND", "xgb")
    finally:
        client.load_model("xgb")
    assert client.is_model_ready("xgb")
    check(case, [0, 1], client.infer("xgb", tensors(case, [0, 1])))
    client.load_model("xgb")  # reload while loaded
    check(case, [2], client.infer("xgb", tensors(case, [2])))
    expect_error(lambda: client.load_model("nosuchmodel"), "NOT_FOUND", "nosuchmodel")
    good_infer(client, repo)


def test_inference_statistics_count(client, repo):
    def stats():
        s = client.get_inference_statistics("scaler", as_json=True)["model_stats"][0]
        return (int(s.get("inference_count", 0)), int(s.get("execution_count", 0)),
                int(s["inference_stats"].get("success", {}).get("count", 0)))

    case = repo.cases["scaler"]
    before = stats()
    client.infer("scaler", tensors(case, [0, 1, 2]))
    client.infer("scaler", tensors(case, [3]))
    after = stats()
    assert after[0] - before[0] == 4  # rows
    assert after[1] - before[1] == 2  # executions
    assert after[2] - before[2] == 2  # successful requests
    all_models = client.get_inference_statistics(as_json=True)["model_stats"]
    assert set(MODELS) <= {m["name"] for m in all_models}
    expect_error(lambda: client.get_inference_statistics("nosuchmodel"), "NOT_FOUND", "nosuchmodel")


# ----------------------------------------------------------------------------- system shared memory

@pytest.fixture
def regions(client):
    """Creates POSIX shared-memory regions (client side); destroys and unregisters them after."""
    made = []

    def make(name, size):
        handle = shm.create_shared_memory_region(name, f"/cortado_test_{os.getpid()}_{name}", size)
        made.append((name, handle))
        return handle

    yield make
    for name, handle in made:
        try:
            client.unregister_system_shared_memory(name)
        finally:
            shm.destroy_shared_memory_region(handle)


def test_shared_memory_inputs_and_outputs(client, repo, regions):
    case = repo.cases["logreg"]
    rows = list(range(5))
    n = len(rows)
    columns = [np.ascontiguousarray(case.inputs[f"f{i}"][rows].reshape(n, 1)) for i in range(4)]
    in_handle = regions("cortado_in", 4 * n * 8)
    shm.set_shared_memory_region(in_handle, columns)
    out_size = n * 3 * 8
    out_handle = regions("cortado_out", 64 + out_size)
    client.register_system_shared_memory("cortado_in", f"/cortado_test_{os.getpid()}_cortado_in", 4 * n * 8)
    client.register_system_shared_memory("cortado_out", f"/cortado_test_{os.getpid()}_cortado_out", 64 + out_size)

    status = client.get_system_shared_memory_status(as_json=True)["regions"]
    assert status["cortado_in"]["byte_size"] in (4 * n * 8, str(4 * n * 8))
    assert status["cortado_out"]["key"] == f"/cortado_test_{os.getpid()}_cortado_out"

    inputs = []
    for i in range(4):
        t = tc.InferInput(f"f{i}", [n, 1], "FP64")
        t.set_shared_memory("cortado_in", n * 8, offset=i * n * 8)
        inputs.append(t)
    probs = tc.InferRequestedOutput("classProbability")
    probs.set_shared_memory("cortado_out", out_size, offset=64)
    species = tc.InferRequestedOutput("species")  # not in shared memory: comes back in the response
    result = client.infer("logreg", inputs, outputs=[probs, species])

    out = result.get_output("classProbability")
    assert out.parameters["shared_memory_region"].string_param == "cortado_out"
    assert not result.get_response().raw_output_contents[0]  # nothing in the message
    got = shm.get_contents_as_numpy(out_handle, np.float64, [n, 3], offset=64)
    np.testing.assert_allclose(got, case.expected["classProbability"][rows], rtol=case.rtol, atol=case.atol)
    assert [s.decode() for s in result.as_numpy("species")[:, 0]] == [case.expected["species"][i] for i in rows]

    # An input region too small for the tensor, and an unknown region: errors naming them.
    t = tc.InferInput("f0", [n, 1], "FP64")
    t.set_shared_memory("cortado_in", n * 8, offset=4 * n * 8 - 8)
    expect_error(lambda: client.infer("logreg", [t] + inputs[1:]), "INVALID_ARGUMENT", "cortado_in")
    t = tc.InferInput("f0", [n, 1], "FP64")
    t.set_shared_memory("nosuchregion", n * 8)
    expect_error(lambda: client.infer("logreg", [t] + inputs[1:]), "INVALID_ARGUMENT", "nosuchregion")

    client.unregister_system_shared_memory("cortado_out")
    status = client.get_system_shared_memory_status(as_json=True).get("regions", {})
    assert "cortado_out" not in status and "cortado_in" in status
    expect_error(lambda: client.get_system_shared_memory_status("cortado_out"), "NOT_FOUND", "cortado_out")
    good_infer(client, repo)


def test_shared_memory_float16_round_trip(client, repo, regions):
    case = repo.cases["half"]
    x = np.ascontiguousarray(case.inputs["x"][:6])
    size = x.nbytes
    assert size == 6 * 6 * 2  # 2 bytes an element
    h_in, h_out = regions("cortado_h_in", size), regions("cortado_h_out", size)
    shm.set_shared_memory_region(h_in, [x])
    client.register_system_shared_memory("cortado_h_in", f"/cortado_test_{os.getpid()}_cortado_h_in", size)
    client.register_system_shared_memory("cortado_h_out", f"/cortado_test_{os.getpid()}_cortado_h_out", size)
    t = tc.InferInput("x", [6, 2, 3], "FP16")
    t.set_shared_memory("cortado_h_in", size)
    o = tc.InferRequestedOutput("x")
    o.set_shared_memory("cortado_h_out", size)
    client.infer("half", [t], outputs=[o])
    got = shm.get_contents_as_numpy(h_out, np.float16, [6, 2, 3])
    assert got.tobytes() == x.tobytes()


def test_shared_memory_register_errors(client, repo, regions):
    expect_error(lambda: client.register_system_shared_memory("ghost", "/cortado_test_no_such_key", 64),
                 "INVALID_ARGUMENT", "ghost")
    regions("cortado_small", 64)
    expect_error(lambda: client.register_system_shared_memory("cortado_small", f"/cortado_test_{os.getpid()}_cortado_small", 4096),
                 "INVALID_ARGUMENT", "cortado_small")
    client.register_system_shared_memory("cortado_small", f"/cortado_test_{os.getpid()}_cortado_small", 64)
    expect_error(lambda: client.register_system_shared_memory("cortado_small", f"/cortado_test_{os.getpid()}_cortado_small", 64),
                 "ALREADY_EXISTS", "cortado_small")
    good_infer(client, repo)


# ----------------------------------------------------------------------------- errors

def test_unknown_model_is_not_found(client, repo):
    expect_error(lambda: client.infer("nosuchmodel", tensors(repo.cases["logreg"], [0])), "NOT_FOUND", "nosuchmodel")
    good_infer(client, repo)


def test_wrong_input_name(client, repo):
    inputs = tensors(repo.cases["logreg"], [0])
    bad = tc.InferInput("petal", [1, 1], "FP64")
    bad.set_data_from_numpy(np.array([[1.0]]))
    expect_error(lambda: client.infer("logreg", inputs[:3] + [bad]), "INVALID_ARGUMENT", "petal", "'logreg'")
    good_infer(client, repo)


def test_missing_input(client, repo):
    inputs = tensors(repo.cases["logreg"], [0])
    expect_error(lambda: client.infer("logreg", inputs[:3]), "INVALID_ARGUMENT", "f3", "'logreg'")
    good_infer(client, repo)


def test_wrong_datatype(client, repo):
    t = tc.InferInput("features", [1, 1], "FP64")
    t.set_data_from_numpy(np.array([[1.0]]))
    expect_error(lambda: client.infer("dictlin", [t]), "INVALID_ARGUMENT", "features")
    t = tc.InferInput("f0", [1, 1], "BYTES")
    t.set_data_from_numpy(np.array([[b"1.0"]], dtype=np.object_))
    expect_error(lambda: client.infer("logreg", [t] + tensors(repo.cases["logreg"], [0])[1:]), "INVALID_ARGUMENT", "f0")
    # BYTES that are not JSON for a dictionary input.
    t = tc.InferInput("features", [1, 1], "BYTES")
    t.set_data_from_numpy(np.array([[b"{not json"]], dtype=np.object_))
    expect_error(lambda: client.infer("dictlin", [t]), "INVALID_ARGUMENT", "features")
    good_infer(client, repo)


def test_wrong_shape(client, repo):
    t = tc.InferInput("input", [1, 4], "FP64")
    t.set_data_from_numpy(np.zeros((1, 4)))
    expect_error(lambda: client.infer("scaler", [t]), "INVALID_ARGUMENT", "input", "'scaler'")
    t = tc.InferInput("input", [1, 5, 1, 1], "FP64")
    t.set_data_from_numpy(np.zeros((1, 5, 1, 1)))
    expect_error(lambda: client.infer("scaler", [t]), "INVALID_ARGUMENT", "input")
    # Inputs that disagree on the batch size.
    inputs = tensors(repo.cases["logreg"], [0, 1])
    inputs[2] = tensors(repo.cases["logreg"], [0])[2]
    expect_error(lambda: client.infer("logreg", inputs), "INVALID_ARGUMENT", "f2")
    good_infer(client, repo)


def test_raw_contents_of_the_wrong_size(client, repo):
    t = tc.InferInput("input", [2, 5], "FP64")
    t.set_data_from_numpy(np.zeros((2, 5)))
    t._raw_content = t._raw_content[:-8]  # one element short
    expect_error(lambda: client.infer("scaler", [t]), "INVALID_ARGUMENT", "input")
    good_infer(client, repo)


def test_unknown_output_and_bad_classification(client, repo):
    inputs = tensors(repo.cases["logreg"], [0])
    expect_error(lambda: client.infer("logreg", inputs, outputs=[tc.InferRequestedOutput("bogus")]),
                 "INVALID_ARGUMENT", "bogus")
    expect_error(lambda: client.infer("logreg", inputs, outputs=[tc.InferRequestedOutput("species", class_count=2)]),
                 "INVALID_ARGUMENT", "species")
    good_infer(client, repo)


def _bad_requests(repo):
    def inp(name, arr, datatype):
        t = tc.InferInput(name, list(arr.shape), datatype)
        t.set_data_from_numpy(arr)
        return t

    xgb = tensors(repo.cases["xgb"], [0])
    truncated = inp("features", np.array([[b'{"a": 1.0}']], dtype=np.object_), "BYTES")
    truncated._raw_content = b"\xff\xff\x00\x00abc"  # a BYTES element claiming 65535 bytes
    return {
        "empty-batch": ("scaler", [inp("input", np.zeros((0, 5)), "FP64")], "batch"),
        "input-given-twice": ("xgb", xgb[:1] + xgb, "f0"),
        "bytes-length-past-the-end": ("dictlin", [truncated], "features"),
        "json-array-for-a-dictionary": ("dictlin", [inp("features", np.array([[b"[1, 2]"]], dtype=np.object_), "BYTES")],
                                        "features"),
        "negative-dimension": ("scaler", [tc.InferInput("input", [-3, 5], "FP64")], "input"),
        "element-count-overflows": ("scaler", [tc.InferInput("input", [2**40, 2**40], "FP64")], "input"),
        "float16-wrong-dims": ("half", [inp("x", np.zeros((1, 3, 2), np.float16), "FP16")], "x"),
    }


@pytest.mark.parametrize("kind", ["empty-batch", "input-given-twice", "bytes-length-past-the-end",
                                  "json-array-for-a-dictionary", "negative-dimension", "element-count-overflows",
                                  "float16-wrong-dims"])
def test_malformed_tensors_are_invalid_argument(client, repo, kind):
    model, inputs, named = _bad_requests(repo)[kind]
    expect_error(lambda: client.infer(model, inputs), "INVALID_ARGUMENT", named)
    good_infer(client, repo)


# ----------------------------------------------------------------------------- ModelStreamInfer

def _stream(address, requests, timeout=30):
    """Sends (model, inputs, request id) on one ModelStreamInfer stream through tritonclient's
    streaming API; returns {request id: (result, error)} once every request was answered."""
    import queue
    answers = queue.Queue()
    client = tc.InferenceServerClient(address)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for model, inputs, rid in requests:
            client.async_stream_infer(model, inputs, request_id=rid)
        got = [answers.get(timeout=timeout) for _ in requests]
        client.stop_stream()
    finally:
        client.close()
    out = {}
    for result, error in got:
        rid = result.get_response().id if result is not None else None
        out.setdefault(rid, []).append((result, error))
    return out, got


def test_stream_infer_answers_every_request(server, repo):
    """Many requests on one stream, several models: each answered once, with the library's
    values, matched by request id."""
    cases = [repo.cases[m] for m in ("logreg", "xgb", "scaler")]
    requests = [(case.name, tensors(case, [k % 3, (k + 1) % 3]), f"r{k}-{case.name}") for k in range(10) for case in cases]
    by_id, got = _stream(server.address, requests)
    assert len(got) == len(requests)
    assert all(error is None for _, error in got), [str(e) for _, e in got if e is not None]
    for model, _, rid in requests:
        (result, _), = by_id[rid]
        k = int(rid[1:].split("-")[0])
        check(repo.cases[model], [k % 3, (k + 1) % 3], result)


def test_stream_infer_errors_travel_on_the_stream(server, repo):
    """A bad request on the stream comes back as that request's error; the requests around it
    are still answered and the stream stays usable."""
    case = repo.cases["logreg"]
    bad = tc.InferInput("petal", [1, 1], "FP64")
    bad.set_data_from_numpy(np.array([[1.0]]))
    requests = [("logreg", tensors(case, [0]), "good-1"), ("logreg", tensors(case, [0])[:3] + [bad], "bad"),
                ("nosuchmodel", tensors(case, [0]), "missing"), ("logreg", tensors(case, [1]), "good-2")]
    _, got = _stream(server.address, requests)
    errors = [str(error) for _, error in got if error is not None]
    results = [result for result, error in got if error is None]
    assert len(errors) == 2 and len(results) == 2, (errors, len(results))
    assert any("petal" in e for e in errors) and any("nosuchmodel" in e for e in errors), errors
    assert sorted(r.get_response().id for r in results) == ["good-1", "good-2"]
    good_infer(tc.InferenceServerClient(server.address), repo)


def test_stream_cancelled_mid_way_leaves_the_server_serving(server, repo):
    """A client that cancels its stream after the first answer (grpcio, raw stubs): the server
    drops the rest and keeps serving."""
    import threading
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    case = repo.cases["scaler"]
    request = service_pb2.ModelInferRequest(model_name="scaler")
    request.inputs.add(name="input", datatype="FP64", shape=[1, 5])
    request.raw_input_contents.append(np.asarray(case.inputs["input"][0], dtype="<f8").tobytes())
    release = threading.Event()

    def requests():
        yield request
        release.wait(10)  # keep the request side open until the client cancels
        for _ in range(50):
            yield request

    with grpc.insecure_channel(server.address) as channel:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        first = next(call)
        assert first.error_message == "" and first.infer_response.model_name == "scaler"
        call.cancel()
        release.set()
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
        assert info.value.code() == grpc.StatusCode.CANCELLED
    good_infer(tc.InferenceServerClient(server.address), repo)
