#!/usr/bin/env bash
# Prints the path of swift-protobuf 1.39.0's protoc-gen-swift, building it first if needed
# (once, from the package mirror, into .build-protoc-gen-swift; about 30 s to 2 min).
# Used by scripts/generate_swift.sh and scripts/generate_server_swift.sh. Build output goes
# to stderr so callers can write: plugin=$(scripts/protoc-gen-swift.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
plugin_dir=.build-protoc-gen-swift
if [ ! -x "$plugin_dir/src/.build/release/protoc-gen-swift" ]; then
  rm -rf "$plugin_dir" && mkdir -p "$plugin_dir"
  git clone -q https://github.com/apple/swift-protobuf "$plugin_dir/src" >&2
  git -C "$plugin_dir/src" checkout -q 1.39.0 >&2
  (cd "$plugin_dir/src" && swift build -c release --product protoc-gen-swift) >&2
fi
echo "$PWD/$plugin_dir/src/.build/release/protoc-gen-swift"
