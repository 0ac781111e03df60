#!/usr/bin/env python3
"""Generate Cortado's conformance cases.

    python Tests/Conformance/make_cases.py OUTDIR [--only SUBSTRING ...]

Trains small models with the source libraries (scikit-learn, XGBoost, LIBSVM),
converts them with coremltools (or builds the spec by hand where no converter
exists), and writes one folder per case:

    OUTDIR/<case>/model.mlmodel    the spec, serialized deterministically
    OUTDIR/<case>/input.jsonl      one JSON object of input features per line
    OUTDIR/<case>/expected.jsonl   one JSON object of expected outputs per line
    OUTDIR/<case>/case.json        kind, source, tolerances, outputs to compare, notes

and OUTDIR/_bad/<case>/ folders with bad.json for inputs that must fail.
See README.md in this folder for the JSON conventions and the tolerance policy.

Every random choice uses a fixed seed, so two runs write the same bytes.
"""

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.special import expit
from scipy.stats import norm

# coremltools prints "Failed to load _MLModelProxy" and version warnings on import.
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import coremltools as ct
    from coremltools.converters import sklearn as ct_sklearn
    from coremltools.models import datatypes
    from coremltools.models.array_feature_extractor import create_array_feature_extractor
    from coremltools.models.feature_vectorizer import create_feature_vectorizer
    from coremltools.proto import FeatureTypes_pb2, Model_pb2

import sklearn
import xgboost
from sklearn import ensemble, linear_model, neighbors, preprocessing, svm, tree
from sklearn.feature_extraction import DictVectorizer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline

ROWS = 20  # rows per case

ARRAY_TYPE_NAMES = {
    FeatureTypes_pb2.ArrayFeatureType.FLOAT32: "FLOAT32",
    FeatureTypes_pb2.ArrayFeatureType.DOUBLE: "DOUBLE",
    FeatureTypes_pb2.ArrayFeatureType.INT32: "INT32",
    FeatureTypes_pb2.ArrayFeatureType.FLOAT16: "FLOAT16",
}

# Tolerance policy (README.md explains the reasoning).
TOL_EXACT_DOUBLE = dict(rtol=1e-9, atol=1e-9)   # pure double arithmetic, only summation order differs
TOL_TRANSCENDENTAL = dict(rtol=1e-7, atol=1e-9)  # exp/tanh/pow/erf chains; libm differences
TOL_FLOAT32 = dict(rtol=1e-5, atol=1e-6)         # the source library computes in float32


def quiet(fn, *args, **kwargs):
    """Call a converter while swallowing its prints ([WARNING] lines, libsvm's inferring notes)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def sk_convert(*args, **kwargs):
    return quiet(ct_sklearn.convert, *args, **kwargs)


# ----------------------------------------------------------------------------
# JSON encoding of feature values (DESIGN.md, "Feature values in JSON")
# ----------------------------------------------------------------------------

def enc_double(x):
    """Doubles are JSON numbers written as floats (1.0, not 1). NaN/inf are the strings
    "NaN", "Infinity", "-Infinity" (JSON has no literal for them)."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def enc_value(ftype, v, where):
    t = ftype.WhichOneof("Type")
    if t == "doubleType":
        return enc_double(v)
    if t == "int64Type":
        if isinstance(v, (float, np.floating)) and float(v) != int(v):
            raise ValueError(f"{where}: int64 value {v!r} is not integral")
        return int(v)
    if t == "stringType":
        if not isinstance(v, (str, np.str_)):
            raise ValueError(f"{where}: expected a string, got {v!r}")
        return str(v)
    if t == "dictionaryType":
        kt = ftype.dictionaryType.WhichOneof("KeyType")
        out = {}
        for k, val in v.items():
            key = str(int(k)) if kt == "int64KeyType" else str(k)
            out[key] = enc_double(val)
        return out
    if t == "multiArrayType":
        dt = ARRAY_TYPE_NAMES[ftype.multiArrayType.dataType]
        arr = np.asarray(v, dtype=np.float64)
        if dt == "FLOAT32" and not np.array_equal(arr.astype(np.float32).astype(np.float64), arr, equal_nan=True):
            raise ValueError(f"{where}: FLOAT32 array value is not exactly representable in float32")
        if dt == "INT32":
            data = [int(x) for x in arr.ravel()]
        else:
            data = [enc_double(x) for x in arr.ravel()]
        return {"shape": [int(s) for s in arr.shape], "dataType": dt, "data": data}
    raise ValueError(f"{where}: feature type {t} not supported by the case writer")


def feature_types(features):
    return {f.name: f.type for f in features}


# ----------------------------------------------------------------------------
# Case writer
# ----------------------------------------------------------------------------

FAMILY_OF_KIND = {
    "glmRegressor": "GLM", "glmClassifier": "GLM",
    "supportVectorRegressor": "SVM", "supportVectorClassifier": "SVM",
    "treeEnsembleRegressor": "TreeEnsemble", "treeEnsembleClassifier": "TreeEnsemble",
    "kNearestNeighborsClassifier": "KNN",
    "bayesianProbitRegressor": "BayesianProbit",
    "pipeline": "Pipeline", "pipelineRegressor": "Pipeline", "pipelineClassifier": "Pipeline",
}


def model_kinds(spec):
    """Every model type in the spec, pipelines flattened (for case.json)."""
    kind = spec.WhichOneof("Type")
    kinds = [kind]
    if kind in ("pipeline", "pipelineRegressor", "pipelineClassifier"):
        pipe = spec.pipeline if kind == "pipeline" else getattr(spec, kind).pipeline
        for sub in pipe.models:
            kinds += model_kinds(sub)
    return kinds


class Writer:
    def __init__(self, outdir, only=None):
        self.outdir = outdir
        self.only = only or []
        self.names = []
        self.family = None  # set by each generator

    def wanted(self, name):
        return not self.only or any(s in name for s in self.only)

    def write(self, name, spec, inputs, expected, source, notes, tol=TOL_EXACT_DOUBLE,
              compare=None, tolerances=None, advisory=None, extra=None):
        if name in self.names:
            raise ValueError(f"duplicate case name {name}")
        self.names.append(name)
        if not self.wanted(name):
            return
        if len(inputs) != len(expected):
            raise ValueError(f"{name}: {len(inputs)} input rows but {len(expected)} expected rows")
        if not 5 <= len(inputs) <= 40:
            raise ValueError(f"{name}: {len(inputs)} rows; filtering left too few or too many")
        in_types = feature_types(spec.description.input)
        out_types = feature_types(spec.description.output)
        if compare is None:
            compare = list(expected[0].keys())
        for c in compare:
            if c not in out_types:
                raise ValueError(f"{name}: compared output {c!r} is not in the model's outputs {list(out_types)}")
        d = os.path.join(self.outdir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "model.mlmodel"), "wb") as f:
            f.write(spec.SerializeToString(deterministic=True))
        with open(os.path.join(d, "input.jsonl"), "w") as f:
            for i, row in enumerate(inputs):
                if set(row) != set(in_types):
                    raise ValueError(f"{name} row {i}: inputs {sorted(row)} != model inputs {sorted(in_types)}")
                obj = {k: enc_value(in_types[k], row[k], f"{name} row {i} input {k}") for k in in_types}
                f.write(json.dumps(obj, allow_nan=False) + "\n")
        with open(os.path.join(d, "expected.jsonl"), "w") as f:
            for i, row in enumerate(expected):
                obj = {k: enc_value(out_types[k], row[k], f"{name} row {i} output {k}") for k in compare}
                f.write(json.dumps(obj, allow_nan=False) + "\n")
        kind = spec.WhichOneof("Type")
        meta = {
            "kind": kind,
            "family": self.family or FAMILY_OF_KIND.get(kind, "FeatureEngineering"),
            "model_kinds": sorted(set(model_kinds(spec))),
            "source": source,
            "rtol": tol["rtol"],
            "atol": tol["atol"],
            "compare": compare,
            "rows": len(inputs),
            "specification_version": spec.specificationVersion,
            "notes": notes,
        }
        if tolerances:
            meta["tolerances"] = tolerances
        if advisory:
            meta["advisory"] = advisory
        if extra:
            meta.update(extra)
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")


# ----------------------------------------------------------------------------
# Data helpers
# ----------------------------------------------------------------------------

def grid(rng, shape, lo=-4.0, hi=4.0, step=0.125, offset=0.0):
    """Values on a binary grid: exact in float32, so float32 and float64 comparisons agree."""
    return np.round(rng.uniform(lo, hi, shape) / step) * step + offset


def dec(rng, shape, digits=3):
    return np.round(rng.randn(*shape), digits)


def named(X, names):
    return [{n: float(v) for n, v in zip(names, row)} for row in X]


def as_array(X, name="input"):
    return [{name: np.asarray(row, dtype=np.float64)} for row in X]


def fnames(d, prefix="x"):
    return [f"{prefix}{i}" for i in range(d)]


def pick(mask, n=ROWS):
    idx = np.flatnonzero(mask)
    if len(idx) < n:
        raise RuntimeError(f"only {len(idx)} candidate rows survived filtering; need {n}")
    return idx[:n]


def top2_gap(P):
    s = np.sort(P, axis=1)
    return s[:, -1] - s[:, -2]


def classify_rows(labels_out, P, classes, label_name, prob_name, n=ROWS, min_gap=1e-6):
    """Keep rows whose top-2 probability gap is >= min_gap (no near-ties); return (indices, expected rows)."""
    idx = pick(top2_gap(P) >= min_gap, n)
    classes = [py_label(c) for c in classes]
    exp = [{label_name: py_label(labels_out[i]), prob_name: dict(zip(classes, map(float, P[i])))} for i in idx]
    return idx, exp


def out_names(spec):
    d = spec.description
    return d.predictedFeatureName, (d.predictedProbabilitiesName or None)


def py_label(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.str_,)):
        return str(v)
    return v


# ----------------------------------------------------------------------------
# GLM
# ----------------------------------------------------------------------------

def gen_glm(w):
    w.family = "GLM"
    rng = np.random.RandomState(1)
    d = 5
    X = dec(rng, (120, d))
    coef = np.array([1.5, -2.0, 0.75, 0.0, 3.25])
    yr = X @ coef + 0.4 + 0.1 * rng.randn(120)
    Xt = dec(rng, (ROWS, d))
    names = fnames(d)

    m = linear_model.LinearRegression().fit(X, yr)
    spec = sk_convert(m, names, "y").get_spec()
    w.write("glm_linear_regression_named", spec, named(Xt, names),
            [{"y": float(v)} for v in m.predict(Xt)], "sklearn",
            "LinearRegression, 5 double inputs -> glmRegressor. y = w.x + b.")

    m = linear_model.Ridge(alpha=2.0).fit(X, yr)
    spec = sk_convert(m, "input", "prediction").get_spec()
    w.write("glm_ridge_array", spec, as_array(Xt),
            [{"prediction": float(v)} for v in m.predict(Xt)], "sklearn",
            "Ridge(alpha=2), one DOUBLE multiArray input of length 5 -> glmRegressor.")

    m = svm.LinearSVR(C=1.0, epsilon=0.0, random_state=0, max_iter=20000, dual=True).fit(X, yr)
    spec = sk_convert(m, names, "y").get_spec()
    w.write("glm_linear_svr", spec, named(Xt, names),
            [{"y": float(v)} for v in m.predict(Xt)], "sklearn",
            "LinearSVR -> glmRegressor (the converter reuses the linear-regression path).")

    # Logistic regression, binary, non-contiguous int labels.
    Xc = dec(rng, (300, d))
    score = Xc @ np.array([1.0, -1.5, 0.5, 2.0, 0.0])
    yb = np.where(score + 0.5 * rng.randn(300) > 0, 8, 3)
    Xct = dec(rng, (200, d))
    m = linear_model.LogisticRegression(multi_class="ovr", C=1.0).fit(Xc, yb)
    spec = sk_convert(m, names, "classLabel").get_spec()
    lab, prob = out_names(spec)
    P = m.predict_proba(Xct)
    idx, exp = classify_rows(m.predict(Xct), P, m.classes_, lab, prob)
    w.write("glm_logreg_binary_int", spec, named(Xct[idx], names), exp, "sklearn",
            "LogisticRegression(multi_class='ovr') binary with int labels {3, 8} -> glmClassifier "
            "(one weight row, Logit). P(8) = sigmoid(w.x+b), P(3) = 1 - P(8).",
            tol=TOL_TRANSCENDENTAL)

    # Multi-class OvR with string labels.
    W3 = np.array([[1.5, 0, -1, 0.5, 0], [-1, 1.5, 0, 0, 0.5], [0, -1, 1.5, -0.5, 0]])
    y3 = np.array(["cat", "dog", "fish"])[np.argmax(Xc @ W3.T + 0.7 * rng.randn(300, 3), axis=1)]
    m = linear_model.LogisticRegression(multi_class="ovr", C=0.5).fit(Xc, y3)
    spec = sk_convert(m, names, "species").get_spec()
    lab, prob = out_names(spec)
    P = m.predict_proba(Xct)
    idx, exp = classify_rows(m.predict(Xct), P, m.classes_, lab, prob)
    w.write("glm_logreg_multi_ovr_string", spec, named(Xct[idx], names), exp, "sklearn",
            "LogisticRegression(multi_class='ovr'), 3 string classes -> glmClassifier OneVsRest/Logit. "
            "sklearn's OvR predict_proba is sigmoid(w_k.x+b_k) normalized to sum 1 over classes; "
            "the label is the argmax.", tol=TOL_TRANSCENDENTAL)

    # Multi-class OvR, 4 int classes, array input.
    W4 = np.vstack([W3, [0.5, 0.5, 0.5, 0.5, -1]])
    y4 = np.argmax(Xc @ W4.T + 0.7 * rng.randn(300, 4), axis=1)
    m = linear_model.LogisticRegression(multi_class="ovr", C=2.0).fit(Xc, y4)
    spec = sk_convert(m, "input", "classLabel").get_spec()
    lab, prob = out_names(spec)
    P = m.predict_proba(Xct)
    idx, exp = classify_rows(m.predict(Xct), P, m.classes_, lab, prob)
    w.write("glm_logreg_multi_ovr_int_array", spec, as_array(Xct[idx]), exp, "sklearn",
            "LogisticRegression(multi_class='ovr'), 4 int classes, multiArray input -> glmClassifier.",
            tol=TOL_TRANSCENDENTAL)

    # LinearSVC: sklearn has no predict_proba; Core ML (Logit transform) reports
    # sigmoid(decision) normalized like OvR logistic regression. Both derived from sklearn's
    # own decision_function.
    m = svm.LinearSVC(C=0.5, random_state=0, max_iter=20000, dual=True).fit(Xc, yb)
    spec = sk_convert(m, "input", "classLabel").get_spec()
    lab, prob = out_names(spec)
    dfun = m.decision_function(Xct)
    p1 = expit(dfun)
    P = np.c_[1 - p1, p1]
    idx, exp = classify_rows(m.predict(Xct), P, m.classes_, lab, prob)
    w.write("glm_linear_svc_binary_array", spec, as_array(Xct[idx]), exp, "sklearn",
            "LinearSVC binary, multiArray input -> glmClassifier with Logit (the converter reuses the logistic path). "
            "Label = sklearn predict. sklearn has no probabilities for LinearSVC: the expected "
            "classProbability is the Core ML semantics applied to sklearn's decision_function d: "
            "P(8) = sigmoid(d), P(3) = 1 - P(8).", tol=TOL_TRANSCENDENTAL)

    m = svm.LinearSVC(C=0.5, random_state=0, max_iter=20000, dual=True).fit(Xc, y3)
    spec = sk_convert(m, names, "species").get_spec()
    lab, prob = out_names(spec)
    S = expit(m.decision_function(Xct))
    P = S / S.sum(axis=1, keepdims=True)
    idx, exp = classify_rows(m.predict(Xct), P, m.classes_, lab, prob)
    w.write("glm_linear_svc_multi_string", spec, named(Xct[idx], names), exp, "sklearn",
            "LinearSVC (ovr), 3 string classes -> glmClassifier OneVsRest/Logit. Label = sklearn predict. "
            "Expected classProbability = sigmoid(decision_function_k) normalized over classes "
            "(Core ML OvR semantics applied to sklearn's decision values; sklearn itself has no "
            "probabilities for LinearSVC).", tol=TOL_TRANSCENDENTAL)


# ----------------------------------------------------------------------------
# SVM (scikit-learn)
# ----------------------------------------------------------------------------

def libsvm_sigmoid_predict(dv, A, B):
    f = dv * A + B
    return np.where(f >= 0, np.exp(-np.abs(f)) / (1 + np.exp(-np.abs(f))), 1 / (1 + np.exp(-np.abs(f))))


def sk_binary_svc_libsvm_proba(m, X):
    """LIBSVM >= 3.x probability for two classes: the pairwise sigmoid itself, no coupling.
    sklearn's bundled libsvm runs the multi-class coupling even for two classes, which moves the
    numbers by up to ~0.5% (coremltools warns about this when converting)."""
    dv = -m.decision_function(X)  # libsvm's decision value for (classes_[0] vs classes_[1])
    r = np.clip(libsvm_sigmoid_predict(dv, m.probA_[0], m.probB_[0]), 1e-7, 1 - 1e-7)
    return np.c_[r, 1 - r]


def ovo_votes(m, X):
    """Vote counts from sklearn's OvO decision values (libsvm order: (0,1),(0,2)..(1,2)..)."""
    D = m.decision_function(X)
    k = len(m.classes_)
    V = np.zeros((len(X), k), int)
    margin = np.full(len(X), np.inf)
    p = 0
    for i in range(k):
        for j in range(i + 1, k):
            V[:, i] += D[:, p] > 0
            V[:, j] += D[:, p] <= 0
            margin = np.minimum(margin, np.abs(D[:, p]))
            p += 1
    return V, margin


def gen_svm_sklearn(w):
    w.family = "SVM"
    rng = np.random.RandomState(2)
    d = 4
    names = fnames(d)
    # Three Gaussian blobs with overlap.
    centers = np.array([[1.5, 0, 0, -1], [-1.5, 1, 0, 0], [0, -1.5, 1, 1]])
    y3 = rng.randint(0, 3, 240)
    X = np.round(centers[y3] + 1.1 * rng.randn(240, d), 3)
    yb = (y3 == 0).astype(int)
    Xt = dec(rng, (300, d), 3) * 1.5

    def svc_case(name, model, y, labels_map, input_style, notes, nu=False):
        y_fit = labels_map[y] if labels_map is not None else y
        m = model.fit(X, y_fit)
        if input_style == "named":
            spec = sk_convert(m, names, "classLabel").get_spec()
        else:
            spec = sk_convert(m, "input", "classLabel").get_spec()
        lab, prob = out_names(spec)
        k = len(m.classes_)
        extra_note = ""
        if m.probability:
            if k == 2:
                P = sk_binary_svc_libsvm_proba(m, Xt)
                diff = np.abs(P - m.predict_proba(Xt)).max()
                extra_note = (" Binary probability model: expected classProbability is LIBSVM's pairwise "
                              "sigmoid 1/(1+exp(A*f+B)) of sklearn's decision value f with sklearn's probA_/probB_ "
                              "(clipped to [1e-7, 1-1e-7]), which is what LIBSVM 3.x and Core ML compute for two "
                              "classes; sklearn's predict_proba couples the pair like a multi-class problem and "
                              f"differs by up to {diff:.2g} on these candidate rows.")
            else:
                P = m.predict_proba(Xt)
                extra_note = (" Multi-class probability model: expected classProbability = sklearn predict_proba "
                              "(LIBSVM pairwise sigmoids + iterative pairwise coupling, "
                              "multiclass_probability(), which stops at a tolerance: implement it as LIBSVM does).")
            labels_out = m.classes_[np.argmax(P, axis=1)]
            n_dis = int((labels_out != m.predict(Xt)).sum())
            extra_note += (" Label = argmax of the probabilities (LIBSVM/Core ML semantics when a probability "
                           f"model exists), not sklearn's voting predict(); they disagree on {n_dis} of "
                           f"{len(Xt)} candidate rows.")
            mask = top2_gap(P) >= 1e-4
            idx = pick(mask)
            exp = [{lab: py_label(labels_out[i]), prob: dict(zip([py_label(c) for c in m.classes_], map(float, P[i])))}
                   for i in idx]
            tol = dict(rtol=1e-6, atol=1e-7)
        else:
            if k == 2:
                margin = np.abs(m.decision_function(Xt))
                mask = margin > 1e-6
            else:
                V, margin = ovo_votes(m, Xt)
                s = np.sort(V, axis=1)
                mask = (s[:, -1] > s[:, -2]) & (margin > 1e-6)
            idx = pick(mask)
            exp = [{lab: py_label(v)} for v in m.predict(Xt[idx])]
            tol = TOL_TRANSCENDENTAL
            extra_note = " No probability model: label by LIBSVM one-vs-one voting; rows with vote ties were dropped."
        inputs = named(Xt[idx], names) if input_style == "named" else as_array(Xt[idx])
        w.write(name, spec, inputs, exp, "sklearn", notes + extra_note, tol=tol)

    strs = np.array(["alpha", "beta", "gamma"])
    svc_case("svm_svc_linear_binary", svm.SVC(kernel="linear", C=0.8), yb, None, "named",
             "sklearn SVC linear kernel, binary, int labels {0,1} -> supportVectorClassifier.")
    svc_case("svm_svc_rbf_multi", svm.SVC(kernel="rbf", C=2.0, gamma=0.3), y3, np.array([1, 2, 3]), "array",
             "sklearn SVC rbf kernel, 3 int classes {1,2,3}, multiArray input.")
    svc_case("svm_svc_poly_binary_prob", svm.SVC(kernel="poly", degree=3, coef0=1.0, gamma=0.2, C=1.0,
                                                 probability=True, random_state=0), yb, None, "named",
             "sklearn SVC poly kernel (degree 3, coef0 1, gamma 0.2), binary, probability=True.")
    svc_case("svm_svc_sigmoid_multi_prob_string", svm.SVC(kernel="sigmoid", gamma=0.05, coef0=0.0, C=1.0,
                                                          probability=True, random_state=0), y3, strs, "named",
             "sklearn SVC sigmoid kernel (gamma 0.05, coef0 0), 3 string classes, probability=True.")
    svc_case("svm_svc_rbf_multi_prob", svm.SVC(kernel="rbf", gamma="scale", C=1.0, probability=True,
                                               random_state=0), y3, np.array([10, 20, 30]), "array",
             "sklearn SVC rbf kernel (gamma='scale', stored as the fitted value), 3 int classes, probability=True.")
    svc_case("svm_svc_poly_multi", svm.SVC(kernel="poly", degree=2, coef0=0.5, gamma=0.5, C=0.5), y3, strs, "named",
             "sklearn SVC poly kernel (degree 2), 3 string classes, no probability.")
    svc_case("svm_nusvc_rbf_binary_prob", svm.NuSVC(nu=0.3, kernel="rbf", gamma=0.4, probability=True,
                                                    random_state=0), yb, np.array(["no", "yes"]), "named",
             "sklearn NuSVC rbf kernel, binary string labels, probability=True.")
    svc_case("svm_nusvc_linear_multi", svm.NuSVC(nu=0.4, kernel="linear"), y3, None, "array",
             "sklearn NuSVC linear kernel, 3 int classes {0,1,2}, no probability.")
    svc_case("svm_nusvc_sigmoid_multi_prob", svm.NuSVC(nu=0.5, kernel="sigmoid", gamma=0.1, coef0=-0.5,
                                                       probability=True, random_state=0), y3, None, "named",
             "sklearn NuSVC sigmoid kernel (gamma 0.1, coef0 -0.5), 3 int classes, probability=True.")

    # Regressors.
    yr = np.sin(X[:, 0]) * 2 + X[:, 1] ** 2 * 0.5 - X[:, 2] + 0.1 * rng.randn(len(X))

    def svr_case(name, model, input_style, notes):
        m = model.fit(X, yr)
        if input_style == "named":
            spec = sk_convert(m, names, "y").get_spec()
            inputs = named(Xt[:ROWS], names)
            out = "y"
        else:
            spec = sk_convert(m, "input", "prediction").get_spec()
            inputs = as_array(Xt[:ROWS])
            out = "prediction"
        w.write(name, spec, inputs, [{out: float(v)} for v in m.predict(Xt[:ROWS])], "sklearn", notes,
                tol=TOL_TRANSCENDENTAL)

    svr_case("svm_svr_rbf", svm.SVR(kernel="rbf", C=3.0, epsilon=0.1, gamma=0.25), "named",
             "sklearn SVR rbf -> supportVectorRegressor. f = sum(alpha_i K(sv_i, x)) - rho.")
    svr_case("svm_svr_linear", svm.SVR(kernel="linear", C=1.0, epsilon=0.2), "array",
             "sklearn SVR linear kernel, multiArray input.")
    svr_case("svm_svr_poly", svm.SVR(kernel="poly", degree=3, coef0=1.0, gamma=0.3, C=0.5), "named",
             "sklearn SVR poly kernel (degree 3, coef0 1, gamma 0.3).")
    svr_case("svm_svr_sigmoid", svm.SVR(kernel="sigmoid", gamma=0.05, coef0=0.2, C=1.0), "array",
             "sklearn SVR sigmoid kernel (gamma 0.05, coef0 0.2).")
    svr_case("svm_nusvr_rbf", svm.NuSVR(nu=0.5, kernel="rbf", C=2.0, gamma=0.2), "named",
             "sklearn NuSVR rbf kernel.")
    svr_case("svm_nusvr_poly", svm.NuSVR(nu=0.3, kernel="poly", degree=2, coef0=1.0, gamma=0.5, C=1.0), "array",
             "sklearn NuSVR poly kernel (degree 2).")


# ----------------------------------------------------------------------------
# SVM (LIBSVM itself)
# ----------------------------------------------------------------------------

def libsvm_shims():
    """libsvm-official 3.37 vs coremltools' LIBSVM converter: the package has no __version__ and
    the svm_type / kernel_type constants moved into IntEnums (svm_forms, kernel_names)."""
    import libsvm
    from libsvm import svm as _svm
    if not hasattr(libsvm, "__version__"):
        try:
            from importlib.metadata import version
            libsvm.__version__ = version("libsvm-official")
        except Exception:
            libsvm.__version__ = "3.37.0"
    for enum_cls in (_svm.svm_forms, _svm.kernel_names):
        for member in enum_cls:
            if not hasattr(_svm, member.name):
                setattr(_svm, member.name, int(member))


def gen_libsvm(w):
    w.family = "SVM"
    libsvm_shims()
    from libsvm import svmutil
    from coremltools.converters import libsvm as ct_libsvm

    rng = np.random.RandomState(3)
    d = 4
    centers = np.array([[1.2, 0, 0, -1], [-1.2, 1, 0, 0], [0, -1.2, 1, 1]])
    c = rng.randint(0, 3, 200)
    X = np.round(centers[c] + rng.randn(200, d), 3)
    Xt = np.round(1.5 * rng.randn(300, d), 3)

    def predict(m, Xq, opts):
        with contextlib.redirect_stdout(io.StringIO()):
            labs, _, vals = svmutil.svm_predict([0] * len(Xq), [list(map(float, r)) for r in Xq], m, opts)
        return np.array(labs), np.array(vals)

    def cls_case(name, y, params, input_style, notes, prob):
        m = svmutil.svm_train(list(map(float, y)), [list(map(float, r)) for r in X], params + " -q")
        if input_style == "named":
            spec = quiet(ct_libsvm.convert, m, names, "label", "classProbability").get_spec()
        else:
            spec = quiet(ct_libsvm.convert, m, "input", "label", "classProbability", input_length=d).get_spec()
        lab, probname = out_names(spec)
        labels = m.get_labels()
        if prob:
            L, P = predict(m, Xt, "-b 1 -q")
            idx = pick(top2_gap(P) >= 1e-4)
            exp = [{lab: int(L[i]), probname: {int(l): float(p) for l, p in zip(labels, P[i])}} for i in idx]
            tol = dict(rtol=1e-6, atol=1e-7)
        else:
            L, D = predict(m, Xt, "-q")
            k = len(labels)
            V = np.zeros((len(Xt), k), int)
            p = 0
            for i in range(k):
                for j in range(i + 1, k):
                    V[:, i] += D[:, p] > 0
                    V[:, j] += D[:, p] <= 0
                    p += 1
            s = np.sort(V, axis=1)
            idx = pick((s[:, -1] > s[:, -2]) & (np.abs(D).min(axis=1) > 1e-6))
            exp = [{lab: int(L[i])} for i in idx]
            tol = TOL_TRANSCENDENTAL
        inputs = named(Xt[idx], names) if input_style == "named" else as_array(Xt[idx])
        w.write(name, spec, inputs, exp, "libsvm",
                notes + f" LIBSVM label order {labels}. Expected values from libsvm's svm_predict"
                + (" with '-b 1'." if prob else "."), tol=tol)

    names = fnames(d)
    ybin = np.where(c == 0, 1, -1)
    y3 = np.array([1, 2, 5])[c]
    cls_case("libsvm_csvc_rbf_binary_prob", ybin, "-s 0 -t 2 -g 0.5 -c 2 -b 1", "array",
             "LIBSVM C-SVC rbf, labels {-1,+1}, probability model (-b 1).", True)
    cls_case("libsvm_csvc_linear_multi", y3, "-s 0 -t 0 -c 1", "named",
             "LIBSVM C-SVC linear, 3 classes {1,2,5}, no probability.", False)
    cls_case("libsvm_nusvc_poly_multi_prob", y3, "-s 1 -t 1 -d 2 -g 0.5 -r 1 -n 0.4 -b 1", "named",
             "LIBSVM nu-SVC poly (degree 2, gamma 0.5, coef0 1), 3 classes, -b 1.", True)
    cls_case("libsvm_csvc_sigmoid_binary", ybin, "-s 0 -t 3 -g 0.1 -r 0 -c 1", "array",
             "LIBSVM C-SVC sigmoid kernel, binary, no probability.", False)
    cls_case("libsvm_csvc_rbf_multi_prob", y3, "-s 0 -t 2 -g 0.3 -c 4 -b 1", "array",
             "LIBSVM C-SVC rbf, 3 classes, -b 1.", True)

    yr = np.sin(X[:, 0]) * 2 + X[:, 1] - 0.5 * X[:, 3] + 0.1 * rng.randn(len(X))

    def reg_case(name, params, input_style, notes):
        m = svmutil.svm_train(list(map(float, yr)), [list(map(float, r)) for r in X], params + " -q")
        if input_style == "named":
            spec = quiet(ct_libsvm.convert, m, names, "target").get_spec()
            inputs = named(Xt[:ROWS], names)
        else:
            spec = quiet(ct_libsvm.convert, m, "input", "target", input_length=d).get_spec()
            inputs = as_array(Xt[:ROWS])
        L, _ = predict(m, Xt[:ROWS], "-q")
        w.write(name, spec, inputs, [{"target": float(v)} for v in L], "libsvm",
                notes + " Expected values from libsvm's svm_predict.", tol=TOL_TRANSCENDENTAL)

    reg_case("libsvm_epsilon_svr_rbf", "-s 3 -t 2 -g 0.3 -c 2 -p 0.1", "named", "LIBSVM epsilon-SVR rbf.")
    reg_case("libsvm_nu_svr_linear", "-s 4 -t 0 -n 0.5 -c 1", "array", "LIBSVM nu-SVR linear.")
    reg_case("libsvm_epsilon_svr_poly", "-s 3 -t 1 -d 3 -g 0.2 -r 1 -c 0.5", "array", "LIBSVM epsilon-SVR poly.")

    # Sparse training data: 12 dimensions, most entries zero; the last two indices never occur,
    # so the converter's inferred input length would be short: input_length=12 is given.
    D = 12
    Xs = np.zeros((200, D))
    for i in range(200):
        cols = rng.choice(10, 3, replace=False)
        Xs[i, cols] = np.round(rng.uniform(0.5, 2.0, 3), 3)
    ys = np.array([1, 2, 3])[np.argmax(np.c_[Xs[:, 0:3].sum(1), Xs[:, 3:6].sum(1), Xs[:, 6:10].sum(1) * 0.75]
                                       + 0.2 * rng.randn(200, 3), axis=1)]
    sparse_train = [{int(j) + 1: float(v) for j, v in enumerate(r) if v != 0} for r in Xs]
    m = svmutil.svm_train(list(map(float, ys)), sparse_train, "-s 0 -t 2 -g 0.5 -c 2 -b 1 -q")
    spec = quiet(ct_libsvm.convert, m, "input", "label", "classProbability", input_length=D).get_spec()
    Xst = np.zeros((300, D))
    for i in range(300):
        cols = rng.choice(D, 3, replace=False)
        Xst[i, cols] = np.round(rng.uniform(0.5, 2.0, 3), 3)
    sparse_test = [{int(j) + 1: float(v) for j, v in enumerate(r) if v != 0} for r in Xst]
    with contextlib.redirect_stdout(io.StringIO()):
        L, _, P = svmutil.svm_predict([0] * len(Xst), sparse_test, m, "-b 1 -q")
    L, P = np.array(L), np.array(P)
    labels = m.get_labels()
    idx = pick(top2_gap(P) >= 1e-4)
    lab, probname = out_names(spec)
    exp = [{lab: int(L[i]), probname: {int(l): float(p) for l, p in zip(labels, P[i])}} for i in idx]
    w.write("libsvm_csvc_sparse_prob", spec, as_array(Xst[idx]), exp, "libsvm",
            "LIBSVM C-SVC rbf trained on sparse rows (index:value, 12 dimensions, indices 11 and 12 never "
            "occur in training) -> sparseSupportVectors with 1-based indices; the Core ML input is a dense "
            "DOUBLE array of length 12 (input_length=12) where element i is LIBSVM index i+1. Expected from "
            f"svm_predict -b 1 on the same rows given sparsely. LIBSVM label order {labels}.",
            tol=dict(rtol=1e-6, atol=1e-7))


# ----------------------------------------------------------------------------
# Tree ensembles
# ----------------------------------------------------------------------------

TREE_NOTE = ("Inputs lie on a binary grid (multiples of 1/8 plus 1/64), exactly representable in float32 and never "
             "equal to a split threshold, so float32 (source library) and float64 (Core ML spec) comparisons "
             "take the same branches.")


def tree_data(rng, n, d, nt=300):
    X = grid(rng, (n, d))
    Xt = grid(rng, (nt, d), offset=1.0 / 64)
    return X, Xt


def gen_trees(w):
    w.family = "TreeEnsemble"
    from coremltools.converters.sklearn import _tree_ensemble

    rng = np.random.RandomState(4)
    d = 5
    names = fnames(d, "f")
    X, Xt = tree_data(rng, 300, d)
    yr = np.sin(X[:, 0]) * 3 + X[:, 1] * X[:, 2] - X[:, 3] + 0.2 * rng.randn(len(X))
    score = np.c_[X[:, 0] + X[:, 1], X[:, 2] - X[:, 0], X[:, 3] * 0.8 + X[:, 4] * 0.5]
    y3 = np.argmax(score + 0.8 * rng.randn(len(X), 3), axis=1)
    yb = (X[:, 0] * X[:, 1] + X[:, 2] + 0.5 * rng.randn(len(X)) > 0).astype(int)

    def reg(name, m, notes, style="named", conv=None, tol=TOL_EXACT_DOUBLE):
        m.fit(X, yr)
        if conv is not None:
            spec = conv(m)
        elif style == "named":
            spec = sk_convert(m, names, "y").get_spec()
        else:
            spec = sk_convert(m, "input", "y").get_spec()
        inputs = named(Xt[:ROWS], names) if style == "named" else as_array(Xt[:ROWS])
        w.write(name, spec, inputs, [{"y": float(v)} for v in m.predict(Xt[:ROWS])], "sklearn",
                notes + " " + TREE_NOTE, tol=tol)
        return m

    reg("tree_decision_tree_regressor", tree.DecisionTreeRegressor(max_depth=6, random_state=0),
        "DecisionTreeRegressor(max_depth=6) -> treeEnsembleRegressor, BranchOnValueLessThanEqual.")
    reg("tree_random_forest_regressor", ensemble.RandomForestRegressor(n_estimators=8, max_depth=5, random_state=0),
        "RandomForestRegressor(8 trees) -> treeEnsembleRegressor; each leaf value carries the 1/8 factor.",
        style="array")
    reg("tree_gradient_boosting_regressor",
        ensemble.GradientBoostingRegressor(n_estimators=25, max_depth=3, learning_rate=0.2, random_state=0),
        "GradientBoostingRegressor(squared_error) -> treeEnsembleRegressor; basePredictionValue = the initial "
        "mean, leaves scaled by the learning rate.")
    reg("tree_gradient_boosting_regressor_absolute_error",
        ensemble.GradientBoostingRegressor(loss="absolute_error", n_estimators=15, max_depth=3, random_state=0),
        "GradientBoostingRegressor(loss='absolute_error'): base prediction = the fitted median.")
    reg("tree_extra_trees_regressor", ensemble.ExtraTreesRegressor(n_estimators=6, max_depth=5, random_state=0),
        "ExtraTreesRegressor(6 trees), converted with coremltools' internal "
        "converters.sklearn._tree_ensemble.convert_tree_ensemble (no public ExtraTrees converter).",
        conv=lambda m: _tree_ensemble.convert_tree_ensemble(m, names, "y"))

    def cls(name, m, y, notes, labels_map=None, style="named", conv=None, scale=None):
        y_fit = labels_map[y] if labels_map is not None else y
        m.fit(X, y_fit)
        if conv is not None:
            spec = conv(m)
        elif style == "named":
            spec = sk_convert(m, names, "classLabel").get_spec()
        else:
            spec = sk_convert(m, "input", "classLabel").get_spec()
        lab, prob = out_names(spec)
        P = m.predict_proba(Xt)
        labels_out = m.predict(Xt)
        P_core = P * scale if scale else P
        idx = pick(top2_gap(P) >= 1e-4)
        exp = [{lab: py_label(labels_out[i]), prob: dict(zip([py_label(c) for c in m.classes_], map(float, P_core[i])))}
               for i in idx]
        inputs = named(Xt[idx], names) if style == "named" else as_array(Xt[idx])
        tol = dict(rtol=1e-9, atol=1e-6) if len(m.classes_) == 2 and not isinstance(
            m, ensemble.GradientBoostingClassifier) else TOL_TRANSCENDENTAL
        w.write(name, spec, inputs, exp, "sklearn", notes + " " + TREE_NOTE, tol=tol)

    BIN_NOTE = ("Binary: one prediction dimension v = P(class 1); Core ML reports P(class 0) = 1 - v. The converter "
                "stores a leaf value of exactly 0.5 as 0.5 - 1e-7 (so ties go to class 0 like sklearn's argmax), "
                "hence atol 1e-6 on probabilities; rows with a top-2 gap < 1e-4 were dropped.")
    cls("tree_decision_tree_classifier_binary", tree.DecisionTreeClassifier(max_depth=5, random_state=0), yb,
        "DecisionTreeClassifier binary, int labels {0,1}. " + BIN_NOTE)
    cls("tree_decision_tree_classifier_multi_string", tree.DecisionTreeClassifier(max_depth=5, random_state=0), y3,
        "DecisionTreeClassifier, 3 string classes: leaves hold the class-fraction vector, NoTransform.",
        labels_map=np.array(["low", "mid", "high"]))
    cls("tree_random_forest_classifier_binary",
        ensemble.RandomForestClassifier(n_estimators=9, max_depth=5, random_state=0), yb,
        "RandomForestClassifier(9 trees) binary; leaves carry the 1/9 factor. " + BIN_NOTE, style="array")
    n_rf = 7
    cls("tree_random_forest_classifier_multi",
        ensemble.RandomForestClassifier(n_estimators=n_rf, max_depth=5, random_state=0), y3,
        f"RandomForestClassifier({n_rf} trees), 3 int classes {{0,1,2}}. CONVERTER QUIRK: the multi-class "
        "conversion omits the 1/n_trees factor, so the model's classProbability is the SUM of the per-tree class "
        f"fractions (sums to {n_rf}). Expected classProbability = {n_rf} x sklearn predict_proba (what the "
        "converted model means under Core ML semantics, NoTransform); the label (argmax) is unaffected.",
        scale=n_rf)
    cls("tree_gradient_boosting_classifier_binary",
        ensemble.GradientBoostingClassifier(n_estimators=20, max_depth=3, learning_rate=0.3, random_state=0), yb,
        "GradientBoostingClassifier binary: basePredictionValue = log-odds prior, Regression_Logistic "
        "post-transform; P(1) = sigmoid(sum), P(0) = 1 - P(1).", labels_map=np.array([5, 9]))
    cls("tree_gradient_boosting_classifier_multi",
        ensemble.GradientBoostingClassifier(n_estimators=12, max_depth=3, learning_rate=0.3, random_state=0), y3,
        "GradientBoostingClassifier, 3 string classes: one tree per class per stage (evaluationIndex = class), "
        "basePredictionValue = log priors, Classification_SoftMax.", labels_map=np.array(["a", "b", "c"]),
        style="array")
    n_et = 5
    cls("tree_extra_trees_classifier_multi",
        ensemble.ExtraTreesClassifier(n_estimators=n_et, max_depth=6, random_state=0), y3,
        f"ExtraTreesClassifier({n_et} trees), 3 string classes, converted with coremltools' internal "
        "_tree_ensemble.convert_tree_ensemble(mode='classifier'). Same CONVERTER QUIRK as "
        f"tree_random_forest_classifier_multi: no 1/n_trees factor, so expected classProbability = {n_et} x sklearn "
        "predict_proba (sums to the tree count); the label is unaffected.",
        labels_map=np.array(["red", "green", "blue"]), scale=n_et,
        conv=lambda m: _tree_ensemble.convert_tree_ensemble(m, names, "classLabel", mode="classifier",
                                                            class_labels=list(m.classes_)))
    cls("tree_extra_trees_classifier_binary",
        ensemble.ExtraTreesClassifier(n_estimators=6, max_depth=5, random_state=0), yb,
        "ExtraTreesClassifier(6 trees) binary, converted with coremltools' internal "
        "_tree_ensemble.convert_tree_ensemble(mode='classifier'). " + BIN_NOTE,
        conv=lambda m: _tree_ensemble.convert_tree_ensemble(m, names, "classLabel", mode="classifier",
                                                            class_labels=list(m.classes_)))


def gen_xgboost(w):
    w.family = "TreeEnsemble"
    from coremltools.converters import xgboost as ct_xgb

    rng = np.random.RandomState(5)
    d = 4
    names = fnames(d, "f")
    X, Xt = tree_data(rng, 300, d)
    yr = np.sin(X[:, 0]) * 3 + X[:, 1] * X[:, 2] - X[:, 3] + 0.2 * rng.randn(len(X))
    yb = (X[:, 0] * X[:, 1] + X[:, 2] + 0.5 * rng.randn(len(X)) > 0).astype(int)
    y3 = np.argmax(np.c_[X[:, 0] + X[:, 1], X[:, 2] - X[:, 0], X[:, 3]] + 0.8 * rng.randn(len(X), 3), axis=1)

    def with_nan(A, frac, seed):
        r = np.random.RandomState(seed)
        A = A.copy()
        A[r.rand(*A.shape) < frac] = np.nan
        return A

    common = dict(base_score=0.5, n_jobs=1, random_state=0, tree_method="hist")
    XGB_NOTE = ("Trained with base_score=0.5 because coremltools' XGBoost converter ignores base_score "
                "(hard-codes 0.5 for regression, 0 margin for classification). XGBoost sums leaves in float32 and "
                "compares float32 features with float32 thresholds (BranchOnValueLessThan); the converted model "
                "holds the same float32 values as doubles, hence rtol 1e-5 / atol 1e-6. " + TREE_NOTE)

    def reg(name, Xtr, Xte, notes):
        m = xgboost.XGBRegressor(n_estimators=20, max_depth=4, learning_rate=0.3, **common).fit(Xtr, yr)
        spec = ct_xgb.convert(m, feature_names=names, target="y").get_spec()
        w.write(name, spec, named(Xte[:ROWS], names),
                [{"y": float(v)} for v in m.predict(Xte[:ROWS])], "xgboost", notes + " " + XGB_NOTE,
                tol=dict(rtol=1e-5, atol=1e-5))

    reg("xgb_regressor", X, Xt, "XGBRegressor(reg:squarederror, 20 trees, depth 4) -> treeEnsembleRegressor, "
        "basePredictionValue 0.5.")
    Xn, Xtn = with_nan(X, 0.15, 50), with_nan(Xt, 0.2, 51)
    reg("xgb_regressor_missing", Xn, Xtn,
        "XGBRegressor trained with 15% NaN; inputs contain NaN (JSON \"NaN\"). Each branch node keeps XGBoost's "
        "default direction as missingValueTracksTrueChild: a NaN feature goes to the true child iff set.")

    def cls(name, y, Xtr, Xte, notes, tol):
        m = xgboost.XGBClassifier(n_estimators=15, max_depth=3, learning_rate=0.3, **common).fit(Xtr, y)
        spec = ct_xgb.convert(m, feature_names=names, target="label", mode="classifier").get_spec()
        lab, prob = out_names(spec)
        P = m.predict_proba(Xte).astype(np.float64)
        L = m.predict(Xte)
        idx = pick(top2_gap(P) >= 1e-4)
        exp = [{lab: int(L[i]), prob: {int(c): float(p) for c, p in enumerate(P[i])}} for i in idx]
        w.write(name, spec, named(Xte[idx], names), exp, "xgboost", notes + " " + XGB_NOTE, tol=tol)

    cls("xgb_classifier_binary", yb, X, Xt,
        "XGBClassifier binary:logistic -> treeEnsembleClassifier, Regression_Logistic, labels {0,1}.",
        TOL_FLOAT32)
    cls("xgb_classifier_binary_missing", yb, Xn, Xtn,
        "XGBClassifier binary trained with NaN; inputs contain NaN (JSON \"NaN\"), missingValueTracksTrueChild.",
        TOL_FLOAT32)
    cls("xgb_classifier_multi", y3, X, Xt,
        "XGBClassifier multi:softprob, 3 classes: tree t adds to class t mod 3, Classification_SoftMax.",
        TOL_FLOAT32)


# ----------------------------------------------------------------------------
# Feature engineering
# ----------------------------------------------------------------------------

def arr_out(v):
    return np.asarray(v, dtype=np.float64)


def set_io(spec, inputs, outputs):
    from coremltools.models._interface_management import set_transform_interface_params
    return set_transform_interface_params(spec, inputs, outputs)


def new_spec():
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    return spec


def gen_feature_engineering(w):
    w.family = "FeatureEngineering"
    rng = np.random.RandomState(6)
    d = 4
    X = np.round(rng.randn(100, d) * 2 + 1, 3)
    Xt = np.round(rng.randn(ROWS, d) * 2 + 1, 3)
    names = fnames(d)

    # Scaler ---------------------------------------------------------------
    m = preprocessing.StandardScaler().fit(X)
    spec = sk_convert(m, "input", "output").get_spec()
    w.write("fe_standard_scaler_array", spec, as_array(Xt), [{"output": arr_out(r)} for r in m.transform(Xt)],
            "sklearn", "StandardScaler -> scaler: y = (x + shiftValue) * scaleValue with shift = -mean, "
            "scale = 1/std. DOUBLE multiArray in and out (shape [4]).")
    spec = sk_convert(m, names, "output").get_spec()
    w.write("fe_standard_scaler_named", spec, named(Xt, names), [{"output": arr_out(r)} for r in m.transform(Xt)],
            "sklearn", "StandardScaler with 4 named double inputs -> pipeline [featureVectorizer, scaler].")

    m = preprocessing.MinMaxScaler(feature_range=(-1, 2)).fit(X)
    spec = new_spec()
    set_io(spec, [("input", datatypes.Array(d))], [("output", datatypes.Array(d))])
    for mn, sc in zip(m.min_, m.scale_):
        spec.scaler.shiftValue.append(float(mn / sc))
        spec.scaler.scaleValue.append(float(sc))
    w.write("fe_minmax_scaler_handbuilt", spec, as_array(Xt), [{"output": arr_out(r)} for r in m.transform(Xt)],
            "sklearn", "MinMaxScaler(feature_range=(-1,2)) has no converter: the scaler spec is written by hand "
            "(shift = min_/scale_, scale = scale_, so (x + shift) * scale = x*scale_ + min_). Expected = "
            "sklearn transform.")

    # Normalizer -----------------------------------------------------------
    for norm_name in ("l1", "l2", "max"):
        m = preprocessing.Normalizer(norm=norm_name).fit(X)
        spec = sk_convert(m, [("input", datatypes.Array(d))], "output").get_spec()
        w.write(f"fe_normalizer_{norm_name}", spec, as_array(Xt), [{"output": arr_out(r)} for r in m.transform(Xt)],
                "sklearn", f"Normalizer(norm='{norm_name}') -> normalizer "
                f"({ {'l1': 'L1', 'l2': 'L2', 'max': 'LMax'}[norm_name] }). 'max' divides by max |x_i|.")

    # Imputer --------------------------------------------------------------
    Xm = X.copy()
    Xm[rng.rand(*Xm.shape) < 0.2] = np.nan
    Xtm = Xt.copy()
    Xtm[rng.rand(*Xtm.shape) < 0.3] = np.nan
    m = SimpleImputer(strategy="mean").fit(Xm)
    spec = sk_convert(m, "input", "output").get_spec()
    w.write("fe_imputer_mean_nan", spec, as_array(Xtm), [{"output": arr_out(r)} for r in m.transform(Xtm)],
            "sklearn", "SimpleImputer(strategy='mean', missing_values=NaN) -> imputer with imputedDoubleArray and "
            "replaceDoubleValue = NaN: every NaN element is replaced by the column mean. Input NaN is written as "
            "the JSON string \"NaN\" inside multiArray data.")
    Xs = np.round(X).copy()
    Xs[rng.rand(*Xs.shape) < 0.2] = -1.0
    Xts = np.round(Xt).copy()
    Xts[rng.rand(*Xts.shape) < 0.3] = -1.0
    m = SimpleImputer(strategy="median", missing_values=-1.0).fit(Xs)
    spec = sk_convert(m, "input", "output").get_spec()
    w.write("fe_imputer_median_sentinel", spec, as_array(Xts), [{"output": arr_out(r)} for r in m.transform(Xts)],
            "sklearn", "SimpleImputer(strategy='median', missing_values=-1.0) -> imputer with replaceDoubleValue "
            "-1: elements equal to -1 are replaced by the column median.")

    # One-hot --------------------------------------------------------------
    Xi = np.c_[rng.randint(0, 3, 100), rng.randint(0, 4, 100), rng.randint(0, 2, 100)]
    Xit = np.c_[rng.randint(0, 3, ROWS), rng.randint(0, 4, ROWS), rng.randint(0, 2, ROWS)]
    m = preprocessing.OneHotEncoder(handle_unknown="ignore").fit(Xi)
    Xit[3, 1] = 7  # unknown categories: all zeros for that column (IgnoreUnknown)
    Xit[11, 0] = 5
    spec = sk_convert(m, "input", "output").get_spec()
    w.write("fe_one_hot_encoder_int_array", spec, as_array(Xit.astype(float)),
            [{"output": arr_out(r)} for r in m.transform(Xit).toarray()], "sklearn",
            "OneHotEncoder(handle_unknown='ignore') on 3 int columns (categories 0..2, 0..3, 0..1) -> pipeline "
            "[per column: arrayFeatureExtractor (Int64 out) -> oneHotEncoder (sparse dict out); featureVectorizer]. "
            "The input is a DOUBLE multiArray holding integral values. Rows 3 and 11 hold unknown categories "
            "(all zeros for that column). Categories are 0..n-1 on purpose: CONVERTER QUIRK, coremltools writes "
            "int64Categories 0..n-1 (positions) instead of categories_, so other category values would convert "
            "wrongly.")

    cats = [2, 5, 7, 11]
    m = preprocessing.OneHotEncoder(categories=[cats], handle_unknown="ignore").fit(np.array(cats)[:, None])
    vals = [5, 2, 11, 7, 3, 7, 2, 2, 11, 5, 0, 7, 5, 11, 2, 100, 7, 5, 2, 11]
    spec = new_spec()
    set_io(spec, [("category", datatypes.Int64())], [("encoded", datatypes.Array(len(cats)))])
    spec.oneHotEncoder.int64Categories.vector.extend(cats)
    spec.oneHotEncoder.outputSparse = False
    spec.oneHotEncoder.handleUnknown = 1  # IgnoreUnknown
    w.write("fe_one_hot_encoder_int64_dense_handbuilt", spec, [{"category": v} for v in vals],
            [{"encoded": arr_out(r)} for r in m.transform(np.array(vals)[:, None]).toarray()], "sklearn",
            "Hand-built oneHotEncoder: int64 input, int64Categories [2,5,7,11], outputSparse=false (dense DOUBLE "
            "array of 4), IgnoreUnknown (3, 0, 100 -> all zeros). Expected = sklearn OneHotEncoder with the same "
            "categories and handle_unknown='ignore'.")

    scats = ["red", "green", "blue", "teal"]
    m = preprocessing.OneHotEncoder(categories=[scats], handle_unknown="ignore").fit(np.array(scats)[:, None])
    svals = ["green", "red", "blue", "teal", "pink", "red", "teal", "green", "blue", "blue", "Red", "green",
             "teal", "red", "", "blue", "green", "teal", "red", "blue"]
    spec = new_spec()
    set_io(spec, [("color", datatypes.String())], [("encoded", datatypes.Dictionary(int))])
    spec.oneHotEncoder.stringCategories.vector.extend(scats)
    spec.oneHotEncoder.outputSparse = True
    spec.oneHotEncoder.handleUnknown = 1
    dense = m.transform(np.array(svals)[:, None]).toarray()
    w.write("fe_one_hot_encoder_string_sparse_handbuilt", spec, [{"color": v} for v in svals],
            [{"encoded": {int(j): 1.0 for j in np.flatnonzero(r)}} for r in dense], "sklearn",
            "Hand-built oneHotEncoder: string input, stringCategories [red,green,blue,teal], outputSparse=true: the "
            "output is a dictionary int64 index -> 1.0 holding only the hot entry (empty {} for unknown strings "
            "'pink', 'Red', '' under IgnoreUnknown; matching is case-sensitive). Expected from sklearn "
            "OneHotEncoder (nonzero entries of its dense output).")

    # DictVectorizer -------------------------------------------------------
    keys = ["age", "height", "score", "weight", "zeta"]

    def rand_dict(r):
        ks = r.choice(keys, r.randint(1, len(keys) + 1), replace=False)
        return {str(k): float(np.round(r.randn() * 10, 2)) for k in ks}

    train = [rand_dict(rng) for _ in range(60)]
    test = [rand_dict(rng) for _ in range(ROWS)]
    m = DictVectorizer(sparse=False).fit(train)
    spec = sk_convert(m, "features", "output").get_spec()
    w.write("fe_dict_vectorizer", spec, [{"features": t} for t in test],
            [{"output": arr_out(r)} for r in m.transform(test)], "sklearn",
            "DictVectorizer on string-keyed dictionaries of doubles -> pipeline [dictVectorizer (stringToIndex, "
            "sorted keys, sparse int64-keyed dict out), featureVectorizer (dense array of 5)]. Absent keys give 0. "
            "Every test key occurs in the mapping (Core ML's DictVectorizer requires that).")

    # CategoricalMapping (no converter emits it alone) ---------------------
    mapping = {"red": 0, "green": 1, "blue": 2, "yellow": 7, "black": -3}
    spec = new_spec()
    set_io(spec, [("color", datatypes.String())], [("code", datatypes.Int64())])
    for k, v in mapping.items():
        spec.categoricalMapping.stringToInt64Map.map[k] = v
    spec.categoricalMapping.int64Value = -1
    cvals = ["red", "blue", "purple", "green", "yellow", "black", "Red", "", "blue", "green", "white", "yellow",
             "red", "black", "black", "blue ", "green", "red", "yellow", "orange"]
    w.write("fe_categorical_mapping_string_to_int64", spec, [{"color": v} for v in cvals],
            [{"code": mapping.get(v, -1)} for v in cvals], "spec",
            "Hand-built categoricalMapping stringToInt64Map with ValueOnUnknown int64Value = -1. Expected computed "
            "in Python by the mapping semantics (exact, case-sensitive lookup; unknown -> -1).")

    imap = {0: "zero", 1: "one", 2: "two", 10: "ten", -5: "minus five"}
    spec = new_spec()
    set_io(spec, [("n", datatypes.Int64())], [("word", datatypes.String())])
    for k, v in imap.items():
        spec.categoricalMapping.int64ToStringMap.map[k] = v
    spec.categoricalMapping.strValue = "unknown"
    ivals = [0, 1, 2, 3, 10, -5, 11, 2, 1, 0, 99, -1, 10, 2, 1, 0, 7, -5, 10, 1]
    w.write("fe_categorical_mapping_int64_to_string", spec, [{"n": v} for v in ivals],
            [{"word": imap.get(v, "unknown")} for v in ivals], "spec",
            "Hand-built categoricalMapping int64ToStringMap with ValueOnUnknown strValue = 'unknown'. Expected "
            "by the mapping semantics.")

    # FeatureVectorizer / ArrayFeatureExtractor / Identity -----------------
    spec_fv, n_out = create_feature_vectorizer(
        [("a", datatypes.Double()), ("b", datatypes.Int64()), ("c", datatypes.Array(3)),
         ("d", datatypes.Dictionary(int))], "features", {"d": 4})
    spec = spec_fv
    rows_in, rows_out = [], []
    for i in range(ROWS):
        a = float(np.round(rng.randn(), 3))
        b = int(rng.randint(-5, 6))
        c = np.round(rng.randn(3), 3)
        dd = {int(k): float(np.round(rng.randn(), 2)) for k in rng.choice(4, rng.randint(0, 4), replace=False)}
        rows_in.append({"a": a, "b": b, "c": c, "d": dd})
        dense = np.zeros(4)
        for k, v in dd.items():
            dense[k] = v
        rows_out.append({"features": np.r_[a, b, c, dense]})
    w.write("fe_feature_vectorizer_handbuilt", spec, rows_in, rows_out, "spec",
            f"featureVectorizer built with coremltools.models.feature_vectorizer: inputs a (double), b (int64), "
            f"c (DOUBLE array of 3) and d (int64-keyed dictionary expanded to 4 slots, absent keys 0) -> "
            f"'features' = concat in inputList order (length {n_out}). Expected by concatenation.")

    A = np.round(rng.randn(ROWS, 6), 3)
    spec = create_array_feature_extractor([("input", datatypes.Array(6))], "picked", 4)
    w.write("fe_array_feature_extractor_single", spec, as_array(A), [{"picked": float(r[4])} for r in A], "spec",
            "arrayFeatureExtractor with one extractIndex (4) -> a double output.")
    spec = create_array_feature_extractor([("input", datatypes.Array(6))], "picked", [5, 0, 2, 2])
    w.write("fe_array_feature_extractor_multi", spec, as_array(A), [{"picked": arr_out(r[[5, 0, 2, 2]])} for r in A],
            "spec", "arrayFeatureExtractor with extractIndex [5,0,2,2] (repeats allowed) -> DOUBLE array of 4.")

    spec = new_spec()
    set_io(spec, [("x", datatypes.Array(3)), ("s", datatypes.String()), ("n", datatypes.Int64())],
           [("x", datatypes.Array(3)), ("s", datatypes.String()), ("n", datatypes.Int64())])
    spec.identity.SetInParent()
    rows = [{"x": np.round(rng.randn(3), 3), "s": f"row{i}", "n": int(i * 7 - 30)} for i in range(ROWS)]
    w.write("fe_identity_handbuilt", spec, rows, rows, "spec",
            "Hand-built identity model: outputs equal the inputs (same names, same order).")


# ----------------------------------------------------------------------------
# Pipelines (scikit-learn Pipelines -> Core ML pipelines)
# ----------------------------------------------------------------------------

def gen_pipelines(w):
    w.family = "Pipeline"
    rng = np.random.RandomState(7)
    d = 4
    names = fnames(d)
    X = np.round(rng.randn(200, d) * 2 + 1, 3)
    X[rng.rand(*X.shape) < 0.15] = np.nan
    Xt = np.round(rng.randn(300, d) * 2 + 1, 3)
    Xt[rng.rand(*Xt.shape) < 0.25] = np.nan
    Xf = np.where(np.isnan(X), 0, X)
    yr = Xf @ np.array([1.0, -2.0, 0.5, 1.5]) + 0.2 * rng.randn(len(X))

    p = Pipeline([("impute", SimpleImputer(strategy="mean")), ("scale", preprocessing.StandardScaler()),
                  ("ridge", linear_model.Ridge(alpha=1.0))]).fit(X, yr)
    spec = sk_convert(p, names, "y").get_spec()
    w.write("pipe_impute_scale_ridge", spec, named(Xt[:ROWS], names),
            [{"y": float(v)} for v in p.predict(Xt[:ROWS])], "sklearn",
            "Pipeline(SimpleImputer(mean), StandardScaler, Ridge) with 4 named double inputs (some NaN, written "
            "\"NaN\") -> pipelineRegressor [featureVectorizer, imputer, scaler, glmRegressor].")

    y3 = np.array(["north", "south", "east"])[np.argmax(
        np.c_[Xf[:, 0], Xf[:, 1] - Xf[:, 2], Xf[:, 3] * 0.5] + 0.5 * rng.randn(len(X), 3), axis=1)]
    p = Pipeline([("impute", SimpleImputer(strategy="median")), ("scale", preprocessing.StandardScaler()),
                  ("lr", linear_model.LogisticRegression(multi_class="ovr"))]).fit(X, y3)
    spec = sk_convert(p, names, "direction").get_spec()
    lab, prob = out_names(spec)
    P = p.predict_proba(Xt)
    idx = pick(top2_gap(P) >= 1e-6)
    exp = [{lab: str(p.predict(Xt[i:i + 1])[0]), prob: dict(zip(p.classes_.tolist(), map(float, P[i])))} for i in idx]
    w.write("pipe_impute_scale_logreg", spec, named(Xt[idx], names), exp, "sklearn",
            "Pipeline(SimpleImputer(median), StandardScaler, LogisticRegression(ovr)), 3 string classes -> "
            "pipelineClassifier [featureVectorizer, imputer, scaler, glmClassifier].", tol=TOL_TRANSCENDENTAL)

    # One-hot + logistic regression on int columns (categories 0..n-1, see the converter quirk).
    Xi = np.c_[rng.randint(0, 3, 300), rng.randint(0, 4, 300), rng.randint(0, 3, 300)]
    Xit = np.c_[rng.randint(0, 3, 200), rng.randint(0, 4, 200), rng.randint(0, 3, 200)]
    yi = ((Xi[:, 0] == 1) + (Xi[:, 1] >= 2) + (Xi[:, 2] == 0) + rng.rand(300) > 1.6).astype(int)
    p = Pipeline([("ohe", preprocessing.OneHotEncoder()),
                  ("lr", linear_model.LogisticRegression(multi_class="ovr"))]).fit(Xi, yi)
    spec = sk_convert(p, "input", "label").get_spec()
    lab, prob = out_names(spec)
    P = p.predict_proba(Xit)
    idx = pick(top2_gap(P) >= 1e-6)
    exp = [{lab: int(p.predict(Xit[i:i + 1])[0]), prob: {int(c): float(v) for c, v in zip(p.classes_, P[i])}}
           for i in idx]
    w.write("pipe_one_hot_logreg", spec, as_array(Xit[idx].astype(float)), exp, "sklearn",
            "Pipeline(OneHotEncoder, LogisticRegression(ovr)) on 3 int columns (DOUBLE multiArray input with "
            "integral values) -> pipelineClassifier [one-hot pipeline (arrayFeatureExtractor, oneHotEncoder, "
            "featureVectorizer), glmClassifier]: a nested pipeline.", tol=TOL_TRANSCENDENTAL)

    # DictVectorizer + regressor / classifier.
    keys = ["a", "b", "c", "d", "e", "f"]

    def rand_dict(r):
        ks = r.choice(keys, r.randint(2, len(keys) + 1), replace=False)
        return {str(k): float(np.round(r.randn() * 3, 2)) for k in ks}

    train = [rand_dict(rng) for _ in range(200)]
    test = [rand_dict(rng) for _ in range(200)]
    coefs = dict(zip(keys, [1.0, -0.5, 2.0, 0.0, 0.7, -1.2]))
    ytr = np.array([sum(coefs[k] * v for k, v in t.items()) for t in train]) + 0.1 * rng.randn(len(train))
    p = Pipeline([("dv", DictVectorizer(sparse=False)), ("lr", linear_model.LinearRegression())]).fit(train, ytr)
    spec = sk_convert(p, "features", "y").get_spec()
    w.write("pipe_dict_vectorizer_linear_regression", spec, [{"features": t} for t in test[:ROWS]],
            [{"y": float(v)} for v in p.predict(test[:ROWS])], "sklearn",
            "Pipeline(DictVectorizer, LinearRegression), input = string-keyed dictionary -> pipelineRegressor "
            "[dict-vectorizer pipeline (dictVectorizer, featureVectorizer), glmRegressor].")

    ycls = (ytr > np.median(ytr)).astype(int)
    p = Pipeline([("dv", DictVectorizer(sparse=False)), ("scale", preprocessing.StandardScaler()),
                  ("svc", svm.SVC(kernel="rbf", gamma=0.2, probability=True, random_state=0))]).fit(train, ycls)
    spec = sk_convert(p, "features", "label").get_spec()
    lab, prob = out_names(spec)
    svc = p.named_steps["svc"]
    Z = p[:-1].transform(test)
    P = sk_binary_svc_libsvm_proba(svc, Z)
    L = svc.classes_[np.argmax(P, axis=1)]
    idx = pick(top2_gap(P) >= 1e-4)
    exp = [{lab: int(L[i]), prob: {int(c): float(v) for c, v in zip(svc.classes_, P[i])}} for i in idx]
    w.write("pipe_dict_vectorizer_scale_svc_prob", spec, [{"features": test[i]} for i in idx], exp, "sklearn",
            "Pipeline(DictVectorizer, StandardScaler, SVC(rbf, probability=True)) binary -> pipelineClassifier "
            "[dict-vectorizer pipeline, scaler, supportVectorClassifier]. As in svm_svc_poly_binary_prob the "
            "probabilities are LIBSVM's two-class pairwise sigmoid of sklearn's decision value (not sklearn's "
            "coupled predict_proba) and the label is their argmax.", tol=dict(rtol=1e-6, atol=1e-7))

    # Normalizer + kNN is avoided (kNN takes FLOAT32); Normalizer + GLM classifier instead.
    Xp = np.round(rng.randn(200, d), 3)
    Xpt = np.round(rng.randn(200, d), 3)
    yp = np.argmax(Xp / np.linalg.norm(Xp, axis=1, keepdims=True) @ np.eye(4)[:, :3] + 0.3 * rng.randn(200, 3), 1)
    p = Pipeline([("norm", preprocessing.Normalizer(norm="l2")),
                  ("lr", linear_model.LogisticRegression(multi_class="ovr", C=5.0))]).fit(Xp, yp)
    spec = sk_convert(p, names, "label").get_spec()
    lab, prob = out_names(spec)
    P = p.predict_proba(Xpt)
    idx = pick(top2_gap(P) >= 1e-6)
    exp = [{lab: int(p.predict(Xpt[i:i + 1])[0]), prob: {int(c): float(v) for c, v in zip(p.classes_, P[i])}}
           for i in idx]
    w.write("pipe_normalizer_logreg", spec, named(Xpt[idx], names), exp, "sklearn",
            "Pipeline(Normalizer(l2), LogisticRegression(ovr)), 3 int classes -> pipelineClassifier "
            "[featureVectorizer, normalizer, glmClassifier].", tol=TOL_TRANSCENDENTAL)

    # Hand-assembled pipeline: categoricalMapping -> oneHotEncoder -> featureVectorizer (with a double) -> GLM.
    from coremltools.models.pipeline import PipelineRegressor
    cities = ["paris", "tokyo", "lima", "oslo"]
    weights = {"paris": 2.0, "tokyo": -1.0, "lima": 0.5, "oslo": 3.0}
    pr = PipelineRegressor([("city", datatypes.String()), ("temp", datatypes.Double())], [("y", datatypes.Double())])
    m1 = new_spec()
    set_io(m1, [("city", datatypes.String())], [("city_code", datatypes.Int64())])
    for i, c in enumerate(cities):
        m1.categoricalMapping.stringToInt64Map.map[c] = i
    m1.categoricalMapping.int64Value = len(cities)  # unknown -> an extra code
    m2 = new_spec()
    set_io(m2, [("city_code", datatypes.Int64())], [("city_hot", datatypes.Dictionary(int))])
    m2.oneHotEncoder.int64Categories.vector.extend(range(len(cities) + 1))
    m2.oneHotEncoder.outputSparse = True
    m3, _ = create_feature_vectorizer([("city_hot", datatypes.Dictionary(int)), ("temp", datatypes.Double())],
                                      "vec", {"city_hot": len(cities) + 1})
    lr = linear_model.LinearRegression()
    cv = list(rng.choice(cities + ["rome"], 100))
    tv = np.round(rng.randn(100) * 10, 1)
    Z = np.zeros((100, len(cities) + 2))
    for i, c in enumerate(cv):
        Z[i, cities.index(c) if c in cities else len(cities)] = 1
    Z[:, -1] = tv
    lr.fit(Z, np.array([weights.get(c, 0.0) for c in cv]) + 0.3 * tv)
    m4 = sk_convert(lr, "vec", "y").get_spec()
    # The GLM sees one array input of length 6.
    del m4.description.input[:]
    inp = m4.description.input.add()
    inp.name = "vec"
    inp.type.multiArrayType.shape.append(len(cities) + 2)
    inp.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    for sub in (m1, m2, m3, m4):
        pr.add_model(sub)
    spec = pr.spec
    ct_rows = [{"city": c, "temp": float(t)} for c, t in zip(rng.choice(cities + ["rome", "bern"], ROWS),
                                                            np.round(rng.randn(ROWS) * 10, 1))]
    Zt = np.zeros((ROWS, len(cities) + 2))
    for i, r in enumerate(ct_rows):
        Zt[i, cities.index(r["city"]) if r["city"] in cities else len(cities)] = 1
        Zt[i, -1] = r["temp"]
    w.write("pipe_handbuilt_categorical_onehot_glm", spec, ct_rows, [{"y": float(v)} for v in lr.predict(Zt)],
            "sklearn", "Hand-assembled pipelineRegressor: categoricalMapping (string -> int64, unknown -> 4) -> "
            "oneHotEncoder (int64 categories 0..4, sparse dict) -> featureVectorizer (dict of 5 + double temp) -> "
            "glmRegressor converted from a sklearn LinearRegression trained on that encoding. Expected = "
            "LinearRegression.predict on the same encoding.")


# ----------------------------------------------------------------------------
# k-nearest neighbours
# ----------------------------------------------------------------------------

def gen_knn(w):
    w.family = "KNN"
    rng = np.random.RandomState(8)
    d = 3
    n = 60
    centers = np.array([[1, 1, 0], [-1, 0.5, 1], [0, -1, -1], [1.5, -1, 1]])

    def data(nclass, n_train, n_test):
        c = rng.randint(0, nclass, n_train)
        X = np.round((centers[c] + 0.9 * rng.randn(n_train, d)) * 8) / 8
        Xt = np.round(rng.uniform(-2.5, 2.5, (n_test, d)) * 8) / 8 + 1.0 / 64
        return X, c, Xt

    def neighbours(X, Xt, k):
        D2 = ((Xt[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        order = np.argsort(D2, axis=1, kind="stable")
        Ds = np.take_along_axis(D2, order, axis=1)
        gap = Ds[:, k] - Ds[:, k - 1]  # no ambiguity about who is in the k nearest
        return D2, order[:, :k], Ds[:, :k], gap

    def votes(y, nb, w_, ncls):
        V = np.zeros((len(nb), ncls))
        for i in range(len(nb)):
            for j, wt in zip(nb[i], w_[i]):
                V[i, y[j]] += wt
        return V

    def case(name, k, algorithm, weighting, nclass, notes, label_names=None):
        X, y, Xt = data(nclass, n, 400)
        m_uniform = neighbors.KNeighborsClassifier(n_neighbors=k, algorithm=algorithm, weights="uniform").fit(X, y)
        spec = sk_convert(m_uniform, "input", "label").get_spec()
        m = neighbors.KNeighborsClassifier(n_neighbors=k, algorithm=algorithm, weights=weighting).fit(
            X, y if label_names is None else label_names[y])
        D2, nb, Dk, gap = neighbours(X, Xt, k)
        if weighting == "uniform":
            V = votes(y, nb, np.ones_like(Dk), nclass)
            s = np.sort(V, axis=1)
            ok = (s[:, -1] > s[:, -2]) & (gap > 1e-3)
        else:
            spec.kNearestNeighborsClassifier.inverseDistanceWeighting.SetInParent()
            V1 = votes(y, nb, 1 / np.sqrt(Dk), nclass)
            V2 = votes(y, nb, 1 / Dk, nclass)
            s1, s2 = np.sort(V1, 1), np.sort(V2, 1)
            ok = ((np.argmax(V1, 1) == np.argmax(V2, 1)) & (s1[:, -1] - s1[:, -2] > 1e-3 * s1[:, -1])
                  & (s2[:, -1] - s2[:, -2] > 1e-3 * s2[:, -1]) & (gap > 1e-3) & (Dk[:, 0] > 1e-6))
        if label_names is not None:
            cl = spec.kNearestNeighborsClassifier
            cl.ClearField("int64ClassLabels")
            cl.stringClassLabels.vector.extend([str(label_names[v]) for v in y])
            spec.description.output[0].type.stringType.SetInParent()
        idx = pick(ok)
        labels_out = m.predict(Xt[idx])
        exp = [{"label": py_label(v)} for v in labels_out]
        rows = [{"input": Xt[i].astype(np.float32).astype(np.float64)} for i in idx]
        w.write(name, spec, rows, exp, "sklearn", notes + (
            " The converter writes the samples as floatSamples (float32) and declares a FLOAT32 multiArray input; "
            "training and test points lie on a 1/8 (+1/64) grid, exact in float32. Rows whose k-th and (k+1)-th "
            "neighbour distances are within 1e-3, or whose vote is tied or nearly tied, were dropped. Labels are "
            "0..n-1 on purpose: CONVERTER QUIRK, the kNN converter writes sklearn's encoded targets (_y, class "
            "indices) as int64ClassLabels instead of classes_. Only the label is compared: the converted model "
            "has no probability output."), tol=TOL_EXACT_DOUBLE)

    case("knn_brute_k3_uniform", 3, "brute", "uniform", 3,
         "KNeighborsClassifier(k=3, algorithm='brute', uniform) -> kNearestNeighborsClassifier with linearIndex.")
    case("knn_kd_tree_k5_uniform", 5, "kd_tree", "uniform", 4,
         "KNeighborsClassifier(k=5, algorithm='kd_tree', leaf_size 30, uniform), 4 classes -> singleKdTreeIndex. "
         "The kd-tree is only an index: results equal exact search.")
    case("knn_brute_k1", 1, "brute", "uniform", 3, "KNeighborsClassifier(k=1, brute).")
    case("knn_kd_tree_k4_uniform_even", 4, "kd_tree", "uniform", 3,
         "KNeighborsClassifier(k=4, kd_tree): even k, rows with 2-2 vote ties dropped.")
    case("knn_brute_k5_distance", 5, "brute", "distance", 3,
         "KNeighborsClassifier(k=5, brute, weights='distance'). The converter refuses distance weighting; the "
         "uniform model is converted and its WeightingScheme switched to inverseDistanceWeighting. Core ML's "
         "proto says 'highest sum of (1 / distance)' while its distance function is squared Euclidean, so it "
         "is ambiguous whether 1/d or 1/d^2 is used: only rows where both give sklearn's 1/d label (with a "
         "margin) are kept.")
    case("knn_kd_tree_k6_distance", 6, "kd_tree", "distance", 4,
         "KNeighborsClassifier(k=6, kd_tree, weights='distance'), 4 classes; spec edited to "
         "inverseDistanceWeighting as in knn_brute_k5_distance (rows robust to 1/d vs 1/d^2).")
    case("knn_brute_k3_string_labels", 3, "brute", "uniform", 3,
         "KNeighborsClassifier(k=3, brute) on string labels: the converter only writes int64 labels, so the spec "
         "is edited to stringClassLabels (one per sample) and a string output. Expected = sklearn trained on the "
         "string labels.", label_names=np.array(["ant", "bee", "cow"]))


# ----------------------------------------------------------------------------
# BayesianProbitRegressor (no converter; hand-built; semantics partly unpinned)
# ----------------------------------------------------------------------------

def gen_bayesian_probit(w):
    w.family = "BayesianProbit"
    rng = np.random.RandomState(9)
    n_features = 3
    n_values = [3, 4, 2]
    spec = new_spec()
    spec.specificationVersion = 3
    inp = spec.description.input.add()
    inp.name = "features"
    inp.type.multiArrayType.shape.append(n_features)
    inp.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    for nm in ("mean", "variance"):
        o = spec.description.output.add()
        o.name = nm
        o.type.doubleType.SetInParent()
    spec.description.predictedFeatureName = "mean"
    bp = spec.bayesianProbitRegressor
    bp.numberOfFeatures = n_features
    bp.bias.mean = -0.25
    bp.bias.precision = 4.0
    W = {}
    for fid in range(n_features):
        fw = bp.features.add()
        fw.featureId = fid
        for v in range(n_values[fid]):
            mean = float(np.round(rng.randn(), 3))
            prec = float(np.round(rng.uniform(0.5, 10.0), 3))
            fv = fw.weights.add()
            fv.featureValue = v
            fv.featureWeight.mean = mean
            fv.featureWeight.precision = prec
            W[(fid, v)] = (mean, prec)
    bp.regressionInputFeatureName = "features"
    bp.meanOutputFeatureName = "mean"
    bp.varianceOutputFeatureName = "variance"
    rows_in, rows_out, notes_probs = [], [], []
    for i in range(ROWS):
        x = [int(rng.randint(0, nv)) for nv in n_values]
        mu = bp.bias.mean + sum(W[(f, v)][0] for f, v in enumerate(x))
        var = 1.0 / bp.bias.precision + sum(1.0 / W[(f, v)][1] for f, v in enumerate(x))
        rows_in.append({"features": np.array(x, dtype=np.float64)})
        rows_out.append({"mean": mu, "variance": var})
        notes_probs.append(float(norm.cdf(mu / math.sqrt(1.0 + var))))
    w.write("bayesian_probit_regressor_handbuilt", spec, rows_in, rows_out, "spec",
            "Hand-built bayesianProbitRegressor (no converter exists). ASSUMED semantics (AdPredictor-style, "
            "Graepel et al. 2010; Apple does not document the computation): input element i is the integer VALUE "
            "of categorical feature i; it selects the Gaussian weight features[featureId=i].weights[featureValue="
            "x_i]. The score is s = bias + sum of selected weights, each weight ~ N(mean, 1/precision). Expected "
            "mean = bias.mean + sum(selected means); variance = 1/bias.precision + sum(1/selected precision). The "
            "probabilities (pessimistic, sampled; optimism/samplingScale/samplingTruncation inputs) are not "
            "declared or compared: their formulas (e.g. Phi(mean/sqrt(beta^2+variance)) with an unknown beta) "
            "cannot be pinned from the public spec. For reference, Phi(mean/sqrt(1+variance)) per row is in "
            "case.json 'reference_probit_beta1'.",
            tol=TOL_EXACT_DOUBLE,
            advisory="semantics assumed, not pinned by a reference implementation: a mismatch is reported as xfail",
            extra={"reference_probit_beta1": notes_probs})


# ----------------------------------------------------------------------------
# Bad inputs
# ----------------------------------------------------------------------------

def gen_bad(w):
    if not w.wanted("_bad"):
        return
    rng = np.random.RandomState(10)
    base = os.path.join(w.outdir, "_bad")
    if os.path.isdir(base):
        shutil.rmtree(base)
    # The simplest model kind: a glmRegressor with one DOUBLE multiArray input of 3 ("measurements").
    X = dec(rng, (50, 3))
    y = X @ np.array([1.0, 2.0, -1.0]) + 0.5
    m = linear_model.LinearRegression().fit(X, y)
    spec = sk_convert(m, "measurements", "y").get_spec()
    assert spec.WhichOneof("Type") == "glmRegressor"
    good = spec.SerializeToString(deterministic=True)

    def row(r):
        return json.dumps({"measurements": {"shape": [3], "dataType": "DOUBLE", "data": [float(v) for v in r]}})

    good_lines = [row(r) for r in dec(rng, (5, 3))]

    def bad(name, model_bytes, lines, expect, notes, model_file="model.mlmodel"):
        d = os.path.join(base, name)
        os.makedirs(d, exist_ok=True)
        if model_bytes is not None:
            with open(os.path.join(d, "model.mlmodel"), "wb") as f:
                f.write(model_bytes)
        with open(os.path.join(d, "input.jsonl"), "w") as f:
            f.write("".join(line + "\n" for line in lines))
        meta = {"model": model_file, "input": "input.jsonl", "expect_exit": "nonzero",
                "stderr_patterns": expect, "notes": notes}
        with open(os.path.join(d, "bad.json"), "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.write("\n")

    line_re = r"(?i)line\D{0,12}%d(?!\d)"
    bad("truncated_model", good[: len(good) // 2], good_lines, [],
        "The first half of a valid glmRegressor file: protobuf decoding must fail cleanly (no crash). No wording "
        "is required; the exit status must be non-zero and stderr non-empty.")
    bad("random_bytes_model", bytes(rng.randint(0, 256, 512).astype(np.uint8)), good_lines, [],
        "512 random bytes as a model: not a Core ML model. Non-zero exit, non-empty stderr.")
    bad("empty_model", b"", good_lines, [],
        "A zero-byte model file decodes as an empty Model message (no model type, no inputs): must be rejected.")
    bad("missing_model_file", None, good_lines, [r"(?i)does_not_exist\.mlmodel|no such file|not found"],
        "The model path does not exist: stderr names the path or says it was not found.",
        model_file="does_not_exist.mlmodel")
    lines = list(good_lines)
    lines[2] = '{"measurements": {"shape": [3], "dataType": "DOUBLE", "data": [0.5, 1.25'
    bad("malformed_json_line", good, lines, [line_re % 3],
        "Line 3 of input.jsonl is cut-off JSON: stderr must name line 3 (e.g. 'line 3').")
    lines = list(good_lines)
    lines[3] = "{}"
    bad("missing_feature", good, lines, [line_re % 4, r"measurements"],
        "Line 4 is {} and so lacks the input feature 'measurements': stderr must name line 4 and "
        "the feature.")
    lines = list(good_lines)
    lines[1] = json.dumps({"measurements": "abc"})
    bad("wrong_feature_type", good, lines, [line_re % 2, r"measurements"],
        "Line 2 gives a string for the multiArray feature 'measurements': stderr must name line 2 and the feature.")
    lines = list(good_lines)
    lines[0] = json.dumps({"measurements": {"shape": [2], "dataType": "DOUBLE", "data": [1.0, 2.0]}})
    bad("wrong_shape", good, lines, [line_re % 1, r"measurements"],
        "Line 1 gives 2 elements where the model declares shape [3]: stderr must name line 1 and the feature.")
    lines = list(good_lines)
    lines[4] = "[1.0, 2.0, 3.0]"
    bad("row_not_an_object", good, lines, [line_re % 5],
        "Line 5 is valid JSON but not an object: stderr must name line 5.")


GENERATORS = [gen_glm, gen_svm_sklearn, gen_libsvm, gen_trees, gen_xgboost, gen_feature_engineering,
              gen_pipelines, gen_knn, gen_bayesian_probit, gen_bad]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--only", action="append", default=[], help="only write cases whose name contains this")
    ap.add_argument("--clean", action="store_true", help="remove OUTDIR first")
    args = ap.parse_args(argv)
    if args.clean and os.path.isdir(args.outdir):
        shutil.rmtree(args.outdir)
    os.makedirs(args.outdir, exist_ok=True)
    w = Writer(args.outdir, args.only)
    for gen in GENERATORS:
        gen(w)
    manifest = {
        "versions": {"coremltools": ct.__version__, "scikit-learn": sklearn.__version__,
                     "xgboost": xgboost.__version__, "numpy": np.__version__},
        "cases": [n for n in w.names if w.wanted(n)],
    }
    with open(os.path.join(args.outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    print(f"wrote {len(manifest['cases'])} cases to {args.outdir}")


if __name__ == "__main__":
    main()
