#!/usr/bin/env bash
# Regenerates Sources/CortadoServerProtos from the server's protos (Protos/cortado,
# Protos/inference, Protos/grpc) with Debian's protoc and swift-protobuf's protoc-gen-swift
# (built once by scripts/protoc-gen-swift.sh). Messages only: the server routes by method
# path itself, so no service stubs are generated. Files are named after their path
# (inference/grpc_service.proto -> inference_grpc_service.pb.swift) so that protos from
# different packages never collide. The output is committed: builds and CI never run protoc.
set -euo pipefail
cd "$(dirname "$0")/.."
plugin=$(scripts/protoc-gen-swift.sh)
out=Sources/CortadoServerProtos
protos=$(cd Protos && find cortado inference grpc -name '*.proto' | sort)
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC2086
(cd Protos && protoc --plugin=protoc-gen-swift="$plugin" -I . \
  --swift_opt=Visibility=Public --swift_opt=FileNaming=PathToUnderscores \
  --swift_out="../$out" $protos)
echo "generated: $(ls "$out" | wc -l) files in $out"
