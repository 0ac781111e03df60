"""The `cortado` command line: the bundled example and how bad input is reported."""
import json
import math
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORTADO = os.environ.get("CORTADO_BIN", str(ROOT / ".build" / "debug" / "cortado"))
IRIS = ROOT / "examples" / "iris"


def run(*args, stdin=None):
    return subprocess.run([CORTADO, *map(str, args)], input=stdin, capture_output=True, text=True, timeout=60)


def test_example_matches_scikit_learn():
    out = run("predict", IRIS / "model.mlmodel", "--input", IRIS / "rows.jsonl")
    assert out.returncode == 0, out.stderr
    got = [json.loads(line) for line in out.stdout.splitlines()]
    want = [json.loads(line) for line in (IRIS / "expected.jsonl").read_text().splitlines()]
    assert len(got) == len(want) == 10
    for g, w in zip(got, want):
        assert g["species"] == w["species"]
        for label, p in w["classProbability"].items():
            assert math.isclose(g["classProbability"][label], p, rel_tol=1e-9, abs_tol=1e-12)


def test_inspect_shows_the_description():
    out = run("inspect", IRIS / "model.mlmodel")
    assert out.returncode == 0, out.stderr
    for text in ("pipelineClassifier", "sepal_length: Double", "species: String", "Class labels:  3", "Runs:          yes"):
        assert text in out.stdout, out.stdout


def test_stdin_and_output_file(tmp_path):
    row = (IRIS / "rows.jsonl").read_text().splitlines()[0]
    dest = tmp_path / "out.jsonl"
    out = run("predict", IRIS / "model.mlmodel", "--output", dest, stdin=row + "\n\n")
    assert out.returncode == 0, out.stderr
    assert json.loads(dest.read_text())["species"] == "setosa"


def test_malformed_line_is_named_and_nothing_after_it_runs():
    rows = (IRIS / "rows.jsonl").read_text().splitlines()
    text = "\n".join([rows[0], "{not json", rows[1]]) + "\n"
    out = run("predict", IRIS / "model.mlmodel", stdin=text)
    assert out.returncode == 1
    assert "line 2" in out.stderr and "malformed JSON" in out.stderr, out.stderr
    assert len(out.stdout.splitlines()) == 1


def test_keep_going_writes_an_error_row_and_exits_1():
    rows = (IRIS / "rows.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["sepal_width"] = "wide"
    text = "\n".join([rows[0], json.dumps(bad), rows[1]]) + "\n"
    out = run("predict", IRIS / "model.mlmodel", "--keep-going", stdin=text)
    assert out.returncode == 1
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 3 and "error" in lines[1] and "species" in lines[2]
    assert "sepal_width" in lines[1]["error"] and "line 2" in out.stderr


def test_missing_and_unknown_features_are_named():
    row = json.loads((IRIS / "rows.jsonl").read_text().splitlines()[0])
    missing = dict(row)
    del missing["petal_width"]
    out = run("predict", IRIS / "model.mlmodel", stdin=json.dumps(missing) + "\n")
    assert out.returncode == 1 and "petal_width" in out.stderr and "missing" in out.stderr, out.stderr
    typo = dict(row, petal_widht=1.0)
    out = run("predict", IRIS / "model.mlmodel", stdin=json.dumps(typo) + "\n")
    assert out.returncode == 1 and "petal_widht" in out.stderr, out.stderr


def test_missing_file_and_unsupported_kind(tmp_path):
    out = run("predict", tmp_path / "nope.mlmodel")
    assert out.returncode != 0 and "nope.mlmodel" in out.stderr
    # A WordTagger model (Apple's NLP kind) parses but does not run: the kind is named.
    import warnings
    warnings.filterwarnings("ignore")
    from coremltools.proto import Model_pb2
    spec = Model_pb2.Model()
    spec.specificationVersion = 4
    f = spec.description.input.add()
    f.name = "text"
    f.type.stringType.MergeFromString(b"")
    spec.wordTagger.revision = 1
    path = tmp_path / "tagger.mlmodel"
    path.write_bytes(spec.SerializeToString())
    out = run("predict", path, stdin="")
    assert out.returncode != 0 and "wordTagger" in out.stderr, out.stderr
    out = run("inspect", path)
    assert out.returncode == 0 and "Runs:          no" in out.stdout and "wordTagger" in out.stdout


def test_version_is_the_one_version_string():
    """`cortado --version` prints the version kept in CortadoServerApp.swift (ServerMetadata
    reports the same), and CHANGELOG.md's newest release is that version."""
    source = (ROOT / "Sources" / "CortadoServer" / "CortadoServerApp.swift").read_text()
    (version,) = re.findall(r'public static let version = "([^"]+)"', source)
    out = run("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == version
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == version
    # Only one place spells it out.
    assert not re.search(r'version:\s*"', (ROOT / "Sources" / "cortado" / "Cortado.swift").read_text())
