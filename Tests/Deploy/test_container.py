"""deploy/container, checked without building the image (`make image` builds and runs it).

The Containerfile's runtime stage is what the image promises (non-root numeric user, /models,
the two ports, a health check, only the binary from the build stage); runtime-packages.txt
must cover every shared library the cortado binary links outside the C library and the Swift
toolchain (which --static-swift-stdlib puts into the binary); build-image.sh is valid bash.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "deploy" / "container"
CORTADO = os.environ.get("CORTADO_BIN", str(ROOT / ".build" / "debug" / "cortado"))


def instructions(path):
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, pending = [], ""
    for line in Path(path).read_text().splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


STEPS = instructions(HERE / "Containerfile")
STAGES = [i for i, (word, _) in enumerate(STEPS) if word == "FROM"]
FINAL = STEPS[STAGES[-1]:]


def final(word):
    return [rest for w, rest in FINAL if w == word]


def runtime_packages():
    return [line for line in (HERE / "runtime-packages.txt").read_text().splitlines() if line and not line.startswith("#")]


def test_two_stages_toolchain_then_debian_slim():
    assert len(STAGES) == 2
    args = dict(rest.split("=", 1) for w, rest in STEPS if w == "ARG" and "=" in rest)
    assert args["SWIFT_IMAGE"].endswith("swift:6.3.1-bookworm")
    assert args["RUNTIME_IMAGE"].endswith("debian:bookworm-slim")
    assert STEPS[STAGES[0]][1] == "${SWIFT_IMAGE} AS build" and STEPS[STAGES[1]][1] == "${RUNTIME_IMAGE}"
    build = " ".join(rest for w, rest in STEPS[STAGES[0]:STAGES[1]] if w == "RUN")
    assert "swift build -c release --product cortado --static-swift-stdlib" in build
    # The runtime stage takes only the binary's folder from the build stage.
    assert final("COPY")[-1] == "--from=build /out/ /"
    assert "install -D -s -m 0755 .build/release/cortado /out/usr/local/bin/cortado" in build


def test_runtime_stage_user_ports_health_and_entrypoint():
    (user,) = final("USER")
    uid, gid = user.split(":")
    assert int(uid) >= 1000 and int(gid) >= 1000, "numeric and not root, for runAsNonRoot"
    assert final("EXPOSE") == ["8000 8001 8002"]
    assert final("STOPSIGNAL") == ["SIGTERM"]
    (health,) = final("HEALTHCHECK")
    command = json.loads(health.split(" CMD ", 1)[1])
    assert command[:2] == ["/bin/bash", "-c"] and "/readyz" in command[2] and "8002" in command[2]
    assert json.loads(final("ENTRYPOINT")[0]) == ["/usr/local/bin/cortado"]
    cmd = json.loads(final("CMD")[0])
    assert cmd[:3] == ["serve", "--models", "/models"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    run = " ".join(final("RUN"))
    assert f"--uid {uid}" in run and "mkdir -m 0755 /models" in run
    assert "runtime-packages.txt" in run and "--no-install-recommends" in run


def test_runtime_packages_are_the_libraries_named_in_the_design():
    assert runtime_packages() == ["libuv1", "libnghttp2-14", "libopenblas0", "libpng16-16", "libjpeg62-turbo", "libjemalloc2",
                                  "libssl3", "libhttp-parser2.9"]


def installed_packages():
    """{package: (priority, [[alternative, ...], ...])} for every installed package, in one
    dpkg-query call (each call reads the whole database)."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Priority}\t${Depends}\n"], capture_output=True, text=True, timeout=60).stdout
    packages = {}
    for line in out.splitlines():
        name, priority, depends = (line.split("\t") + ["", ""])[:3]
        packages[name] = (priority, [[a.split()[0].split(":")[0] for a in alt.split("|") if a.strip()] for alt in depends.split(",") if alt.strip()])
    return packages


def owners(paths):
    """{path: package} for the paths dpkg knows, in one call."""
    out = subprocess.run(["dpkg-query", "-S", *paths], capture_output=True, text=True, timeout=60).stdout
    found = {}
    for line in out.splitlines():
        package, _, path = line.partition(": ")
        found[path] = package.split(":")[0].split(",")[0]
    return found


@pytest.mark.skipif(shutil.which("dpkg-query") is None or shutil.which("ldd") is None, reason="not a Debian system")
def test_runtime_packages_cover_the_binarys_libraries():
    """Each library the binary links comes from a listed package or one apt brings with it,
    from the Swift toolchain (linked in statically for the image), or from a package of
    priority required, which every Debian base (minbase, slim) has."""
    out = subprocess.run(["ldd", CORTADO], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    packages = installed_packages()
    # What apt installs with the list: the packages and, transitively, what they depend on
    # (libopenblas0 → libopenblas0-pthread → libgfortran5 → libquadmath0).
    listed, todo = set(), list(runtime_packages())
    while todo:
        package = todo.pop()
        if package in listed or package not in packages:
            continue
        listed.add(package)
        todo += [name for alternatives in packages[package][1] for name in alternatives]
    libraries = {}
    for line in out.stdout.splitlines():
        m = re.search(r"=> (/\S+)", line)
        if m:
            libraries[m.group(1)] = os.path.realpath(m.group(1))
    owner = owners(sorted(set(libraries) | set(libraries.values())))
    unexplained = []
    for linked, path in libraries.items():
        package = owner.get(path) or owner.get(linked)
        if package is None:
            assert "/swift/" in path, f"{path} belongs to no package and not to the Swift toolchain"
            continue
        if package in listed or packages.get(package, ("",))[0] == "required":
            continue
        unexplained.append(f"{path} ({package})")
    assert not unexplained, "add to runtime-packages.txt: " + ", ".join(unexplained)


def test_build_script_is_valid_bash_and_reads_the_containerfile():
    script = HERE / "build-image.sh"
    assert os.access(script, os.X_OK)
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = script.read_text()
    assert "mmdebstrap" in text and "umoci" in text and "examples/client.py" in text
    assert 'HERE/Containerfile' in text and "runtime-packages.txt" in text


def test_image_build_is_not_in_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^image:.*\n\tdeploy/container/build-image.sh", makefile, re.M)
    test_target = re.search(r"^test:(.*)$", makefile, re.M).group(1)
    assert "image" not in test_target


def test_containerignore_keeps_build_products_out_of_the_context():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".build", ".venv", ".git"} <= set(ignored)
