#!/usr/bin/env python3
"""A slow, independent reading of the Core ML semantics for the kinds the conformance suite covers.

    python Tests/Conformance/reference_predict.py predict MODEL --input rows.jsonl

It speaks the same CLI contract as `cortado predict` (DESIGN.md): one JSON object of inputs per line
in, one JSON object of outputs per line out, errors on stderr with a non-zero exit naming the line
and feature. It exists to check the suite itself without the Swift binary:

    CORTADO_BIN=".venv/bin/python Tests/Conformance/reference_predict.py" \\
        .venv/bin/python -m pytest Tests/Conformance

It evaluates the *spec* (weights, thresholds, labels written by the converters), never the source
library, so agreement with expected.jsonl shows that the converted model means what the source
library predicted. It is not part of Cortado and is not fast.
"""

import contextlib
import io
import json
import math
import sys

import numpy as np

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    from coremltools.proto import FeatureTypes_pb2, Model_pb2


class InputError(Exception):
    pass


class ModelError(Exception):
    pass


ARRAY_NAMES = {
    FeatureTypes_pb2.ArrayFeatureType.FLOAT32: "FLOAT32",
    FeatureTypes_pb2.ArrayFeatureType.DOUBLE: "DOUBLE",
    FeatureTypes_pb2.ArrayFeatureType.INT32: "INT32",
    FeatureTypes_pb2.ArrayFeatureType.FLOAT16: "FLOAT16",
}
SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# ---------------------------------------------------------------------------- JSON <-> values

def dec_double(v, what):
    if isinstance(v, bool):
        raise InputError(f"{what}: expected a number, got {json.dumps(v)}")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in SPECIAL:
        return SPECIAL[v]
    raise InputError(f"{what}: expected a number, got {json.dumps(v)}")


def decode(ftype, v, what):
    t = ftype.WhichOneof("Type")
    if t == "doubleType":
        return dec_double(v, what)
    if t == "int64Type":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v):
            raise InputError(f"{what}: expected an int64, got {json.dumps(v)}")
        return int(v)
    if t == "stringType":
        if not isinstance(v, str):
            raise InputError(f"{what}: expected a string, got {json.dumps(v)}")
        return v
    if t == "dictionaryType":
        if not isinstance(v, dict):
            raise InputError(f"{what}: expected a JSON object (dictionary)")
        int_keys = ftype.dictionaryType.WhichOneof("KeyType") == "int64KeyType"
        out = {}
        for k, val in v.items():
            if int_keys:
                try:
                    key = int(k)
                except ValueError:
                    raise InputError(f"{what}: dictionary key {k!r} is not an int64")
            else:
                key = k
            out[key] = dec_double(val, f"{what}[{k}]")
        return out
    if t == "multiArrayType":
        if isinstance(v, dict):
            if "data" not in v:
                raise InputError(f"{what}: multiArray object needs 'data'")
            data = [dec_double(x, what) for x in v["data"]]
            shape = v.get("shape", [len(data)])
            arr = np.array(data, dtype=np.float64)
            if int(np.prod(shape)) != arr.size:
                raise InputError(f"{what}: shape {shape} does not match {arr.size} values")
            arr = arr.reshape(shape)
        elif isinstance(v, list):
            arr = np.array(v, dtype=object)
            arr = np.vectorize(lambda x: dec_double(x, what), otypes=[np.float64])(arr)
        else:
            raise InputError(f"{what}: expected a multiArray object or nested array")
        dt = ftype.multiArrayType.dataType
        if dt == FeatureTypes_pb2.ArrayFeatureType.FLOAT32:
            arr = arr.astype(np.float32).astype(np.float64)
        elif dt == FeatureTypes_pb2.ArrayFeatureType.INT32:
            arr = np.trunc(arr)
        want = list(ftype.multiArrayType.shape)
        if want and int(np.prod(want)) != arr.size:
            raise InputError(f"{what}: expected {int(np.prod(want))} elements (shape {want}), got {arr.size}")
        return arr
    raise InputError(f"{what}: feature type {t} is not supported by the reference evaluator")


def enc_double(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def encode(ftype, v):
    t = ftype.WhichOneof("Type")
    if t == "doubleType":
        return enc_double(v)
    if t == "int64Type":
        return int(v)
    if t == "stringType":
        return str(v)
    if t == "dictionaryType":
        return {str(k): enc_double(x) for k, x in v.items()}
    if t == "multiArrayType":
        arr = np.asarray(v, dtype=np.float64)
        return {"shape": list(arr.shape), "dataType": ARRAY_NAMES.get(ftype.multiArrayType.dataType, "DOUBLE"),
                "data": [enc_double(x) for x in arr.ravel()]}
    raise ModelError(f"cannot encode output type {t}")


# ---------------------------------------------------------------------------- helpers

def vectorize(spec, feats):
    """Concatenate the model's inputs in description order (doubles/int64 as one slot, arrays flattened)."""
    parts = []
    for f in spec.description.input:
        v = feats[f.name]
        if isinstance(v, np.ndarray):
            parts.append(v.ravel())
        elif isinstance(v, (int, float)):
            parts.append(np.array([float(v)]))
        else:
            raise ModelError(f"input {f.name} cannot be vectorized")
    return np.concatenate(parts) if parts else np.zeros(0)


def labels_of(msg):
    which = msg.WhichOneof("ClassLabels")
    if which == "int64ClassLabels":
        return list(msg.int64ClassLabels.vector)
    if which == "stringClassLabels":
        return list(msg.stringClassLabels.vector)
    return None


def classifier_outputs(spec, labels, probs, label):
    out = {spec.description.predictedFeatureName: label}
    pname = spec.description.predictedProbabilitiesName
    if pname:
        out[pname] = dict(zip(labels, map(float, probs)))
    return out


def sigmoid(x):
    x = np.asarray(x, dtype=np.float64)
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def probit(x):
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, dtype=np.float64) / math.sqrt(2)))


def single_output(spec, value):
    o = spec.description.output[0]
    if o.type.WhichOneof("Type") == "multiArrayType":
        return {o.name: np.atleast_1d(np.asarray(value, dtype=np.float64))}
    return {o.name: float(np.asarray(value).ravel()[0])}


# ---------------------------------------------------------------------------- GLM

def eval_glm_regressor(spec, feats):
    m = spec.glmRegressor
    x = vectorize(spec, feats)
    y = np.array([np.dot(w.value, x) for w in m.weights]) + np.array(m.offset)
    if m.postEvaluationTransform == 1:
        y = sigmoid(y)
    elif m.postEvaluationTransform == 2:
        y = probit(y)
    return single_output(spec, y)


def eval_glm_classifier(spec, feats):
    m = spec.glmClassifier
    x = vectorize(spec, feats)
    z = np.array([np.dot(w.value, x) for w in m.weights]) + np.array(m.offset)
    p = sigmoid(z) if m.postEvaluationTransform == 0 else probit(z)
    labels = labels_of(m)
    if len(m.weights) == 1:
        probs = np.array([1 - p[0], p[0]])
    elif m.classEncoding == 1:  # OneVsRest: normalize
        probs = p / p.sum()
    else:  # ReferenceClass: class 0 is the reference
        e = np.r_[1.0, np.exp(z)]
        probs = e / e.sum()
    return classifier_outputs(spec, labels, probs, labels[int(np.argmax(probs))])


# ---------------------------------------------------------------------------- SVM (LIBSVM semantics)

def kernel_fn(k):
    which = k.WhichOneof("kernel")
    if which == "linearKernel":
        return lambda a, b: float(np.dot(a, b))
    if which == "rbfKernel":
        g = k.rbfKernel.gamma
        return lambda a, b: math.exp(-g * float(np.dot(a - b, a - b)))
    if which == "polyKernel":
        g, c, d = k.polyKernel.gamma, k.polyKernel.c, k.polyKernel.degree
        return lambda a, b: (g * float(np.dot(a, b)) + c) ** d
    if which == "sigmoidKernel":
        g, c = k.sigmoidKernel.gamma, k.sigmoidKernel.c
        return lambda a, b: math.tanh(g * float(np.dot(a, b)) + c)
    raise ModelError(f"unknown kernel {which}")


def support_vectors(m, n):
    which = m.WhichOneof("supportVectors")
    if which == "denseSupportVectors":
        return [np.array(v.values) for v in m.denseSupportVectors.vectors]
    out = []
    for v in m.sparseSupportVectors.vectors:
        a = np.zeros(n)
        for node in v.nodes:
            if node.index - 1 < n:  # LIBSVM indices are 1-based
                a[node.index - 1] = node.value
        out.append(a)
    return out


def eval_svr(spec, feats):
    m = spec.supportVectorRegressor
    x = vectorize(spec, feats)
    K = kernel_fn(m.kernel)
    svs = support_vectors(m, len(x))
    y = sum(a * K(sv, x) for a, sv in zip(m.coefficients.alpha, svs)) - m.rho
    return single_output(spec, y)


def multiclass_probability(k, r):
    """LIBSVM's pairwise coupling (Wu, Lin, Weng 2004, method 2), as in svm.cpp."""
    Q = np.zeros((k, k))
    p = np.full(k, 1.0 / k)
    for t in range(k):
        Q[t, t] = 0.0
        for j in range(t):
            Q[t, t] += r[j][t] * r[j][t]
            Q[t, j] = Q[j, t]
        for j in range(t + 1, k):
            Q[t, t] += r[j][t] * r[j][t]
            Q[t, j] = -r[j][t] * r[t][j]
    max_iter = max(100, k)
    eps = 0.005 / k
    Qp = np.zeros(k)
    for _ in range(max_iter):
        pQp = 0.0
        for t in range(k):
            Qp[t] = 0.0
            for j in range(k):
                Qp[t] += Q[t, j] * p[j]
            pQp += p[t] * Qp[t]
        max_error = 0.0
        for t in range(k):
            error = abs(Qp[t] - pQp)
            if error > max_error:
                max_error = error
        if max_error < eps:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t, t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t, t] + 2 * Qp[t])) / (1 + diff) / (1 + diff)
            for j in range(k):
                Qp[j] = (Qp[j] + diff * Q[t, j]) / (1 + diff)
                p[j] /= (1 + diff)
    return p


def sigmoid_predict(dv, A, B):
    f = dv * A + B
    if f >= 0:
        return math.exp(-f) / (1.0 + math.exp(-f))
    return 1.0 / (1 + math.exp(f))


def eval_svc(spec, feats):
    m = spec.supportVectorClassifier
    x = vectorize(spec, feats)
    K = kernel_fn(m.kernel)
    svs = support_vectors(m, len(x))
    kv = [K(sv, x) for sv in svs]
    labels = labels_of(m)
    k = len(labels)
    counts = list(m.numberOfSupportVectorsPerClass)
    start = np.r_[0, np.cumsum(counts)[:-1]].astype(int)
    coef = [list(c.alpha) for c in m.coefficients]
    dec = []
    p = 0
    for i in range(k):
        for j in range(i + 1, k):
            s = 0.0
            for t in range(counts[i]):
                s += coef[j - 1][start[i] + t] * kv[start[i] + t]
            for t in range(counts[j]):
                s += coef[i][start[j] + t] * kv[start[j] + t]
            dec.append(s - m.rho[p])
            p += 1
    if len(m.probA) and len(m.probB):
        min_prob = 1e-7
        r = np.zeros((k, k))
        p = 0
        for i in range(k):
            for j in range(i + 1, k):
                r[i][j] = min(max(sigmoid_predict(dec[p], m.probA[p], m.probB[p]), min_prob), 1 - min_prob)
                r[j][i] = 1 - r[i][j]
                p += 1
        probs = np.array([r[0][1], r[1][0]]) if k == 2 else multiclass_probability(k, r)
        return classifier_outputs(spec, labels, probs, labels[int(np.argmax(probs))])
    votes = np.zeros(k, int)
    p = 0
    for i in range(k):
        for j in range(i + 1, k):
            if dec[p] > 0:
                votes[i] += 1
            else:
                votes[j] += 1
            p += 1
    return {spec.description.predictedFeatureName: labels[int(np.argmax(votes))]}


# ---------------------------------------------------------------------------- tree ensembles

def eval_tree_params(params, x):
    nodes = {}
    children = set()
    for n in params.nodes:
        nodes[(n.treeId, n.nodeId)] = n
        if n.nodeBehavior != 6:
            children.add((n.treeId, n.trueChildNodeId))
            children.add((n.treeId, n.falseChildNodeId))
    roots = sorted(k for k in nodes if k not in children)
    acc = np.zeros(max(1, params.numPredictionDimensions))
    base = list(params.basePredictionValue)
    acc[:len(base)] += base
    for tree_id, node_id in roots:
        n = nodes[(tree_id, node_id)]
        while n.nodeBehavior != 6:
            v = x[n.branchFeatureIndex]
            t = n.branchFeatureValue
            if math.isnan(v):
                go_true = n.missingValueTracksTrueChild
            else:
                go_true = {0: v <= t, 1: v < t, 2: v >= t, 3: v > t, 4: v == t, 5: v != t}[n.nodeBehavior]
            n = nodes[(tree_id, n.trueChildNodeId if go_true else n.falseChildNodeId)]
        for e in n.evaluationInfo:
            acc[e.evaluationIndex] += e.evaluationValue
    return acc


def post_transform(kind, v):
    if kind == 1:  # Classification_SoftMax
        e = np.exp(v - v.max())
        return e / e.sum()
    if kind == 2:  # Regression_Logistic
        return sigmoid(v)
    if kind == 3:  # SoftMaxWithZeroClassReference
        e = np.exp(np.r_[0.0, v] - max(0.0, v.max()))
        return (e / e.sum())
    return v


def eval_tree_regressor(spec, feats):
    m = spec.treeEnsembleRegressor
    v = post_transform(m.postEvaluationTransform, eval_tree_params(m.treeEnsemble, vectorize(spec, feats)))
    return single_output(spec, v)


def eval_tree_classifier(spec, feats):
    m = spec.treeEnsembleClassifier
    v = post_transform(m.postEvaluationTransform, eval_tree_params(m.treeEnsemble, vectorize(spec, feats)))
    labels = labels_of(m)
    if len(v) == 1 and len(labels) == 2:
        probs = np.array([1 - v[0], v[0]])
        label = labels[1] if v[0] > 0.5 else labels[0]
    else:
        probs = v
        label = labels[int(np.argmax(probs))]
    return classifier_outputs(spec, labels, probs, label)


# ---------------------------------------------------------------------------- kNN

def eval_knn(spec, feats):
    m = spec.kNearestNeighborsClassifier
    x = vectorize(spec, feats)
    X = np.array([list(s.vector) for s in m.nearestNeighborsIndex.floatSamples], dtype=np.float64)
    labels = labels_of(m)
    k = m.numberOfNeighbors.defaultValue
    d2 = ((X - x) ** 2).sum(axis=1)
    order = np.argsort(d2, kind="stable")[:k]
    scores = {}
    first_seen = []
    for i in order:
        lab = labels[i]
        if m.WhichOneof("WeightingScheme") == "inverseDistanceWeighting":
            d = math.sqrt(d2[i])
            w = 1.0 / d if d > 0 else 1e300
        else:
            w = 1.0
        if lab not in scores:
            first_seen.append(lab)
            scores[lab] = 0.0
        scores[lab] += w
    best = max(first_seen, key=lambda l: scores[l])
    return {spec.description.predictedFeatureName: best}


# ---------------------------------------------------------------------------- feature engineering

def only_input(spec, feats):
    return feats[spec.description.input[0].name]


def eval_imputer(spec, feats):
    m = spec.imputer
    v = only_input(spec, feats)
    which = m.WhichOneof("ReplaceValue")
    rep = getattr(m, which) if which else math.nan
    imp_kind = m.WhichOneof("ImputedValue")
    if isinstance(v, np.ndarray):
        out = v.astype(np.float64).copy()
        mask = np.isnan(out) if (isinstance(rep, float) and math.isnan(rep)) else out == rep
        if imp_kind == "imputedDoubleArray":
            fill = np.array(m.imputedDoubleArray.vector)
        elif imp_kind == "imputedInt64Array":
            fill = np.array(m.imputedInt64Array.vector, dtype=np.float64)
        else:
            fill = np.full(out.shape, float(getattr(m, imp_kind)))
        out[mask] = fill.reshape(out.shape)[mask]
        return {spec.description.output[0].name: out}
    missing = (isinstance(v, float) and math.isnan(v) and isinstance(rep, float) and math.isnan(rep)) or v == rep
    return {spec.description.output[0].name: getattr(m, imp_kind) if missing else v}


def eval_scaler(spec, feats):
    m = spec.scaler
    v = np.asarray(only_input(spec, feats), dtype=np.float64)
    return single_output(spec, (v + np.array(m.shiftValue)) * np.array(m.scaleValue))


def eval_normalizer(spec, feats):
    v = np.asarray(only_input(spec, feats), dtype=np.float64)
    t = spec.normalizer.normType
    n = np.abs(v).max() if t == 0 else (np.abs(v).sum() if t == 1 else math.sqrt(float(np.dot(v, v))))
    return single_output(spec, v / n if n > 0 else v)


def eval_one_hot(spec, feats):
    m = spec.oneHotEncoder
    v = only_input(spec, feats)
    cats = list(m.int64Categories.vector) if m.WhichOneof("CategoryType") == "int64Categories" else list(
        m.stringCategories.vector)
    if v in cats:
        idx = cats.index(v)
    elif m.handleUnknown == 1:
        idx = None
    else:
        raise InputError(f"one-hot encoder: unknown category {v!r}")
    o = spec.description.output[0]
    if o.type.WhichOneof("Type") == "dictionaryType":
        return {o.name: {} if idx is None else {idx: 1.0}}
    out = np.zeros(len(cats))
    if idx is not None:
        out[idx] = 1.0
    return {o.name: out}


def eval_dict_vectorizer(spec, feats):
    m = spec.dictVectorizer
    d = only_input(spec, feats)
    keys = list(m.stringToIndex.vector) if m.WhichOneof("Map") == "stringToIndex" else list(m.int64ToIndex.vector)
    o = spec.description.output[0]
    pos = {k: i for i, k in enumerate(keys)}
    for k in d:
        if k not in pos:
            raise InputError(f"dict vectorizer: key {k!r} is not in the mapping")
    if o.type.WhichOneof("Type") == "dictionaryType":
        return {o.name: {pos[k]: v for k, v in d.items()}}
    out = np.zeros(len(keys))
    for k, v in d.items():
        out[pos[k]] = v
    return {o.name: out}


def eval_feature_vectorizer(spec, feats):
    parts = []
    for col in spec.featureVectorizer.inputList:
        v = feats[col.inputColumn]
        n = col.inputDimensions
        if isinstance(v, dict):
            a = np.zeros(n)
            for k, x in v.items():
                a[int(k)] = x
        elif isinstance(v, np.ndarray):
            a = v.ravel()
        else:
            a = np.array([float(v)])
        if len(a) != n:
            raise InputError(f"feature vectorizer: {col.inputColumn} has {len(a)} values, expected {n}")
        parts.append(a)
    return {spec.description.output[0].name: np.concatenate(parts)}


def eval_array_feature_extractor(spec, feats):
    v = np.asarray(only_input(spec, feats)).ravel()
    idx = list(spec.arrayFeatureExtractor.extractIndex)
    o = spec.description.output[0]
    t = o.type.WhichOneof("Type")
    if t == "multiArrayType":
        return {o.name: v[idx]}
    if t == "int64Type":
        return {o.name: int(v[idx[0]])}
    return {o.name: float(v[idx[0]])}


def eval_categorical_mapping(spec, feats):
    m = spec.categoricalMapping
    v = only_input(spec, feats)
    table = m.stringToInt64Map.map if m.WhichOneof("MappingType") == "stringToInt64Map" else m.int64ToStringMap.map
    if v in table:
        r = table[v]
    else:
        which = m.WhichOneof("ValueOnUnknown")
        if which is None:
            raise InputError(f"categorical mapping: unknown value {v!r}")
        r = getattr(m, which)
    return {spec.description.output[0].name: r}


def eval_identity(spec, feats):
    return {o.name: feats[i.name] for i, o in zip(spec.description.input, spec.description.output)}


def eval_bayesian_probit(spec, feats):
    m = spec.bayesianProbitRegressor
    x = np.asarray(feats[m.regressionInputFeatureName]).ravel()
    mean = m.bias.mean
    var = 1.0 / m.bias.precision
    for fw in m.features:
        val = int(x[fw.featureId])
        for vw in fw.weights:
            if vw.featureValue == val:
                mean += vw.featureWeight.mean
                var += 1.0 / vw.featureWeight.precision
    out = {}
    if m.meanOutputFeatureName:
        out[m.meanOutputFeatureName] = mean
    if m.varianceOutputFeatureName:
        out[m.varianceOutputFeatureName] = var
    return out


def eval_pipeline(spec, feats):
    kind = spec.WhichOneof("Type")
    pipe = spec.pipeline if kind == "pipeline" else getattr(spec, kind).pipeline
    pool = dict(feats)
    for sub in pipe.models:
        sub_in = {}
        for f in sub.description.input:
            if f.name not in pool:
                raise ModelError(f"pipeline: sub-model input {f.name} is produced by no earlier model")
            sub_in[f.name] = pool[f.name]
        pool.update(evaluate(sub, sub_in))
    return {o.name: pool[o.name] for o in spec.description.output}


EVALUATORS = {
    "glmRegressor": eval_glm_regressor, "glmClassifier": eval_glm_classifier,
    "supportVectorRegressor": eval_svr, "supportVectorClassifier": eval_svc,
    "treeEnsembleRegressor": eval_tree_regressor, "treeEnsembleClassifier": eval_tree_classifier,
    "kNearestNeighborsClassifier": eval_knn,
    "imputer": eval_imputer, "scaler": eval_scaler, "normalizer": eval_normalizer,
    "oneHotEncoder": eval_one_hot, "dictVectorizer": eval_dict_vectorizer,
    "featureVectorizer": eval_feature_vectorizer, "arrayFeatureExtractor": eval_array_feature_extractor,
    "categoricalMapping": eval_categorical_mapping, "identity": eval_identity,
    "bayesianProbitRegressor": eval_bayesian_probit,
    "pipeline": eval_pipeline, "pipelineRegressor": eval_pipeline, "pipelineClassifier": eval_pipeline,
}


def evaluate(spec, feats):
    kind = spec.WhichOneof("Type")
    if kind is None:
        raise ModelError("the model has no model type (empty or not a Core ML model)")
    if kind not in EVALUATORS:
        raise ModelError(f"model type {kind} is not supported by the reference evaluator")
    return EVALUATORS[kind](spec, feats)


# ---------------------------------------------------------------------------- CLI

def load(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"cannot read model {path}: {e.strerror}")
    spec = Model_pb2.Model()
    try:
        spec.ParseFromString(data)
    except Exception as e:
        raise ModelError(f"cannot decode model {path}: {e}")
    if spec.WhichOneof("Type") is None:
        raise ModelError(f"model {path} has no model type")
    if not spec.description.input:
        raise ModelError(f"model {path} declares no inputs")
    return spec


def predict(model_path, input_path):
    spec = load(model_path)
    in_types = {f.name: f.type for f in spec.description.input}
    out_types = {f.name: f.type for f in spec.description.output}
    with open(input_path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"line {lineno}: invalid JSON: {e.msg}")
            if not isinstance(row, dict):
                raise InputError(f"line {lineno}: expected a JSON object of input features")
            feats = {}
            for name, ftype in in_types.items():
                if name not in row:
                    raise InputError(f"line {lineno}: missing input feature '{name}'")
                try:
                    feats[name] = decode(ftype, row[name], f"feature '{name}'")
                except InputError as e:
                    raise InputError(f"line {lineno}: {e}")
            try:
                out = evaluate(spec, feats)
            except InputError as e:
                raise InputError(f"line {lineno}: {e}")
            sys.stdout.write(json.dumps({k: encode(out_types[k], out[k]) for k in out_types}, allow_nan=False)
                             + "\n")


def main(argv):
    if len(argv) != 4 or argv[0] != "predict" or argv[2] != "--input":
        sys.stderr.write("usage: reference_predict.py predict MODEL --input rows.jsonl\n")
        return 64
    try:
        predict(argv[1], argv[3])
    except (InputError, ModelError) as e:
        sys.stdout.flush()
        sys.stderr.write(f"error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
