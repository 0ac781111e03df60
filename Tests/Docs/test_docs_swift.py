"""The guide's Swift blocks compile: each `swift` block of README.md and docs/*.md (unless marked
`<!-- docs-test: skip (reason) -->`) is type-checked as a program's main.swift against the
modules of the build under test (the folder of CORTADO_BIN: `import Cortado` as a dependent
package sees it). Running them is Tests/Adopt's work (a package that depends on Cortado by a
tag); type-checking costs well under a second a block.
"""
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("docs_docsrun_swift", Path(__file__).with_name("docsrun.py"))
docsrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docsrun)

ROOT = docsrun.ROOT
BUILD = Path(os.environ.get("CORTADO_BIN", ROOT / ".build" / "debug" / "cortado")).resolve().parent
BLOCKS = [b for p in docsrun.guide_pages() for b in docsrun.blocks(p) if b.lang == "swift" and b.directive != "skip"]


def module_flags():
    """The build's Swift modules, and the module maps of the C targets they import."""
    maps = sorted(BUILD.glob("*.build/module.modulemap"))
    maps += sorted((ROOT / "Sources" / "CSystem").glob("*/module.modulemap"))
    maps += sorted((ROOT / "Plugins").glob("*/module.modulemap"))
    flags = ["-I", str(BUILD / "Modules")]
    for m in maps:
        flags += ["-Xcc", f"-fmodule-map-file={m}"]
    return flags


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_swift_block_type_checks(block, tmp_path):
    swiftc = shutil.which("swiftc")
    assert swiftc, "swiftc is not on PATH"
    assert (BUILD / "Modules" / "Cortado.swiftmodule").exists(), f"no Cortado module in {BUILD}: build first"
    (tmp_path / "main.swift").write_text(block.text)
    out = subprocess.run([swiftc, "-typecheck", *module_flags(), "main.swift"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{block.where}: the swift block does not compile:\n{block.text}\n{out.stderr[-4000:]}"


def test_there_are_swift_blocks_to_check():
    assert BLOCKS, "no swift block is type-checked: the guide's Swift examples would go unchecked"


def test_the_cortado_client_example_is_checked():
    """docs/swift.md's CortadoClient example is among the blocks type-checked above."""
    assert any("import CortadoClient" in b.text and "client.infer(" in b.text for b in BLOCKS), \
        "no type-checked block uses CortadoClient"
    assert (BUILD / "Modules" / "CortadoClient.swiftmodule").exists(), f"no CortadoClient module in {BUILD}: build first"
