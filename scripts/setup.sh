#!/usr/bin/env bash
# Installs everything the build, the tests and the benchmarks need on a fresh Debian 12
# machine with the Swift toolchain, gcc, Python and pip. Idempotent: a second run checks
# and returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: libuv and nghttp2 carry the server; protoc regenerates Sources/CortadoSpec (scripts/generate_swift.sh) and
# checks the protos against the format's descriptors in the tests; OpenBLAS runs the neural-network GEMMs; libpng and
# libjpeg-turbo decode image inputs; jemalloc is the cortado executable's allocator; http-parser reads HTTP/1.1 requests
# on the REST port (the Open Inference Protocol over HTTP); OpenSSL 3 carries TLS (and its command line makes the test
# certificates in Tests/Server/test_tls_auth.py). systemd brings systemd-analyze, which checks deploy/systemd's unit (no
# systemd needs to run), and curl is that unit's readiness check (Tests/Deploy) and a REST peer in Tests/Server.
# gcc-aarch64-linux-gnu cross-compiles the C kernels and the plugin ABI for aarch64 (Tests/Kernels, compile only).
debs=(protobuf-compiler libuv1-dev libnghttp2-dev pkg-config libopenblas-dev libpng-dev libjpeg62-turbo-dev libjemalloc-dev
      libhttp-parser-dev libssl-dev openssl systemd curl gcc-aarch64-linux-gnu)
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python venv for the conformance suite (coremltools, scikit-learn, XGBoost, LIBSVM),
# rebuilt when scripts/requirements-test.txt changes.
req=scripts/requirements-test.txt
stamp=.venv/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating .venv from $req"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi
echo "setup: ok"
