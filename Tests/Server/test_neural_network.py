"""A neural network served over the Open Inference Protocol, called from unmodified
tritonclient: an MLP (inner product, ReLU, inner product, sigmoid) written with coremltools'
NeuralNetworkBuilder, a batch of rows in one request (the server stacks them along the
network's batch axis), compared with NumPy at rtol 1e-4 / atol 1e-5 (float32 kernels)."""

import contextlib
import io

import numpy as np
import pytest
import tritonclient.grpc as tc

CIN, HIDDEN, COUT = 16, 32, 5


def _mlp(root):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from coremltools.models import datatypes
        from coremltools.models.neural_network import NeuralNetworkBuilder
    rng = np.random.default_rng(40)
    W1 = rng.normal(size=(HIDDEN, CIN)).astype(np.float32) / 4
    b1 = rng.normal(size=(HIDDEN,)).astype(np.float32)
    W2 = rng.normal(size=(COUT, HIDDEN)).astype(np.float32) / 4
    b2 = rng.normal(size=(COUT,)).astype(np.float32)
    b = NeuralNetworkBuilder([("x", datatypes.Array(CIN))], [("y", datatypes.Array(COUT))])
    b.add_inner_product("fc1", W1, b1, CIN, HIDDEN, True, "x", "h")
    b.add_activation("relu", "RELU", "h", "hr")
    b.add_inner_product("fc2", W2, b2, HIDDEN, COUT, True, "hr", "z")
    b.add_activation("sig", "SIGMOID", "z", "y")
    folder = root / "mlp" / "1"
    folder.mkdir(parents=True)
    (folder / "model.mlmodel").write_bytes(b.spec.SerializeToString(deterministic=True))

    def reference(x):
        h = np.maximum(x @ W1.T.astype(np.float64) + b1, 0)
        return 1 / (1 + np.exp(-(h @ W2.T.astype(np.float64) + b2)))
    return reference


@pytest.fixture(scope="module")
def mlp_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("nn-repo")
    reference = _mlp(root)
    return root, reference


def test_mlp_batch_over_open_inference(start_server, mlp_server):
    root, reference = mlp_server
    server = start_server(root)
    client = tc.InferenceServerClient(server.address)
    try:
        meta = client.get_model_metadata("mlp", as_json=True)
        assert meta["inputs"][0]["shape"] == ["-1", str(CIN)]
        x = np.random.default_rng(41).normal(size=(7, CIN)).astype(np.float32)
        inp = tc.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("mlp", [inp], client_timeout=30).as_numpy("y")
        assert got.shape == (7, COUT)
        np.testing.assert_allclose(got, reference(x.astype(np.float64)), rtol=1e-4, atol=1e-5)
        # Rows one at a time give the same answers as the batch.
        one = tc.InferInput("x", [1, CIN], "FP32")
        one.set_data_from_numpy(x[3:4])
        np.testing.assert_allclose(client.infer("mlp", [one], client_timeout=30).as_numpy("y")[0], got[3], rtol=1e-5, atol=1e-6)
    finally:
        client.close()
