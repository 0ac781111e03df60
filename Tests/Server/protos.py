"""Python modules for the server's protos, compiled on demand with grpc_tools.protoc.

Server tests call Cortado from the reference gRPC implementation (grpcio) with messages
built from the same .proto files the Swift server is generated from:

    from protos import load
    p = load()
    stub = p.predictor_pb2_grpc.PredictorStub(channel)
    reply = stub.Predict(p.predictor_pb2.PredictRequest(model="iris"))
    health = p.health_pb2_grpc.HealthStub(channel)

The modules are written to .cases/pyprotos (cached; rebuilt when a .proto file or the
grpcio-tools version changes) and imported as top-level modules `predictor_pb2`,
`predictor_pb2_grpc`, `health_pb2`, `health_pb2_grpc` (each compiled from its own
folder, so no generated import names the `grpc` package, which grpcio owns).

One process, one definition of a name: protobuf's default descriptor pool refuses a
second file that defines the same message. So do not import `health_pb2` together with
`grpc_health.v1.health_pb2`, nor `load_inference()` together with `tritonclient.grpc`
(which registers the same `inference.*` messages); for the Open Inference Protocol use
tritonclient, which is what its users run.
"""
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTOS = os.path.join(ROOT, "Protos")
CACHE = os.path.join(ROOT, ".cases", "pyprotos")

# (include root relative to Protos, proto files relative to that root)
_UNITS = {
    "predictor": ("cortado/v1", ["predictor.proto"]),
    "health": ("grpc/health/v1", ["health.proto"]),
    "inference": (".", ["inference/model_config.proto", "inference/grpc_service.proto"]),
}


def _stamp():
    import grpc_tools

    h = hashlib.sha256()
    h.update(getattr(grpc_tools, "__version__", "").encode())
    try:
        from importlib.metadata import version

        h.update(version("grpcio-tools").encode())
    except Exception:
        pass
    for unit, (root, files) in sorted(_UNITS.items()):
        for f in files:
            path = os.path.join(PROTOS, root, f)
            h.update(path.encode())
            with open(path, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def compile_all():
    """Compiles every unit into CACHE unless it is current; returns CACHE."""
    stamp = _stamp()
    stamp_file = os.path.join(CACHE, ".stamp")
    try:
        with open(stamp_file) as fh:
            if fh.read() == stamp:
                return CACHE
    except OSError:
        pass

    from grpc_tools import protoc

    os.makedirs(os.path.dirname(CACHE), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pyprotos.", dir=os.path.dirname(CACHE))
    try:
        for unit, (root, files) in _UNITS.items():
            include = os.path.normpath(os.path.join(PROTOS, root))
            args = ["grpc_tools.protoc", "-I", include,
                    "--python_out=" + tmp, "--grpc_python_out=" + tmp] + files
            cwd = os.getcwd()
            os.chdir(include)
            try:
                rc = protoc.main(args)
            finally:
                os.chdir(cwd)
            if rc != 0:
                raise RuntimeError(f"grpc_tools.protoc failed ({rc}) on {unit}: {files}")
        with open(os.path.join(tmp, ".stamp"), "w") as fh:
            fh.write(stamp)
        old = CACHE + ".old"
        shutil.rmtree(old, ignore_errors=True)
        if os.path.exists(CACHE):
            os.rename(CACHE, old)
        os.rename(tmp, CACHE)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return CACHE


def _import(names):
    path = compile_all()
    if path not in sys.path:
        sys.path.insert(0, path)
    return types.SimpleNamespace(**{n.replace(".", "_"): importlib.import_module(n) for n in names})


def load():
    """predictor_pb2, predictor_pb2_grpc, health_pb2, health_pb2_grpc."""
    return _import(["predictor_pb2", "predictor_pb2_grpc", "health_pb2", "health_pb2_grpc"])


def load_predictor():
    """predictor_pb2 and predictor_pb2_grpc only. Use this (with grpcio-health-checking's
    `grpc_health.v1` for Health) in tests that share a process with anything importing
    `grpc_health.v1.health_pb2`, e.g. Tests/Format in one pytest run."""
    return _import(["predictor_pb2", "predictor_pb2_grpc"])


def load_inference():
    """inference.grpc_service_pb2(_grpc) and inference.model_config_pb2 (see the module note:
    not in a process that imports tritonclient.grpc)."""
    ns = _import(["inference.model_config_pb2", "inference.grpc_service_pb2",
                  "inference.grpc_service_pb2_grpc"])
    return types.SimpleNamespace(model_config_pb2=ns.inference_model_config_pb2,
                                 grpc_service_pb2=ns.inference_grpc_service_pb2,
                                 grpc_service_pb2_grpc=ns.inference_grpc_service_pb2_grpc)


if __name__ == "__main__":
    p = load()
    print("compiled into", CACHE)
    for name, mod in sorted(vars(p).items()):
        print(f"  {name}: {mod.__file__}")
