#!/usr/bin/env bash
# Installs everything the build, the tests and the benchmarks need on a fresh Debian 12
# machine with the Swift toolchain, gcc, Python and pip. Idempotent: a second run checks
# and returns in about a second.
#
#   scripts/setup.sh           Debian packages and the test environment (.venv)  — make setup
#   scripts/setup.sh --build   only the Debian packages the build and `cortado serve` need — make serve
#   scripts/setup.sh --client  also .venv-client with only tritonclient, for examples/client.py — make client
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
case "$mode" in all|--build|--client) ;; *) echo "usage: scripts/setup.sh [--build|--client]" >&2; exit 2 ;; esac

sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
apt_install() {
  echo "setup: installing Debian packages: $*"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# Debian packages: libuv and nghttp2 carry the server; protoc regenerates Sources/CortadoSpec (scripts/generate_swift.sh) and
# checks the protos against the format's descriptors in the tests; OpenBLAS runs the neural-network GEMMs; libpng and
# libjpeg-turbo decode image inputs; jemalloc is the cortado executable's allocator; http-parser reads HTTP/1.1 requests
# on the REST port (the Open Inference Protocol over HTTP); OpenSSL 3 carries TLS (and its command line makes the test
# certificates in Tests/Server/test_tls_auth.py). systemd brings systemd-analyze, which checks deploy/systemd's unit (no
# systemd needs to run), and curl is that unit's readiness check (Tests/Deploy) and a REST peer in Tests/Server.
# gcc-aarch64-linux-gnu cross-compiles the C kernels and the plugin ABI for aarch64 (Tests/NeuralNetwork/test_isa_paths.py), and
# qemu-user runs the cross-compiled NEON kernels against the portable ones (Tests/NeuralNetwork/test_neon_kernels.py).
debs=(protobuf-compiler libuv1-dev libnghttp2-dev pkg-config libopenblas-dev libpng-dev libjpeg62-turbo-dev libjemalloc-dev
      libhttp-parser-dev libssl-dev openssl systemd curl gcc-aarch64-linux-gnu qemu-user)
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
if [ "$mode" = --build ]; then echo "setup: ok (build only)"; exit 0; fi

# `python3 -m venv` needs ensurepip, which Debian ships apart, in python3-venv.
if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then apt_install python3-venv; fi

# The example client's environment: tritonclient only (examples/client.py).
if [ "$mode" = --client ]; then
  if [ ! -x .venv-client/bin/python ]; then
    echo "setup: creating .venv-client with tritonclient[grpc] (for examples/client.py)"
    python3 -m venv .venv-client
    .venv-client/bin/pip install --disable-pip-version-check --progress-bar off "tritonclient[grpc]==2.41.0" "protobuf==5.29.5"
  fi
  echo "setup: ok (client)"
  exit 0
fi

# Python venv for the conformance suite (coremltools, scikit-learn, XGBoost, LIBSVM),
# rebuilt when scripts/requirements-test.txt changes.
req=scripts/requirements-test.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating .venv from $req ($(grep -cv '^\s*\(#\|$\)' "$req") pinned packages with their dependencies; minutes on a fresh machine)"
  python3 -m venv .venv
  .venv/bin/pip install --disable-pip-version-check --progress-bar off -r "$req" | grep -E '^(Collecting|Successfully installed)' || true
  echo "$want" > "$stamp"
fi
echo "setup: ok"
