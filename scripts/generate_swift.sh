#!/usr/bin/env bash
# Regenerates Sources/CortadoSpec from Protos/ with Debian's protoc and swift-protobuf's
# protoc-gen-swift (built once from the package mirror into .build-protoc-gen-swift).
# The output is committed: builds and CI never run protoc.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler" >&2; exit 1; }
plugin_dir=.build-protoc-gen-swift
if [ ! -x "$plugin_dir/src/.build/release/protoc-gen-swift" ]; then
  rm -rf "$plugin_dir" && mkdir -p "$plugin_dir"
  git clone -q https://github.com/apple/swift-protobuf "$plugin_dir/src"
  git -C "$plugin_dir/src" checkout -q 1.39.0
  (cd "$plugin_dir/src" && swift build -c release --product protoc-gen-swift)
fi
plugin="$PWD/$plugin_dir/src/.build/release/protoc-gen-swift"
gen() { # gen PROTO_DIR OUT_DIR
  rm -rf "$2" && mkdir -p "$2"
  protoc --plugin=protoc-gen-swift="$plugin" -I "$1" \
    --swift_opt=Visibility=Public --swift_opt=FileNaming=DropPath \
    --swift_out="$2" "$1"/*.proto
}
gen Protos/CoreML Sources/CortadoSpec/CoreML
[ -d Protos/Cortado ] && gen Protos/Cortado Sources/CortadoSpec/Cortado
echo "generated: $(ls Sources/CortadoSpec/* | wc -l) files"
