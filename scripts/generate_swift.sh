#!/usr/bin/env bash
# Regenerates Sources/CortadoSpec from Protos/ with Debian's protoc and swift-protobuf's
# protoc-gen-swift (built once by scripts/protoc-gen-swift.sh into .build-protoc-gen-swift).
# The output is committed: builds and CI never run protoc.
set -euo pipefail
cd "$(dirname "$0")/.."
plugin=$(scripts/protoc-gen-swift.sh)
gen() { # gen PROTO_DIR OUT_DIR
  rm -rf "$2" && mkdir -p "$2"
  protoc --plugin=protoc-gen-swift="$plugin" -I "$1" \
    --swift_opt=Visibility=Public --swift_opt=FileNaming=DropPath \
    --swift_out="$2" "$1"/*.proto
}
gen Protos/CoreML Sources/CortadoSpec/CoreML
[ -d Protos/Cortado ] && gen Protos/Cortado Sources/CortadoSpec/Cortado
echo "generated: $(ls Sources/CortadoSpec/* | wc -l) files"
