"""deploy/systemd: the unit passes `systemd-analyze verify` and its offline security review,
carries the hardening and limits docs/deploy.md promises, and its commands work: the test runs
ExecStart and ExecStartPost as systemd would expand them from cortado.env (ports and the
repository changed to this machine's), then stops the server as KillSignal does.

No systemd runs as PID 1 here, so the unit is never started by systemd itself: what the
sandbox (DynamicUser, ProtectSystem, the system call filter) does at run time is checked on
paper only.
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "cortado.service"
CORTADO = os.environ.get("CORTADO_BIN", str(ROOT / ".build" / "debug" / "cortado"))
ANALYZE = shutil.which("systemd-analyze")


def parse_unit(path):
    """{section: [(key, value), ...]} in file order; a key may repeat (SystemCallFilter)."""
    sections, current = {}, None
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def parse_env(path):
    """systemd's EnvironmentFile syntax as the unit uses it: KEY=value, value optionally in quotes."""
    env = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, _, value = line.partition("=")
        env[key] = shlex.split(value)[0] if value else ""
    return env


UNIT_KEYS = parse_unit(UNIT)
SERVICE = dict(UNIT_KEYS["Service"])
ENV = parse_env(SYSTEMD / "cortado.env")


def all_values(key):
    return [v for k, v in UNIT_KEYS["Service"] if k == key]


def expand(command, env):
    """systemd's ExecStart expansion: ${X} is one word, $X splits on whitespace."""
    words = []
    for word in command.split():
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            words += env.get(word[1:], "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return words


def seconds(value):
    m = re.fullmatch(r"(\d+)(s|min)?", value)
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    """A root for `systemd-analyze verify --root`: this machine's unit library (so
    multi-user.target and sysinit.target resolve) and stand-ins for the unit's two executables,
    which verify requires to exist."""
    root = tmp_path_factory.mktemp("root")
    (root / "usr" / "lib" / "systemd").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    for exe in ("usr/local/bin/cortado", "usr/bin/curl"):
        (root / exe).parent.mkdir(parents=True, exist_ok=True)
        (root / exe).write_text("#!/bin/sh\n")
        (root / exe).chmod(0o755)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc" / "systemd" / "system" / UNIT.name)
    return root


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (scripts/setup.sh installs systemd)")
def test_systemd_analyze_verify(fake_root):
    out = subprocess.run([ANALYZE, "verify", f"--root={fake_root}", "--man=no", UNIT.name], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and only warns: any output is a finding.
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stdout + out.stderr


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")
def test_verify_catches_a_misspelt_key(fake_root, tmp_path):
    unit = fake_root / "etc" / "systemd" / "system" / UNIT.name
    original = unit.read_text()
    try:
        unit.write_text(original.replace("ProtectClock=yes", "ProtectClok=yes"))
        out = subprocess.run([ANALYZE, "verify", f"--root={fake_root}", "--man=no", UNIT.name], capture_output=True, text=True, timeout=60)
        assert "Unknown key 'ProtectClok'" in out.stderr
    finally:
        unit.write_text(original)


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")
def test_security_exposure_is_low():
    """systemd's own review of the sandbox: 0 is locked down, 10 fully exposed; 2.0 and below
    is what systemd calls OK."""
    out = subprocess.run([ANALYZE, "security", "--offline=yes", "--threshold=20", "--no-pager", str(UNIT)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    level = float(re.search(r"Overall exposure level for cortado.service: ([\d.]+)", out.stdout).group(1))
    assert level <= 2.0


def test_hardening_keys():
    expected = {
        "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "", "Type": "exec",
        "KillSignal": "SIGTERM", "PrivateDevices": "yes", "MemoryDenyWriteExecute": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "SystemCallArchitectures": "native",
    }
    for key, value in expected.items():
        assert SERVICE.get(key) == value, key
    assert ENV["CORTADO_MODELS"] in SERVICE["ReadOnlyPaths"].split()
    assert all_values("SystemCallFilter") == ["@system-service", "~@privileged"]
    assert re.fullmatch(r"\d+[KMG]", SERVICE["MemoryMax"]) and re.fullmatch(r"\d+", SERVICE["TasksMax"])
    assert SERVICE["EnvironmentFile"] == "/etc/cortado/cortado.env"
    assert UNIT_KEYS["Install"] == [("WantedBy", "multi-user.target")]


def test_stop_timeout_covers_the_drain():
    """systemd sends SIGKILL TimeoutStopSec after SIGTERM: it must outlast the drain."""
    assert seconds(SERVICE["TimeoutStopSec"]) >= int(ENV["CORTADO_DRAIN_TIMEOUT"]) + 10
    assert "--drain-timeout ${CORTADO_DRAIN_TIMEOUT}" in SERVICE["ExecStart"]
    assert SERVICE["KillMode"] == "mixed"


def test_readiness_polls_readyz_on_the_metrics_port():
    post = SERVICE["ExecStartPost"]
    assert post.startswith("/usr/bin/curl ") and "--fail" in post and "--retry-all-errors" in post
    assert post.endswith("http://127.0.0.1:${CORTADO_METRICS_PORT}/readyz")
    retries = int(re.search(r"--retry (\d+)", post).group(1)) * int(re.search(r"--retry-delay (\d+)", post).group(1))
    assert retries <= seconds(SERVICE["TimeoutStartSec"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (scripts/setup.sh installs it)")
def test_the_units_commands_start_become_ready_and_drain(tmp_path):
    env = dict(ENV, CORTADO_MODELS=str(ROOT / "examples" / "repository"), CORTADO_PORT=str(free_port()), CORTADO_METRICS_PORT=str(free_port()))
    start = expand(SERVICE["ExecStart"], env)
    assert start[0] == "/usr/local/bin/cortado" and start[1] == "serve"
    server = subprocess.Popen([CORTADO] + start[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        post = subprocess.run(expand(SERVICE["ExecStartPost"], env), capture_output=True, text=True, timeout=seconds(SERVICE["TimeoutStartSec"]))
        assert post.returncode == 0, post.stderr
        assert server.poll() is None
        server.send_signal(getattr(signal, SERVICE["KillSignal"]))
        output, _ = server.communicate(timeout=seconds(SERVICE["TimeoutStopSec"]))
        assert server.returncode == 0, output
        assert "draining" in output
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
