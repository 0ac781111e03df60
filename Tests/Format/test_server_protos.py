"""Proves that the server's public protocols in Protos/ match the real ones.

1. Protos/inference/*.proto against the descriptors compiled into tritonclient 2.41.0
   (tritonclient.grpc.service_pb2 / model_config_pb2): the same messages and enums under
   the same full names, every field with the same number, name, type, label, type name,
   oneof and map shape, every enum value the same; and the GRPCInferenceService methods
   with the same request/response types and streaming.
2. Protos/grpc/health/v1/health.proto against grpcio-health-checking's descriptor.
3. Bytes written by tritonclient's messages parse into ours with nothing unknown.
4. Protos/cortado/v1/predictor.proto keeps its published numbers and keeps map fields
   off the prediction path; Sources/CortadoServerProtos holds one generated file per proto.

Our files are compiled with grpc_tools.protoc into a descriptor set (never imported into
the default pool, which tritonclient's modules occupy).
"""
import os
import tempfile
import warnings

import pytest

warnings.filterwarnings("ignore")

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTOS = os.path.join(ROOT, "Protos")
SERVER_PROTOS = ["inference/model_config.proto", "inference/grpc_service.proto",
                 "grpc/health/v1/health.proto", "cortado/v1/predictor.proto"]
F = descriptor_pb2.FieldDescriptorProto

# The methods Cortado's server must expose (the Triton/OIP surface tools call).
REQUIRED_METHODS = [
    "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
    "ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad",
    "RepositoryModelUnload", "SystemSharedMemoryStatus", "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings",
]


# ---------------------------------------------------------------- descriptors

def _file_proto(fd):
    p = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(p)
    return p


@pytest.fixture(scope="module")
def ours():
    """Our server protos, compiled by grpc_tools.protoc: {path: FileDescriptorProto}."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "set.pb")
        cwd = os.getcwd()
        os.chdir(PROTOS)
        try:
            rc = protoc.main(["grpc_tools.protoc", "-I", PROTOS, "--descriptor_set_out=" + out]
                             + SERVER_PROTOS)
        finally:
            os.chdir(cwd)
        assert rc == 0, "grpc_tools.protoc rejected the server protos"
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as fh:
            fds.ParseFromString(fh.read())
    return {f.name: f for f in fds.file}


@pytest.fixture(scope="module")
def triton():
    from tritonclient.grpc import model_config_pb2, service_pb2

    return {"inference/model_config.proto": _file_proto(model_config_pb2.DESCRIPTOR),
            "inference/grpc_service.proto": _file_proto(service_pb2.DESCRIPTOR)}


@pytest.fixture(scope="module")
def health():
    from grpc_health.v1 import health_pb2

    return _file_proto(health_pb2.DESCRIPTOR)


def flatten(file_proto):
    """'message X' / 'enum X' (full names) -> comparable facts."""
    facts = {}

    def visit_enum(prefix, e):
        facts["enum " + prefix + e.name] = {"values": sorted((v.name, v.number) for v in e.value)}

    def visit_msg(prefix, m):
        name = prefix + m.name
        oneofs = [o.name for o in m.oneof_decl]
        fields = {}
        for f in m.field:
            oneof = oneofs[f.oneof_index] if f.HasField("oneof_index") and not f.proto3_optional else None
            fields[f.number] = dict(name=f.name, type=F.Type.Name(f.type), label=F.Label.Name(f.label),
                                    type_name=f.type_name.lstrip("."), oneof=oneof,
                                    proto3_optional=f.proto3_optional,
                                    packed=f.options.packed if f.options.HasField("packed") else None)
        facts["message " + name] = dict(fields=fields, map_entry=m.options.map_entry,
                                        oneofs=sorted(o for o in oneofs))
        for e in m.enum_type:
            visit_enum(name + ".", e)
        for n in m.nested_type:
            visit_msg(name + ".", n)

    pkg = file_proto.package + "."
    for e in file_proto.enum_type:
        visit_enum(pkg, e)
    for m in file_proto.message_type:
        visit_msg(pkg, m)
    return facts


def compare_files(theirs, mine, label):
    a, b = flatten(theirs), flatten(mine)
    missing, extra = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    assert not missing and not extra, f"{label}: missing {missing}, extra {extra}"
    for key in sorted(a):
        if key.startswith("enum "):
            assert a[key]["values"] == b[key]["values"], \
                f"{label} {key}: values differ\nreference: {a[key]['values']}\nours:      {b[key]['values']}"
            continue
        fa, fb = a[key]["fields"], b[key]["fields"]
        assert sorted(fa) == sorted(fb), \
            f"{label} {key}: field numbers differ: reference {sorted(fa)}, ours {sorted(fb)}"
        for number in fa:
            assert fa[number] == fb[number], \
                f"{label} {key} field {number}:\nreference: {fa[number]}\nours:      {fb[number]}"
        assert a[key]["oneofs"] == b[key]["oneofs"], f"{label} {key}: oneofs differ"
        assert a[key]["map_entry"] == b[key]["map_entry"], f"{label} {key}: map entry flag differs"
    return len(a)


def methods(file_proto, service):
    [svc] = [s for s in file_proto.service if s.name == service]
    return {m.name: (m.input_type.lstrip("."), m.output_type.lstrip("."),
                     m.client_streaming, m.server_streaming) for m in svc.method}


# ---------------------------------------------------------------- Open Inference Protocol

@pytest.mark.parametrize("path", ["inference/model_config.proto", "inference/grpc_service.proto"])
def test_inference_messages_match_tritonclient(path, ours, triton):
    assert ours[path].package == triton[path].package == "inference"
    assert ours[path].syntax == triton[path].syntax == "proto3"
    checked = compare_files(triton[path], ours[path], path)
    assert checked > 40  # 69 messages and enums in model_config, 66 in grpc_service (2.41.0)


def test_inference_service_matches_tritonclient(ours, triton):
    path = "inference/grpc_service.proto"
    theirs = methods(triton[path], "GRPCInferenceService")
    mine = methods(ours[path], "GRPCInferenceService")
    assert not set(REQUIRED_METHODS) - set(mine), f"undeclared: {set(REQUIRED_METHODS) - set(mine)}"
    assert not set(mine) - set(theirs), f"not in the protocol: {set(mine) - set(theirs)}"
    for name in mine:
        assert mine[name] == theirs[name], f"{name}: ours {mine[name]}, reference {theirs[name]}"
    # Declaration order is irrelevant on the wire, but keep it for readers comparing the two.
    assert [m for m in theirs if m in mine] == list(mine)


def test_inference_wire_compatibility(ours):
    """Messages written by tritonclient's classes parse into ours field for field (a field we
    lacked would be kept as unknown and vanish from the JSON form)."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2, service_pb2

    pool = descriptor_pool.DescriptorPool()
    for path in ("inference/model_config.proto", "inference/grpc_service.proto"):
        pool.Add(ours[path])

    def our_class(name):
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    req = service_pb2.ModelInferRequest(model_name="m", model_version="2", id="r1")
    req.parameters["sequence_id"].uint64_param = 7
    req.parameters["flag"].bool_param = True
    t = req.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    t.parameters["shared_memory_region"].string_param = "in0"
    t.contents.fp32_contents.extend([1.0, 2.5, -3.0])
    req.outputs.add(name="y").parameters["classification"].int64_param = 2
    req.raw_input_contents.append(b"\x00\x00\x80\x3f")

    cfg = model_config_pb2.ModelConfig(name="m", platform="coreml", backend="cortado", max_batch_size=8)
    cfg.input.add(name="x", data_type=model_config_pb2.TYPE_FP32, dims=[-1, 3], optional=True,
                  is_shape_tensor=False, allow_ragged_batch=True, format=model_config_pb2.ModelInput.FORMAT_NCHW)
    cfg.output.add(name="y", data_type=model_config_pb2.TYPE_INT64, dims=[1], label_filename="labels.txt")
    cfg.dynamic_batching.preferred_batch_size.extend([4, 8])
    cfg.dynamic_batching.priority_queue_policy[1].max_queue_size = 16
    cfg.model_transaction_policy.decoupled = False
    cfg.response_cache.enable = True
    cfg.version_policy.latest.num_versions = 1
    cfg.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=2)
    cfg.parameters["k"].string_value = "v"

    stats = service_pb2.ModelStatisticsResponse()
    s = stats.model_stats.add(name="m", version="1", inference_count=5, execution_count=3)
    s.inference_stats.success.count = 5
    s.inference_stats.cache_miss.ns = 99
    s.batch_stats.add(batch_size=2).compute_infer.ns = 10
    s.memory_usage.add(type="CPU", id=0, byte_size=1024)

    for msg in (req, cfg, stats):
        mine = our_class(msg.DESCRIPTOR.full_name).FromString(msg.SerializeToString())
        assert json_format.MessageToDict(mine) == json_format.MessageToDict(msg)
        assert mine.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)


# ---------------------------------------------------------------- gRPC health

def test_health_matches_grpcio_health_checking(ours, health):
    path = "grpc/health/v1/health.proto"
    assert ours[path].package == health.package == "grpc.health.v1"
    compare_files(health, ours[path], path)
    assert methods(ours[path], "Health") == methods(health, "Health")
    assert methods(ours[path], "Health") == {
        "Check": ("grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse", False, False),
        "Watch": ("grpc.health.v1.HealthCheckRequest", "grpc.health.v1.HealthCheckResponse", False, True),
    }


# ---------------------------------------------------------------- cortado.v1 (ours)

# Numbers published in the native API: changing one breaks every deployed client.
PREDICTOR_NUMBERS = {
    "MultiArray": {"data_type": 1, "shape": 2, "data": 3},
    "Image": {"width": 1, "height": 2, "pixel_format": 3, "data": 4, "encoded": 5},
    "Dictionary": {"string_keys": 1, "int64_keys": 2, "values": 3},
    "Sequence": {"int64_values": 1, "string_values": 2},
    "FeatureValue": {"int64_value": 1, "double_value": 2, "string_value": 3, "multi_array": 4,
                     "dictionary": 5, "image": 6, "sequence": 7},
    "Feature": {"name": 1, "value": 2},
    "PredictRequest": {"model": 1, "version": 2, "inputs": 3, "outputs": 4, "function": 5, "session": 6,
                       "variant": 7},
    "CreateSessionRequest": {"model": 1, "version": 2, "function": 3},
    "CreateSessionResponse": {"session": 1, "idle_timeout_ms": 2},
    "EndSessionRequest": {"session": 1},
    "EndSessionResponse": {},
    "PredictResponse": {"model": 1, "version": 2, "outputs": 3},
    "Row": {"features": 1},
    "PredictBatchRequest": {"model": 1, "version": 2, "rows": 3, "outputs": 4, "variant": 5},
    "PredictBatchResponse": {"model": 1, "version": 2, "rows": 3},
    "ModelStatus": {"name": 1, "version": 2, "state": 3, "reason": 4, "spec_type": 5},
    "FeatureDescription": {"name": 1, "short_description": 2, "type": 3, "optional": 4, "data_type": 5,
                           "shape": 6, "constraint": 7},
    "LoadRequest": {"model": 1, "version": 2, "model_data": 3},
    "LoadResponse": {"status": 1},
    "UnloadRequest": {"model": 1, "version": 2},
    "UnloadResponse": {},
    "ListRequest": {},
    "ListResponse": {"models": 1},
    "DescribeRequest": {"model": 1, "version": 2},
    "DescribeResponse": {"status": 1, "specification_version": 2, "inputs": 3, "outputs": 4,
                         "class_labels": 5, "int64_class_labels": 6, "predicted_feature_name": 7,
                         "predicted_probabilities_name": 8, "author": 9, "license": 10,
                         "short_description": 11, "user_defined": 12, "summary": 13},
    "UpdateParameters": {"epochs": 1, "learning_rate": 2, "mini_batch_size": 3, "momentum": 4, "beta1": 5,
                         "beta2": 6, "eps": 7, "shuffle": 8, "seed": 9},
    "UpdateRequest": {"model": 1, "version": 2, "variant": 3, "rows": 4, "parameters": 5},
    "UpdateProgress": {"epoch": 1, "epochs": 2, "loss": 3},
    "UpdateResult": {"model": 1, "version": 2, "variant": 3, "examples": 4, "epochs": 5, "loss": 6, "parameters": 7,
                     "stored": 8, "store_error": 9},
    "UpdateEvent": {"progress": 1, "result": 2},
    "VariantStatus": {"model": 1, "variant": 2, "base_version": 3, "loaded": 4, "updates": 5, "stored": 6},
    "ListVariantsRequest": {"model": 1},
    "ListVariantsResponse": {"variants": 1},
    "DeleteVariantRequest": {"model": 1, "variant": 2},
    "DeleteVariantResponse": {},
}
PREDICTOR_ENUMS = {
    "ArrayDataType": {"ARRAY_DATA_TYPE_UNSPECIFIED": 0, "FLOAT32": 1, "DOUBLE": 2, "INT32": 3, "FLOAT16": 4},
    "ModelState": {"MODEL_STATE_UNSPECIFIED": 0, "READY": 1, "LOADING": 2, "UNLOADING": 3, "UNAVAILABLE": 4},
    "Image.PixelFormat": {"PIXEL_FORMAT_UNSPECIFIED": 0, "RGB8": 1, "BGRA8": 2, "GRAY8": 3, "GRAY16F": 4},
}
HOT_PATH = ["MultiArray", "Image", "Dictionary", "Sequence", "FeatureValue", "Feature", "PredictRequest",
            "PredictResponse", "Row", "PredictBatchRequest", "PredictBatchResponse"]


def test_predictor_numbers_are_stable(ours):
    fp = ours["cortado/v1/predictor.proto"]
    assert fp.package == "cortado.v1"
    msgs = {m.name: m for m in fp.message_type}
    assert sorted(msgs) == sorted(PREDICTOR_NUMBERS)
    for name, want in PREDICTOR_NUMBERS.items():
        assert {f.name: f.number for f in msgs[name].field} == want, name
    assert [f.name for f in msgs["FeatureValue"].field if f.HasField("oneof_index")] == list(
        PREDICTOR_NUMBERS["FeatureValue"])
    enums = {e.name: e for e in fp.enum_type}
    enums["Image.PixelFormat"] = msgs["Image"].enum_type[0]
    for name, want in PREDICTOR_ENUMS.items():
        assert {v.name: v.number for v in enums[name].value} == want, name
    assert [m.name for m in fp.service[0].method] == [
        "Predict", "PredictBatch", "Load", "Unload", "List", "Describe", "CreateSession", "EndSession",
        "Update", "ListVariants", "DeleteVariant"]


def test_predictor_keeps_maps_off_the_prediction_path(ours):
    msgs = {m.name: m for m in ours["cortado/v1/predictor.proto"].message_type}
    for name in HOT_PATH:
        assert not msgs[name].nested_type, f"{name} has a map field (or nested type)"
    maps = [f"{m.name}.{n.name}" for m in msgs.values() for n in m.nested_type if n.options.map_entry]
    assert maps == ["DescribeResponse.UserDefinedEntry"]


def test_generated_swift_is_present():
    folder = os.path.join(ROOT, "Sources", "CortadoServerProtos")
    want = sorted(p[:-len(".proto")].replace("/", "_") + ".pb.swift" for p in SERVER_PROTOS)
    assert sorted(f for f in os.listdir(folder) if f.endswith(".swift")) == want
    for name in want:
        with open(os.path.join(folder, name)) as fh:
            head = fh.read(2000)
        assert "Generated by the Swift generator plugin for the protocol buffer compiler" in head, name
