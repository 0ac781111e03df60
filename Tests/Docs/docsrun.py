"""Reads the guide (README.md and docs/*.md) for its commands, and what `cortado help` says.

Shared by test_docs_commands.py and test_docs_flags.py, which load this file by its path.

A fenced block is a command block when its language is sh, bash, shell or console (in a
console block only the `$ ` lines are commands), and a program when it is python. Each is run
unless the HTML comment just before its fence says otherwise:

    <!-- docs-test: skip (why it cannot run here) -->

A skipped block is still checked: the flags its `cortado` and `cortado-load` commands pass
exist, the `make` targets it names exist, and the repository paths it names exist.
"""
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The binaries the guide's commands run: CORTADO_BIN, else the debug build; cortado-load beside it.
CORTADO = Path(os.environ.get("CORTADO_BIN", ROOT / ".build" / "debug" / "cortado")).resolve()
LOAD = CORTADO.with_name("cortado-load")
COMMAND_LANGS = {"sh", "bash", "shell", "console"}
PROGRAM_LANGS = {"python"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")


def guide_pages():
    """README.md first, then docs/*.md by name."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Block:
    page: Path
    line: int            # the fence's line, 1-based
    lang: str
    text: str
    directive: str = ""  # "" (run) or "skip"
    reason: str = ""

    @property
    def where(self):
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def commands(self, comments=False):
        """The block's command lines, continuations joined, console output and (unless
        `comments`) comment lines dropped."""
        raw = self.text.splitlines()
        if self.lang == "console":
            raw = [l[2:] for l in raw if l.startswith("$ ")]
        out, pending = [], ""
        for l in raw:
            if l.rstrip().endswith("\\"):
                pending += l.rstrip()[:-1] + " "
                continue
            l = pending + l
            pending = ""
            if comments or (l.strip() and not l.strip().startswith("#")):
                out.append(l)
        return out


def blocks(page):
    """Every fenced block of a page with the docs-test directive written just before it."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        d = DIRECTIVE.search(lines[k]) if k >= 0 else None
        found.append(Block(page, i + 1, lang, "\n".join(lines[i + 1:j]) + "\n",
                           d.group(1) if d else "", d.group(2).strip("() ") if d else ""))
        i = j + 1
    return found


def inline_code(page):
    """Inline code spans outside fenced blocks (a span may wrap onto the next line), with the
    line each starts on."""
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    text = "\n".join(lines)
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()))
            for m in re.finditer(r"`([^`]+)`", text)]


def words(command):
    """shlex words of one command line; None when it is not plain enough to split (heredocs)."""
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return None


# --- what the binaries say -------------------------------------------------------------------

def help_text(binary, *args):
    out = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{binary} {' '.join(args)}: {out.stderr}"
    return out.stdout


def subcommands(cortado):
    text = help_text(cortado, "--help")
    section = text.split("SUBCOMMANDS:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\w[\w-]*)\s", section, re.M)]


def option_flags(text):
    """The flags a help text declares (its OPTIONS section, `--a/--no-a` as both)."""
    options = text.split("OPTIONS:", 1)[1] if "OPTIONS:" in text else ""
    flags = set()
    for line in options.splitlines():
        m = re.match(r"^\s{2}(?:-\w, )?(--[\w/-]+)", line)
        if m:
            flags.update(f for f in m.group(1).split("/") if f.startswith("--"))
    return flags


@dataclass
class Helps:
    """Flags per command: ("cortado", SUB) and ("cortado-load", "")."""
    flags: dict = field(default_factory=dict)

    @classmethod
    def read(cls, cortado, load=None):
        h = cls()
        h.flags[("cortado", "")] = option_flags(help_text(cortado, "--help"))
        for sub in subcommands(cortado):
            if sub != "help":
                h.flags[("cortado", sub)] = option_flags(help_text(cortado, "help", sub))
        if load is not None and Path(load).exists():
            h.flags[("cortado-load", "")] = option_flags(help_text(load, "--help"))
        return h

    def all(self):
        return set().union(*self.flags.values())


SEPARATORS = {"|", "&&", "||", ";", "&", "then", "do", "else", "time", "exec", "sudo", "!"}


def cortado_calls(command):
    """(tool, subcommand, [flags]) for each cortado or cortado-load call in a command line:
    a word in command position (first, after a separator or `$(`, after VAR=value) named
    cortado or cortado-load, or a path ending in one."""
    ws = words(command)
    if ws is None:
        return []
    calls, at_command = [], True
    for i, w in enumerate(ws):
        if w.startswith("$("):
            w, at_command = w[2:], True
        bare = w.strip("[]|")
        if bare in SEPARATORS or bare.endswith(";"):
            at_command = True
            continue
        if at_command and "=" in w and not w.startswith("-"):
            continue                      # VAR=value before a command
        if not at_command:
            continue
        at_command = False
        name = bare.rsplit("/", 1)[-1]
        if name not in ("cortado", "cortado-load"):
            continue
        rest = []
        for x in ws[i + 1:]:
            if x.strip("[]") in SEPARATORS or x.startswith(">") or x.startswith("2>"):
                break
            rest.append(x)
        sub = ""
        if name == "cortado" and rest and not rest[0].startswith("-"):
            sub = rest[0]
        flags = []
        for x in rest:
            for piece in re.split(r"[\[\]|]", x):
                if piece.startswith("--"):
                    flags.append(piece.split("=", 1)[0])
        calls.append((name, sub, flags))
    return calls


def make_targets():
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", text, re.M))


REPO_PATH = re.compile(r"^[\w.-]+(/[\w.*-]+)+/?$")


def repo_paths(command):
    """Words that name a file or folder of the repository (first part a top-level entry)."""
    ws = words(command) or []
    top = {p.name for p in ROOT.iterdir()} - {".build", ".venv"}
    out = []
    for w in ws:
        w = w.split("=", 1)[-1] if w.startswith("-") else w
        if REPO_PATH.match(w) and w.split("/", 1)[0] in top:
            out.append(w)
    return out
