"""Conformance: `cortado predict` against the source libraries (see README.md in this folder).

Environment:
  CORTADO_BIN    the cortado executable (default: .build/debug/cortado under the repository root).
                 It may be a command with arguments, e.g. ".venv/bin/python Tests/Conformance/reference_predict.py".
  CORTADO_CASES  a folder written by make_cases.py. If unset, make_cases.py runs once per session
                 into a temporary folder.

Each case folder is one test (its id is the case name); each _bad/<name> folder is one test that
expects a clean failure.
"""

import atexit
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TIMEOUT = float(os.environ.get("CORTADO_TIMEOUT", "120"))
MAX_REPORTED = 25  # mismatches printed per case


# ---------------------------------------------------------------------------- locating things

def _cases_root():
    env = os.environ.get("CORTADO_CASES")
    if env:
        root = Path(env)
        if not root.is_absolute():
            root = (Path.cwd() / root).resolve()
        return root
    tmp = Path(tempfile.mkdtemp(prefix="cortado-cases-"))
    atexit.register(shutil.rmtree, tmp, True)
    proc = subprocess.run([sys.executable, str(HERE / "make_cases.py"), str(tmp)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"make_cases.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return tmp


CASES_ROOT = _cases_root()


def _list(pattern_file, base):
    if not base.is_dir():
        return []
    return sorted(p.parent.name for p in base.glob(f"*/{pattern_file}"))


GOOD_CASES = _list("case.json", CASES_ROOT)
BAD_CASES = _list("bad.json", CASES_ROOT / "_bad")


def _command():
    env = os.environ.get("CORTADO_BIN")
    argv = shlex.split(env) if env else [str(REPO / ".build" / "debug" / "cortado")]
    exe = argv[0]
    found = shutil.which(exe) or (exe if os.path.exists(exe) else None)
    if found is None and not os.path.isabs(exe) and (REPO / exe).exists():
        found = str(REPO / exe)
    if found is None:
        msg = f"cortado executable not found: {exe!r} (set CORTADO_BIN or build it)"
        if env:
            pytest.fail(msg)
        pytest.skip(msg)
    return [found] + argv[1:]


def _run(model, rows):
    cmd = _command() + ["predict", str(model), "--input", str(rows)]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, cwd=str(REPO))
    except subprocess.TimeoutExpired:
        pytest.fail(f"timed out after {TIMEOUT:g}s: {' '.join(cmd)}")


# ---------------------------------------------------------------------------- comparison

SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _as_number(v):
    """A JSON number, or one of the strings NaN / Infinity / -Infinity. None if neither."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in SPECIAL:
        return SPECIAL[v]
    return None


def _is_multiarray(v):
    return isinstance(v, dict) and "data" in v and "shape" in v and set(v) <= {"shape", "dataType", "data"}


def _short(v, limit=160):
    s = json.dumps(v)
    return s if len(s) <= limit else s[:limit] + "..."


def compare_value(got, exp, rtol, atol, path, out):
    """Append one line per mismatch to `out`. Numbers: |got - exp| <= atol + rtol*|exp|; integers and
    strings exactly; dictionaries key by key with the same key set; multiArrays by shape and data."""
    if _is_multiarray(exp):
        if not _is_multiarray(got):
            out.append(f"{path}: expected a multiArray object {{shape, dataType, data}}, got {_short(got)}")
            return
        if list(got["shape"]) != list(exp["shape"]):
            out.append(f"{path}: shape {got['shape']} != expected {exp['shape']}")
            return
        if len(got["data"]) != len(exp["data"]):
            out.append(f"{path}: {len(got['data'])} data values, expected {len(exp['data'])}")
            return
        for i, (g, e) in enumerate(zip(got["data"], exp["data"])):
            compare_value(g, e, rtol, atol, f"{path}.data[{i}]", out)
        return
    if isinstance(exp, dict):
        if not isinstance(got, dict):
            out.append(f"{path}: expected an object with keys {sorted(exp)}, got {_short(got)}")
            return
        if set(got) != set(exp):
            missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
            out.append(f"{path}: key set differs (missing {missing}, unexpected {extra})")
        for k in sorted(set(got) & set(exp)):
            compare_value(got[k], exp[k], rtol, atol, f"{path}[{json.dumps(k)}]", out)
        return
    if isinstance(exp, str) and exp not in SPECIAL:
        if got != exp:
            out.append(f"{path}: got {_short(got)}, expected {_short(exp)}")
        return
    if isinstance(exp, int) and not isinstance(exp, bool):
        g = _as_number(got)
        if g is None or g != exp:
            out.append(f"{path}: got {_short(got)}, expected the integer {exp}")
        return
    e = _as_number(exp)
    if e is None:
        if got != exp:
            out.append(f"{path}: got {_short(got)}, expected {_short(exp)}")
        return
    g = _as_number(got)
    if g is None:
        out.append(f"{path}: got {_short(got)}, expected the number {exp}")
        return
    if math.isnan(e) or math.isnan(g):
        if not (math.isnan(e) and math.isnan(g)):
            out.append(f"{path}: got {got}, expected {exp}")
        return
    if math.isinf(e) or math.isinf(g):
        if e != g:
            out.append(f"{path}: got {got}, expected {exp}")
        return
    tol = atol + rtol * abs(e)
    if abs(g - e) > tol:
        out.append(f"{path}: got {g!r}, expected {e!r} (|diff| {abs(g - e):.3g} > tol {tol:.3g})")


def _read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------------------- tests

@pytest.mark.parametrize("case", GOOD_CASES)
def test_case(case):
    d = CASES_ROOT / case
    meta = json.loads((d / "case.json").read_text())
    inputs = _read_jsonl(d / "input.jsonl")
    expected = _read_jsonl(d / "expected.jsonl")
    proc = _run(d / "model.mlmodel", d / "input.jsonl")
    if proc.returncode != 0:
        pytest.fail(f"[{case}] cortado exited with {proc.returncode}\n--- stderr ---\n{proc.stderr[-4000:]}")
    got_rows = []
    for i, line in enumerate(l for l in proc.stdout.splitlines() if l.strip()):
        try:
            got_rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            pytest.fail(f"[{case}] output line {i + 1} is not JSON ({e.msg}): {line[:300]}")
    if len(got_rows) != len(expected):
        pytest.fail(f"[{case}] {len(got_rows)} output lines for {len(expected)} input rows\n"
                    f"--- stdout (head) ---\n{proc.stdout[:2000]}\n--- stderr ---\n{proc.stderr[-2000:]}")
    rtol, atol = meta["rtol"], meta["atol"]
    per_output = meta.get("tolerances", {})
    problems = []
    bad_rows = []
    for r, (got, exp) in enumerate(zip(got_rows, expected)):
        row_problems = []
        if not isinstance(got, dict):
            row_problems.append(f"output is not a JSON object: {_short(got)}")
        else:
            for name in meta["compare"]:
                t = per_output.get(name, {})
                if name not in got:
                    row_problems.append(f"output '{name}' missing (got keys {sorted(got)})")
                    continue
                compare_value(got[name], exp[name], t.get("rtol", rtol), t.get("atol", atol), f"'{name}'",
                              row_problems)
        if row_problems:
            bad_rows.append(r)
            problems += [f"row {r} (input line {r + 1}) {p}" for p in row_problems]
    if not problems:
        return
    shown = problems[:MAX_REPORTED]
    more = len(problems) - len(shown)
    msg = [f"[{case}] {len(problems)} mismatch(es) in {len(bad_rows)} of {len(expected)} rows "
           f"(kind {meta['kind']}, source {meta['source']}, rtol {rtol:g}, atol {atol:g})"]
    msg += ["  " + p for p in shown]
    if more:
        msg.append(f"  ... and {more} more")
    msg.append(f"  first bad row's input: {_short(inputs[bad_rows[0]], 400)}")
    msg.append(f"  notes: {meta.get('notes', '')}")
    text = "\n".join(msg)
    if meta.get("advisory"):
        pytest.xfail(f"advisory case ({meta['advisory']}):\n{text}")
    pytest.fail(text, pytrace=False)


@pytest.mark.parametrize("case", BAD_CASES, ids=[f"_bad/{c}" for c in BAD_CASES])
def test_bad_input(case):
    d = CASES_ROOT / "_bad" / case
    meta = json.loads((d / "bad.json").read_text())
    proc = _run(d / meta["model"], d / meta["input"])
    where = f"[_bad/{case}] {meta.get('notes', '')}"
    if proc.returncode < 0:
        pytest.fail(f"{where}\ncortado was killed by signal {-proc.returncode} (a crash, not a clean error)\n"
                    f"--- stderr ---\n{proc.stderr[-3000:]}", pytrace=False)
    if proc.returncode == 0:
        pytest.fail(f"{where}\ncortado exited 0; a non-zero exit was expected\n--- stdout ---\n{proc.stdout[:2000]}"
                    f"\n--- stderr ---\n{proc.stderr[-2000:]}", pytrace=False)
    if not proc.stderr.strip():
        pytest.fail(f"{where}\nnon-zero exit ({proc.returncode}) but stderr is empty", pytrace=False)
    missing = [p for p in meta.get("stderr_patterns", []) if not re.search(p, proc.stderr)]
    if missing:
        pytest.fail(f"{where}\nstderr does not match {missing}\n--- stderr ---\n{proc.stderr[-3000:]}",
                    pytrace=False)


def test_cases_were_generated():
    """Guard against an empty or wrong CORTADO_CASES folder silently running zero cases."""
    assert GOOD_CASES, f"no case folders (with case.json) under {CASES_ROOT}"
    assert BAD_CASES, f"no bad-input folders (with bad.json) under {CASES_ROOT / '_bad'}"
