"""Writes the seed corpora in fuzz/corpus/ (committed; run again only to change them).

Models come from coremltools (small ones: each seed stays a few KB), their compiled and
encrypted forms from `cortado compile` / `cortado encrypt` (CORTADO_BIN), the requests from
the generated OIP messages the server reads. Usage:
    CORTADO_BIN=.build/debug/cortado .venv/bin/python fuzz/make_seeds.py
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
# The key the model-loader target opens encrypted models with (ModelLoaderFuzz.key).
KEY = bytes((i * 7 + 1) & 0xFF for i in range(32))


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def models(tmp):
    import coremltools as ct
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    from sklearn.linear_model import LinearRegression
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 3))
    y = X @ [1.0, -2.0, 0.5] + 0.25
    out = {}
    glm = ct.converters.sklearn.convert(LinearRegression().fit(X, y), ["a", "b", "c"], "y")
    out["glm"] = glm.get_spec()
    tree = ct.converters.sklearn.convert(DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y > 0), "x", "label")
    out["tree"] = tree.get_spec()
    builder = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("y", datatypes.Array(2))])
    builder.add_inner_product("fc", W=rng.normal(size=(2, 4)).astype(np.float32), b=np.zeros(2, np.float32),
                              input_channels=4, output_channels=2, has_bias=True, input_name="x", output_name="h")
    builder.add_activation("relu", "RELU", "h", "y")
    out["nn"] = builder.spec
    return out


def mlprogram(tmp):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS16)
    def prog(x):
        w = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
        return mb.relu(x=mb.linear(x=x, weight=w, bias=np.zeros(2, np.float32)))

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32)
    path = Path(tmp) / "p.mlpackage"
    model.save(str(path))
    records = b""
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = str(f.relative_to(path)).encode()
        data = f.read_bytes()
        records += bytes([len(rel)]) + rel + struct.pack("<H", len(data)) + data
    return records


def model_loader(tmp, cortado):
    for name, spec in models(tmp).items():
        data = spec.SerializeToString(deterministic=True)
        for mode in (0, 1, 3):
            write("model-loader", f"{name}-mode{mode}", bytes([mode]) + data)
        src = Path(tmp) / f"{name}.mlmodel"
        src.write_bytes(data)
        keyfile = Path(tmp) / "key"
        keyfile.write_text(KEY.hex())
        subprocess.run([cortado, "compile", str(src), str(Path(tmp) / f"{name}.cortado")], check=True, capture_output=True)
        write("model-loader", f"{name}-compiled", b"\0" + (Path(tmp) / f"{name}.cortado").read_bytes())
        subprocess.run([cortado, "encrypt", str(src), str(Path(tmp) / f"{name}.enc"), "--key-file", str(keyfile)], check=True, capture_output=True)
        write("model-loader", f"{name}-encrypted", b"\0" + (Path(tmp) / f"{name}.enc").read_bytes())
    write("model-loader", "mlprogram-package", b"\2" + mlprogram(tmp))


def infer_decoder():
    sys.path.insert(0, str(ROOT.parent / "Tests" / "Server"))
    from tritonclient.grpc import service_pb2 as pb

    r = pb.ModelInferRequest(model_name="iris", model_version="1", id="call-1")
    t = r.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    r.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    r.outputs.add(name="y")
    write("infer-decoder", "raw", r.SerializeToString(deterministic=True))
    r2 = pb.ModelInferRequest(model_name="m")
    t = r2.inputs.add(name="x", datatype="INT64", shape=[2, -1])
    t.contents.int64_contents.extend([1, 2, 3])
    r2.parameters["priority"].int64_param = 3
    write("infer-decoder", "typed-contents", r2.SerializeToString(deterministic=True))
    r3 = pb.ModelInferRequest(model_name="m", model_version="")
    t = r3.inputs.add(name="in", datatype="BYTES", shape=[1])
    t.parameters["shared_memory_region"].string_param = "r"
    r3.outputs.add(name="o").parameters["binary_data"].bool_param = True
    write("infer-decoder", "parameters", r3.SerializeToString(deterministic=True))


def frame(type_, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([type_, flags]) + struct.pack(">I", stream) + payload


def http2():
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = frame(4, 0, 0, struct.pack(">HI", 3, 100))
    headers = frame(1, 4, 1, b"\x83\x86\x84\x41\x0flocalhost:8001")
    message = b"\0" + struct.pack(">I", 3) + b"abc"
    data = frame(0, 1, 1, message)
    rst_unopened = frame(3, 0, 7, struct.pack(">I", 8))
    rst_open = frame(3, 0, 1, struct.pack(">I", 8))
    # Split count 0, then the stream; and with splits inside frame headers.
    write("http2", "call", b"\0" + preface + settings + headers + data)
    write("http2", "resets", b"\3" + struct.pack("<HHH", 30, 31, 50) + preface + settings + rst_unopened + headers + rst_open)
    write("http2", "header-values", b"\0" + b"grpc-timeout 100m te trailers content-length 12 x-Trace\x00 \tv\r\n")
    write("http2", "messages", b"\2" + struct.pack("<HH", 3, 9) + message + b"\0\0\0\0\0" + message)


def feature_json():
    rows = {
        "row": {"i": 3, "d": 0.1, "s": "a\u00e9", "o": None, "a": [[1, 2, 3], [4, 5, 6]],
                "h": {"shape": [4], "dataType": "FLOAT16", "data": [1, 2, 3, 4]},
                "n": {"shape": [1, 3], "dataType": "INT32", "data": [1, 2, 3]}, "x": [1e300, -0.0, 5e-324]},
        "dicts": {"di": {"3": 0.5, "10": 1}, "ds": {"k": 2.5}, "qi": [1, -2, 3], "qs": ["x", "y"]},
        "image": {"img": {"width": 4, "height": 3, "pixelFormat": "RGB8", "data": list(range(36))},
                  "gray": {"width": 2, "height": 2, "pixelFormat": "GRAY16F", "data": [0.5, 1, 2, 3]}},
        "scalars": [1, "NaN", "Infinity", True, None, "\ud83d\ude00", -9223372036854775808],
    }
    for name, value in rows.items():
        write("feature-json", name, json.dumps(value).encode())
    write("feature-json", "escapes", b'{"s":"\\u00e9\\n\\"\\/\\ud83d\\ude00","d":-1.5e-3}')


def rest_infer():
    """REST infer bodies as tritonclient.http and perf_analyzer write them, and the edges."""
    def tensor(name, shape, datatype, data=None, **parameters):
        t = {"name": name, "shape": shape, "datatype": datatype}
        if parameters:
            t["parameters"] = parameters
        if data is not None:
            t["data"] = data
        return t
    bodies = {
        "json-tensors": {"id": "r1", "inputs": [tensor("x", [1, 4], "FP32", [0.5, 1.25, -2, 3e-3]),
                                                tensor("n", [2, 2], "INT64", [[1, -9223372036854775808], [9223372036854775807, 0]])],
                         "outputs": [{"name": "y", "parameters": {"binary_data": False}}]},
        "all-datatypes": {"inputs": [tensor("a", [2], "FP64", [-0.0, 1e308]), tensor("b", [1], "FP16", [65504]),
                                     tensor("c", [3], "BOOL", [True, False, 1]), tensor("d", [2], "UINT64", [0, 18446744073709551615]),
                                     tensor("e", [2], "INT8", [-128, 127]), tensor("f", [2], "UINT16", [0, 65535]),
                                     tensor("g", [2], "BYTES", ["a\u00e9\n", "\ud83d\ude00"]), tensor("h", [1], "INT32", [2e3])],
                          "parameters": {"binary_data_output": True}},
        "parameters": {"inputs": [tensor("x", [1], "FP64", [1], shared_memory_region="r", shared_memory_byte_size=8)],
                       "outputs": [{"name": "y", "parameters": {"classification": 3, "binary_data": 1}}]},
    }
    for name, body in bodies.items():
        write("rest-infer", name, json.dumps(body).encode())
    # Keys in another order, repeated keys, whitespace everywhere, escaped keys.
    write("rest-infer", "order-and-duplicates",
          b' {\n"inputs" : 3 ,"inputs":[ {"data":[[1 ,2],[3,4]],"shape":[2,2],"name":"x","datatype":"FP32",'
          b'"datatype":"FP64","\u0064ata":[[5,6],[7,8]] } ] ,"id":7,"id":"ok"}\t')
    header = json.dumps({"inputs": [tensor("x", [2], "FP32", binary_data_size=8)]}).encode()
    write("rest-infer", "binary", b"\0" + struct.pack("<H", len(header)) + header + struct.pack("<2f", 1.5, -2))


def main():
    cortado = os.environ.get("CORTADO_BIN", ".build/debug/cortado")
    with tempfile.TemporaryDirectory() as tmp:
        model_loader(tmp, cortado)
    infer_decoder()
    http2()
    feature_json()
    rest_infer()


if __name__ == "__main__":
    main()
