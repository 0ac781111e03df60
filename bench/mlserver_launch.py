#!/usr/bin/env python3
"""Starts MLServer (`mlserver start DIR`) with one addition: the model configuration.

perf_analyzer asks for the model configuration before it measures (gRPC
`inference.GRPCInferenceService/ModelConfig`; with `-i http`, `GET /v2/models/{name}/config`),
and MLServer 1.7.1 implements neither, so stock perf_analyzer cannot drive MLServer. This
launcher registers an extra generic gRPC handler for that one method and an extra REST route;
both answer from the model's metadata (the inputs and outputs in its model-settings.json) with
max_batch_size 1024 so perf_analyzer sends batch-1 tensors shaped [1, ...] as it does to Cortado.

One change to MLServer's REST answers: its outputs carry `"parameters": {"content_type": "np"}`,
and perf_analyzer's HTTP client (tritonclient's C++ InferResult) reads `binary_data_size` from
any output that has parameters, failing every call on that missing member. The launcher drops
the outputs' parameters from REST answers (less work for MLServer, not more).

The ModelConfigResponse is encoded by hand (a few protobuf fields): MLServer's own
`inference` protos and tritonclient's cannot share one Python process, and only field
numbers are needed (config=1; ModelConfig name=1 platform=2 max_batch_size=4 input=5
output=6; ModelInput/ModelOutput name=1 data_type=2, dims=4 for inputs and 3 for outputs).

Usage: python bench/mlserver_launch.py MODEL_REPOSITORY_DIR   (run with .venv-bench/bin/python)
"""
import functools
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


def model_config_json(settings):
    """The same configuration as Triton's REST answer writes it (ModelConfig as JSON)."""
    def tensor(spec):
        return {"name": spec["name"], "data_type": "TYPE_" + {"BYTES": "STRING"}.get(spec.get("datatype", "FP32"), spec.get("datatype", "FP32")),
                "dims": list(spec.get("shape", []))[1:]}
    return {"name": settings["name"], "platform": "mlserver", "max_batch_size": 1024,
            "input": [tensor(s) for s in settings.get("inputs", [])], "output": [tensor(s) for s in settings.get("outputs", [])]}


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
    configs, json_configs = {}, {}
    for name in os.listdir(repo):
        path = os.path.join(repo, name, "model-settings.json")
        if os.path.exists(path):
            with open(path) as fh:
                settings = json.load(fh)
            configs[settings["name"]] = model_config_response(settings)
            json_configs[settings["name"]] = json.dumps(model_config_json(settings))

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

    from fastapi import Response
    from mlserver.rest import server as rest_server
    original_app = rest_server.create_app

    async def rest_model_config(model_name: str, model_version: str = ""):
        if model_name not in json_configs:
            return Response(json.dumps({"error": f"no model {model_name}"}), status_code=404, media_type="application/json")
        return Response(json_configs[model_name], media_type="application/json")

    def create_app(*args, **kwargs):
        app = original_app(*args, **kwargs)
        app.add_api_route("/v2/models/{model_name}/config", rest_model_config, methods=["GET"])
        app.add_api_route("/v2/models/{model_name}/versions/{model_version}/config", rest_model_config, methods=["GET"])
        return app

    rest_server.create_app = create_app

    from mlserver.rest import endpoints as rest_endpoints
    original_infer = rest_endpoints.Endpoints.infer

    @functools.wraps(original_infer)  # FastAPI reads the parameters through __wrapped__
    async def infer(self, *args, **kwargs):
        response = await original_infer(self, *args, **kwargs)
        for output in response.outputs:
            output.parameters = None  # omitted: MLServer's routes exclude None fields
        return response

    rest_endpoints.Endpoints.infer = infer
    from mlserver.cli.main import main as mlserver_main
    sys.argv = ["mlserver", "start", repo]
    mlserver_main()


if __name__ == "__main__":
    main()
