"""Helpers for the ML Program tests: build a program with coremltools' MIL builder, convert it
to an ML Program (`.mlpackage`), run it through `cortado predict`, compare with a NumPy
reference the test writes from the op's definition.

    from milharness import mb, ct, run_program, assert_close
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.relu(x=x)
    out = run_program(prog, {"x": x}, tmp_path)   # {output name: ndarray}

`keep_ops=True` (the default) converts with an empty pass pipeline, so the op under test reaches
the file as written (coremltools' optimisation passes would otherwise fold or fuse it).
`precision="fp16"` converts with compute_precision=FLOAT16 and the default passes, as users do.
"""

import os
import subprocess
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")
os.environ.setdefault("TQDM_DISABLE", "1")

import coremltools as ct  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from nnharness import REPO as REPO_ROOT, assert_close, cortado_command, rng, run_cortado  # noqa: E402,F401

DTYPES = {np.float32: "FLOAT32", np.float16: "FLOAT16", np.int32: "INT32", np.float64: "DOUBLE"}


def convert(prog, tmp_path, precision="fp32", keep_ops=True, name="model", **kwargs):
    """Converts a MIL program to an .mlpackage in tmp_path; returns its path."""
    opts = dict(convert_to="mlprogram")
    if precision == "fp16":
        opts["compute_precision"] = ct.precision.FLOAT16
    else:
        opts["compute_precision"] = ct.precision.FLOAT32
        if keep_ops:
            opts["pass_pipeline"] = ct.PassPipeline.EMPTY
    opts.update(kwargs)
    if "minimum_deployment_target" not in opts:
        # The converter refuses ops newer than its target: aim at the program's own opset.
        opset = getattr(prog.functions.get("main"), "opset_version", None) if hasattr(prog, "functions") else None
        if opset is not None:
            opts["minimum_deployment_target"] = opset
    model = ct.convert(prog, **opts)
    path = Path(tmp_path) / f"{name}.mlpackage"
    model.save(str(path))
    return path


def array_json(a):
    a = np.asarray(a)
    dt = DTYPES.get(a.dtype.type)
    if dt is None:
        a = a.astype(np.float64 if a.dtype.kind == "f" else np.int32)
        dt = DTYPES[a.dtype.type]
    data = a.reshape(-1).tolist()
    return {"shape": list(a.shape), "dataType": dt, "data": data}


def encode(v):
    return array_json(v) if isinstance(v, np.ndarray) else v


def decode(v):
    if isinstance(v, dict) and "shape" in v and "data" in v:
        return np.asarray(v["data"], dtype=np.float64).reshape(v["shape"])
    return v


def predict(model_path, rows, extra_args=(), expect_failure=False, timeout=300):
    """Runs `cortado predict` on a list of input rows (arrays keep their own dtype); returns
    the decoded output rows, or (returncode, stderr) when expect_failure."""
    return run_cortado(model_path, rows, extra_args=extra_args, expect_failure=expect_failure, timeout=timeout,
                       encode=encode, decode=decode)


def run_program(prog, inputs, tmp_path, precision="fp32", keep_ops=True, **kwargs):
    """Converts prog and predicts one row; returns {output name: value}."""
    path = convert(prog, tmp_path, precision=precision, keep_ops=keep_ops, **kwargs)
    return predict(path, [inputs])[0]


def only(outputs):
    """The single output's value."""
    assert len(outputs) == 1, f"expected one output, got {list(outputs)}"
    return next(iter(outputs.values()))


def inspect(model_path, *args):
    proc = subprocess.run(cortado_command() + ["inspect", str(model_path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
