"""Stateful (iOS18) and multi-function ML Programs."""

import numpy as np

from coremltools.converters.mil.mil import types

from milharness import assert_close, convert, ct, inspect, mb, only, predict

OPS = ["read_state", "coreml_update_state"]


def test_state_accumulates_across_one_session(tmp_path):
    """`cortado predict` runs a stateful model's rows through one state (MLModel.makeState):
    each row's output sees the state the rows before it left."""
    @mb.program(input_specs=[mb.StateTensorSpec(shape=(2, 3), dtype=types.fp16), mb.TensorSpec(shape=(2, 3), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(acc, x):
        total = mb.add(x=mb.read_state(input=acc), y=x)
        mb.coreml_update_state(state=acc, value=total)
        return mb.mul(x=total, y=np.float16(2))

    path = convert(prog, tmp_path, precision="fp16", minimum_deployment_target=ct.target.iOS18)
    assert "States:" in inspect(path) and "acc" in inspect(path)
    xs = [np.full((2, 3), v, dtype=np.float16) for v in (1.0, 2.5, -0.5)]
    out = [only(o) for o in predict(path, [{"x": x} for x in xs])]
    running = np.zeros((2, 3))
    for x, o in zip(xs, out):
        running = running + x.astype(np.float64)
        assert_close(o, 2 * running, rtol=1e-3, atol=1e-3)
    # A new run is a new session: the state starts at zero again.
    assert_close(only(predict(path, [{"x": xs[0]}])[0]), 2 * xs[0].astype(np.float64))


def test_multifunction_model(tmp_path):
    """A model saved with two functions (specification 9): --function picks one; the default
    function runs without it; an unknown name is a clear load error."""
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS18)
    def double(x):
        return mb.mul(x=x, y=2.0)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS18)
    def negate(x):
        return mb.mul(x=x, y=-1.0)

    a = convert(double, tmp_path, name="a", minimum_deployment_target=ct.target.iOS18)
    b = convert(negate, tmp_path, name="b", minimum_deployment_target=ct.target.iOS18)
    desc = ct.utils.MultiFunctionDescriptor()
    desc.add_function(str(a), src_function_name="main", target_function_name="twice")
    desc.add_function(str(b), src_function_name="main", target_function_name="minus")
    desc.default_function_name = "minus"
    path = tmp_path / "multi.mlpackage"
    ct.utils.save_multifunction(desc, str(path))

    x = np.array([[1.0, -2.0, 3.5]], dtype=np.float32)
    assert_close(only(predict(path, [{"x": x}])[0]), -x)
    assert_close(only(predict(path, [{"x": x}], extra_args=["--function", "twice"])[0]), 2 * x)
    listing = inspect(path)
    assert "twice" in listing and "minus" in listing
    _, err = predict(path, [{"x": x}], extra_args=["--function", "thrice"], expect_failure=True)
    assert "thrice" in err and "twice" in err
