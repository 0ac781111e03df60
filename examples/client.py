#!/usr/bin/env python3
"""A first call to `cortado serve` with standard clients (no grpcurl needed).

    make serve                                   # in one shell: serves examples/repository
    .venv/bin/python examples/client.py          # in another

It asks the Open Inference Protocol service (tritonclient, as for Triton) for the iris
model's metadata and classifies two flowers, then does the same through the health service.
Options: --url 127.0.0.1:8001, --model iris.
"""
import argparse

import numpy as np
import tritonclient.grpc as triton


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="127.0.0.1:8001")
    p.add_argument("--model", default="iris")
    a = p.parse_args()
    client = triton.InferenceServerClient(a.url)
    print("live:", client.is_server_live(), " ready:", client.is_model_ready(a.model))
    meta = client.get_model_metadata(a.model, as_json=True)
    print("inputs:", [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]])
    print("outputs:", [(t["name"], t["datatype"], t["shape"]) for t in meta["outputs"]])

    flowers = {"sepal_length": [5.1, 6.7], "sepal_width": [3.5, 3.0], "petal_length": [1.4, 5.2], "petal_width": [0.2, 2.3]}
    inputs = []
    for name, values in flowers.items():
        tensor = triton.InferInput(name, [len(values), 1], "FP64")  # [batch, 1]: one double per row
        tensor.set_data_from_numpy(np.array(values, dtype=np.float64).reshape(-1, 1))
        inputs.append(tensor)
    result = client.infer(a.model, inputs)
    print("species:", [s.decode() for s in result.as_numpy("species").ravel()])
    print("classProbability (setosa, versicolor, virginica):")
    print(np.round(result.as_numpy("classProbability"), 4))
    top = client.infer(a.model, inputs, outputs=[triton.InferRequestedOutput("classProbability", class_count=1)])
    print("top class (score:index:label):", [s.decode() for s in top.as_numpy("classProbability").ravel()])


if __name__ == "__main__":
    main()
