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


@pytest.mark.parametrize("threads", [None, "1", "2"])
def test_mlp_batch_over_open_inference(start_server, mlp_server, threads):
    """The same answers whatever --model-threads (the kernels split the work differently)."""
    root, reference = mlp_server
    server = start_server(root, *(["--model-threads", threads] if threads else []))
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


def test_negative_model_threads_is_refused(mlp_server):
    import os
    import subprocess
    from pathlib import Path
    cortado = os.environ.get("CORTADO_BIN") or str(Path(__file__).resolve().parents[2] / ".build" / "debug" / "cortado")
    root, _ = mlp_server
    done = subprocess.run(cortado.split() + ["serve", "--models", str(root), "--port", "0", "--http-port", "0", "--metrics-port=-1",
                                             "--model-threads=-1"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--model-threads must be ≥ 0" in done.stderr, done.stderr


# MARK: the dynamic batcher

def _infer_rows(address, rows, bad=()):
    """One ModelInfer call per row, all at once from their own threads and clients; a row
    whose index is in `bad` is sent with one feature too few. Returns outputs or exceptions."""
    import threading
    out = [None] * len(rows)
    start = threading.Barrier(len(rows))

    def call(i):
        client = tc.InferenceServerClient(address)
        try:
            x = rows[i:i + 1, :CIN - 1] if i in bad else rows[i:i + 1]
            inp = tc.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(np.ascontiguousarray(x))
            start.wait(30)
            out[i] = client.infer("mlp", [inp], client_timeout=60).as_numpy("y")[0]
        except Exception as e:  # noqa: BLE001  (the caller inspects it)
            out[i] = e
        finally:
            client.close()
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(rows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def test_dynamic_batcher_gives_the_unbatched_answers_in_fewer_executions(start_server, mlp_server):
    """32 concurrent one-row calls: with `--max-batch-size 8` and a 200 ms delay they run in
    batches (statistics: fewer executions than inferences, batch sizes adding up), and every
    answer equals the unbatched server's to rtol 1e-5 / atol 1e-6 (a batch is one GEMM, a
    row a GEMV: float32 sums in another order) and NumPy's to rtol 1e-4 / atol 1e-5."""
    root, reference = mlp_server
    x = np.random.default_rng(42).normal(size=(32, CIN)).astype(np.float32)
    plain = start_server(root)
    unbatched = _infer_rows(plain.address, x)
    batched_server = start_server(root, "--max-batch-size", "8", "--max-queue-delay-us", "200000")
    batched = _infer_rows(batched_server.address, x)
    for i in range(len(x)):
        assert not isinstance(unbatched[i], Exception), unbatched[i]
        assert not isinstance(batched[i], Exception), batched[i]
        np.testing.assert_allclose(batched[i], unbatched[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(batched[i], reference(x[i:i + 1].astype(np.float64))[0], rtol=1e-4, atol=1e-5)

    client = tc.InferenceServerClient(batched_server.address)
    try:
        config = client.get_model_config("mlp", as_json=True)["config"]
        assert config["dynamic_batching"]["preferred_batch_size"] == [8]
        assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "200000"
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
    finally:
        client.close()
    inferences, executions = int(stats["inference_count"]), int(stats["execution_count"])
    assert inferences == 32
    assert executions < inferences, stats
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert sum(size * count for size, count in sizes.items()) == inferences, sizes
    assert sum(sizes.values()) == executions and max(sizes) > 1 and max(sizes) <= 8, sizes
    assert int(stats["inference_stats"]["success"]["count"]) == 32
    # Without the batcher: one execution per call and no dynamic_batching in the config.
    client = tc.InferenceServerClient(plain.address)
    try:
        assert "dynamic_batching" not in client.get_model_config("mlp", as_json=True)["config"]
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
        assert stats["execution_count"] == stats["inference_count"] == "32"
    finally:
        client.close()


def test_a_bad_row_in_a_batch_fails_only_its_own_call(start_server, mlp_server):
    """Eight calls gathered into one batch, one of them with 15 features for a 16-feature input:
    that call gets INVALID_ARGUMENT naming the input, the other seven their answers (NumPy,
    rtol 1e-4 / atol 1e-5)."""
    root, reference = mlp_server
    server = start_server(root, "--max-batch-size", "8", "--max-queue-delay-us", "500000")
    x = np.random.default_rng(43).normal(size=(8, CIN)).astype(np.float32)
    got = _infer_rows(server.address, x, bad={5})
    assert isinstance(got[5], tc.InferenceServerException), got[5]
    assert got[5].status() == "StatusCode.INVALID_ARGUMENT" and "'x'" in got[5].message(), got[5]
    for i in (0, 1, 2, 3, 4, 6, 7):
        assert not isinstance(got[i], Exception), got[i]
        np.testing.assert_allclose(got[i], reference(x[i:i + 1].astype(np.float64))[0], rtol=1e-4, atol=1e-5)


# MARK: images over the Open Inference Protocol

IMG_H, IMG_W = 4, 5


def _image_models(root):
    """`rgbin`: an RGB image input (scale 1/2, blue bias 3) → LINEAR → multi-array [3, H, W];
    `rgbout`: a multi-array [3, H, W] → LINEAR → an RGB image output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from coremltools.models import datatypes
        from coremltools.models.neural_network import NeuralNetworkBuilder
        from coremltools.proto import FeatureTypes_pb2
    shape = (3, IMG_H, IMG_W)
    b = NeuralNetworkBuilder([("image", datatypes.Array(*shape))], [("y", datatypes.Array(*shape))])
    b.add_activation("identity", "LINEAR", "image", "y", params=[1.0, 0.0])
    b.set_pre_processing_parameters(image_input_names=["image"], image_scale=0.5, blue_bias=3.0)
    (root / "rgbin" / "1").mkdir(parents=True)
    (root / "rgbin" / "1" / "model.mlmodel").write_bytes(b.spec.SerializeToString(deterministic=True))
    b = NeuralNetworkBuilder([("x", datatypes.Array(*shape))], [("image", datatypes.Array(*shape))])
    b.add_activation("identity", "LINEAR", "x", "image", params=[1.0, 0.0])
    t = b.spec.description.output[0].type
    t.imageType.width, t.imageType.height = IMG_W, IMG_H
    t.imageType.colorSpace = FeatureTypes_pb2.ImageFeatureType.RGB
    (root / "rgbout" / "1").mkdir(parents=True)
    (root / "rgbout" / "1" / "model.mlmodel").write_bytes(b.spec.SerializeToString(deterministic=True))


def _preprocessed(pixels):
    """NumPy's view of the `rgbin` model: H×W×3 uint8 → 3×H×W, × 0.5, + 3 on blue."""
    y = pixels.astype(np.float64).transpose(2, 0, 1) * 0.5
    y[2] += 3.0
    return y


def test_images_as_uint8_pixels_and_as_png_bytes(start_server, tmp_path):
    """An image input takes UINT8 [batch, H, W, 3] pixels or BYTES [batch, 1] holding PNG
    files (Pillow writes them); both give NumPy's preprocessing exactly (atol 1e-5, float32).
    An image output comes back as UINT8 [batch, H, W, 3] (rounded, clamped to 0…255)."""
    from PIL import Image
    _image_models(tmp_path)
    server = start_server(tmp_path)
    client = tc.InferenceServerClient(server.address)
    rng = np.random.default_rng(44)
    pixels = rng.integers(0, 256, size=(2, IMG_H, IMG_W, 3), dtype=np.uint8)
    try:
        meta = client.get_model_metadata("rgbin", as_json=True)["inputs"][0]
        assert meta["datatype"] == "UINT8" and meta["shape"] == ["-1", str(IMG_H), str(IMG_W), "3"]
        inp = tc.InferInput("image", list(pixels.shape), "UINT8")
        inp.set_data_from_numpy(pixels)
        got = client.infer("rgbin", [inp], client_timeout=30).as_numpy("y")
        np.testing.assert_allclose(got, np.stack([_preprocessed(p) for p in pixels]), rtol=0, atol=1e-5)

        pngs = []
        for p in pixels:
            buf = io.BytesIO()
            Image.fromarray(p, "RGB").save(buf, format="PNG")
            pngs.append(buf.getvalue())
        inp = tc.InferInput("image", [2, 1], "BYTES")
        inp.set_data_from_numpy(np.array(pngs, dtype=np.object_).reshape(2, 1))
        got_png = client.infer("rgbin", [inp], client_timeout=30).as_numpy("y")
        np.testing.assert_allclose(got_png, got, rtol=0, atol=0)

        x = rng.uniform(-40, 300, size=(1, 3, IMG_H, IMG_W)).astype(np.float32)
        inp = tc.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("rgbout", [inp], client_timeout=30).as_numpy("image")
        assert out.dtype == np.uint8 and out.shape == (1, IMG_H, IMG_W, 3)
        expected = np.clip(np.floor(x[0].astype(np.float64) + 0.5), 0, 255).transpose(1, 2, 0)
        np.testing.assert_array_equal(out[0], expected.astype(np.uint8))

        for bad, dtype, words in ((np.array([[b"not an image"]], dtype=np.object_), "BYTES", "neither a PNG nor a JPEG"),
                                  (pixels[:, :, :, :2].copy(), "UINT8", "UINT8 [H, W, C]")):
            inp = tc.InferInput("image", list(bad.shape), dtype)
            inp.set_data_from_numpy(bad)
            with pytest.raises(tc.InferenceServerException) as e:
                client.infer("rgbin", [inp], client_timeout=30)
            assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "'image'" in e.value.message() and words in e.value.message(), e.value
    finally:
        client.close()
