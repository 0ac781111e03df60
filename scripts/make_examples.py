#!/usr/bin/env python3
"""Writes the bundled example models under examples/ (committed; rerun to refresh).

examples/iris: scikit-learn's iris data, a StandardScaler + one-vs-rest
LogisticRegression pipeline with species names as labels, converted by coremltools.
rows.jsonl holds a few flowers; expected.jsonl what scikit-learn predicts for them.
"""
import json
import os
import warnings

warnings.filterwarnings("ignore")
import coremltools as ct  # noqa: E402
from sklearn.datasets import load_iris  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

root = os.path.join(os.path.dirname(__file__), "..", "examples", "iris")
os.makedirs(root, exist_ok=True)
iris = load_iris()
names = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
labels = [str(iris.target_names[t]) for t in iris.target]
model = make_pipeline(StandardScaler(), LogisticRegression(multi_class="ovr", max_iter=500)).fit(iris.data, labels)
ml = ct.converters.sklearn.convert(model, names, "species")
ml.short_description = "Iris species from flower measurements (scikit-learn, one-vs-rest logistic regression)"
ml.author = "Cortado examples"
ml.license = "BSD-3-Clause (iris data via scikit-learn)"
for n in names:
    ml.input_description[n] = n.replace("_", " ") + " in cm"
spec = ml.get_spec()
with open(os.path.join(root, "model.mlmodel"), "wb") as fh:
    fh.write(spec.SerializeToString(deterministic=True))

rows = iris.data[::15]
with open(os.path.join(root, "rows.jsonl"), "w") as fh:
    for r in rows:
        fh.write(json.dumps({n: float(v) for n, v in zip(names, r)}) + "\n")
with open(os.path.join(root, "expected.jsonl"), "w") as fh:
    for label, proba in zip(model.predict(rows), model.predict_proba(rows)):
        fh.write(json.dumps({"species": str(label),
                             "classProbability": {str(c): float(p) for c, p in zip(model.classes_, proba)}}) + "\n")
print("wrote", root)
