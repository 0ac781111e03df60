"""What a client may change on the server (issue #20): model control (`--model-control
none|explicit|poll`, default none) and shared-memory registration (`--allow-shared-memory`,
keys under `--shared-memory-prefix`). Without the flags the calls answer PERMISSION_DENIED
naming the flag, and the models keep serving; from grpcio and from tritonclient.
"""
import json
import os
import shutil
import subprocess
import time

import grpc
import pytest
import tritonclient.grpc as tc
import tritonclient.utils.shared_memory as shm

import test_open_inference as oip
from test_predictor import P, as_dict, check_outputs, expect_error, good_call, row_features

pb = P.predictor_pb2
CORTADO = os.environ.get("CORTADO_BIN") or os.path.join(os.path.dirname(__file__), "..", "..", ".build", "debug", "cortado")

POLL_ROUNDS = 400        # bounded waits for a polling server to notice a change
POLL_PAUSE = 0.05


def stub_of(channel):
    return P.predictor_pb2_grpc.PredictorStub(channel)


def test_model_control_is_off_by_default_grpcio(repo, start_server):
    server = start_server(repo.path)
    model_bytes = (repo.path / "scaler" / "1" / "model.mlmodel").read_bytes()
    with server.channel() as ch:
        stub = stub_of(ch)
        for call in (lambda: stub.Load(pb.LoadRequest(model="scaler"), timeout=30),
                     lambda: stub.Load(pb.LoadRequest(model="fresh", model_data=model_bytes), timeout=30),
                     lambda: stub.Unload(pb.UnloadRequest(model="scaler"), timeout=30),
                     lambda: stub.Unload(pb.UnloadRequest(model="nosuchmodel"), timeout=30)):
            expect_error(call, grpc.StatusCode.PERMISSION_DENIED, "--model-control")
        # Nothing changed: every model still serves, the bytes sent were not loaded.
        listed = {m.name: m.state for m in stub.List(pb.ListRequest(), timeout=10).models}
        assert listed["scaler"] == pb.READY and "fresh" not in listed, listed
        case = repo.cases["scaler"]
        reply = stub.Predict(pb.PredictRequest(model="scaler", inputs=row_features(case, 0)), timeout=10)
        check_outputs(case, 0, as_dict(reply.outputs))
        good_call(stub, repo)


def test_model_control_and_shared_memory_are_off_by_default_tritonclient(repo, start_server):
    server = start_server(repo.path)
    client = tc.InferenceServerClient(server.address)
    key = f"/cortado_test_{os.getpid()}_denied"
    handle = shm.create_shared_memory_region("denied", key, 64)
    try:
        oip.expect_error(lambda: client.load_model("xgb"), "PERMISSION_DENIED", "--model-control")
        oip.expect_error(lambda: client.unload_model("xgb"), "PERMISSION_DENIED", "--model-control")
        oip.expect_error(lambda: client.register_system_shared_memory("denied", key, 64),
                         "PERMISSION_DENIED", "--allow-shared-memory")
        assert client.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
        assert client.is_model_ready("xgb")
        oip.check(repo.cases["xgb"], [0, 1], client.infer("xgb", oip.tensors(repo.cases["xgb"], [0, 1])))
        oip.good_infer(client, repo)
    finally:
        shm.destroy_shared_memory_region(handle)
        client.close()


def test_shared_memory_keys_stay_under_the_prefix(repo, start_server):
    server = start_server(repo.path, "--allow-shared-memory")
    client = tc.InferenceServerClient(server.address)
    pid = os.getpid()
    made = []
    try:
        for name, key in [("inside", f"/cortado_test_{pid}_inside"), ("outside", f"/other_test_{pid}_outside")]:
            made.append(shm.create_shared_memory_region(name, key, 64))
        client.register_system_shared_memory("inside", f"/cortado_test_{pid}_inside", 64)
        oip.expect_error(lambda: client.register_system_shared_memory("outside", f"/other_test_{pid}_outside", 64),
                         "PERMISSION_DENIED", "/cortado", "--shared-memory-prefix")
        oip.expect_error(lambda: client.register_system_shared_memory("climb", "/cortado/../etc", 64),
                         "PERMISSION_DENIED", "..")
        oip.expect_error(lambda: client.register_system_shared_memory("nested", "/cortado_x/y", 64),
                         "PERMISSION_DENIED", "'/'")
        assert set(client.get_system_shared_memory_status(as_json=True)["regions"]) == {"inside"}
        client.unregister_system_shared_memory("inside")
    finally:
        for handle in made:
            shm.destroy_shared_memory_region(handle)
        client.close()

    # "/" allows every key (what perf_analyzer's "/"+name keys need).
    server = start_server(repo.path, "--allow-shared-memory", "--shared-memory-prefix", "/")
    client = tc.InferenceServerClient(server.address)
    handle = shm.create_shared_memory_region("anykey", f"/other_test_{pid}_any", 64)
    try:
        client.register_system_shared_memory("anykey", f"/other_test_{pid}_any", 64)
        client.unregister_system_shared_memory("anykey")
    finally:
        shm.destroy_shared_memory_region(handle)
        client.close()


def test_config_file_sets_model_control_and_shared_memory(repo, start_server, tmp_path):
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"modelControl": "explicit", "allowSharedMemory": True, "sharedMemoryPrefix": "/cortado_cfg"}))
    server = start_server(repo.path, "--config", config)
    with server.channel() as ch:
        stub = stub_of(ch)
        assert stub.Load(pb.LoadRequest(model="scaler"), timeout=30).status.state == pb.READY
    client = tc.InferenceServerClient(server.address)
    try:
        oip.expect_error(lambda: client.register_system_shared_memory("r", "/cortado_test_x", 64),
                         "PERMISSION_DENIED", "/cortado_cfg")
    finally:
        client.close()


def test_bad_model_control_value_is_refused():
    if not os.path.exists(CORTADO.split()[0]):
        pytest.skip("cortado is not built")
    done = subprocess.run(CORTADO.split() + ["serve", "--models", ".", "--model-control", "sometimes"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "none, explicit or poll" in done.stderr, done.stderr


def wait_for(check):
    """Calls `check` until it returns a true value (bounded); returns that value."""
    for _ in range(POLL_ROUNDS):
        value = check()
        if value:
            return value
        time.sleep(POLL_PAUSE)
    pytest.fail("the polling server did not pick up the change")


def test_poll_reloads_changed_adds_new_and_unloads_removed_models(repo, copy_repo, start_server):
    root = copy_repo()
    server = start_server(root, "--model-control", "poll", "--poll-interval", "0.1")
    case = repo.cases["logreg"]

    def version(stub, model="logreg"):
        try:
            return stub.Predict(pb.PredictRequest(model=model, inputs=row_features(repo.cases[model], 0)), timeout=10).version
        except grpc.RpcError as e:
            return e.code()

    with server.channel() as ch:
        stub = stub_of(ch)
        assert version(stub) == "1"
        # A new version folder: swapped in.
        shutil.copytree(root / "logreg" / "1", root / "logreg" / "2")
        wait_for(lambda: version(stub) == "2")
        reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 1)), timeout=10)
        assert reply.version == "2"
        # A new model folder: loaded.
        shutil.copytree(root / "xgb", root / "xgb_copy")
        listed = lambda: {m.name: m.state for m in stub.List(pb.ListRequest(), timeout=10).models}
        wait_for(lambda: listed().get("xgb_copy") == pb.READY)
        # A file that is not a model: the version that served keeps serving.
        (root / "scaler" / "2").mkdir()
        (root / "scaler" / "2" / "model.mlmodel").write_bytes(b"not a model")
        wait_for(lambda: "failed to load" in server.stderr() and "scaler" in server.stderr())
        assert version(stub, "scaler") == "1"
        # A removed model: unloaded.
        shutil.rmtree(root / "dictlin")
        wait_for(lambda: version(stub, "dictlin") == grpc.StatusCode.NOT_FOUND)
        # Explicit calls work too under poll.
        assert stub.Load(pb.LoadRequest(model="logreg"), timeout=30).status.version == "2"
        good_call(stub, repo)
