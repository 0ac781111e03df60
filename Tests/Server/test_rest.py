"""The Open Inference Protocol over HTTP/1.1 (KServe v2 REST with Triton's binary tensor data
extension) on `cortado serve --http-port`: through unmodified tritonclient.http, through curl,
and through a raw socket for what neither sends (pipelined requests, oversized heads).

Tensors map to Core ML features as over gRPC (Sources/CortadoServer/Services/TensorMapping.swift);
the same request over gRPC and REST must give the same outputs, bit for bit.
Errors are {"error": "..."} with 400 (bad request), 403 (model control off), 404 (unknown model
or path), 413 (body over --max-message-size), 431 (head too large).
"""
import json
import socket
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from test_open_inference import check

MAX_MESSAGE = 1_000_000
# The module's server loads and unloads models; its bodies are limited to MAX_MESSAGE bytes.
SERVER_ARGS = ["--model-control", "explicit", "--max-message-size", str(MAX_MESSAGE)]

DTYPES = {np.float64: "FP64", np.float32: "FP32", np.float16: "FP16"}


@pytest.fixture(scope="module")
def client(server):
    c = thttp.InferenceServerClient(server.http_address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc_client(server):
    c = tgrpc.InferenceServerClient(server.address)
    yield c
    c.close()


def arrays(case, rows):
    """The case's rows as (name, datatype, numpy array with a leading batch dimension)."""
    out = []
    for name, values in case.inputs.items():
        if name == "features":  # a dictionary travels as BYTES holding its JSON
            out.append((name, "BYTES", np.array([[json.dumps(values[i]).encode()] for i in rows], dtype=np.object_)))
        else:
            data = np.asarray(values)[list(rows)]
            if data.ndim == 1:
                data = data.reshape(-1, 1)
            out.append((name, DTYPES[data.dtype.type], data))
    return out


def http_inputs(case, rows, binary):
    out = []
    for name, datatype, data in arrays(case, rows):
        t = thttp.InferInput(name, list(data.shape), datatype)
        t.set_data_from_numpy(data, binary_data=binary)
        out.append(t)
    return out


def expect_error(fn, status, *words):
    with pytest.raises(InferenceServerException) as info:
        fn()
    assert info.value.status() == str(status), (info.value.status(), info.value.message())
    for w in words:
        assert w in info.value.message(), info.value.message()
    return info.value


# ----------------------------------------------------------------------------- tritonclient.http

def test_server_live_ready_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "cortado"
    for ext in ["binary_tensor_data", "model_repository", "model_configuration", "statistics", "classification"]:
        assert ext in meta["extensions"]


def test_model_metadata_ready_and_config(client):
    assert client.is_model_ready("scaler32")
    assert client.is_model_ready("scaler32", "1")
    assert not client.is_model_ready("no-such-model")
    meta = client.get_model_metadata("scaler32")
    assert meta["name"] == "scaler32" and meta["versions"] == ["1"] and meta["platform"] == "coreml"
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 5]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP64", "shape": [-1, 5]}]
    assert client.get_model_metadata("scaler32", "1") == meta
    config = client.get_model_config("logreg")
    assert config["name"] == "logreg" and config["max_batch_size"] > 0
    assert [i["name"] for i in config["input"]] == [f"f{i}" for i in range(4)]
    assert all(i["data_type"] == "TYPE_FP64" and i["dims"] == [1] for i in config["input"])
    assert {o["name"]: (o["data_type"], o["dims"]) for o in config["output"]} == {
        "species": ("TYPE_STRING", [1]), "classProbability": ("TYPE_FP64", [3])}


def test_unknown_model_is_404(client):
    expect_error(lambda: client.get_model_metadata("no-such-model"), 404, "no-such-model")
    expect_error(lambda: client.get_model_metadata("scaler", "7"), 404, "version 7")
    t = thttp.InferInput("x", [1, 1], "FP64")
    t.set_data_from_numpy(np.zeros((1, 1)))
    expect_error(lambda: client.infer("no-such-model", [t]), 404, "no-such-model")


@pytest.mark.parametrize("model", ["logreg", "xgb", "dictlin", "scaler", "scaler32"])
def test_infer_json_data(client, repo, model):
    case = repo.cases[model]
    rows = range(len(next(iter(case.inputs.values()))))
    outputs = [thttp.InferRequestedOutput(name, binary_data=False) for name in case.expected]
    result = client.infer(model, http_inputs(case, rows, binary=False), outputs=outputs, request_id="json-1")
    response = result.get_response()
    assert response["id"] == "json-1" and response["model_name"] == model and response["model_version"] == "1"
    assert all("data" in o and "parameters" not in o for o in response["outputs"])
    check(case, rows, result)


@pytest.mark.parametrize("model", ["logreg", "xgb", "dictlin", "half", "scaler", "scaler32"])
def test_infer_binary_data(client, repo, model):
    case = repo.cases[model]
    rows = range(len(next(iter(case.inputs.values()))))
    result = client.infer(model, http_inputs(case, rows, binary=True))  # no outputs named: all binary
    assert all(o["parameters"]["binary_data_size"] > 0 for o in result.get_response()["outputs"])
    check(case, rows, result)
    # Binary inputs, one output as JSON and one as binary data.
    if model == "logreg":
        outputs = [thttp.InferRequestedOutput("classProbability", binary_data=True), thttp.InferRequestedOutput("species", binary_data=False)]
        result = client.infer(model, http_inputs(case, rows, binary=True), outputs=outputs)
        check(case, rows, result)


def test_classification_extension(client, repo):
    case = repo.cases["logreg"]
    result = client.infer("logreg", http_inputs(case, [0, 1], binary=False),
                          outputs=[thttp.InferRequestedOutput("classProbability", binary_data=False, class_count=2)])
    got = result.as_numpy("classProbability")
    assert got.shape == (2, 2)
    for r, row in enumerate(got):
        labels = [(e.decode() if isinstance(e, bytes) else e).split(":")[2] for e in row]
        order = np.argsort(-case.expected["classProbability"][r])[:2]
        assert labels == [case.labels[i] for i in order]


@pytest.mark.parametrize("model", ["logreg", "xgb", "dictlin", "half", "scaler32"])
@pytest.mark.parametrize("binary", [True, False])
def test_grpc_and_rest_give_identical_outputs(client, grpc_client, repo, model, binary):
    case = repo.cases[model]
    if model == "half" and not binary:
        pytest.skip("tritonclient sends FP16 only as binary data")
    rows = [0, 2, 3]
    grpc_inputs = []
    for name, datatype, data in arrays(case, rows):
        t = tgrpc.InferInput(name, list(data.shape), datatype)
        t.set_data_from_numpy(data)
        grpc_inputs.append(t)
    over_grpc = grpc_client.infer(model, grpc_inputs)
    outputs = [thttp.InferRequestedOutput(name, binary_data=binary) for name in case.expected]
    over_rest = client.infer(model, http_inputs(case, rows, binary=binary), outputs=outputs)
    for name in case.expected:
        a, b = over_grpc.as_numpy(name), over_rest.as_numpy(name)
        assert a.shape == b.shape, name
        if a.dtype == np.object_:
            assert [x if isinstance(x, bytes) else x.encode() for x in b.ravel()] == list(a.ravel()), name
        else:
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name


def test_bad_inputs_are_400(client, repo):
    t = thttp.InferInput("nope", [1, 1], "FP64")
    t.set_data_from_numpy(np.zeros((1, 1)), binary_data=False)
    expect_error(lambda: client.infer("xgb", [t]), 400, "no input named 'nope'")
    t = thttp.InferInput("input", [1, 5], "FP64")
    t.set_data_from_numpy(np.zeros((1, 5)), binary_data=False)
    expect_error(lambda: client.infer("xgb", [t]), 400)


def test_statistics(client, repo):
    case = repo.cases["xgb"]
    before = client.get_inference_statistics("xgb")["model_stats"][0]["inference_stats"]["success"]["count"]
    for _ in range(3):
        client.infer("xgb", http_inputs(case, [0], binary=True))
    stats = client.get_inference_statistics("xgb")["model_stats"]
    assert len(stats) == 1 and stats[0]["name"] == "xgb" and stats[0]["version"] == "1"
    assert stats[0]["inference_stats"]["success"]["count"] == before + 3
    assert stats[0]["inference_stats"]["fail"]["count"] >= 0
    everything = client.get_inference_statistics()["model_stats"]
    assert {"logreg", "xgb", "scaler"} <= {m["name"] for m in everything}


def test_repository_index_unload_and_load(client, repo):
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert {"logreg", "xgb", "dictlin", "half", "scaler", "scaler32"} <= set(index)
    assert index["xgb"]["state"] == "READY" and index["xgb"]["version"] == "1"
    client.unload_model("scaler")
    try:
        assert not client.is_model_ready("scaler")
        t = thttp.InferInput("input", [1, 5], "FP64")
        t.set_data_from_numpy(np.zeros((1, 5)))
        expect_error(lambda: client.infer("scaler", [t]), 404, "scaler")
        assert {m["name"]: m for m in client.get_model_repository_index()}["scaler"]["state"] == "UNAVAILABLE"
    finally:
        client.load_model("scaler")
    assert client.is_model_ready("scaler")
    expect_error(lambda: client.load_model("no-such-model"), 404, "no-such-model")


def test_model_control_none_is_403(repo, start_server):
    s = start_server(repo.path)
    c = thttp.InferenceServerClient(s.http_address)
    try:
        expect_error(lambda: c.load_model("xgb"), 403, "--model-control")
        expect_error(lambda: c.unload_model("xgb"), 403, "--model-control")
        assert c.is_model_ready("xgb")
        assert {m["name"] for m in c.get_model_repository_index()} >= {"xgb"}
    finally:
        c.close()


# ----------------------------------------------------------------------------- curl

def curl(*args):
    """curl's stdout (text), failing on a transport error."""
    done = subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


XGB_BODY = json.dumps({"inputs": [{"name": f"f{i}", "shape": [1, 1], "datatype": "FP64", "data": [0.5]} for i in range(4)]})


def test_curl_keep_alive(server):
    url = f"{server.http_url}/v2/health/ready"
    # num_connects is 0 for a transfer that reused the connection.
    out = curl("-o", "/dev/null", "-w", "%{http_code} %{num_connects}\n", url, "-o", "/dev/null", url,
               "-o", "/dev/null", f"{server.http_url}/v2/models/xgb")
    assert out.split("\n")[:3] == ["200 1", "200 0", "200 0"]
    one = ["-o", "/dev/null", "-w", "%{http_code} %{num_connects}\n", "-d", XGB_BODY, f"{server.http_url}/v2/models/xgb/infer"]
    out = curl(*one, "--next", *one)
    assert out.split("\n")[:2] == ["200 1", "200 0"]


def test_curl_infer(server, repo):
    answer = json.loads(curl("-d", XGB_BODY, f"{server.http_url}/v2/models/xgb/versions/1/infer"))
    [y] = answer["outputs"]
    assert y["name"] == "y" and y["datatype"] == "FP64" and y["shape"] == [1, 1]
    want = repo.cases["xgb"].model.predict(np.full((1, 4), 0.5))[0]
    assert y["data"][0] == pytest.approx(float(want), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("body", ["{\"inputs\": [", "not json", "[1, 2]", "{\"inputs\": 3}"])
def test_curl_malformed_json_is_400(server, body):
    out = curl("-o", "-", "-w", "\n%{http_code}", "-d", body, f"{server.http_url}/v2/models/xgb/infer")
    text, code = out.rsplit("\n", 1)
    assert code == "400"
    assert "error" in json.loads(text)


def test_curl_unknown_model_and_path_are_404(server):
    for path in ["/v2/models/no-such-model", "/v2/models/no-such-model/infer", "/v3/anything", "/v2/models/xgb/nothing"]:
        method = ["-d", XGB_BODY] if path.endswith("infer") else []
        out = curl("-o", "-", "-w", "\n%{http_code}", *method, server.http_url + path)
        text, code = out.rsplit("\n", 1)
        assert code == "404", path
        assert "error" in json.loads(text)


def test_curl_percent_encoded_paths(server):
    """A path segment holding escapes is percent-decoded (%78 is 'x'); a malformed escape is 400.
    Segments without a '%' are taken as they are."""
    out = curl("-o", "-", "-w", "\n%{http_code}", f"{server.http_url}/v2/models/%78gb")
    text, code = out.rsplit("\n", 1)
    assert code == "200" and json.loads(text)["name"] == "xgb", text
    out = curl("-o", "-", "-w", "\n%{http_code}", f"{server.http_url}/v2/models/%zzgb")
    text, code = out.rsplit("\n", 1)
    assert code == "400" and "percent-encoding" in json.loads(text)["error"], text


def test_curl_oversized_body_is_413(server, tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"inputs": [{"name": "f0", "shape": [1, 1], "datatype": "FP64", "data": [0.0] * 400_000}]}))
    assert big.stat().st_size > MAX_MESSAGE
    out = curl("-o", "-", "-w", "\n%{http_code}", "--data-binary", f"@{big}", f"{server.http_url}/v2/models/xgb/infer")
    text, code = out.rsplit("\n", 1)
    assert code == "413"
    assert str(MAX_MESSAGE) in json.loads(text)["error"]
    # The server goes on serving.
    assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{server.http_url}/v2/health/live") == "200"


# ----------------------------------------------------------------------------- raw socket

def read_responses(sock, count):
    """Reads `count` HTTP/1.1 responses (Content-Length framed): [(status, headers, body)]."""
    data = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            data += chunk
        head, data = data.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = int(headers["content-length"])
        while len(data) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside a body"
            data += chunk
        out.append((status, headers, data[:length]))
        data = data[length:]
    return out


def request(method, path, body=b"", headers=()):
    head = f"{method} {path} HTTP/1.1\r\nHost: test\r\n" + "".join(f"{h}\r\n" for h in headers)
    if body or method == "POST":
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def test_pipelined_requests_are_answered_in_order(server, repo):
    case = repo.cases["scaler"]
    bodies = []
    for r in range(6):
        bodies.append(json.dumps({"id": f"req-{r}", "inputs": [{"name": "input", "shape": [1, 5], "datatype": "FP64",
                                                                  "data": case.inputs["input"][r].tolist()}]}).encode())
    wire = b""
    for r, body in enumerate(bodies):
        wire += request("POST", "/v2/models/scaler/infer", body)
        if r == 2:
            wire += request("GET", "/v2/models/no-such-model") + request("GET", "/v2/health/live")
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(wire)  # every request at once, before any answer
        answers = read_responses(sock, 8)
    statuses = [a[0] for a in answers]
    assert statuses == [200, 200, 200, 404, 200, 200, 200, 200]
    infer = [json.loads(a[2]) for a in answers if a[0] == 200 and a[2]]
    assert [a["id"] for a in infer] == [f"req-{r}" for r in range(6)]
    for r, a in enumerate(infer):
        np.testing.assert_allclose(a["outputs"][0]["data"], case.expected["output"][r], rtol=1e-9, atol=1e-9)


def test_binary_request_by_hand(server, repo):
    """Triton's binary tensor data extension without tritonclient: JSON header, then raw bytes."""
    x = np.asarray(repo.cases["scaler32"].inputs["input"][:2], dtype=np.float32)
    header = json.dumps({"inputs": [{"name": "input", "shape": [2, 5], "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(request("POST", "/v2/models/scaler32/infer", header + x.tobytes(), [f"Inference-Header-Content-Length: {len(header)}"]))
        # The header's length past the body's end: 400, and the connection still serves.
        sock.sendall(request("POST", "/v2/models/scaler32/infer", header, [f"Inference-Header-Content-Length: {len(header) + 10}"]))
        (status, headers, body), (bad, _, text) = read_responses(sock, 2)
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    n = int(headers["inference-header-content-length"])
    meta = json.loads(body[:n])
    [out] = meta["outputs"]
    assert out["shape"] == [2, 5] and out["parameters"]["binary_data_size"] == 80
    got = np.frombuffer(body[n:], dtype=np.float64).reshape(2, 5)
    np.testing.assert_allclose(got, repo.cases["scaler32"].expected["output"][:2], rtol=1e-9, atol=1e-9)
    assert bad == 400 and "Inference-Header-Content-Length" in json.loads(text)["error"]


def test_malformed_and_oversized_heads(server):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (80 << 10) + b"\r\n\r\n")
        [(status, headers, body)] = read_responses(sock, 1)
        assert status == 431 and headers.get("connection") == "close"
        assert "error" in json.loads(body)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        [(status, _, body)] = read_responses(sock, 1)
        assert status == 400 and "error" in json.loads(body)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(request("DELETE", "/v2/models/xgb"))
        [(status, _, _)] = read_responses(sock, 1)
        assert status == 405
        sock.sendall(request("GET", "/v2/health/live", headers=["Connection: close"]))
        [(status, headers, _)] = read_responses(sock, 1)
        assert status == 200 and headers.get("connection") == "close"
        assert sock.recv(10) == b""  # the server closed after answering


def test_half_closed_client_still_gets_its_answers(server):
    """A client may send its requests, shut its sending side, and then read."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(request("GET", "/v2/models/xgb") + request("POST", "/v2/models/xgb/infer", XGB_BODY.encode()))
        sock.shutdown(socket.SHUT_WR)
        (meta, _, _), (infer, headers, body) = read_responses(sock, 2)
        # "Connection: close" only when the server saw the end of input before the answer was
        # ready (a race with the worker); either way it closes after the last answer.
        assert meta == 200 and infer == 200 and headers.get("connection") in (None, "close")
        assert json.loads(body)["outputs"][0]["name"] == "y"
        assert sock.recv(10) == b""
