"""`cortado inspect --ops-supported` and docs/ops.md: the operations Cortado lists are exactly the
iOS15–iOS18 ops of coremltools' registry, the count line adds up, every op that runs is named by
a test module's OPS list (and no module claims an op that does not run), and the doc is what
scripts/ops_table.py writes today."""

import importlib.util
import subprocess

from nnharness import REPO, cortado_command

spec = importlib.util.spec_from_file_location("ops_table", REPO / "scripts" / "ops_table.py")
ops_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ops_table)


def test_listed_ops_are_the_opsets_ops():
    ops = list(ops_table.opsets())
    assert len(ops) > 150
    header, status = ops_table.supported(cortado_command()[0])
    assert sorted(status) == sorted(ops)
    runs = [n for n, s in status.items() if s == "runs"]
    assert header == f"ML Program operations (iOS15–iOS18 opsets): {len(runs)} of {len(ops)} run"
    for name in ("conv", "linear", "matmul", "softmax", "layer_norm", "cond", "while_loop", "constexpr_lut_to_dense"):
        assert status[name] == "runs", name


def test_every_op_that_runs_is_tested():
    _, status = ops_table.supported(cortado_command()[0])
    tested = ops_table.tested_in()
    untested = [n for n, s in status.items() if s == "runs" and n not in tested]
    assert not untested, f"ops that run but no test module lists: {untested}"
    claimed = [n for n in tested if status.get(n) != "runs"]
    assert not claimed, f"test modules list ops that do not run: {claimed}"


def test_doc_is_current():
    assert (REPO / "docs" / "ops.md").read_text() == ops_table.render(cortado_command()[0]), \
        "docs/ops.md is stale: run scripts/ops_table.py"


def test_ops_supported_lists_only_ops():
    out = subprocess.run(cortado_command() + ["inspect", "--ops-supported"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("ML Program operations") and "neural-network" not in out.stdout
