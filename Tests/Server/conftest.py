"""Fixtures for the server's end-to-end tests: a model repository written by coremltools from
scikit-learn and XGBoost (with the libraries' own predictions to compare with), and
`cortado serve` processes on free 127.0.0.1 ports (gRPC, REST and metrics).

Models in the repository (each at DIR/<name>/1/model.mlmodel):

| name     | what                                                        | inputs -> outputs |
|----------|-------------------------------------------------------------|-------------------|
| logreg   | LogisticRegression(multi_class='ovr'), string labels          | f0..f3 double -> species string, classProbability dict |
| xgb      | XGBRegressor(base_score=0.5), 12 trees                      | f0..f3 double -> y double |
| dictlin  | Pipeline(DictVectorizer, LinearRegression)                  | features dict(string->double) -> y double |
| half     | hand-built `identity`, specificationVersion 4               | x FLOAT16 [2,3] -> x FLOAT16 [2,3] |
| scaler   | StandardScaler                                              | input DOUBLE [5] -> output DOUBLE [5] |
| scaler32 | the same spec with its input declared FLOAT32               | input FLOAT32 [5] -> output DOUBLE [5] |

Tolerances (as Tests/Conformance/README.md): plain double arithmetic (scalers, linear
regression) rtol 1e-9 / atol 1e-9; logistic outputs (exp) rtol 1e-7 / atol 1e-9; XGBoost
(sums float32 leaves) rtol 1e-5 / atol 1e-5; Float16 identity: bit-exact.

Model control and shared-memory registration are off unless a server is started with
`--model-control explicit` / `--allow-shared-memory`: tests that load, unload or register pass
them (a module's `SERVER_ARGS` for the module-scoped `server`).

Servers: `start_server(repo, *args)` (function scope) and the module-scoped `server` start
`CORTADO_BIN serve` on ports picked by binding port 0, wait (bounded) for grpc.health.v1
SERVING, and on teardown send SIGTERM and assert exit status 0 within a bound. When a test
fails, the tail of every running server's stderr is attached to its report.
"""
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import time
import types
import warnings
from pathlib import Path

import grpc
import numpy as np
import pytest


ROOT = Path(__file__).resolve().parents[2]
_BIN_ENV = os.environ.get("CORTADO_BIN")
CORTADO = _BIN_ENV or str(ROOT / ".build" / "debug" / "cortado")

STARTUP_SECONDS = 30     # until Health answers SERVING
STOP_SECONDS = 20        # from SIGTERM to exit
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]

TOL_EXACT = dict(rtol=1e-9, atol=1e-9)
TOL_LOGISTIC = dict(rtol=1e-7, atol=1e-9)
TOL_XGB = dict(rtol=1e-5, atol=1e-5)

_live_servers = []


# ----------------------------------------------------------------------------- models

def _quiet(fn, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args, **kwargs)


def _save(root, name, spec, version="1"):
    folder = Path(root) / name / version
    folder.mkdir(parents=True, exist_ok=True)
    data = spec.SerializeToString(deterministic=True)
    (folder / "model.mlmodel").write_bytes(data)
    return data


def build_repository(root, rows=12):
    """Trains, converts and writes the models; returns name -> case namespace with
    `inputs` (name -> per-row values), `expected` (output -> per-row values), tolerances."""
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from coremltools.converters import sklearn as ct_sklearn
        from coremltools.converters import xgboost as ct_xgb
        from coremltools.proto import FeatureTypes_pb2, Model_pb2
        import xgboost
        from sklearn import linear_model, preprocessing
        from sklearn.feature_extraction import DictVectorizer
        from sklearn.pipeline import Pipeline

    cases = {}
    names = ["f0", "f1", "f2", "f3"]

    # LogisticRegression, one-vs-rest, string labels, four named double inputs.
    rng = np.random.RandomState(11)
    X = rng.randn(300, 4)
    labels = np.array(["setosa", "versicolor", "virginica"])
    y = labels[np.argmax(np.c_[X[:, 0] + X[:, 1], X[:, 2] - X[:, 0], X[:, 3]] + 0.7 * rng.randn(300, 3), axis=1)]
    m = linear_model.LogisticRegression(multi_class="ovr", max_iter=2000).fit(X, y)
    spec = _quiet(ct_sklearn.convert, m, names, "species").get_spec()
    _save(root, "logreg", spec)
    Xt = rng.randn(200, 4)
    P = m.predict_proba(Xt)
    top = np.sort(P, axis=1)
    keep = np.where(top[:, -1] - top[:, -2] > 1e-3)[0][:rows]  # no near ties
    Xt, P = Xt[keep], P[keep]
    cases["logreg"] = types.SimpleNamespace(
        name="logreg", inputs={n: Xt[:, i].copy() for i, n in enumerate(names)},
        expected={"species": [str(s) for s in m.predict(Xt)], "classProbability": P},
        labels=[str(c) for c in m.classes_], **TOL_LOGISTIC)

    # XGBoost regressor. Inputs on a float32-exact grid away from split thresholds (training
    # data on the 1/8 grid, test rows on it shifted by 1/64), base_score 0.5 (converter trap).
    rng = np.random.RandomState(12)
    Xtr = np.round(rng.uniform(-4, 4, (300, 4)) * 8) / 8
    ytr = np.sin(Xtr[:, 0]) * 3 + Xtr[:, 1] * Xtr[:, 2] - Xtr[:, 3] + 0.2 * rng.randn(300)
    xm = xgboost.XGBRegressor(n_estimators=12, max_depth=4, learning_rate=0.3, base_score=0.5,
                              n_jobs=1, random_state=0, tree_method="hist").fit(Xtr, ytr)
    spec = _quiet(ct_xgb.convert, xm, feature_names=names, target="y").get_spec()
    _save(root, "xgb", spec)
    Xt = np.round(rng.uniform(-4, 4, (rows, 4)) * 8) / 8 + 1 / 64
    cases["xgb"] = types.SimpleNamespace(
        name="xgb", inputs={n: Xt[:, i].copy() for i, n in enumerate(names)},
        expected={"y": xm.predict(Xt).astype(np.float64)}, model=xm, **TOL_XGB)

    # DictVectorizer + LinearRegression: a string-keyed dictionary input.
    rng = np.random.RandomState(13)
    keys = ["a", "b", "c", "d", "e"]

    def rand_dict():
        ks = rng.choice(keys, rng.randint(2, len(keys) + 1), replace=False)
        return {str(k): float(np.round(rng.randn() * 3, 2)) for k in ks}

    train = [rand_dict() for _ in range(200)]
    coefs = dict(zip(keys, [1.0, -0.5, 2.0, 0.3, -1.2]))
    ytr = np.array([sum(coefs[k] * v for k, v in t.items()) for t in train]) + 0.1 * rng.randn(200)
    p = Pipeline([("dv", DictVectorizer(sparse=False)), ("lr", linear_model.LinearRegression())]).fit(train, ytr)
    spec = _quiet(ct_sklearn.convert, p, "features", "y").get_spec()
    _save(root, "dictlin", spec)
    test = [rand_dict() for _ in range(rows)]
    cases["dictlin"] = types.SimpleNamespace(
        name="dictlin", inputs={"features": test}, expected={"y": p.predict(test).astype(np.float64)}, **TOL_EXACT)

    # Float16 identity, hand-built with the proto API.
    spec = Model_pb2.Model()
    spec.specificationVersion = 4
    for features in (spec.description.input, spec.description.output):
        f = features.add()
        f.name = "x"
        f.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.FLOAT16
        f.type.multiArrayType.shape.extend([2, 3])
    spec.identity.SetInParent()
    _save(root, "half", spec)
    bits = np.array([
        [0x3C00, 0x4100, 0xC200, 0x2E66, 0x7BFF, 0x8000],   # 1, 2.5, -3, ~0.1, 65504, -0
        [0x0001, 0x03FF, 0x7C00, 0xFC00, 0x3555, 0x0400],   # subnormals, +inf, -inf, ~1/3, min normal
        [0x7E00, 0xBC00, 0x4248, 0x0000, 0x5640, 0xD3D0],   # NaN, -1, 3.14, 0, 100, -62.5
    ], dtype=np.uint16)
    rs = np.random.RandomState(14)
    more = rs.randint(0, 0x7C00, size=(rows - 3, 6)).astype(np.uint16) | (rs.randint(0, 2, size=(rows - 3, 6)).astype(np.uint16) << 15)
    half = np.concatenate([bits, more]).view(np.float16).reshape(-1, 2, 3)
    cases["half"] = types.SimpleNamespace(name="half", inputs={"x": half}, expected={"x": half}, rtol=0, atol=0)

    # StandardScaler with a DOUBLE [5] array input, and the same spec with a FLOAT32 input.
    rng = np.random.RandomState(15)
    sc = preprocessing.StandardScaler().fit(rng.randn(100, 5) * 3 + 1)
    spec = _quiet(ct_sklearn.convert, sc, "input", "output").get_spec()
    _save(root, "scaler", spec)
    Xt = np.round(rng.randn(rows, 5) * 4, 3)
    cases["scaler"] = types.SimpleNamespace(name="scaler", inputs={"input": Xt}, expected={"output": sc.transform(Xt)}, **TOL_EXACT)
    spec.description.input[0].type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    _save(root, "scaler32", spec)
    X32 = (rng.randn(rows, 5) * 4).astype(np.float32)
    cases["scaler32"] = types.SimpleNamespace(name="scaler32", inputs={"input": X32},
                                              expected={"output": sc.transform(X32.astype(np.float64))}, **TOL_EXACT)
    return cases


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    """The model repository folder (do not change it: copy it with `copy_repo`) and its cases."""
    root = tmp_path_factory.mktemp("repository")
    cases = build_repository(root)
    return types.SimpleNamespace(path=root, cases=cases)


@pytest.fixture
def copy_repo(repo, tmp_path):
    """A private copy of the repository, for tests that add versions or files."""
    def copy():
        dest = tmp_path / "repo-copy"
        shutil.copytree(repo.path, dest)
        return dest
    return copy


# ----------------------------------------------------------------------------- servers

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_status(address, timeout=1.0):
    """grpc.health.v1 Check("") status number, or None when the server does not answer.

    grpcio-health-checking's messages (the ones Tests/Format compares ours with: one
    definition per process). Imported here, not at the top: pytest loads this file before
    collecting Tests/Format, which must choose the protobuf implementation first."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout).status
        except grpc.RpcError:
            return None


class Server:
    """One `cortado serve` process on 127.0.0.1."""

    def __init__(self, models, args, log_dir):
        self.models = Path(models)
        self.args = [str(a) for a in args]
        self.log_path = Path(log_dir) / f"cortado-serve-{len(_live_servers)}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.proc = None
        self.port = self.metrics_port = self.http_port = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.metrics_port}"

    @property
    def http_address(self):
        """host:port of the REST port (the Open Inference Protocol over HTTP/1.1)."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def http_url(self):
        return f"http://127.0.0.1:{self.http_port}"

    def start(self):
        if not os.path.exists(CORTADO.split()[0]):
            if _BIN_ENV:
                pytest.fail(f"CORTADO_BIN={CORTADO} does not exist")
            pytest.skip(f"{CORTADO} is not built (swift build)")
        for attempt in range(3):  # a port picked by bind(0) may be taken in between: retry
            self.port = free_port()
            self.metrics_port = next(p for p in (free_port() for _ in range(10)) if p != self.port)
            self.http_port = next(p for p in (free_port() for _ in range(10)) if p not in (self.port, self.metrics_port))
            self.log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                CORTADO.split() + ["serve", "--models", str(self.models), "--host", "127.0.0.1",
                                   "--port", str(self.port), "--metrics-port", str(self.metrics_port),
                                   "--http-port", str(self.http_port), *self.args],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
            _live_servers.append(self)
            if self._wait_serving():
                return self
            _live_servers.remove(self)
            self.log.close()
            rc = self.proc.poll()
            if rc is None:
                self.proc.kill()
                self.proc.wait(10)
                pytest.fail(f"cortado serve did not answer SERVING within {STARTUP_SECONDS} s\n{self.stderr()}")
            if "cannot listen" not in self.stderr() or attempt == 2:
                pytest.fail(f"cortado serve exited with status {rc} while starting\n{self.stderr()}")
        return self

    def _wait_serving(self):
        deadline = time.monotonic() + STARTUP_SECONDS
        for _ in range(1000):
            if self.proc.poll() is not None:
                return False
            if health_status(self.address, timeout=1.0) == 1:  # SERVING
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return False

    def stderr(self, tail=6000):
        try:
            text = self.log_path.read_bytes().decode(errors="replace")
        except OSError:
            return ""
        return text[-tail:]

    def terminate(self):
        """SIGTERM (to this PID only)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout=STOP_SECONDS):
        """Exit status, or None if still running after `timeout` (then it is killed)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None
        finally:
            if self in _live_servers:
                _live_servers.remove(self)
            self.log.close()

    def stop(self):
        self.terminate()
        return self.wait()

    def channel(self):
        return grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)


@pytest.fixture
def start_server(tmp_path):
    """start_server(models_dir, *extra_args) -> a running Server; stopped (SIGTERM, exit 0
    asserted) after the test unless the test stopped it."""
    started = []

    def start(models, *args):
        server = Server(models, args, tmp_path).start()
        started.append(server)
        return server

    yield start
    failures = []
    for server in started:
        if server.proc.returncode is not None:
            continue
        rc = server.stop()
        if rc != 0:
            failures.append(f"exit status {rc} after SIGTERM (None: not within {STOP_SECONDS} s)\n{server.stderr()}")
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def server(request, repo, tmp_path_factory):
    """One server for a test module, on the shared repository, started with the module's
    `SERVER_ARGS` (e.g. the flags that enable model control or shared memory)."""
    args = getattr(request.module, "SERVER_ARGS", [])
    s = Server(repo.path, args, tmp_path_factory.mktemp("server")).start()
    yield s
    if s.proc.returncode is None:
        rc = s.stop()
        assert rc == 0, f"cortado serve exited with {rc} after SIGTERM (None: not within {STOP_SECONDS} s)\n{s.stderr()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in list(_live_servers):
            report.sections.append((f"cortado serve {server.address} stderr (tail)", server.stderr()))
