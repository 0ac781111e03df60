"""The guide and the binaries agree on flags, both ways.

- Every flag a `cortado` or `cortado-load` command in the guide passes (in any fenced block,
  run or skipped, and in inline code that starts with the command) is one its help lists.
- Every flag `cortado help SUBCOMMAND` and `cortado-load --help` list is written somewhere in
  README.md or docs/*.md, so a new flag cannot go undocumented.
- Every flag the guide mentions on its own in inline code (`--max-queue`) is a flag of
  cortado or cortado-load, or one of the other tools' flags listed below with their tool.
- Skipped blocks name `make` targets the Makefile has and repository paths that exist.
"""
import importlib.util
import re
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("docs_docsrun_flags", Path(__file__).with_name("docsrun.py"))
docsrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docsrun)

ROOT = docsrun.ROOT
CORTADO, LOAD = docsrun.CORTADO, docsrun.LOAD
PAGES = docsrun.guide_pages()

# Flags of other tools that the guide names in inline code, with the tool they belong to.
OTHER_TOOLS = {
    "--static-swift-stdlib": "swift build",
    "--model-control-mode": "Triton's tritonserver",
    "--fresh": "deploy/container/build-image.sh",
    "--replay": "bench/server_replay_batching.py",
    "--instructions": "bench/server_replay_batching.py",
    "--tls": "scripts/soak.py",
}


@pytest.fixture(scope="module")
def helps():
    assert CORTADO.exists(), f"no cortado at {CORTADO} (set CORTADO_BIN)"
    return docsrun.Helps.read(CORTADO, LOAD)


def guide_text():
    return "\n".join(p.read_text() for p in PAGES)


def test_commands_in_the_guide_pass_only_flags_that_exist(helps):
    bad = []
    for page in PAGES:
        lines = [(b.where, c) for b in docsrun.blocks(page)
                 if b.lang in docsrun.COMMAND_LANGS | {"text", ""} for c in b.commands()]
        lines += [(f"{page.relative_to(ROOT)}:{n}", span) for n, span in docsrun.inline_code(page)
                  if re.match(r"(\S*/)?cortado(-load)? ", span)]
        for where, line in lines:
            for tool, sub, flags in docsrun.cortado_calls(line):
                if (tool, sub) == ("cortado", "help"):
                    named = (docsrun.words(line) or [])[2:3]
                    if named and named[0].isalpha() and named[0].islower() and ("cortado", named[0]) not in helps.flags:
                        bad.append(f"{where}: `cortado help {named[0]}`: no such subcommand")
                    continue
                known = helps.flags.get((tool, sub))
                if known is None:
                    bad.append(f"{where}: `{tool} {sub}`: no such subcommand")
                    continue
                bad += [f"{where}: `{tool} {sub}` has no flag {f}" for f in flags if f not in known | {"--help"}]
    assert not bad, "\n".join(bad)


def test_every_flag_the_binaries_list_is_documented(helps):
    text = guide_text()
    missing = []
    for (tool, sub), flags in sorted(helps.flags.items()):
        for f in sorted(flags):
            if not re.search(re.escape(f) + r"(?![\w-])", text):
                missing.append(f"{tool} {sub} {f}".replace("  ", " "))
    assert not missing, "flags no page of the guide mentions:\n" + "\n".join(missing)


def test_flags_named_alone_belong_to_a_tool(helps):
    known = helps.all() | {"--help"} | set(OTHER_TOOLS)
    bad = []
    for page in PAGES:
        for n, span in docsrun.inline_code(page):
            m = re.match(r"--[a-z0-9][a-z0-9-]*", span)
            if m and m.group(0) not in known:
                bad.append(f"{page.relative_to(ROOT)}:{n}: `{span}`: no cortado or cortado-load flag, "
                           "and not listed in OTHER_TOOLS")
    assert not bad, "\n".join(bad)


def test_skipped_blocks_name_targets_and_paths_that_exist():
    targets = docsrun.make_targets()
    bad = []
    for page in PAGES:
        for b in docsrun.blocks(page):
            if b.directive != "skip":
                continue
            for c in b.commands():
                ws = docsrun.words(c) or []
                for i, w in enumerate(ws):
                    if w == "make":
                        for t in ws[i + 1:]:
                            if t.startswith("-") or "=" in t:
                                continue
                            if t in ("&&", "||", ";", "|") or t.startswith("#"):
                                break
                            if t not in targets:
                                bad.append(f"{b.where}: make {t}: no such target in the Makefile")
                for p in docsrun.repo_paths(c):
                    if not list(ROOT.glob(p.rstrip("/"))):
                        bad.append(f"{b.where}: {p}: no such file or folder in the repository")
    assert not bad, "\n".join(bad)


def test_other_tools_flags_exist_in_the_scripts_named():
    """The allow-list cannot drift either: a flag credited to a script of the repository is in it."""
    bad = [f"{flag}: not in {tool}" for flag, tool in OTHER_TOOLS.items()
           if (ROOT / tool).is_file() and flag not in (ROOT / tool).read_text()]
    assert not bad, "\n".join(bad)
