"""`cortado serve --trace-file FILE [--trace-sample-rate R]`: per-call traces in Chrome's trace
event format (what Perfetto and chrome://tracing open).

Calls go in over cortado.v1 (grpcio), the Open Inference Protocol over gRPC (tritonclient.grpc)
and over REST (tritonclient.http), some with a W3C `traceparent`. After SIGTERM the file must
be one JSON array (closed by the drain) whose async spans, per call: open and close in pairs,
nest (the call's span holds queue wait, input decode and checks, compute and output encoding,
in that order, without overlap), carry the model, service, status and request id, and keep the
caller's trace id with its span as parent. Sampling: rate 0 traces only calls whose
traceparent says sampled; a traceparent that says not sampled is not traced at rate 1.
"""
import json
import os
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
import tritonclient.http as thttp

from protos import load_predictor

# As conftest.py's (by value: under a run of several folders, 'conftest' may be another's).
CORTADO = os.environ.get("CORTADO_BIN") or str(Path(__file__).resolve().parents[2] / ".build" / "debug" / "cortado")
P = load_predictor()
pb = P.predictor_pb2
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
STEPS = ["queue wait", "input decode and checks", "compute", "output encoding"]


def features(case, i):
    return [pb.Feature(name=n, value=pb.FeatureValue(double_value=float(v[i]))) for n, v in case.inputs.items()]


def oip_inputs(client, case, i, **options):
    """Row i of a case's scalar features as one [1, 1] FP64 tensor each, for tritonclient's
    gRPC or HTTP module (`client`)."""
    inputs = []
    for name, values in case.inputs.items():
        t = client.InferInput(name, [1, 1], "FP64")
        t.set_data_from_numpy(np.asarray([[values[i]]], dtype=np.float64), **options)
        inputs.append(t)
    return inputs


def spans(path):
    """{span id: {"call": (begin event, end event), step name: (begin, end)}} from the file."""
    events = json.loads(path.read_text())
    assert isinstance(events, list)
    out, open_ = {}, {}
    for e in events:
        assert e["ph"] in ("b", "e") and e["cat"] in ("gRPC", "REST"), e
        key = (e["id"], e["name"])
        if e["ph"] == "b":
            assert key not in open_, f"span opened twice: {e}"
            open_[key] = e
        else:
            begin = open_.pop(key)
            assert e["ts"] >= begin["ts"], (begin, e)
            calls = out.setdefault(e["id"], {})
            calls["call" if "args" in begin and "trace_id" in begin["args"] else e["name"]] = (begin, e)
    assert not open_, f"spans never closed: {list(open_)}"
    return out


def check_call(span, model, service, status):
    begin, end = span["call"]
    args = begin["args"]
    assert args["model"] == model and args["service"] == service and args["status"] == status, args
    assert len(args["trace_id"]) == 32 and len(args["span_id"]) == 16, args
    if status != "OK":
        return args
    t = begin["ts"]
    for step in STEPS:
        b, e = span[step]
        assert b["ts"] >= t - 0.002, (step, b["ts"], t)  # printed to the nanosecond
        t = e["ts"]
    assert end["ts"] >= t - 0.002
    return args


def test_every_call_is_traced_with_its_steps_and_context(repo, start_server, tmp_path):
    trace = tmp_path / "trace.json"
    server = start_server(repo.path, "--trace-file", trace)
    case = repo.cases["logreg"]
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    stub.Predict(pb.PredictRequest(model="logreg", inputs=features(case, 0)), timeout=10,
                 metadata=[("traceparent", f"00-{TRACE_ID}-{PARENT}-01"), ("x-request-id", "native-1")])
    with pytest.raises(grpc.RpcError):
        stub.Predict(pb.PredictRequest(model="logreg", inputs=[pb.Feature(name="nope", value=pb.FeatureValue(double_value=1))]),
                     timeout=10)
    g = tgrpc.InferenceServerClient(server.address)
    g.infer("logreg", oip_inputs(tgrpc, case, 1))
    g.close()
    h = thttp.InferenceServerClient(server.http_address)
    h.infer("logreg", oip_inputs(thttp, case, 1, binary_data=False), headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01", "X-Request-ID": "rest-2"})
    h.close()
    assert server.stop() == 0

    found = sorted(spans(trace).values(), key=lambda s: s["call"][0]["ts"])
    assert len(found) == 4, found
    native = check_call(found[0], "logreg", "predictor", "OK")
    assert native["trace_id"] == TRACE_ID and native["parent_id"] == PARENT and native["request_id"] == "native-1"
    assert native["span_id"] != PARENT
    bad = check_call(found[1], "logreg", "predictor", "INVALID_ARGUMENT")
    assert "parent_id" not in bad and bad["trace_id"] != TRACE_ID
    oip = check_call(found[2], "logreg", "inference", "OK")
    assert found[2]["call"][0]["cat"] == "gRPC"
    rest = check_call(found[3], "logreg", "rest", "OK")
    assert found[3]["call"][0]["cat"] == "REST"
    assert rest["trace_id"] == TRACE_ID and rest["parent_id"] == PARENT and rest["request_id"] == "rest-2"
    assert len({a["span_id"] for a in (native, bad, oip, rest)}) == 4


def test_sampling_follows_the_rate_and_the_callers_flag(repo, start_server, tmp_path):
    trace = tmp_path / "trace.json"
    server = start_server(repo.path, "--trace-file", trace, "--trace-sample-rate", "0")
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    request = pb.PredictRequest(model="logreg", inputs=features(repo.cases["logreg"], 0))
    for _ in range(5):
        stub.Predict(request, timeout=10)
    stub.Predict(request, timeout=10, metadata=[("traceparent", f"00-{TRACE_ID}-{PARENT}-00")])
    stub.Predict(request, timeout=10, metadata=[("traceparent", f"00-{TRACE_ID}-{PARENT}-01")])
    # Not a valid traceparent (an all-zero trace id): sampled by the rate, i.e. not at all.
    stub.Predict(request, timeout=10, metadata=[("traceparent", f"00-{'0' * 32}-{PARENT}-01")])
    assert server.stop() == 0
    found = list(spans(trace).values())
    assert len(found) == 1, found
    assert found[0]["call"][0]["args"]["trace_id"] == TRACE_ID


def test_bad_flags_are_refused(repo, tmp_path):
    for args, words in ((["--trace-file", tmp_path / "t.json", "--trace-sample-rate", "1.5"], "between 0 and 1"),
                        (["--trace-file", tmp_path / "no-such-folder" / "t.json"], "cannot be written")):
        run = subprocess.run(CORTADO.split() + ["serve", "--models", str(repo.path), "--port", "0", *map(str, args)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and words in run.stderr, run.stderr


def _models(root):
    """A scikit-learn pipeline (scaler, then linear regression) as a Core ML pipeline, and an MLP."""
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        import coremltools as ct
        from coremltools.models import datatypes
        from coremltools.models.neural_network import NeuralNetworkBuilder
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    r = np.random.default_rng(9)
    x = r.normal(size=(50, 2))
    pipe = Pipeline([("scale", StandardScaler()), ("lin", LinearRegression())]).fit(x, x @ [1.5, -2.0] + 0.5)
    spec = ct.converters.sklearn.convert(pipe, ["a", "b"], "y").get_spec()
    assert spec.WhichOneof("Type") == "pipelineRegressor"
    (root / "pipe" / "1").mkdir(parents=True)
    (root / "pipe" / "1" / "model.mlmodel").write_bytes(spec.SerializeToString())
    b = NeuralNetworkBuilder([("x", datatypes.Array(8))], [("y", datatypes.Array(3))])
    b.add_inner_product("fc1", r.normal(size=(16, 8)).astype(np.float32), None, 8, 16, False, "x", "h")
    b.add_activation("relu", "RELU", "h", "hr")
    b.add_inner_product("fc2", r.normal(size=(3, 16)).astype(np.float32), None, 16, 3, False, "hr", "y")
    (root / "mlp" / "1").mkdir(parents=True)
    (root / "mlp" / "1" / "model.mlmodel").write_bytes(b.spec.SerializeToString())
    return [m.WhichOneof("Type") for m in spec.pipelineRegressor.pipeline.models]


def test_pipeline_models_and_network_layers_nest_under_compute(start_server, tmp_path):
    root = tmp_path / "repo"
    stage_types = _models(root)
    trace = tmp_path / "trace.json"
    server = start_server(root, "--trace-file", trace, "--trace-layers")
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    stub.Predict(pb.PredictRequest(model="pipe", inputs=[pb.Feature(name="a", value=pb.FeatureValue(double_value=0.3)),
                                                         pb.Feature(name="b", value=pb.FeatureValue(double_value=-1.2))]), timeout=10)
    g = tgrpc.InferenceServerClient(server.address)
    t = tgrpc.InferInput("x", [1, 8], "FP32")
    t.set_data_from_numpy(np.ones((1, 8), np.float32))
    g.infer("mlp", [t])
    g.close()
    assert server.stop() == 0

    events = json.loads(trace.read_text())
    by_call = {}
    for e in events:
        by_call.setdefault(e["id"], []).append(e)
    assert len(by_call) == 2
    for evs in by_call.values():
        model = evs[0]["args"]["model"]
        # Properly nested: a stack of open spans, each end closing the innermost.
        stack, inside_compute = [], []
        for e in evs:
            if e["ph"] == "b":
                if stack and stack[-1] == "compute":
                    inside_compute.append(e["name"])
                stack.append(e["name"])
            else:
                assert stack and stack[-1] == e["name"], (stack, e)
                stack.pop()
        assert not stack
        if model == "pipe":
            # The converter's stages, in order (a feature vectorizer, the scaler, the regression).
            assert inside_compute == [f"model pipe/stage {i} ({t})" for i, t in enumerate(stage_types)], inside_compute
        else:
            assert [n.split(" ")[0] for n in inside_compute] == ["fc1", "fc2"], inside_compute


def test_a_client_forcing_traces_cannot_grow_the_file_past_its_bound(repo, start_server, tmp_path):
    """Every call of this client asks to be traced (a sampled traceparent) although the rate is
    0: the file stops at --trace-max-size (1 MiB here), stays a valid JSON array, the server
    logs why and goes on answering."""
    trace = tmp_path / "trace.json"
    server = start_server(repo.path, "--trace-file", trace, "--trace-sample-rate", "0", "--trace-max-size", "1")
    stub = P.predictor_pb2_grpc.PredictorStub(server.channel())
    request = pb.PredictRequest(model="logreg", inputs=features(repo.cases["logreg"], 0))
    forced = [("traceparent", f"00-{TRACE_ID}-{PARENT}-01")]
    calls = 0
    # About 1.5 KB of events a call: well past 1 MiB within 2,000 calls.
    while calls < 2000:
        stub.Predict(request, timeout=10, metadata=forced)
        calls += 1
        if calls % 200 == 0 and "trace file full" in server.stderr():
            break
    assert "trace file full" in server.stderr(), f"{calls} traced calls and still tracing"
    for _ in range(20):
        stub.Predict(request, timeout=10, metadata=forced)
    assert server.stop() == 0
    assert trace.stat().st_size <= 1 << 20
    found = spans(trace)
    assert 0 < len(found) < calls, (len(found), calls)
