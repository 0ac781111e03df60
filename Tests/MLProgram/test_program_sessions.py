"""Stateful and multi-function ML Programs over cortado.v1.Predictor (grpcio): a session keeps
its state on the server between Predict calls (CreateSession / Predict with `session` /
EndSession), bounded in number and idle time; `function` picks a function per call."""

import importlib.util
import sys
import time
import warnings

import grpc
import numpy as np
import pytest
from coremltools.converters.mil.mil import types

from milharness import REPO_ROOT, assert_close, convert, ct, mb

warnings.filterwarnings("ignore")
sys.path.insert(0, str(REPO_ROOT / "Tests" / "Server"))
from protos import load_predictor  # noqa: E402

_spec = importlib.util.spec_from_file_location("server_conftest_sessions", REPO_ROOT / "Tests" / "Server" / "conftest.py")
server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_conftest)

p = load_predictor()
pb = p.predictor_pb2


def array(a):
    a = np.asarray(a, dtype=np.float32)
    return pb.FeatureValue(multi_array=pb.MultiArray(data_type=pb.FLOAT32, shape=list(a.shape), data=a.astype("<f4").tobytes()))


def decode(value):
    m = value.multi_array
    dtype = {pb.FLOAT32: "<f4", pb.FLOAT16: "<f2", pb.DOUBLE: "<f8", pb.INT32: "<i4"}[m.data_type]
    return np.frombuffer(m.data, dtype=dtype).astype(np.float64).reshape(list(m.shape))


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    root = tmp_path_factory.mktemp("sessions")
    work = tmp_path_factory.mktemp("build")

    @mb.program(input_specs=[mb.StateTensorSpec(shape=(1, 3), dtype=types.fp16), mb.TensorSpec(shape=(1, 3), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def acc(total, x):
        t = mb.add(x=mb.read_state(input=total), y=x)
        mb.coreml_update_state(state=total, value=t)
        return t

    convert(acc, work, name="acc", precision="fp16", inputs=[ct.TensorType(name="x", shape=(1, 3), dtype=np.float32)],
            outputs=[ct.TensorType(name="sum", dtype=np.float32)]).rename(root / "acc.mlpackage")

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS18)
    def double(x):
        return mb.mul(x=x, y=2.0)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS18)
    def negate(x):
        return mb.mul(x=x, y=-1.0)

    a, b = convert(double, work, name="a"), convert(negate, work, name="b")
    desc = ct.utils.MultiFunctionDescriptor()
    desc.add_function(str(a), src_function_name="main", target_function_name="twice")
    desc.add_function(str(b), src_function_name="main", target_function_name="minus")
    desc.default_function_name = "minus"
    ct.utils.save_multifunction(desc, str(root / "multi.mlpackage"))

    server = server_conftest.Server(root, ["--max-sessions", "2", "--session-idle-timeout", "2"],
                                    tmp_path_factory.mktemp("server")).start()
    channel = server.channel()
    yield p.predictor_pb2_grpc.PredictorStub(channel)
    channel.close()
    assert server.stop() == 0


def predict(stub, model, x, **kw):
    reply = stub.Predict(pb.PredictRequest(model=model, inputs=[pb.Feature(name="x", value=array(x))], **kw), timeout=10)
    return decode(reply.outputs[0].value)


def test_session_state_accumulates_and_sessions_are_separate(stub):
    one = stub.CreateSession(pb.CreateSessionRequest(model="acc"), timeout=10)
    two = stub.CreateSession(pb.CreateSessionRequest(model="acc"), timeout=10)
    assert one.session and one.session != two.session and one.idle_timeout_ms == 2000
    x = np.array([[1.0, 2.0, -0.5]])
    assert_close(predict(stub, "acc", x, session=one.session), x)
    assert_close(predict(stub, "acc", x, session=one.session), 2 * x)
    assert_close(predict(stub, "acc", 3 * x, session=two.session), 3 * x)
    assert_close(predict(stub, "acc", x, session=one.session), 3 * x)
    # The bound: a third session is refused while two are open.
    with pytest.raises(grpc.RpcError) as e:
        stub.CreateSession(pb.CreateSessionRequest(model="acc"), timeout=10)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-sessions" in e.value.details()
    stub.EndSession(pb.EndSessionRequest(session=one.session), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        predict(stub, "acc", x, session=one.session)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        stub.EndSession(pb.EndSessionRequest(session=one.session), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    stub.EndSession(pb.EndSessionRequest(session=two.session), timeout=10)


def test_idle_session_expires(stub):
    s = stub.CreateSession(pb.CreateSessionRequest(model="acc"), timeout=10).session
    predict(stub, "acc", np.ones((1, 3)), session=s)
    time.sleep(2.5)
    with pytest.raises(grpc.RpcError) as e:
        predict(stub, "acc", np.ones((1, 3)), session=s)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "idle" in e.value.details()


def test_stateful_model_needs_a_session_and_stateless_refuses_one(stub):
    with pytest.raises(grpc.RpcError) as e:
        predict(stub, "acc", np.ones((1, 3)))
    assert "state" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.CreateSession(pb.CreateSessionRequest(model="multi"), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_function_per_call(stub):
    x = np.array([[1.0, -2.0, 3.5]])
    assert_close(predict(stub, "multi", x), -x)
    assert_close(predict(stub, "multi", x, function="twice"), 2 * x)
    assert_close(predict(stub, "multi", x, function="minus"), -x)
    with pytest.raises(grpc.RpcError) as e:
        predict(stub, "multi", x, function="thrice")
    assert "thrice" in e.value.details() and "twice" in e.value.details()
