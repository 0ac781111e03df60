"""`cortado encrypt` and loading encrypted models with a key (AES-256-GCM).

An encrypted .mlmodel or compiled network predicts byte for byte what the .mlmodel predicts
(itself checked against NumPy in test_compile), with the key from --key-file or
CORTADO_MODEL_KEY (hex or base64), in predict, inspect and report. A wrong key, a missing key,
altered bytes and a malformed key are errors naming the model (or the key's source). The
server serves encrypted and compiled models found by their repository file names, and keeps
serving when one of them has the wrong key (tritonclient)."""

import base64
import json
import os
import stat

import numpy as np
import pytest

from nnharness import rng, save
from test_compile import compile_model, cortado, mlp_reference, mlp_spec, predict_text, write_rows
from test_weights import quantized


def new_key(path):
    out = cortado("encrypt", "--generate-key", path)
    assert out.returncode == 0, out.stderr
    return path


def encrypt(src, dst, *args, env=None):
    out = cortado("encrypt", src, dst, *args, env=env)
    assert out.returncode == 0, out.stderr
    assert dst.read_bytes()[:8] == b"CORTADOE"
    return dst


@pytest.fixture
def models(tmp_path):
    spec = quantized(mlp_spec(), 16, "linear")
    plain = save(spec, tmp_path, "mlp")
    compiled = compile_model(plain, tmp_path / "mlp.cortado")
    xs = [rng(200 + i).normal(size=(64,)) for i in range(5)]
    rows = write_rows(tmp_path / "rows.jsonl", [{"x": x} for x in xs])
    key = new_key(tmp_path / "model.key")
    return dict(spec=spec, plain=plain, compiled=compiled, rows=rows, key=key, xs=xs, want=predict_text(plain, rows))


def test_generated_key_file(tmp_path):
    key = new_key(tmp_path / "k")
    text = key.read_text().strip()
    assert len(text) == 64 and all(c in "0123456789abcdef" for c in text)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    again = cortado("encrypt", "--generate-key", key)
    assert again.returncode != 0 and "cannot create the key file" in again.stderr
    assert key.read_text().strip() == text


@pytest.mark.parametrize("inner", ["plain", "compiled"])
def test_encrypted_model_predicts_the_same_bits(models, inner, tmp_path):
    enc = encrypt(models[inner], tmp_path / "mlp.cortado-enc", "--key-file", models["key"])
    data = enc.read_bytes()
    # Not readable at rest: neither the layer names nor the weight bytes appear.
    assert b"fc1" not in data and models[inner].read_bytes()[200:264] not in data
    assert predict_text(enc, models["rows"], "--key-file", models["key"]) == models["want"]
    for x, line in zip(models["xs"], models["want"].splitlines()):
        np.testing.assert_allclose(json.loads(line)["y"]["data"], mlp_reference(models["spec"], x), rtol=1e-4, atol=1e-4)
    # The key from the environment, as hex and as base64.
    hex_key = models["key"].read_text().strip()
    b64_key = base64.b64encode(bytes.fromhex(hex_key)).decode()
    for text in (hex_key, b64_key):
        assert predict_text(enc, models["rows"], env={"CORTADO_MODEL_KEY": text}) == models["want"]
    info = cortado("inspect", enc, "--key-file", models["key"])
    assert info.returncode == 0, info.stderr
    inside = "Cortado compiled model" if inner == "compiled" else "Core ML specification"
    assert f"Form:          encrypted model (a {inside}" in info.stdout and "Runs:          yes" in info.stdout, info.stdout
    report = cortado("report", enc, "--key-file", models["key"], "--input", models["rows"], "--iterations", "3", "--warmup", "0", "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["loadSeconds"] > 0


def test_compile_an_encrypted_model_with_its_key(models, tmp_path):
    enc = encrypt(models["plain"], tmp_path / "mlp.cortado-enc", "--key-file", models["key"])
    compiled = compile_model(enc, tmp_path / "again.cortado", "--key-file", models["key"])
    assert predict_text(compiled, models["rows"]) == models["want"]


def test_wrong_missing_and_malformed_keys_are_named(models, tmp_path):
    enc = encrypt(models["compiled"], tmp_path / "secret.cortado-enc", env={"CORTADO_MODEL_KEY": models["key"].read_text()})
    other = new_key(tmp_path / "other.key")
    out = cortado("predict", enc, "--input", models["rows"], "--key-file", other)
    assert out.returncode != 0 and "model 'secret'" in out.stderr and "wrong key" in out.stderr, out.stderr
    out = cortado("predict", enc, "--input", models["rows"])
    assert out.returncode != 0 and "model 'secret'" in out.stderr and "no key was given" in out.stderr, out.stderr
    out = cortado("inspect", enc)
    assert out.returncode != 0 and "no key was given" in out.stderr, out.stderr
    (tmp_path / "short.key").write_text("abcd\n")
    out = cortado("predict", enc, "--input", models["rows"], "--key-file", tmp_path / "short.key")
    assert out.returncode != 0 and "short.key" in out.stderr and "64 hex digits" in out.stderr, out.stderr
    out = cortado("predict", enc, "--input", models["rows"], env={"CORTADO_MODEL_KEY": "not a key"})
    assert out.returncode != 0 and "CORTADO_MODEL_KEY" in out.stderr, out.stderr
    out = cortado("encrypt", models["plain"], tmp_path / "x.cortado-enc")
    assert out.returncode != 0 and "no key" in out.stderr


def test_tampered_ciphertext_fails_authentication(models, tmp_path):
    enc = encrypt(models["compiled"], tmp_path / "secret.cortado-enc", "--key-file", models["key"])
    data = enc.read_bytes()
    for offset in (30, len(data) // 2, len(data) - 1):  # nonce, ciphertext, tag
        bad = bytearray(data)
        bad[offset] ^= 0x04
        path = tmp_path / "tampered.cortado-enc"
        path.write_bytes(bytes(bad))
        out = cortado("predict", path, "--input", models["rows"], "--key-file", models["key"])
        assert out.returncode != 0 and "model 'tampered'" in out.stderr and "authentication failed" in out.stderr, out.stderr
    path.write_bytes(data[:40])
    out = cortado("predict", path, "--input", models["rows"], "--key-file", models["key"])
    assert out.returncode != 0 and "truncated" in out.stderr, out.stderr


def test_serve_encrypted_and_compiled_models(models, start_server, tmp_path):
    import tritonclient.grpc as tc
    repo = tmp_path / "repo"
    for name, source, fname in [("secret", "compiled", "model.cortado-enc"), ("fast", "compiled", "model.cortado"),
                                ("plainenc", "plain", "model.cortado-enc"), ("wrongkey", "compiled", "model.cortado-enc")]:
        folder = repo / name / "1"
        folder.mkdir(parents=True)
        if fname.endswith("-enc"):
            key = models["key"] if name != "wrongkey" else new_key(tmp_path / "wrong.key")
            encrypt(models[source], folder / fname, "--key-file", key)
        else:
            (folder / fname).write_bytes(models[source].read_bytes())
    # A bare compiled file in the repository's folder, named only by its extension.
    (repo / "bare.cortado").write_bytes(models["compiled"].read_bytes())
    server = start_server(repo, "--key-file", models["key"])
    client = tc.InferenceServerClient(server.address)
    try:
        x = np.stack(models["xs"]).astype(np.float32)
        want = np.stack([mlp_reference(models["spec"], v.astype(np.float32).astype(np.float64)) for v in models["xs"]])
        results = {}
        for name in ("secret", "fast", "plainenc", "bare"):
            inp = tc.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            results[name] = client.infer(name, [inp], client_timeout=30).as_numpy("y")
            np.testing.assert_allclose(results[name], want, rtol=1e-4, atol=1e-4)
        for name in ("fast", "plainenc", "bare"):
            np.testing.assert_array_equal(results[name], results["secret"])
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["wrongkey"]["state"] == "UNAVAILABLE" and "wrong key" in index["wrongkey"]["reason"], index["wrongkey"]
        assert index["secret"]["state"] == "READY"
        with pytest.raises(tc.InferenceServerException) as failed:
            inp = tc.InferInput("x", [1, 64], "FP32")
            inp.set_data_from_numpy(x[:1])
            client.infer("wrongkey", [inp], client_timeout=30)
        assert "wrongkey" in str(failed.value) and "wrong key" in str(failed.value)
        assert client.is_server_live()
    finally:
        client.close()


def test_native_load_from_bytes_in_every_form(models, start_server, tmp_path):
    """cortado.v1.Predictor/Load with `model_data` (grpcio): a spec, a compiled model and an
    encrypted one load without a file and predict what the .mlmodel predicts; bytes that are not
    a model, or sealed with another key, fail that Load with a message naming the model, and the
    server goes on serving."""
    import grpc
    from test_predictor import P, decode, encode, pb
    repo = tmp_path / "repo"
    repo.mkdir()
    server = start_server(repo, "--key-file", models["key"], "--model-control", "explicit")
    sealed = encrypt(models["compiled"], tmp_path / "m.cortado-enc", "--key-file", models["key"]).read_bytes()
    other = encrypt(models["compiled"], tmp_path / "o.cortado-enc", "--key-file", new_key(tmp_path / "o.key")).read_bytes()
    x = models["xs"][0].astype(np.float32)
    # One row alone, as the server runs it (a batch sums in another order: last-bit differences).
    want = np.asarray(json.loads(predict_text(models["plain"], models["rows"], "--batch", "1").splitlines()[0])["y"]["data"], dtype=np.float32)
    with server.channel() as channel:
        stub = P.predictor_pb2_grpc.PredictorStub(channel)
        for name, data in (("spec", models["plain"].read_bytes()), ("compiled", models["compiled"].read_bytes()), ("sealed", sealed)):
            reply = stub.Load(pb.LoadRequest(model=name, model_data=data), timeout=60)
            assert reply.status.state == pb.READY and reply.status.name == name and reply.status.version == "1"
            out = stub.Predict(pb.PredictRequest(model=name, inputs=[pb.Feature(name="x", value=encode(x))]), timeout=30)
            y = {f.name: decode(f.value) for f in out.outputs}["y"]
            np.testing.assert_array_equal(np.ravel(y), want)
        for name, data, text in (("junk", b"\xff\xff\xff not a model", "not a Core ML model"), ("other", other, "wrong key")):
            with pytest.raises(grpc.RpcError) as failed:
                stub.Load(pb.LoadRequest(model=name, model_data=data), timeout=60)
            assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert f"model '{name}'" in failed.value.details() and text in failed.value.details(), failed.value.details()
        listed = {m.name: m for m in stub.List(pb.ListRequest(), timeout=10).models}
        assert listed["sealed"].state == pb.READY
        out = stub.Predict(pb.PredictRequest(model="sealed", inputs=[pb.Feature(name="x", value=encode(x))]), timeout=30)
        assert len(out.outputs) == 1
