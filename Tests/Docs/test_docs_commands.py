"""Every command in the guide runs: the sh/bash/console and python blocks of README.md and
docs/*.md, page by page, in order, each page in a sandbox folder of its own.

The sandbox holds a copy of examples/ and links to the rest of the repository (Protos, Plugins,
deploy, scripts, Makefile, .venv); `cortado` and `cortado-load` are on PATH (the build under
test: CORTADO_BIN and the cortado-load beside it), and `.build/debug` is that build's folder
(the plugins are there). A line `cortado serve ...` is started in the background; it serves
the page's later blocks until the next `cortado serve` line or the end of the page, then gets
SIGTERM and must exit 0 (the drain). The default ports 8000, 8001 and 8002 are mapped to free
ones: `:8000`/`:8001`/`:8002` in commands and programs, and `--http-port`, `--port`,
`--metrics-port` added to each `cortado serve` line. A block marked
`<!-- docs-test: skip (reason) -->` is not run; it is listed with its reason and checked
statically (flags, make targets, repository paths; docsrun.py).
"""
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("docs_docsrun", Path(__file__).with_name("docsrun.py"))
docsrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docsrun)

ROOT = docsrun.ROOT
CORTADO, LOAD = docsrun.CORTADO, docsrun.LOAD
BLOCK_TIMEOUT = 120      # seconds one block may take (a failure's bound, not a timing check)
LINKED = ["Protos", "Plugins", "deploy", "scripts", "bench", "Tests", "Makefile", "Package.swift", ".venv", "docs"]

PAGES = docsrun.guide_pages()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_sandbox(base):
    shutil.copytree(ROOT / "examples", base / "examples")
    for name in LINKED:
        if (ROOT / name).exists():
            (base / name).symlink_to(ROOT / name)
    (base / ".build").mkdir()
    (base / ".build" / "debug").symlink_to(CORTADO.parent)
    bin_dir = base / ".docs-bin"
    bin_dir.mkdir()
    (bin_dir / "cortado").symlink_to(CORTADO)
    if LOAD.exists():
        (bin_dir / "cortado-load").symlink_to(LOAD)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}:{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["CORTADO_BIN"] = str(CORTADO)
    env.pop("CORTADO_PLUGIN_PATH", None)
    env.pop("CORTADO_MODEL_KEY", None)
    return env


class Server:
    """One `cortado serve` line of a page, started by its PID and stopped by it."""

    def __init__(self, line, ports, cwd, env, where):
        self.where, self.ports = where, ports
        self.log = cwd / f".server-{ports['grpc']}.log"
        m = SERVE.match(line)   # exec: the PID is cortado's, assignments kept before it
        self.proc = subprocess.Popen(["bash", "-c", m.group(1) + "exec " + line[m.start(2):]], cwd=cwd, env=env,
                                     stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"),
                                     start_new_session=True)

    def wait_ready(self, wait_ports, timeout=60):
        """Until every port in wait_ports accepts a connection (the server opens them once its
        models are loaded)."""
        deadline = time.monotonic() + timeout
        pending = list(wait_ports)
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.where}: cortado serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", pending[0]), timeout=1).close()
                pending.pop(0)
            except OSError:
                time.sleep(0.1)
        if pending:
            self.kill()
            pytest.fail(f"{self.where}: cortado serve did not open port {pending[0]} in {timeout} s:\n{self.log.read_text()}")

    def log_tail(self):
        return self.log.read_text()[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"{self.where}: cortado serve did not exit after SIGTERM")
        assert self.proc.returncode == 0, \
            f"{self.where}: cortado serve exited {self.proc.returncode} after SIGTERM:\n{self.log.read_text()}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def map_ports(text, ports):
    for default, key in (("8000", "http"), ("8001", "grpc"), ("8002", "metrics")):
        text = text.replace(f":{default}", f":{ports[key]}")
    return text


def serve_line(line, ports):
    """The serve command with the page's ports, unless the line sets its own; and the ports
    to wait for (those it was given: a line's own may be 0 or -1, turned off)."""
    line = re.sub(r"\s+#.*$", "", line)
    wait = []
    for flag, key in (("--port", "grpc"), ("--http-port", "http"), ("--metrics-port", "metrics")):
        if f"{flag} " not in line and f"{flag}=" not in line:
            line += f" {flag} {ports[key]}"
            wait.append(ports[key])
    return line, wait


SERVE = re.compile(r"""^\s*((?:[A-Za-z_]\w*=(?:\$\([^)]*\)|\$\{[^}]*\}|\$\w+|"[^"]*"|'[^']*'|[^\s"'$])*\s+)*)((?:\S*/)?cortado\s+serve(?:\s|$))""")


def is_serve(line):
    """`cortado serve ...`, after any VAR=value assignments."""
    return SERVE.match(line) is not None


def run_page(page, base):
    env = make_sandbox(base)
    ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
    server, ran, skipped = None, 0, []
    try:
        for b in docsrun.blocks(page):
            if b.lang not in docsrun.COMMAND_LANGS | docsrun.PROGRAM_LANGS:
                continue
            if b.directive == "skip":
                skipped.append((b.where, b.reason))
                continue
            assert b.directive == "", f"{b.where}: unknown docs-test directive {b.directive!r}"
            if b.lang in docsrun.PROGRAM_LANGS:
                script = base / f".block-{b.line}.py"
                script.write_text(map_ports(b.text, ports))
                argv = [sys.executable, script.name]
            else:
                lines = []
                for c in b.commands(comments=True):
                    if is_serve(c):
                        if lines:
                            run_block(b, ["bash", "-euo", "pipefail", "-c", "\n".join(lines)], base, env, server)
                            lines = []
                        if server:
                            server.stop()
                        line, wait = serve_line(c, ports)
                        server = Server(line, ports, base, env, b.where)
                        server.wait_ready(wait)
                    else:
                        lines.append(map_ports(c, ports))
                if not any(l.strip() for l in lines):
                    ran += 1
                    continue
                argv = ["bash", "-euo", "pipefail", "-c", "\n".join(lines)]
            run_block(b, argv, base, env, server)
            ran += 1
        if server:
            server.stop()
            server = None
    finally:
        if server:
            server.kill()
    return ran, skipped


def run_block(b, argv, cwd, env, server=None):
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{b.where}: the {b.lang} block did not finish in {BLOCK_TIMEOUT} s:\n{b.text}")
    if os.environ.get("DOCS_TEST_VERBOSE"):
        print(f"--- {b.where} ({b.lang})\n{out.stdout}{out.stderr}")
    served = f"\n--- the server's log ({server.where})\n{server.log_tail()}" if server else ""
    assert out.returncode == 0, (f"{b.where}: the {b.lang} block failed (exit {out.returncode}):\n{b.text}\n"
                                 f"--- stdout\n{out.stdout[-3000:]}\n--- stderr\n{out.stderr[-3000:]}{served}")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_commands_run(page, tmp_path):
    ran, skipped = run_page(page, tmp_path)
    print(f"{page.relative_to(ROOT)}: {ran} blocks run, {len(skipped)} skipped")
    for where, reason in skipped:
        print(f"  skipped {where}: {reason}")


def test_skipped_blocks_are_counted_and_give_a_reason():
    """Every skip names its reason, and the list of skipped blocks is printed (pytest -s or -rA)."""
    skipped = [b for p in PAGES for b in docsrun.blocks(p) if b.directive == "skip"]
    for b in skipped:
        assert b.reason, f"{b.where}: docs-test skip without a reason"
        assert b.lang in docsrun.COMMAND_LANGS | docsrun.PROGRAM_LANGS | {"swift"}, \
            f"{b.where}: a skip on a {b.lang or 'plain'} block, which is never run anyway"
    run = [b for p in PAGES for b in docsrun.blocks(p)
           if b.lang in docsrun.COMMAND_LANGS | docsrun.PROGRAM_LANGS and b.directive != "skip"]
    print(f"{len(run)} blocks run, {len(skipped)} skipped:")
    for b in skipped:
        print(f"  {b.where}: {b.reason}")
    assert len(run) > len(skipped), "most of the guide's commands must run"


SKIPPED = [b for p in PAGES for b in docsrun.blocks(p) if b.directive == "skip"]


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_block_marked_skip(block):
    """One pytest skip per block the guide marks, so that every run counts them (`-rs` lists
    the reasons); test_docs_flags.py checks their flags, make targets and paths."""
    pytest.skip(f"{block.where}: {block.reason}")
