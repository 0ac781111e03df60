#!/usr/bin/env python3
"""Starts MLServer (`mlserver start DIR`) with one addition: a ModelConfig method.

perf_analyzer calls `inference.GRPCInferenceService/ModelConfig` before it measures, and
MLServer 1.7.1 does not implement it, so stock perf_analyzer cannot drive MLServer. This
launcher registers an extra generic gRPC handler for that one method; it answers from the
model's metadata (the inputs and outputs in its model-settings.json) with max_batch_size 1024
so perf_analyzer sends batch-1 tensors shaped [1, ...] as it does to Cortado.

The ModelConfigResponse is encoded by hand (a few protobuf fields): MLServer's own
`inference` protos and tritonclient's cannot share one Python process, and only field
numbers are needed (config=1; ModelConfig name=1 platform=2 max_batch_size=4 input=5
output=6; ModelInput/ModelOutput name=1 data_type=2, dims=4 for inputs and 3 for outputs).

Usage: python bench/mlserver_launch.py MODEL_REPOSITORY_DIR   (run with .venv-bench/bin/python)
"""
import json
import os
import sys

import grpc

TYPES = {"BOOL": 1, "UINT8": 2, "INT32": 8, "INT64": 9, "FP16": 10, "FP32": 11, "FP64": 12, "BYTES": 13}


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, wire, payload):
    return _varint(number << 3 | wire) + payload


def _string(number, text):
    data = text.encode()
    return _field(number, 2, _varint(len(data)) + data)


def _message(number, data):
    return _field(number, 2, _varint(len(data)) + data)


def _tensor(spec, dims_field):
    body = _string(1, spec["name"]) + _field(2, 0, _varint(TYPES.get(spec.get("datatype", "FP32"), 11)))
    dims = [d for d in spec.get("shape", [])][1:]  # drop the batch dimension
    packed = b"".join(_varint(d) for d in dims)
    if dims:
        body += _field(dims_field, 2, _varint(len(packed)) + packed)
    return body


def model_config_response(settings):
    config = _string(1, settings["name"]) + _string(2, "mlserver") + _field(4, 0, _varint(1024))
    for spec in settings.get("inputs", []):
        config += _message(5, _tensor(spec, 4))
    for spec in settings.get("outputs", []):
        config += _message(6, _tensor(spec, 3))
    return _message(1, config)


def _read_name(request):
    """ModelConfigRequest.name (field 1) from the raw request bytes."""
    i = 0
    while i < len(request):
        key = request[i]
        i += 1
        length, shift = 0, 0
        while True:
            b = request[i]
            i += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if key == (1 << 3 | 2):
            return request[i:i + length].decode()
        i += length
    return ""


def main():
    repo = sys.argv[1]
    configs = {}
    for name in os.listdir(repo):
        path = os.path.join(repo, name, "model-settings.json")
        if os.path.exists(path):
            with open(path) as fh:
                settings = json.load(fh)
            configs[settings["name"]] = model_config_response(settings)

    async def model_config(request, context):
        name = _read_name(request)
        if name not in configs:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {name}")
        return configs[name]

    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelConfig": grpc.unary_unary_rpc_method_handler(model_config),
    })

    from mlserver.grpc import server as grpc_server
    original = grpc_server.GRPCServer._create_server

    def create_server(self):
        server = original(self)
        server.add_generic_rpc_handlers((handler,))
        return server

    grpc_server.GRPCServer._create_server = create_server
    from mlserver.cli.main import main as mlserver_main
    sys.argv = ["mlserver", "start", repo]
    mlserver_main()


if __name__ == "__main__":
    main()
