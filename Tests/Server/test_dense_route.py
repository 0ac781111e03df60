"""The dense route: models that run vectorized rows (trees, GLMs) take a ModelInfer request's
columns straight into one matrix (MLColumnarPredicting, Sources/CortadoCore/MLDenseBatchPredicting.swift). Its answers
must be the libraries' own and the general route's (the native Predictor API builds a feature
dictionary per row), for scalar double and int64 inputs, array inputs, classifiers, batches,
and rows the dynamic batcher gathers from concurrent calls; anything it cannot take as it is
(a wrong shape, a missing input, BYTES) gets the general route's error.

Models (written by coremltools from XGBoost and scikit-learn):
- `xgb6`: XGBRegressor on six features, f0..f2 declared double and f3..f5 int64 (integer data);
- `xgb6arr`: the same trees with one DOUBLE [6] input `x` (a tree ensemble reads its inputs'
  concatenation, so both compute the same function);
- `logreg`: LogisticRegression (3 classes, string labels) on four named doubles.
Tolerances: XGBoost sums float32 leaves (rtol 1e-5, atol 1e-5); logistic rtol 1e-7, atol 1e-9;
dense against general route: identical.
"""
import concurrent.futures as futures
import contextlib
import importlib.util
import io
import warnings
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as tc

import protos

# This folder's conftest by its path: under one pytest run of several test folders the bare
# name `conftest` may be another folder's.
_spec = importlib.util.spec_from_file_location("server_conftest_dense", Path(__file__).with_name("conftest.py"))
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)
TOL_LOGISTIC, TOL_XGB, _save = conftest.TOL_LOGISTIC, conftest.TOL_XGB, conftest._save

SERVER_ARGS = ["--max-batch-size", "8", "--max-queue-delay-us", "20000", "--workers", "2"]
# xgb6names' inputs, in declared order ("été" precomposed).
TRICKY = ["f1", "f10", "f", "\u00e9t\u00e9", "\u65e5\u672c", "x"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    warnings.filterwarnings("ignore")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from coremltools.converters import sklearn as ct_sklearn
        from coremltools.converters import xgboost as ct_xgb
        from coremltools.proto import FeatureTypes_pb2
        import xgboost
        from sklearn import linear_model
    root = tmp_path_factory.mktemp("dense-repo")
    rng = np.random.RandomState(21)
    # Doubles on the 1/8 grid, integers in [-3, 3]: test rows shifted off split thresholds.
    Xtr = np.c_[np.round(rng.uniform(-4, 4, (400, 3)) * 8) / 8, rng.randint(-3, 4, (400, 3))].astype(np.float64)
    ytr = np.sin(Xtr[:, 0]) * 2 + Xtr[:, 1] * Xtr[:, 3] - Xtr[:, 4] + 0.5 * Xtr[:, 5] + 0.1 * rng.randn(400)
    xm = xgboost.XGBRegressor(n_estimators=20, max_depth=4, learning_rate=0.3, base_score=0.5,
                              n_jobs=1, random_state=0, tree_method="hist").fit(Xtr, ytr)
    names = [f"f{i}" for i in range(6)]
    spec = ct_xgb.convert(xm, feature_names=names, target="y").get_spec()
    for i in (3, 4, 5):
        spec.description.input[i].type.int64Type.SetInParent()
    _save(root, "xgb6", spec)
    arr = ct_xgb.convert(xm, feature_names=names, target="y").get_spec()
    del arr.description.input[:]
    x = arr.description.input.add()
    x.name = "x"
    x.type.multiArrayType.shape.append(6)
    x.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    _save(root, "xgb6arr", arr)
    # The same trees with names that are prefixes of one another and non-ASCII ones: the
    # request decoder matches names by their bytes, at their position first.
    tricky = ct_xgb.convert(xm, feature_names=names, target="y").get_spec()
    for i in (3, 4, 5):
        tricky.description.input[i].type.int64Type.SetInParent()
    for i, name in enumerate(TRICKY):
        tricky.description.input[i].name = name
    _save(root, "xgb6names", tricky)

    X4 = rng.randn(300, 4)
    labels = np.array(["a", "b", "c"])
    y4 = labels[np.argmax(np.c_[X4[:, 0] + X4[:, 1], X4[:, 2] - X4[:, 0], X4[:, 3]] + 0.5 * rng.randn(300, 3), axis=1)]
    lr = linear_model.LogisticRegression(multi_class="ovr", max_iter=2000).fit(X4, y4)
    _save(root, "logreg", ct_sklearn.convert(lr, ["f0", "f1", "f2", "f3"], "label").get_spec())

    Xt = np.c_[np.round(rng.uniform(-4, 4, (16, 3)) * 8) / 8 + 1 / 64, rng.randint(-3, 4, (16, 3))].astype(np.float64)
    return {"root": root, "xgb": xm, "Xt": Xt, "lr": lr, "X4": rng.randn(16, 4)}


@pytest.fixture(scope="module")
def served(models, tmp_path_factory):
    s = conftest.Server(str(models["root"]), SERVER_ARGS, tmp_path_factory.mktemp("dense-server")).start()
    yield s
    assert s.stop() == 0, s.stderr()


def scalar_inputs(X, ints=(3, 4, 5), int_wire="INT64"):
    inputs = []
    for i in range(X.shape[1]):
        wire = int_wire if i in ints else "FP64"
        dtype = {"INT64": np.int64, "FP64": np.float64, "FP32": np.float32}[wire]
        t = tc.InferInput(f"f{i}", [X.shape[0], 1], wire)
        t.set_data_from_numpy(X[:, i:i + 1].astype(dtype))
        inputs.append(t)
    return inputs


def native_predict(server, model, row, ints=(3, 4, 5)):
    """The general route: the native API's typed values (one feature dictionary per row)."""
    p = protos.load_predictor()
    pb = p.predictor_pb2
    features = [pb.Feature(name=f"f{i}", value=pb.FeatureValue(int64_value=int(v)) if i in ints else pb.FeatureValue(double_value=float(v)))
                for i, v in enumerate(row)]
    reply = p.predictor_pb2_grpc.PredictorStub(server.channel()).Predict(pb.PredictRequest(model=model, inputs=features), timeout=30)
    return {f.name: f.value for f in reply.outputs}


def test_scalar_double_and_int64_inputs_match_xgboost_and_the_general_route(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"]
    got = client.infer("xgb6", scalar_inputs(X)).as_numpy("y").reshape(-1)
    np.testing.assert_allclose(got, models["xgb"].predict(X), **TOL_XGB)
    for r in range(4):
        one = client.infer("xgb6", scalar_inputs(X[r:r + 1])).as_numpy("y").reshape(-1)[0]
        assert one == got[r], "a row answers the same alone and in a batch"
        assert native_predict(served, "xgb6", X[r])["y"].double_value == one


def test_array_input_and_scalar_inputs_agree(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"]
    t = tc.InferInput("x", list(X.shape), "FP64")
    t.set_data_from_numpy(X)
    arr = client.infer("xgb6arr", [t]).as_numpy("y").reshape(-1)
    scal = client.infer("xgb6", scalar_inputs(X)).as_numpy("y").reshape(-1)
    np.testing.assert_array_equal(arr, scal)
    # FP32 on the wire for the array: converted per element as the general route does.
    t32 = tc.InferInput("x", list(X.shape), "FP32")
    t32.set_data_from_numpy(X.astype(np.float32))
    np.testing.assert_array_equal(client.infer("xgb6arr", [t32]).as_numpy("y").reshape(-1), arr)


def test_int64_input_sent_as_float_is_truncated_like_the_general_route(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"][:3].copy()
    fractional = X.copy()
    fractional[:, 3:] += 0.75 * np.sign(fractional[:, 3:] + 0.5)  # 2 -> 2.75, -1 -> -1.75
    a = client.infer("xgb6", scalar_inputs(fractional, int_wire="FP32")).as_numpy("y").reshape(-1)
    b = client.infer("xgb6", scalar_inputs(X)).as_numpy("y").reshape(-1)
    np.testing.assert_array_equal(a, b)


def test_classifier_with_scalar_inputs(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["X4"]
    res = client.infer("logreg", scalar_inputs(X, ints=()), outputs=[tc.InferRequestedOutput("label"), tc.InferRequestedOutput("classProbability")])
    labels = [v.decode() for v in res.as_numpy("label").reshape(-1)]
    assert labels == list(models["lr"].predict(X))
    np.testing.assert_allclose(res.as_numpy("classProbability").reshape(len(X), -1), models["lr"].predict_proba(X), **TOL_LOGISTIC)


def test_rows_the_batcher_gathers_from_concurrent_calls(served, models):
    """Single-row calls at once: the dynamic batcher runs them as one matrix gathered from
    several requests; every caller gets its own row's answer."""
    X = models["Xt"]
    expected = models["xgb"].predict(X)

    def call(r):
        c = tc.InferenceServerClient(served.address)
        return c.infer("xgb6", scalar_inputs(X[r:r + 1])).as_numpy("y").reshape(-1)[0]

    for _ in range(3):
        with futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(call, range(len(X))))
        np.testing.assert_allclose(got, expected, **TOL_XGB)
    stats = tc.InferenceServerClient(served.address).get_inference_statistics("xgb6", as_json=True)
    s = stats["model_stats"][0]
    assert int(s["inference_count"]) > int(s["execution_count"]), f"no call was batched with another: {s}"


def test_what_the_route_cannot_take_gets_the_general_error(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"][:2]
    # Two values per row for a scalar input.
    bad = scalar_inputs(X)
    wide = tc.InferInput("f0", [2, 2], "FP64")
    wide.set_data_from_numpy(np.ones((2, 2)))
    bad[0] = wide
    with pytest.raises(tc.InferenceServerException, match="f0' is a scalar"):
        client.infer("xgb6", bad)
    # A missing input.
    with pytest.raises(tc.InferenceServerException, match="required input 'f5' is missing"):
        client.infer("xgb6", scalar_inputs(X)[:5])
    # BYTES for a number.
    strings = scalar_inputs(X)
    s = tc.InferInput("f1", [2, 1], "BYTES")
    s.set_data_from_numpy(np.array([[b"1"], [b"2"]], dtype=object))
    strings[1] = s
    with pytest.raises(tc.InferenceServerException, match="f1': expected a numeric tensor"):
        client.infer("xgb6", strings)
    # The array model with a wrong width: the general route's shape error.
    t = tc.InferInput("x", [2, 5], "FP64")
    t.set_data_from_numpy(np.ones((2, 5)))
    with pytest.raises(tc.InferenceServerException) as err:
        client.infer("xgb6arr", [t])
    assert "INVALID_ARGUMENT" in str(err.value.status()) and "x" in err.value.message()
    # Still serving.
    np.testing.assert_allclose(client.infer("xgb6", scalar_inputs(X)).as_numpy("y").reshape(-1), models["xgb"].predict(X), **TOL_XGB)


def named_inputs(X, names, order, ints=(3, 4, 5)):
    """Column i of X as the scalar input names[i], the tensors in `order`."""
    inputs = []
    for i in order:
        t = tc.InferInput(names[i], [X.shape[0], 1], "INT64" if i in ints else "FP64")
        t.set_data_from_numpy(X[:, i:i + 1].astype(np.int64 if i in ints else np.float64))
        inputs.append(t)
    return inputs


def test_inputs_in_any_order_and_names_that_look_alike(served, models):
    """Each tensor finds its input by name whatever its position: declared order, reversed,
    prefixes swapped, random orders; the answers are XGBoost's, and identical across orders."""
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"][:5]
    expected = models["xgb"].predict(X)
    declared = client.infer("xgb6names", named_inputs(X, TRICKY, range(6))).as_numpy("y").reshape(-1)
    np.testing.assert_allclose(declared, expected, **TOL_XGB)
    rng = np.random.RandomState(5)
    orders = [[5, 4, 3, 2, 1, 0], [1, 0, 2, 3, 4, 5], [2, 1, 0, 5, 3, 4]] + [list(rng.permutation(6)) for _ in range(4)]
    for order in orders:
        got = client.infer("xgb6names", named_inputs(X, TRICKY, order)).as_numpy("y").reshape(-1)
        np.testing.assert_array_equal(got, declared, err_msg=f"order {order}")
        # One row, as the load generator sends it.
        one = client.infer("xgb6names", named_inputs(X[:1], TRICKY, order)).as_numpy("y").reshape(-1)
        assert one[0] == declared[0], order
    # "été" decomposed (e + U+0301) is the same name to the server, as before the byte match.
    decomposed = list(TRICKY)
    decomposed[3] = "e\u0301te\u0301"
    for order in (range(6), [3, 0, 1, 2, 4, 5]):
        got = client.infer("xgb6names", named_inputs(X, decomposed, order)).as_numpy("y").reshape(-1)
        np.testing.assert_array_equal(got, declared)


def test_duplicate_unknown_and_near_miss_names_get_the_general_errors(served, models):
    client = tc.InferenceServerClient(served.address)
    X = models["Xt"][:2]
    cases = [
        # f1 twice (in f10's place, then in its own), f10 missing.
        (["f1", "f1", "f", TRICKY[3], TRICKY[4], "x"], "input 'f1' is given twice"),
        (["f10", "f10", "f", TRICKY[3], TRICKY[4], "x"], "input 'f10' is given twice"),
        (["f1", "f10", "f", TRICKY[3], "\u65e5", "x"], "has no input named '\u65e5'"),
        (["f1", "f10 ", "f", TRICKY[3], TRICKY[4], "x"], "has no input named 'f10 '"),
        (["F1", "f10", "f", TRICKY[3], TRICKY[4], "x"], "has no input named 'F1'"),
    ]
    for names, message in cases:
        with pytest.raises(tc.InferenceServerException) as err:
            client.infer("xgb6names", named_inputs(X, names, range(6)))
        assert "INVALID_ARGUMENT" in str(err.value.status()) and message in err.value.message(), (names, err.value.message())
    # A name left out: the missing-input error names it.
    with pytest.raises(tc.InferenceServerException, match="required input 'x' is missing"):
        client.infer("xgb6names", named_inputs(X, TRICKY, range(5)))
    np.testing.assert_allclose(client.infer("xgb6names", named_inputs(X, TRICKY, range(6))).as_numpy("y").reshape(-1),
                               models["xgb"].predict(X), **TOL_XGB)
