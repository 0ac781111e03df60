"""Operating `cortado serve`: metrics and probes on the metrics port, a hot reload under load,
the bounded queue, and a graceful SIGTERM with calls in flight."""
import re
import shutil
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest

from protos import load_predictor

P = load_predictor()
pb = P.predictor_pb2
# Load and Unload are off unless the server is started with these flags.
CONTROL = ("--model-control", "explicit")

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url):
    try:
        with _opener.open(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def metrics(server):
    """Samples of the exposition text: (name, frozenset of label pairs) -> value."""
    status, _, text = http_get(server.metrics_url + "/metrics")
    assert status == 200
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def sample(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def logreg_request(repo, row):
    case = repo.cases["logreg"]
    return pb.PredictRequest(model="logreg", inputs=[
        pb.Feature(name=n, value=pb.FeatureValue(double_value=float(v[row]))) for n, v in case.inputs.items()])


def check_logreg(repo, row, features):
    case = repo.cases["logreg"]
    out = {f.name: f.value for f in features}
    assert out["species"].string_value == case.expected["species"][row]
    d = out["classProbability"].dictionary
    got = dict(zip(d.string_keys, d.values))
    np.testing.assert_allclose([got[label] for label in case.labels], case.expected["classProbability"][row],
                               rtol=case.rtol, atol=case.atol)


def heavy_batch(repo, rows=5000):
    """The case's rows cycled into one large PredictBatch (tens of milliseconds of work)."""
    case = repo.cases["logreg"]
    n = len(case.expected["species"])
    return pb.PredictBatchRequest(model="logreg", rows=[pb.Row(features=logreg_request(repo, i % n).inputs) for i in range(rows)])


def check_heavy(repo, reply, rows=5000):
    assert len(reply.rows) == rows
    n = len(repo.cases["logreg"].expected["species"])
    for i in (0, 1, n + 2, rows - 1):
        check_logreg(repo, i % n, reply.rows[i].features)


# ----------------------------------------------------------------------------- metrics and probes

def test_metrics_count_calls_by_model_and_code(server, repo):
    before = metrics(server)
    with server.channel() as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        for row in range(3):
            check_logreg(repo, row, stub.Predict(logreg_request(repo, row), timeout=10).outputs)
        bad = logreg_request(repo, 0)
        bad.inputs[0].name = "nope"
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(bad, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(pb.PredictRequest(model="nosuchmodel"), timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    after = metrics(server)

    def delta(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("cortado_requests_total", model="logreg", service="predictor", code="OK") == 3
    assert delta("cortado_requests_total", model="logreg", service="predictor", code="INVALID_ARGUMENT") == 1
    not_found = sum(v for (name, labels), v in after.items()
                    if name == "cortado_requests_total" and ("code", "NOT_FOUND") in labels) - \
        sum(v for (name, labels), v in before.items()
            if name == "cortado_requests_total" and ("code", "NOT_FOUND") in labels)
    assert not_found == 1
    assert delta("cortado_request_duration_seconds_count", model="logreg", service="predictor") == 4
    assert sample(after, "cortado_request_duration_seconds_bucket", model="logreg", service="predictor", le="+Inf") == \
        sample(after, "cortado_request_duration_seconds_count", model="logreg", service="predictor")
    assert sample(after, "cortado_models_loaded") == len(repo.cases)
    assert ("cortado_queue_depth", frozenset({("model", "logreg")})) in after


def test_probes_and_content_type(server):
    status, ctype, text = http_get(server.metrics_url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain") and "cortado_requests_total" in text
    assert http_get(server.metrics_url + "/healthz")[0] == 200
    status, _, text = http_get(server.metrics_url + "/readyz")
    assert status == 200 and "ready" in text
    assert http_get(server.metrics_url + "/no/such/page")[0] == 404


# ----------------------------------------------------------------------------- hot reload under load

def test_hot_reload_under_load(repo, copy_repo, start_server):
    root = copy_repo()
    server = start_server(root, *CONTROL)
    stop = threading.Event()
    phase = {"value": 0}  # 0 before the reloads, 1 during, 2 after version 2 is loaded
    results = [[] for _ in range(4)]  # per thread: (phase at start, version, ok)
    errors = []

    def caller(k):
        with server.channel() as ch:
            stub = P.predictor_pb2_grpc.PredictorStub(ch)
            for i in range(100000):  # bounded; normally ended by `stop`
                if stop.is_set():
                    return
                row = (i + k) % 12
                started = phase["value"]
                try:
                    reply = stub.Predict(logreg_request(repo, row), timeout=30)
                    check_logreg(repo, row, reply.outputs)
                    results[k].append((started, reply.version))
                except Exception as e:  # every failure is reported
                    errors.append(f"thread {k} call {i}: {e!r}")
                    results[k].append((started, None))

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    try:
        with server.channel() as ch:
            admin = P.predictor_pb2_grpc.PredictorStub(ch)
            time.sleep(0.5)
            phase["value"] = 1
            for _ in range(5):
                status = admin.Load(pb.LoadRequest(model="logreg"), timeout=30).status
                assert (status.version, status.state) == ("1", pb.READY)
                time.sleep(0.1)
            shutil.copytree(root / "logreg" / "1", root / "logreg" / "2")
            status = admin.Load(pb.LoadRequest(model="logreg"), timeout=30).status
            assert (status.version, status.state) == ("2", pb.READY)
            phase["value"] = 2
            for _ in range(3):
                time.sleep(0.1)
                assert admin.Load(pb.LoadRequest(model="logreg"), timeout=30).status.version == "2"
            time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:10]
    for k, calls in enumerate(results):
        versions = [v for _, v in calls]
        assert "1" in versions and "2" in versions, f"thread {k} saw {set(versions)}"
        first2 = versions.index("2")
        assert all(v == "2" for v in versions[first2:]), f"thread {k} went back to version 1"
        assert all(v == "1" for started, v in calls if started == 0)
        assert all(v == "2" for started, v in calls if started == 2)
    assert sum(1 for calls in results for started, _ in calls if started == 1) > 0, "no call overlapped the reloads"
    with server.channel() as ch:
        listed = {m.name: m for m in P.predictor_pb2_grpc.PredictorStub(ch).List(pb.ListRequest(), timeout=10).models}
    assert (listed["logreg"].version, listed["logreg"].state) == ("2", pb.READY)


# ----------------------------------------------------------------------------- bounded queue

def test_full_queue_is_resource_exhausted(repo, start_server):
    """One prediction at a time and no queue: while a large batch runs, another call gets
    RESOURCE_EXHAUSTED at once. (The large batch may end before the small call arrives on a
    busy machine, so up to 5 attempts; every answer must be OK or RESOURCE_EXHAUSTED.)"""
    server = start_server(repo.path, "--workers", "1", "--max-concurrency", "1", "--max-queue", "0")
    heavy = heavy_batch(repo, rows=20000)
    exhausted = None
    with server.channel() as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        for attempt in range(5):
            running = stub.PredictBatch.future(heavy, timeout=120)
            for _ in range(1000):  # bounded wait until the batch is running
                if sample(metrics(server), "cortado_running", model="logreg") >= 1 or running.done():
                    break
                time.sleep(0.005)
            try:
                check_logreg(repo, 0, stub.Predict(logreg_request(repo, 0), timeout=10).outputs)
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                exhausted = e
            check_heavy(repo, running.result(), rows=20000)
            if exhausted:
                break
        assert exhausted is not None, "no call was refused while the model was busy"
        assert "queue" in exhausted.details() and "max-queue" in exhausted.details(), exhausted.details()
        check_logreg(repo, 1, stub.Predict(logreg_request(repo, 1), timeout=10).outputs)
    status = metrics(server)
    assert sample(status, "cortado_requests_total", model="logreg", service="predictor", code="RESOURCE_EXHAUSTED") >= 1


# ----------------------------------------------------------------------------- graceful stop

def test_sigterm_lets_admitted_calls_finish_then_exits_0(repo, start_server):
    server = start_server(repo.path, "--workers", "1", "--max-concurrency", "1")
    heavy = heavy_batch(repo)
    n = 6
    with server.channel() as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        futures = [stub.PredictBatch.future(heavy, timeout=120) for _ in range(n)]
        # Wait (bounded) until the server has received all of them: answered or in flight.
        # (The loop thread reads each request's model and queues it, so the first may be
        # answered before the last is read; a call just answered may be counted both ways for
        # a moment.) Then
        # SIGTERM while some are still running or queued.
        received = in_flight = 0
        for _ in range(1000):
            m = metrics(server)
            in_flight = sample(m, "cortado_calls_in_flight")
            received = in_flight + sample(m, "cortado_requests_total", model="logreg", service="predictor", code="OK")
            if received >= n:
                break
            time.sleep(0.01)
        assert received >= n, f"the server saw {received} of {n} calls"
        assert in_flight >= 1, "every call was answered before SIGTERM: make the batches heavier"
        server.terminate()
        for i, f in enumerate(futures):
            check_heavy(repo, f.result(timeout=120))
        # Draining: no new calls are taken.
        with pytest.raises(grpc.RpcError) as info:
            stub.Predict(logreg_request(repo, 0), timeout=5, wait_for_ready=False)
        assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), info.value
    rc = server.wait()
    assert rc == 0, f"exit status {rc} (None: still running after the bound)\n{server.stderr()}"
    log = server.stderr()
    assert "draining" in log and "stopped" in log, log


def test_health_watch_streams_changes_and_ends_on_drain(repo, start_server):
    """Health/Watch: the status at once (SERVING; SERVICE_UNKNOWN for a name not served),
    a model's watch follows its unload and load, and SIGTERM sends NOT_SERVING and ends every
    watch with OK, so the server still exits 0."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    S = health_pb2.HealthCheckResponse
    server = start_server(repo.path, *CONTROL)
    with server.channel() as ch:
        health = health_pb2_grpc.HealthStub(ch)
        whole = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        model = health.Watch(health_pb2.HealthCheckRequest(service="logreg"), timeout=60)
        unknown = health.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=60)
        assert next(whole).status == S.SERVING
        assert next(model).status == S.SERVING
        assert next(unknown).status == S.SERVICE_UNKNOWN
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        stub.Unload(P.predictor_pb2.UnloadRequest(model="logreg"), timeout=30)
        assert next(model).status == S.SERVICE_UNKNOWN
        stub.Load(P.predictor_pb2.LoadRequest(model="logreg"), timeout=60)
        assert next(model).status == S.SERVING
        # A cancelled watch is forgotten; the others carry on.
        unknown.cancel()
        server.terminate()
        for stream in (whole, model):
            assert [r.status for r in stream] == [S.NOT_SERVING]  # then the stream ends
            assert stream.code() == grpc.StatusCode.OK
    rc = server.wait()
    assert rc == 0, f"exit status {rc}\n{server.stderr()}"
