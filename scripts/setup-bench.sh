#!/usr/bin/env bash
# What `make bench` needs beyond `make setup`: h2load and nghttpd (Debian's nghttp2-client and
# nghttp2-server), libb64 for the perf_analyzer binary that tritonclient 2.41.0's wheel ships,
# and .venv-bench: MLServer with its scikit-learn and XGBoost runtimes (kept apart from .venv,
# whose protobuf and grpcio pins coremltools needs) plus nvidia-cuda-runtime-cu12, only for the
# libcudart.so.12 perf_analyzer links against (no GPU is used); libgrpc++-dev for the gRPC-core
# client bench/grpc_core_client.cc; tl2cgen + treelite into .venv. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
debs=(nghttp2-client nghttp2-server libb64-0d libgrpc++-dev valgrind)
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-bench: installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
req=scripts/requirements-bench.txt
stamp=.venv-bench/.requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x .venv-bench/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup-bench: creating .venv-bench from $req"
  python3 -m venv .venv-bench
  .venv-bench/bin/pip install -q --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi
# tl2cgen and treelite (the forest compiler trees_vs_xgboost.py compares with) go into .venv,
# beside the test pins, since that bench also needs coremltools and XGBoost from there.
extra=scripts/requirements-bench-venv.txt
stamp_extra=.venv/.bench-extra.sha256
want_extra=$(sha256sum "$extra" | cut -d' ' -f1)
if [ "$(cat "$stamp_extra" 2>/dev/null)" != "$want_extra" ]; then
  echo "setup-bench: installing $extra into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r "$extra"
  echo "$want_extra" > "$stamp_extra"
fi
echo "setup-bench: ok"
