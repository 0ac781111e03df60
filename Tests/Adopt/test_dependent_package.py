"""Cortado as a dependency: a throw-away Swift package depends on the `Cortado` library product
by version (a `file://` git URL and a tag, on a temporary git copy of this working tree, since
a CI clone may lack tags), builds, and runs predictions through

- `import Cortado` and `MLModel(contentsOf:)` with no registration call (as on Apple platforms),
- `MLModel.compileModel(at:)` (a compiled file under the temporary folder) and the async
  `MLModel.load(contentsOf:configuration:)`,
- typed wrappers written by `cortado generate --swift` for a classical model (scikit-learn's
  LogisticRegression: doubles in, a string label and a string→double dictionary out), a neural
  network with an image input, and an ML Program.

Truth: scikit-learn's predictions (label exact, probabilities rtol 1e-7), NumPy for the network
and the program (float32 arithmetic: rtol 1e-5, atol 1e-5). The package builds once (one cold
debug build of the product's targets); its build is bounded by BUILD_SECONDS, not timed.
"""
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CORTADO = os.environ.get("CORTADO_BIN") or str(ROOT / ".build" / "debug" / "cortado")
BUILD_SECONDS = 1500
TAG = "0.1.0"


def run(cmd, cwd=None, timeout=120, env=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def git_copy_with_tag(dest):
    """This working tree's files (tracked and untracked, not ignored) as a fresh git repository
    with one commit tagged TAG."""
    files = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).split("\0")
    for name in files:
        src = ROOT / name
        if not name or not src.is_file():  # deleted in the working tree
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    env = dict(os.environ, GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@localhost",
               GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@localhost")
    run(["git", "init", "-q", "-b", "main"], cwd=dest)
    run(["git", "add", "-A"], cwd=dest, env=env)
    run(["git", "commit", "-q", "-m", "snapshot"], cwd=dest, env=env)
    run(["git", "tag", TAG], cwd=dest, env=env)


# ----------------------------------------------------------------------------- models

def iris_model(folder):
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    import coremltools as ct
    data = load_iris()
    names = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
    labels = np.array(data.target_names)[data.target]
    clf = LogisticRegression(multi_class="ovr", max_iter=1000).fit(data.data, labels)
    spec = ct.converters.sklearn.convert(clf, names, "species").get_spec()
    spec.description.metadata.shortDescription = "Iris species from flower measurements."
    spec.description.input[0].shortDescription = "Sepal length in cm."
    path = folder / "Iris.mlmodel"
    path.write_bytes(spec.SerializeToString(deterministic=True))
    rows = data.data[[0, 60, 120]]
    return path, names, rows, clf.predict(rows), clf.predict_proba(rows), list(clf.classes_)


def odd_names_model(folder, rng):
    """A linear regression whose feature names are a Swift keyword, not an identifier, and a
    member the generated class already has: the generated code must still compile."""
    from sklearn.linear_model import LinearRegression
    import coremltools as ct
    x = rng.normal(size=(20, 3))
    reg = LinearRegression().fit(x, x @ [1.5, -2.0, 0.5] + 0.25)
    spec = ct.converters.sklearn.convert(reg, ["class", "input.1", "featureNames"], "default").get_spec()
    path = folder / "Odd.mlmodel"
    path.write_bytes(spec.SerializeToString(deterministic=True))
    row = x[0]
    return path, row, reg.predict(row.reshape(1, -1))[0]


def image_net_model(folder, rng):
    """image (RGB 4×4) → scale 1/255 → 1×1 convolution to 2 channels (+ bias) → y (2×4×4)."""
    import coremltools as ct
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    w = rng.normal(size=(2, 3)).astype(np.float32)
    b = rng.normal(size=2).astype(np.float32)
    builder = NeuralNetworkBuilder([("image", datatypes.Array(3, 4, 4))], [("y", datatypes.Array(2, 4, 4))])
    builder.add_convolution("conv", kernel_channels=3, output_channels=2, height=1, width=1, stride_height=1,
                            stride_width=1, border_mode="valid", groups=1, W=w.T.reshape(1, 1, 3, 2), b=b,
                            has_bias=True, input_name="image", output_name="y")
    builder.set_pre_processing_parameters(image_input_names=["image"], image_scale=1 / 255)
    spec = builder.spec
    spec.description.input[0].shortDescription = "A 4×4 RGB picture."
    path = folder / "Net.mlmodel"
    path.write_bytes(spec.SerializeToString(deterministic=True))
    pixels = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)  # H×W×RGB
    blob = pixels.transpose(2, 0, 1).astype(np.float32) * np.float32(1 / 255)
    expected = np.einsum("ck,khw->chw", w, blob) + b[:, None, None]
    return path, pixels, expected


def program_model(folder, rng):
    """x (1×4 fp32) → relu(x·W + b) → y (1×3)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    w = rng.normal(size=(4, 3)).astype(np.float32)
    b = rng.normal(size=3).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.relu(x=mb.linear(x=x, weight=w.T, bias=b), name="y")

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS16, pass_pipeline=ct.PassPipeline.EMPTY)
    path = folder / "Prog.mlpackage"
    model.save(str(path))
    x = rng.normal(size=(1, 4)).astype(np.float32)
    return path, x, np.maximum(x @ w + b, 0)


def swift_doubles(values):
    return "[" + ", ".join(repr(float(v)) for v in np.asarray(values).reshape(-1)) + "]"


MAIN = """
import Cortado
import Foundation

// Each result is one JSON line: {"case": ..., ...}.
func emit(_ name: String, _ fields: [String: Any]) throws {
    var all = fields
    all["case"] = name
    let data = try JSONSerialization.data(withJSONObject: all, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}

let folder = URL(fileURLWithPath: CommandLine.arguments[1])
let irisURL = folder.appendingPathComponent("Iris.mlmodel")
let rows: [[Double]] = {rows}

// The plain Core ML API, with no registration call before it.
let plain = try MLModel(contentsOf: irisURL)
for row in rows {
    let input = try MLDictionaryFeatureProvider(dictionary: [{plain_inputs}])
    let out = try plain.prediction(from: input)
    try emit("plain", ["species": out.featureValue(for: "species")!.stringValue])
}

// The generated classical wrapper: a typed call, then the compiled form from compileModel(at:).
let iris = try Iris(contentsOf: irisURL)
for row in rows {
    let out = try iris.prediction({typed_inputs})
    try emit("iris", ["species": out.species, "classProbability": out.classProbability])
}
let compiledURL = try MLModel.compileModel(at: irisURL)
let compiled = try Iris(contentsOf: compiledURL)
let fromInput = try compiled.prediction(input: IrisInput({typed_inputs_first}))
try emit("compiled", ["species": fromInput.species, "classProbability": fromInput.classProbability,
                      "path": compiledURL.path])

// The image network, loaded with the async API.
let net = try await Net.load(contentsOf: folder.appendingPathComponent("Net.mlmodel"))
let picture = try MLImage(width: 4, height: 4, pixelFormat: .rgb8, data: {pixels})
let y = try net.prediction(image: picture).y
try emit("net", ["y": y.doubleValues(), "shape": y.shape])

// The ML Program, with the async MLModel.load too.
let programModel = try await MLModel.load(contentsOf: folder.appendingPathComponent("Prog.mlpackage"))
let prog = Prog(model: programModel)
let x = try MLMultiArray({x}, shape: [1, 4], dataType: .float32)
let py = try prog.prediction(x: x).y
try emit("prog", ["y": py.doubleValues()])

// Feature names that are a keyword, not an identifier, and a generated member's name.
let odd = try Odd(contentsOf: folder.appendingPathComponent("Odd.mlmodel"))
try emit("odd", ["default": odd.prediction({odd}).`default`])
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not os.path.exists(CORTADO):
        if os.environ.get("CORTADO_BIN"):
            pytest.fail(f"CORTADO_BIN={CORTADO} does not exist")
        pytest.skip(f"{CORTADO} is not built")
    tmp = tmp_path_factory.mktemp("dependent")
    rng = np.random.default_rng(22)
    models = tmp / "models"
    models.mkdir()
    iris = iris_model(models)
    net = image_net_model(models, rng)
    prog = program_model(models, rng)
    odd = odd_names_model(models, rng)

    source = tmp / "cortado"
    source.mkdir()
    git_copy_with_tag(source)

    app = tmp / "app"
    (app / "Sources" / "App").mkdir(parents=True)
    (app / "Package.swift").write_text(textwrap.dedent(f"""\
        // swift-tools-version:6.1
        import PackageDescription

        let package = Package(
            name: "App",
            dependencies: [.package(url: "file://{source}", exact: "{TAG}")],
            targets: [.executableTarget(name: "App", dependencies: [.product(name: "Cortado", package: "cortado")],
                                        swiftSettings: [.swiftLanguageMode(.v5)])]
        )
        """))
    for model, name in [(iris[0], "Iris"), (net[0], "Net"), (prog[0], "Prog"), (odd[0], "Odd")]:
        run([CORTADO, "generate", str(model), "--swift", "--name", name, "--output", str(app / "Sources" / "App" / f"{name}.swift")])
    names, rows = iris[1], iris[2]
    main = MAIN
    for key, value in {
        "{rows}": "[" + ", ".join(swift_doubles(r) for r in rows) + "]",
        "{plain_inputs}": ", ".join(f'"{n}": row[{i}]' for i, n in enumerate(names)),
        "{typed_inputs}": ", ".join(f"{n}: row[{i}]" for i, n in enumerate(names)),
        "{typed_inputs_first}": ", ".join(f"{n}: rows[0][{i}]" for i, n in enumerate(names)),
        "{pixels}": "[" + ", ".join(str(int(v)) for v in net[1].reshape(-1)) + "]",
        "{x}": swift_doubles(prog[1]),
        "{odd}": ", ".join(f"{label}: {float(v)!r}" for label, v in zip(["class", "input_1", "featureNames_"], odd[1])),
    }.items():
        main = main.replace(key, value)
    (app / "Sources" / "App" / "main.swift").write_text(main)

    build = subprocess.run(["swift", "build"], cwd=app, capture_output=True, text=True, timeout=BUILD_SECONDS)
    assert build.returncode == 0, f"the dependent package did not build:\n{build.stdout[-6000:]}\n{build.stderr[-3000:]}"
    exe = run(["swift", "build", "--show-bin-path"], cwd=app).strip()
    out = run([os.path.join(exe, "App"), str(models)], timeout=300)
    results = {}
    for line in out.splitlines():
        record = json.loads(line)
        results.setdefault(record.pop("case"), []).append(record)
    yield dict(results=results, iris=iris, net=net, prog=prog, odd=odd, app=app)
    shutil.rmtree(app / ".build", ignore_errors=True)  # a debug build's objects: hundreds of MB


def test_plain_mlmodel_loads_with_no_registration(built):
    labels = built["iris"][3]
    assert [r["species"] for r in built["results"]["plain"]] == list(labels)


def test_generated_classical_wrapper(built):
    _, _, _, labels, proba, classes = built["iris"]
    got = built["results"]["iris"]
    assert [r["species"] for r in got] == list(labels)
    for r, p in zip(got, proba):
        assert sorted(r["classProbability"]) == sorted(classes)
        np.testing.assert_allclose([r["classProbability"][c] for c in classes], p, rtol=1e-7, atol=1e-9)


def test_compile_model_at_writes_a_loadable_temporary_file(built):
    _, _, _, labels, proba, classes = built["iris"]
    (r,) = built["results"]["compiled"]
    assert r["species"] == labels[0]
    np.testing.assert_allclose([r["classProbability"][c] for c in classes], proba[0], rtol=1e-7, atol=1e-9)
    path = Path(r["path"])
    assert path.name == "Iris.mlmodelc" and path.is_file() and path.read_bytes()[:8] == b"CORTADOC"
    shutil.rmtree(path.parent)


def test_generated_image_network_wrapper(built):
    _, _, expected = built["net"]
    (r,) = built["results"]["net"]
    assert r["shape"] == [2, 4, 4]
    np.testing.assert_allclose(np.array(r["y"]).reshape(2, 4, 4), expected, rtol=1e-5, atol=1e-5)


def test_generated_ml_program_wrapper(built):
    _, _, expected = built["prog"]
    (r,) = built["results"]["prog"]
    np.testing.assert_allclose(np.array(r["y"]).reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


def test_generated_wrapper_for_awkward_feature_names(built):
    (r,) = built["results"]["odd"]
    np.testing.assert_allclose(r["default"], built["odd"][2], rtol=1e-9, atol=1e-9)


def test_generated_code_carries_descriptions(built):
    iris = (built["app"] / "Sources" / "App" / "Iris.swift").read_text()
    assert "/// Iris species from flower measurements." in iris
    assert "/// Sepal length in cm." in iris
    assert "final class IrisInput: MLFeatureProvider" in iris and "var classProbability: [String: Double]" in iris
    net = (built["app"] / "Sources" / "App" / "Net.swift").read_text()
    assert "var image: MLImage" in net and "RGB image, 4 × 4" in net
