"""Linked models shared in the server: two repository pipelines that link the same large
network hold one copy of it.

The network (coremltools' NeuralNetworkBuilder, 512-2048-2048-2048-16 inner products with
ReLU, ~9.5 M float32 weights, ~38 MB) lives in DIR/shared/, which is not a model of its own.
Three repositories are served, one `cortado serve` each, and the server's resident memory
(VmRSS of /proc/PID/status) is read after every model answered a prediction:

- one:     pipeline a (a link to "extractor.mlmodelc" on the search path "shared", which
           resolves against the repository, then a small head)
- two:     pipelines a and b, both linking the network
- private: pipelines a and b, each embedding its own copy of the network

Asserted (memory, not time): the second linking pipeline adds less than 25 % of the
network's weight bytes (two - one), while a second private copy adds more than 75 % of them
(private - one, which shows the measurement can see a copy). The figures are printed.
Predictions match a NumPy forward pass (float32 kernels: rtol 1e-4, atol 1e-5)."""
import shutil
import time

import numpy as np
import pytest

from linkharness import assert_close, dense_network, link_spec, native, pipeline_spec, save

LAYERS = [512, 2048, 2048, 2048, 16]
WEIGHT_BYTES = 4 * sum(a * b for a, b in zip(LAYERS, LAYERS[1:]))
TOL = dict(rtol=1e-4, atol=1e-5)


def head(seed):
    return dense_network([LAYERS[-1], 8, 2], seed, input_name="features", output_name="score")


@pytest.fixture(scope="module")
def network(tmp_path_factory):
    folder = tmp_path_factory.mktemp("network")
    spec, reference = dense_network(LAYERS, 90, output_name="features")
    path = save(spec, folder, "extractor")
    return spec, reference, path


def repository(root, network, names, private=False):
    """Pipelines `names` (each with its own head) in root; returns name -> reference."""
    spec, reference, path = network
    references = {}
    for i, name in enumerate(names):
        hd, href = head(91 + i)
        first = spec if private else link_spec(spec, "extractor.mlmodelc", "shared")
        folder = root / name / "1"
        folder.mkdir(parents=True)
        save(pipeline_spec([first, hd], spec.description.input, hd.description.output), folder)
        references[name] = (lambda r: lambda x: r(reference(x)))(href)
    if not private:
        (root / "shared").mkdir()
        shutil.copy(path, root / "shared" / "extractor.mlmodel")
    return references


def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields


def predict_all(server, references, seed=92):
    api = native()
    pb = api.pb
    x = np.random.default_rng(seed).standard_normal(LAYERS[0])
    with server.channel() as ch:
        stub = api.P.predictor_pb2_grpc.PredictorStub(ch)
        for name, reference in references.items():
            reply = stub.Predict(pb.PredictRequest(model=name, inputs=[pb.Feature(name="x", value=api.encode(x))]), timeout=60)
            assert_close(api.as_dict(reply.outputs)["score"], reference(x[None, :])[0], what=name, **TOL)


def measure(tmp_path, start_server, network, names, private):
    root = tmp_path / ("private" if private else f"linked-{len(names)}")
    references = repository(root, network, names, private)
    server = start_server(root, "--workers", "1")
    predict_all(server, references)
    time.sleep(0.2)
    figures = status(server.proc.pid)
    assert server.stop() == 0
    return figures


def test_two_linking_pipelines_use_the_memory_of_one(tmp_path, start_server, network):
    one = measure(tmp_path, start_server, network, ["a"], private=False)
    two = measure(tmp_path, start_server, network, ["a", "b"], private=False)
    private = measure(tmp_path, start_server, network, ["a", "b"], private=True)
    mb = lambda v: f"{v / 1e6:.1f} MB"
    print(f"\nnetwork weights {mb(WEIGHT_BYTES)}; server resident memory after loading and one prediction per model:")
    for label, f in (("one linking pipeline", one), ("two linking pipelines", two), ("two private copies", private)):
        print(f"  {label:24s} VmRSS {mb(f['VmRSS'])}  (peak VmHWM {mb(f['VmHWM'])})")
    added_linked = two["VmRSS"] - one["VmRSS"]
    added_private = private["VmRSS"] - one["VmRSS"]
    print(f"  second linking pipeline adds {mb(added_linked)} ({added_linked / WEIGHT_BYTES:.0%} of the weights); "
          f"a second private copy adds {mb(added_private)} ({added_private / WEIGHT_BYTES:.0%})")
    assert added_linked < 0.25 * WEIGHT_BYTES, (one, two)
    assert added_private > 0.75 * WEIGHT_BYTES, (one, private)


def test_unloading_one_linking_model_keeps_the_other_working(tmp_path, start_server, network):
    references = repository(tmp_path / "repo", network, ["a", "b"])
    server = start_server(tmp_path / "repo", "--model-control", "explicit")
    api = native()
    pb = api.pb
    predict_all(server, references)
    with server.channel() as ch:
        stub = api.P.predictor_pb2_grpc.PredictorStub(ch)
        stub.Unload(pb.UnloadRequest(model="a"), timeout=30)
        predict_all(server, {"b": references["b"]}, seed=93)
        api.expect_error(lambda: stub.Predict(pb.PredictRequest(model="a", inputs=[]), timeout=30),
                         api.grpc.StatusCode.NOT_FOUND, "a")
        loaded = stub.Load(pb.LoadRequest(model="a"), timeout=60)
        assert loaded.status.state == pb.READY
    predict_all(server, references, seed=94)


def test_a_missing_linked_file_leaves_the_model_unavailable_and_others_serving(tmp_path, start_server, network):
    references = repository(tmp_path / "repo", network, ["a"])
    spec = network[0]
    hd, _ = head(95)
    folder = tmp_path / "repo" / "broken" / "1"
    folder.mkdir(parents=True)
    save(pipeline_spec([link_spec(spec, "gone.mlmodelc"), hd], spec.description.input, hd.description.output), folder)
    server = start_server(tmp_path / "repo")
    api = native()
    pb = api.pb
    with server.channel() as ch:
        stub = api.P.predictor_pb2_grpc.PredictorStub(ch)
        err = api.expect_error(lambda: stub.Predict(pb.PredictRequest(model="broken", inputs=[]), timeout=30),
                               api.grpc.StatusCode.UNAVAILABLE, "broken", "gone.mlmodelc")
        assert str(tmp_path / "repo") in err.details(), err.details()
    predict_all(server, references)
