"""`cortado serve --log-format json --log-calls`: every line the server writes is one JSON object
(time, level, label, message), and every prediction call, good or bad, over cortado.v1 (grpcio),
the Open Inference Protocol over gRPC (tritonclient.grpc) and over REST (tritonclient.http),
gets one "call" line with its request id, model, version, service, status and latency.
The text format stays the default and logs no calls unless asked."""
import json
import os
import re
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp
from tritonclient.utils import InferenceServerException

from protos import load_predictor

# As conftest.py's (imported by value: under a run of several folders, 'conftest' may be another's).
CORTADO = os.environ.get("CORTADO_BIN") or str(Path(__file__).resolve().parents[2] / ".build" / "debug" / "cortado")
P = load_predictor()
pb = P.predictor_pb2
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
LEVELS = {"trace", "debug", "info", "notice", "warning", "error", "critical"}


def features(case, i):
    return [pb.Feature(name=n, value=pb.FeatureValue(double_value=float(v[i]))) for n, v in case.inputs.items()]


def json_lines(server):
    """Every non-empty line of the server's output, parsed (a line that is not JSON fails)."""
    text = server.log_path.read_text()
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            pytest.fail(f"line {n} of the server's output is not JSON ({e}): {line!r}")
        assert isinstance(obj, dict), line
        assert TIME.fullmatch(obj.get("time", "")), line
        assert obj.get("level") in LEVELS, line
        assert isinstance(obj.get("message"), str) and obj.get("label") == "cortado", line
        out.append(obj)
    return out


def test_json_lines_and_call_records(repo, start_server):
    server = start_server(repo.path, "--log-format", "json", "--log-calls")
    case = repo.cases["logreg"]
    expected = []  # (request_id or None, model, status, service: the metrics label, predictor | inference | rest)

    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    stub.Predict(pb.PredictRequest(model="logreg", inputs=features(case, 0)), timeout=10,
                 metadata=[("x-request-id", "native-ok-1")])
    expected.append(("native-ok-1", "logreg", "OK", "predictor"))
    bad = [pb.Feature(name="nope", value=pb.FeatureValue(double_value=1.0))]
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(pb.PredictRequest(model="logreg", inputs=bad), timeout=10, metadata=[("x-request-id", "native-bad-2")])
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    expected.append(("native-bad-2", "logreg", "INVALID_ARGUMENT", "predictor"))
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(pb.PredictRequest(model="no-such-model", inputs=features(case, 0)), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    expected.append((None, "", "NOT_FOUND", "predictor"))

    x = np.asarray([[case.inputs[n][1] for n in case.inputs]], dtype=np.float64)
    g = tgrpc.InferenceServerClient(server.address)
    inputs = []
    for j, name in enumerate(case.inputs):
        t = tgrpc.InferInput(name, [1, 1], "FP64")
        t.set_data_from_numpy(x[:, j:j + 1])
        inputs.append(t)
    g.infer("logreg", inputs, headers={"x-request-id": "oip-grpc-3"})
    expected.append(("oip-grpc-3", "logreg", "OK", "inference"))
    g.close()

    h = thttp.InferenceServerClient(server.http_address)
    inputs = []
    for j, name in enumerate(case.inputs):
        t = thttp.InferInput(name, [1, 1], "FP64")
        t.set_data_from_numpy(x[:, j:j + 1], binary_data=False)
        inputs.append(t)
    h.infer("logreg", inputs, headers={"X-Request-ID": "rest-4"})
    expected.append(("rest-4", "logreg", "OK", "rest"))
    wrong = thttp.InferInput("f0", [1, 1], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 1), np.float32), binary_data=False)
    with pytest.raises(InferenceServerException):
        h.infer("logreg", [wrong], headers={"X-Request-ID": "rest-bad-5"})
    expected.append(("rest-bad-5", "logreg", "INVALID_ARGUMENT", "rest"))
    h.close()

    assert server.stop() == 0
    lines = json_lines(server)
    messages = [l["message"] for l in lines]
    assert "listening" in messages and "stopped" in messages, messages
    listening = next(l for l in lines if l["message"] == "listening")
    assert str(server.port) == str(listening["grpc_port"]), listening

    calls = [l for l in lines if l["message"] == "call"]
    assert len(calls) == len(expected), calls
    made_up = set()
    for line, (rid, model, status, service) in zip(calls, expected):
        assert line["level"] == "info"
        assert line["model"] == model and line["status"] == status, (line, model, status)
        assert line["service"] == service, line
        if rid:
            assert line["request_id"] == rid, line
        else:
            assert line["request_id"] and line["request_id"] not in made_up, line
            made_up.add(line["request_id"])
        assert line["version"] == ("1" if model else ""), line
        assert isinstance(line["latency_ms"], (int, float)) and line["latency_ms"] >= 0, line
        if status == "OK":
            assert "error" not in line, line
        else:
            assert line["error"], line
    assert "nope" in calls[1]["error"], calls[1]
    assert "no-such-model" in calls[2]["error"], calls[2]


def test_text_is_the_default_and_logs_no_calls(repo, start_server):
    server = start_server(repo.path)
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    stub.Predict(pb.PredictRequest(model="logreg", inputs=features(repo.cases["logreg"], 0)), timeout=10)
    assert server.stop() == 0
    text = server.log_path.read_text()
    assert "listening" in text and not text.lstrip().startswith("{"), text
    assert " call " not in text and "request_id" not in text, text


def test_fatal_errors_are_json_too(tmp_path):
    missing = tmp_path / "no-such-folder"
    run = subprocess.run(CORTADO.split() + ["serve", "--models", str(missing), "--log-format", "json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    lines = [json.loads(l) for l in (run.stdout + run.stderr).splitlines() if l.strip()]
    assert any(l["level"] == "critical" and str(missing) in l["message"] for l in lines), lines


def test_unknown_log_format_is_refused(tmp_path):
    run = subprocess.run(CORTADO.split() + ["serve", "--models", str(tmp_path), "--log-format", "yaml"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "--log-format" in run.stderr and "json" in run.stderr, run.stderr
