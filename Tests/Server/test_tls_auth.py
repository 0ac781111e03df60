"""TLS, bearer tokens and readiness (issue #20, items 3 and 7).

- TLS (`--tls-cert`, `--tls-key`, `--tls-client-ca`): grpcio and tritonclient call through
  `grpc.ssl_channel_credentials`; plaintext clients fail; ALPN must select h2; mutual TLS
  refuses a client without a certificate (or with one from another CA); the metrics port
  serves HTTPS; SIGHUP reloads the certificate (a broken one is refused and the old stays).
- Tokens (`--auth-tokens`): no token or an unknown one is UNAUTHENTICATED, a token without
  the method's scope PERMISSION_DENIED, checked before the request is decoded or a model looked
  up; health and ServerLive/Ready stay open; /metrics needs the `metrics` scope.
- Readiness (`--require-models`): /readyz, ServerReady and the overall health status follow
  the required models.

Certificates are made here with the `openssl` command line (scripts/setup.sh installs it): a CA,
a server certificate for localhost / 127.0.0.1, a client certificate, and a second CA with its
own server and client certificates for the negative cases and the reload.
"""
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as tc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

# This folder's conftest by its path: under one pytest run of several test folders the bare
# name `conftest` may be another folder's.
import importlib.util as _importlib_util
_spec = _importlib_util.spec_from_file_location("server_conftest_tls", Path(__file__).with_name("conftest.py"))
conftest = _importlib_util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)
import test_open_inference as oip
from test_predictor import P, as_dict, check_outputs, expect_error, raw_call, row_features

pb = P.predictor_pb2
WAIT_SECONDS = 20       # bounded waits (server start, a reload to show in the log)

TOKENS = {
    "infer": "infer-token-0123456789abcdef",
    "admin": "admin-token-0123456789abcdef",
    "metrics": "metrics-token-0123456789abcdef",
    "all": "all-scopes-token-0123456789abcdef",
}
TOKEN_FILE = f"""# Test tokens: TOKEN SCOPE[,SCOPE...]
{TOKENS['infer']} infer
{TOKENS['admin']} admin   # load, unload, repository, shared memory

{TOKENS['metrics']} metrics
{TOKENS['all']} infer,admin,metrics
"""


def bearer(scope):
    return (("authorization", f"Bearer {TOKENS[scope]}"),)


# ----------------------------------------------------------------------------- certificates

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _key(folder, name):
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", f"{name}.key", cwd=folder)


def make_ca(folder, name):
    _key(folder, name)
    _openssl("req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    return folder / f"{name}.pem"


def make_cert(folder, name, ca, usage):
    """A certificate `name` signed by CA `ca`, for `usage` serverAuth (localhost, 127.0.0.1) or clientAuth."""
    _key(folder, name)
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=folder)
    ext = folder / f"{name}.ext"
    lines = [f"extendedKeyUsage={usage}", "basicConstraints=CA:FALSE"]
    if usage == "serverAuth":
        lines.append("subjectAltName=DNS:localhost,IP:127.0.0.1")
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", ext.name, cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line is not installed (scripts/setup.sh installs it)")
    folder = tmp_path_factory.mktemp("pki")
    ns = type("PKI", (), {})()
    ns.ca = make_ca(folder, "ca1")
    ns.server_cert, ns.server_key = make_cert(folder, "server1", "ca1", "serverAuth")
    ns.client_cert, ns.client_key = make_cert(folder, "client1", "ca1", "clientAuth")
    ns.ca2 = make_ca(folder, "ca2")
    ns.server2_cert, ns.server2_key = make_cert(folder, "server2", "ca2", "serverAuth")
    ns.client2_cert, ns.client2_key = make_cert(folder, "client2", "ca2", "clientAuth")
    return ns


# ----------------------------------------------------------------------------- servers and clients

TLS_OPTIONS = conftest.CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", "localhost")]


def credentials(ca, cert=None, key=None):
    return grpc.ssl_channel_credentials(root_certificates=Path(ca).read_bytes(),
                                        private_key=Path(key).read_bytes() if key else None,
                                        certificate_chain=Path(cert).read_bytes() if cert else None)


def secure_channel(server, ca, cert=None, key=None):
    return grpc.secure_channel(server.address, credentials(ca, cert, key), options=TLS_OPTIONS)


def https_context(ca):
    context = ssl.create_default_context(cafile=str(ca))
    return context


def http_get(url, ca=None, headers=None):
    """(status, headers, text); HTTP errors are answers too."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=https_context(ca) if ca else None) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


class SecureServer(conftest.Server):
    """A `cortado serve` that may speak TLS and need tokens: started when its metrics port
    answers /healthz (over HTTPS when `ca`), which works whatever the gRPC side asks of clients
    and whatever the readiness."""

    def __init__(self, models, args, log_dir, ca=None):
        super().__init__(models, args, log_dir)
        self.ca = ca

    @property
    def metrics_url(self):
        return f"{'https' if self.ca else 'http'}://localhost:{self.metrics_port}"

    def _wait_serving(self):
        deadline = time.monotonic() + conftest.STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if http_get(self.metrics_url + "/healthz", self.ca)[0] == 200:
                    return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.05)
        return False

    def wait_log(self, text, after=0):
        """Waits (bounded) until `text` appears in the log past offset `after`."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            log = self.log_path.read_bytes().decode(errors="replace")
            if text in log[after:]:
                return log
            time.sleep(0.05)
        pytest.fail(f"{text!r} did not appear in the server log\n{self.stderr()}")

    def log_size(self):
        return len(self.log_path.read_bytes())


@pytest.fixture
def start_secure(tmp_path):
    started = []

    def start(models, *args, ca=None):
        server = SecureServer(models, args, tmp_path, ca=ca).start()
        started.append(server)
        return server

    yield start
    failures = []
    for server in started:
        if server.proc.returncode is None:
            rc = server.stop()
            if rc != 0:
                failures.append(f"exit status {rc} after SIGTERM\n{server.stderr()}")
    assert not failures, "\n".join(failures)


def tls_args(pki, mutual=False):
    args = ["--tls-cert", pki.server_cert, "--tls-key", pki.server_key]
    return args + (["--tls-client-ca", pki.ca] if mutual else [])


def predict_ok(channel, repo, metadata=None):
    case = repo.cases["logreg"]
    stub = P.predictor_pb2_grpc.PredictorStub(channel)
    reply = stub.Predict(pb.PredictRequest(model="logreg", inputs=row_features(case, 0)), timeout=10, metadata=metadata)
    check_outputs(case, 0, as_dict(reply.outputs))


def health(channel, service=""):
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def alpn_handshake(port, ca, protocols):
    """Opens a TLS connection offering `protocols` by ALPN; returns the selected one, or
    raises what the handshake raised."""
    context = https_context(ca)
    if protocols is not None:
        context.set_alpn_protocols(protocols)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            selected = tls.selected_alpn_protocol()
            # Without h2 the server ends the connection right after the handshake.
            tls.settimeout(5)
            try:
                data = tls.recv(64)
            except (ssl.SSLError, ConnectionError, socket.timeout):
                data = None
            return selected, data


def peer_certificate(port, ca):
    context = https_context(ca)
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def der(pem_path):
    return ssl.PEM_cert_to_DER_cert(Path(pem_path).read_text())


# ----------------------------------------------------------------------------- TLS

def test_tls_serves_grpcio_and_tritonclient_and_refuses_plaintext(repo, pki, start_secure):
    server = start_secure(repo.path, *tls_args(pki), ca=pki.ca)
    with secure_channel(server, pki.ca) as ch:
        predict_ok(ch, repo)
        assert health(ch) == health_pb2.HealthCheckResponse.SERVING
    client = tc.InferenceServerClient(server.address, ssl=True, root_certificates=str(pki.ca), channel_args=TLS_OPTIONS)
    try:
        assert client.is_server_ready()
        oip.good_infer(client, repo)
    finally:
        client.close()
    # A plaintext (h2c) client gets no answer from a TLS port.
    with grpc.insecure_channel(server.address, options=conftest.CHANNEL_OPTIONS) as ch:
        expect_error(lambda: P.predictor_pb2_grpc.PredictorStub(ch).List(pb.ListRequest(), timeout=5), grpc.StatusCode.UNAVAILABLE)
    # A client trusting another CA refuses the server.
    with secure_channel(server, pki.ca2) as ch:
        expect_error(lambda: P.predictor_pb2_grpc.PredictorStub(ch).List(pb.ListRequest(), timeout=5), grpc.StatusCode.UNAVAILABLE)
    # The server goes on serving.
    with secure_channel(server, pki.ca) as ch:
        predict_ok(ch, repo)
    assert "TLS on" in server.stderr()


def test_large_messages_over_tls(repo, pki, start_secure):
    """PredictBatch calls of about half a megabyte each way, four in flight on one connection:
    many TLS records, split across socket reads, in both directions."""
    server = start_secure(repo.path, *tls_args(pki), ca=pki.ca)
    case = repo.cases["scaler"]
    n = len(case.inputs["input"])
    rows = 6000
    request = pb.PredictBatchRequest(model="scaler", rows=[pb.Row(features=row_features(case, i % n)) for i in range(rows)])
    assert request.ByteSize() > 300_000
    with secure_channel(server, pki.ca) as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        futures = [stub.PredictBatch.future(request, timeout=60) for _ in range(4)]
        for future in futures:
            reply = future.result()
            assert len(reply.rows) == rows
            for i in (0, 1, rows - 1):
                check_outputs(case, i % n, as_dict(reply.rows[i].features))


def test_alpn_must_select_h2(repo, pki, start_secure):
    server = start_secure(repo.path, *tls_args(pki), ca=pki.ca)
    selected, data = alpn_handshake(server.port, pki.ca, ["h2", "http/1.1"])
    assert selected == "h2"
    assert data, "the server sends its SETTINGS once the handshake is done"
    # Offering only HTTP/1.1: the handshake fails (no_application_protocol).
    with pytest.raises(ssl.SSLError) as info:
        alpn_handshake(server.port, pki.ca, ["http/1.1"])
    assert "NO_APPLICATION_PROTOCOL" in str(info.value).upper() or "ALERT" in str(info.value).upper(), info.value
    # Offering no ALPN at all: the handshake completes but the server closes at once, sending nothing.
    try:
        selected, data = alpn_handshake(server.port, pki.ca, None)
        assert selected is None and not data
    except (ssl.SSLError, ConnectionError):
        pass
    with secure_channel(server, pki.ca) as ch:
        predict_ok(ch, repo)


def test_metrics_port_serves_https(repo, pki, start_secure):
    server = start_secure(repo.path, *tls_args(pki, mutual=True), ca=pki.ca)
    # No client certificate needed here (probes cannot present one), but the server's is checked.
    status, _, text = http_get(server.metrics_url + "/metrics", pki.ca)
    assert status == 200 and "cortado_requests_total" in text
    assert http_get(server.metrics_url + "/readyz", pki.ca)[:1] == (200,)
    # Plain HTTP to the metrics port gets no HTTP answer.
    with pytest.raises((urllib.error.URLError, ConnectionError, http_client_errors())):
        http_get(f"http://127.0.0.1:{server.metrics_port}/healthz")


def http_client_errors():
    import http.client
    return http.client.HTTPException


def test_mutual_tls_requires_a_client_certificate(repo, pki, start_secure):
    server = start_secure(repo.path, *tls_args(pki, mutual=True), ca=pki.ca)
    # With a certificate from the client CA: served (grpcio and tritonclient).
    with secure_channel(server, pki.ca, pki.client_cert, pki.client_key) as ch:
        predict_ok(ch, repo)
    client = tc.InferenceServerClient(server.address, ssl=True, root_certificates=str(pki.ca), private_key=str(pki.client_key),
                                      certificate_chain=str(pki.client_cert), channel_args=TLS_OPTIONS)
    try:
        oip.good_infer(client, repo)
    finally:
        client.close()
    # Without one, or with one from another CA: refused during the handshake.
    for cert, key in [(None, None), (pki.client2_cert, pki.client2_key)]:
        with secure_channel(server, pki.ca, cert, key) as ch:
            expect_error(lambda: P.predictor_pb2_grpc.PredictorStub(ch).List(pb.ListRequest(), timeout=5), grpc.StatusCode.UNAVAILABLE)
    client = tc.InferenceServerClient(server.address, ssl=True, root_certificates=str(pki.ca), channel_args=TLS_OPTIONS)
    try:
        with pytest.raises(InferenceServerException) as info:
            client.get_server_metadata(client_timeout=5)
        assert "UNAVAILABLE" in info.value.status()
    finally:
        client.close()
    with secure_channel(server, pki.ca, pki.client_cert, pki.client_key) as ch:
        predict_ok(ch, repo)
    assert "TLS" in server.stderr()


def test_sighup_reloads_the_certificate(repo, pki, start_secure, tmp_path):
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    server = start_secure(repo.path, "--tls-cert", cert, "--tls-key", key, ca=pki.ca)
    assert peer_certificate(server.port, pki.ca) == der(pki.server_cert)
    old = secure_channel(server, pki.ca)
    predict_ok(old, repo)

    # A new certificate from another CA: after SIGHUP new connections get it.
    shutil.copy(pki.server2_cert, cert)
    shutil.copy(pki.server2_key, key)
    mark = server.log_size()
    server.proc.send_signal(signal.SIGHUP)
    server.wait_log("TLS certificate reloaded", mark)
    assert peer_certificate(server.port, pki.ca2) == der(pki.server2_cert)
    with secure_channel(server, pki.ca2) as ch:
        predict_ok(ch, repo)
    with secure_channel(server, pki.ca) as ch:
        expect_error(lambda: P.predictor_pb2_grpc.PredictorStub(ch).List(pb.ListRequest(), timeout=5), grpc.StatusCode.UNAVAILABLE)
    # A connection opened before the reload goes on with the old certificate.
    predict_ok(old, repo)
    old.close()
    # The metrics port takes the new certificate too.
    status, _, _ = http_get(server.metrics_url + "/healthz", pki.ca2)
    assert status == 200

    # A broken reload (a key that does not match) keeps the certificate in use, and says why.
    shutil.copy(pki.server_key, key)
    mark = server.log_size()
    server.proc.send_signal(signal.SIGHUP)
    log = server.wait_log("TLS reload failed", mark)
    assert "does not match" in log[mark:], log[mark:]
    assert peer_certificate(server.port, pki.ca2) == der(pki.server2_cert)
    with secure_channel(server, pki.ca2) as ch:
        predict_ok(ch, repo)
    assert server.proc.poll() is None


def test_bad_tls_files_stop_the_start(repo, pki, tmp_path):
    for args, words in [(["--tls-cert", pki.server_cert], "--tls-key"),
                        (["--tls-cert", tmp_path / "missing.pem", "--tls-key", pki.server_key], "missing.pem"),
                        (["--tls-cert", pki.server_cert, "--tls-key", pki.client_key], "does not match"),
                        (["--tls-client-ca", pki.ca], "--tls-cert")]:
        done = subprocess.run(conftest.CORTADO.split() + ["serve", "--models", str(repo.path), "--port", "0", "--metrics-port=-1",
                                                           *map(str, args)], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, done.stderr
        assert words in done.stderr, done.stderr


# ----------------------------------------------------------------------------- tokens

@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "tokens.txt"
    path.write_text(TOKEN_FILE)
    return path


def test_tokens_and_scopes_grpcio(repo, token_file, start_secure):
    server = start_secure(repo.path, "--auth-tokens", token_file, "--model-control", "explicit")
    with server.channel() as ch:
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        case = repo.cases["logreg"]
        request = pb.PredictRequest(model="logreg", inputs=row_features(case, 0))
        # No token, an unknown token, another scheme: UNAUTHENTICATED.
        for metadata in [None, (("authorization", "Bearer not-a-known-token-at-all"),),
                         (("authorization", f"Basic {TOKENS['infer']}"),), (("authorization", "Bearer"),)]:
            err = expect_error(lambda: stub.Predict(request, timeout=10, metadata=metadata), grpc.StatusCode.UNAUTHENTICATED)
            assert TOKENS["infer"] not in err.details()
        # The scheme is case-insensitive.
        predict_ok(ch, repo, (("authorization", f"bearer {TOKENS['infer']}"),))
        # Checked before the message is decoded and before a model is looked up.
        expect_error(lambda: raw_call(ch, "/cortado.v1.Predictor/Predict", b"\xff\xff\xff"), grpc.StatusCode.UNAUTHENTICATED)
        expect_error(lambda: stub.Predict(pb.PredictRequest(model="nosuchmodel"), timeout=10), grpc.StatusCode.UNAUTHENTICATED)
        expect_error(lambda: raw_call(ch, "/cortado.v1.Predictor/Predict", b"\xff\xff\xff", metadata=bearer("infer")),
                     grpc.StatusCode.INVALID_ARGUMENT)
        expect_error(lambda: stub.Predict(pb.PredictRequest(model="nosuchmodel"), timeout=10, metadata=bearer("infer")),
                     grpc.StatusCode.NOT_FOUND)
        # infer: predictions and reads; not load/unload.
        predict_ok(ch, repo, bearer("infer"))
        assert {m.name for m in stub.List(pb.ListRequest(), timeout=10, metadata=bearer("infer")).models} >= {"logreg"}
        stub.Describe(pb.DescribeRequest(model="logreg"), timeout=10, metadata=bearer("infer"))
        expect_error(lambda: stub.Load(pb.LoadRequest(model="scaler"), timeout=30, metadata=bearer("infer")),
                     grpc.StatusCode.PERMISSION_DENIED, "'admin' scope")
        expect_error(lambda: stub.Unload(pb.UnloadRequest(model="scaler"), timeout=30, metadata=bearer("metrics")),
                     grpc.StatusCode.PERMISSION_DENIED, "'admin' scope")
        # Updates and variant deletion are admin's; listing variants is a read.
        expect_error(lambda: list(stub.Update(pb.UpdateRequest(model="scaler", variant="v"), timeout=30, metadata=bearer("infer"))),
                     grpc.StatusCode.PERMISSION_DENIED, "'admin' scope")
        expect_error(lambda: stub.DeleteVariant(pb.DeleteVariantRequest(model="scaler", variant="v"), timeout=30,
                                                metadata=bearer("infer")), grpc.StatusCode.PERMISSION_DENIED, "'admin' scope")
        assert not stub.ListVariants(pb.ListVariantsRequest(), timeout=10, metadata=bearer("infer")).variants
        # admin: load and unload, not predictions.
        stub.Load(pb.LoadRequest(model="scaler"), timeout=30, metadata=bearer("admin"))
        expect_error(lambda: stub.Predict(request, timeout=10, metadata=bearer("admin")), grpc.StatusCode.PERMISSION_DENIED, "'infer' scope")
        expect_error(lambda: stub.Predict(request, timeout=10, metadata=bearer("metrics")), grpc.StatusCode.PERMISSION_DENIED, "'infer' scope")
        # A token with every scope does everything.
        predict_ok(ch, repo, bearer("all"))
        stub.Unload(pb.UnloadRequest(model="scaler"), timeout=30, metadata=bearer("all"))
        stub.Load(pb.LoadRequest(model="scaler"), timeout=30, metadata=bearer("all"))
        # Health stays open for probes.
        assert health(ch) == health_pb2.HealthCheckResponse.SERVING
    # Refusals are answered quickly and leave nothing running: the server still serves.
    assert server.proc.poll() is None


def test_tokens_guard_metrics_but_not_probes(repo, token_file, start_secure):
    server = start_secure(repo.path, "--auth-tokens", token_file)
    url = server.metrics_url
    status, headers, text = http_get(url + "/metrics")
    assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer"), (status, text)
    assert http_get(url + "/metrics", headers={"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
    status, _, text = http_get(url + "/metrics", headers={"Authorization": f"Bearer {TOKENS['infer']}"})
    assert status == 403 and "'metrics' scope" in text
    status, _, text = http_get(url + "/metrics", headers={"Authorization": f"Bearer {TOKENS['metrics']}"})
    assert status == 200 and "cortado_requests_total" in text
    assert http_get(url + "/healthz")[0] == 200
    assert http_get(url + "/readyz")[0] == 200


def test_tls_with_tokens_tritonclient(repo, pki, token_file, start_secure):
    server = start_secure(repo.path, *tls_args(pki), "--auth-tokens", token_file, "--allow-shared-memory", ca=pki.ca)
    client = tc.InferenceServerClient(server.address, ssl=True, root_certificates=str(pki.ca), channel_args=TLS_OPTIONS)
    infer = {"authorization": f"Bearer {TOKENS['infer']}"}
    admin = {"authorization": f"Bearer {TOKENS['admin']}"}
    case = repo.cases["logreg"]
    try:
        # Probes are open.
        assert client.is_server_live() and client.is_server_ready()
        # infer scope.
        oip.check(case, [0, 1], client.infer("logreg", oip.tensors(case, [0, 1]), headers=infer, client_timeout=10))
        assert client.get_model_metadata("logreg", headers=infer).name == "logreg"
        client.get_model_config("logreg", headers=infer)
        client.get_inference_statistics("logreg", headers=infer)
        assert client.is_model_ready("logreg", headers=infer)
        client.get_server_metadata(headers=infer)
        # Without a token or with the wrong scope.
        oip.expect_error(lambda: client.infer("logreg", oip.tensors(case, [0]), client_timeout=10), "UNAUTHENTICATED")
        oip.expect_error(lambda: client.get_model_metadata("logreg"), "UNAUTHENTICATED")
        oip.expect_error(lambda: client.infer("logreg", oip.tensors(case, [0]), headers=admin, client_timeout=10),
                         "PERMISSION_DENIED", "'infer' scope")
        oip.expect_error(lambda: client.get_model_repository_index(headers=infer), "PERMISSION_DENIED", "'admin' scope")
        oip.expect_error(lambda: client.load_model("logreg", headers=infer), "PERMISSION_DENIED", "'admin' scope")
        oip.expect_error(lambda: client.get_system_shared_memory_status(headers=infer), "PERMISSION_DENIED", "'admin' scope")
        oip.expect_error(lambda: client.register_system_shared_memory("r", "/cortado_x", 64, headers=infer),
                         "PERMISSION_DENIED", "'admin' scope")
        # admin scope.
        assert client.get_model_repository_index(headers=admin, as_json=True)["models"]
        client.get_system_shared_memory_status(headers=admin)
        # A stream: every message needs the token too (the stream is refused at once without one).
        results = []
        client.start_stream(callback=lambda result, error: results.append((result, error)))
        try:
            client.async_stream_infer("logreg", oip.tensors(case, [0]))
        except InferenceServerException:
            pass  # the stream was refused from its headers before this message left
        deadline = time.monotonic() + WAIT_SECONDS
        while not results and time.monotonic() < deadline:
            time.sleep(0.02)
        client.stop_stream()
        assert results and results[0][1] is not None and "UNAUTHENTICATED" in str(results[0][1].status()), results
        results.clear()
        client.start_stream(callback=lambda result, error: results.append((result, error)), headers=infer)
        client.async_stream_infer("logreg", oip.tensors(case, [0, 1]))
        deadline = time.monotonic() + WAIT_SECONDS
        while not results and time.monotonic() < deadline:
            time.sleep(0.02)
        client.stop_stream()
        assert results and results[0][1] is None, results
        oip.check(case, [0, 1], results[0][0])
    finally:
        client.close()


def test_sighup_reloads_tokens(repo, token_file, start_secure):
    server = start_secure(repo.path, "--auth-tokens", token_file)
    fresh = "fresh-token-0123456789abcdef"
    with server.channel() as ch:
        predict_ok(ch, repo, bearer("infer"))
        token_file.write_text(f"{fresh} infer\n")
        mark = server.log_size()
        server.proc.send_signal(signal.SIGHUP)
        server.wait_log("tokens reloaded", mark)
        predict_ok(ch, repo, (("authorization", f"Bearer {fresh}"),))
        stub = P.predictor_pb2_grpc.PredictorStub(ch)
        expect_error(lambda: stub.List(pb.ListRequest(), timeout=10, metadata=bearer("infer")), grpc.StatusCode.UNAUTHENTICATED)
        # A file that does not parse keeps the tokens in use.
        token_file.write_text(f"{fresh} infer,bogus\n")
        mark = server.log_size()
        server.proc.send_signal(signal.SIGHUP)
        log = server.wait_log("token reload failed", mark)
        assert "bogus" in log[mark:]
        predict_ok(ch, repo, (("authorization", f"Bearer {fresh}"),))


def test_bad_token_files_stop_the_start(repo, tmp_path):
    for text, words in [("short infer\n", "16 characters"), ("a-long-enough-token-123 infer,root\n", "unknown scope 'root'"),
                        ("# nothing\n", "no token"), ("a-long-enough-token-123\n", "line 1")]:
        path = tmp_path / "tokens.txt"
        path.write_text(text)
        done = subprocess.run(conftest.CORTADO.split() + ["serve", "--models", str(repo.path), "--port", "0", "--metrics-port=-1",
                                                           "--auth-tokens", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and words in done.stderr, done.stderr


# ----------------------------------------------------------------------------- readiness

def test_required_models_decide_readiness(repo, copy_repo, start_secure):
    root = copy_repo()
    broken = root / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "model.mlmodel").write_bytes(b"not a model")
    server = start_secure(root, "--require-models", "logreg,broken", "--model-control", "explicit")
    client = tc.InferenceServerClient(server.address)
    try:
        status, _, text = http_get(server.metrics_url + "/readyz")
        assert status == 503 and "broken" in text, text
        assert client.is_server_live() and not client.is_server_ready()
        with server.channel() as ch:
            assert health(ch) == health_pb2.HealthCheckResponse.NOT_SERVING
            # The services and the loaded models still serve: only readiness says "not yet".
            assert health(ch, "cortado.v1.Predictor") == health_pb2.HealthCheckResponse.SERVING
            assert health(ch, "logreg") == health_pb2.HealthCheckResponse.SERVING
            predict_ok(ch, repo)
            # The model fixed and loaded: ready.
            shutil.copy(root / "scaler" / "1" / "model.mlmodel", broken / "model.mlmodel")
            client.load_model("broken")
            assert client.is_server_ready()
            assert http_get(server.metrics_url + "/readyz")[0] == 200
            assert health(ch) == health_pb2.HealthCheckResponse.SERVING
            # A required model unloaded: not ready again.
            client.unload_model("logreg")
            assert not client.is_server_ready()
            status, _, text = http_get(server.metrics_url + "/readyz")
            assert status == 503 and "logreg" in text
            assert health(ch) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        client.close()


def test_required_model_missing_from_the_repository(repo, start_secure):
    server = start_secure(repo.path, "--require-models", "nosuchmodel")
    status, _, text = http_get(server.metrics_url + "/readyz")
    assert status == 503 and "nosuchmodel" in text and "not in the repository" in text, text
    assert "not ready" in server.stderr()


def test_readiness_is_false_while_draining(repo, start_secure):
    server = start_secure(repo.path, "--require-models", "logreg", "--drain-timeout", "10")
    assert http_get(server.metrics_url + "/readyz")[0] == 200
    # A health watch holds the server's attention; a slow heavy call keeps the drain going.
    with server.channel() as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        server.terminate()
        statuses = [r.status for r in watch]
        assert statuses and statuses[-1] == health_pb2.HealthCheckResponse.NOT_SERVING, statuses
    assert server.wait() == 0
