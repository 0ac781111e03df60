"""The network as a whole: graph checks at load (unknown layer types, dangling inputs, blobs
written twice, cycles), classifier and regressor outputs, flexible input shapes re-planned per
request, batches, and `cortado inspect`. Values compare at rtol 1e-5, atol 1e-6."""

import json
import subprocess

import numpy as np
import pytest

from nnharness import assert_close, builder, cortado_command, load_error, predict, rng, save


def chain(n=3):
    b = builder([("x", (4,))], [("y", (4,))])
    names = ["x"] + [f"t{i}" for i in range(n - 1)] + ["y"]
    for i in range(n):
        b.add_activation(f"a{i}", "LINEAR", names[i], names[i + 1], params=[1.0, 1.0])
    return b


def test_chain_of_layers(tmp_path):
    x = rng(3).normal(size=(4,))
    assert_close(predict(chain(5), {"x": x}, tmp_path)["y"], x + 5)


def test_layers_out_of_order_are_sorted(tmp_path):
    b = chain(3)
    layers = list(b.spec.neuralNetwork.layers)
    del b.spec.neuralNetwork.layers[:]
    b.spec.neuralNetwork.layers.extend(reversed(layers))
    x = rng(4).normal(size=(4,))
    assert_close(predict(b, {"x": x}, tmp_path)["y"], x + 3)


def test_unknown_layer_type_fails_the_load(tmp_path):
    b = chain(2)
    layer = b.spec.neuralNetwork.layers.add()
    layer.name = "mystery"
    layer.input.append("y")
    layer.output.append("z")
    layer.custom.className = "NotThere"
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "mystery" in err and "custom" in err


def test_dangling_input_names_the_layer(tmp_path):
    b = chain(2)
    b.spec.neuralNetwork.layers[1].input[0] = "nowhere"
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "a1" in err and "nowhere" in err


def test_blob_written_twice_names_both_layers(tmp_path):
    b = chain(2)
    b.spec.neuralNetwork.layers[0].output[0] = "y"
    b.spec.neuralNetwork.layers[1].input[0] = "x"
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "a0" in err and "a1" in err and "'y'" in err


def test_writing_a_model_input_is_rejected(tmp_path):
    b = chain(2)
    b.spec.neuralNetwork.layers[0].output[0] = "x"
    b.spec.neuralNetwork.layers[1].input[0] = "x"
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "a0" in err and "model input" in err


def test_cycle_names_a_layer(tmp_path):
    b = builder([("x", (4,))], [("y", (4,))])
    b.add_activation("first", "RELU", "loop2", "loop1")
    b.add_activation("second", "RELU", "loop1", "loop2")
    b.add_activation("out", "RELU", "x", "y")
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "cycle" in err and ("first" in err or "second" in err)


def test_output_no_layer_writes(tmp_path):
    b = builder([("x", (4,))], [("y", (4,)), ("extra", (4,))])
    b.add_activation("a", "RELU", "x", "y")
    err = load_error(b, tmp_path, rows=[{"x": np.zeros(4)}])
    assert "extra" in err


def test_shape_error_at_load_names_the_layer(tmp_path):
    b = builder([("x", (3, 2, 2))], [("y", (3, 2, 2))])
    b.add_activation("pr", "PRELU", "x", "y", params=np.array([0.1, 0.2]))
    err = load_error(b, tmp_path, rows=[{"x": np.zeros((3, 2, 2))}])
    assert "pr" in err and "2 values" in err


def classifier(labels):
    b = builder([("x", (len(labels),))], [("probs", (len(labels),))], mode="classifier")
    b.add_activation("pass", "LINEAR", "x", "probs", params=[1.0, 0.0])
    b.set_class_labels(labels, predicted_feature_name="label", prediction_blob="probs")
    return b


@pytest.mark.parametrize("labels", [["cat", "dog", "fox"], [10, 20, 30]])
def test_classifier_label_and_probabilities(labels, tmp_path):
    rows = [{"x": np.array([0.1, 0.7, 0.2])}, {"x": np.array([0.5, 0.2, 0.3])}, {"x": np.array([0.0, 0.1, 0.9])}]
    out = predict(classifier(labels), rows, tmp_path)
    for row, o in zip(rows, out):
        want = labels[int(np.argmax(row["x"]))]
        assert o["label"] == want
        probs = o["probs"]
        assert set(probs) == {str(l) for l in labels}
        for l, p in zip(labels, row["x"]):
            assert abs(probs[str(l)] - p) < 1e-6


def test_regressor(tmp_path):
    b = builder([("x", (2,))], [("y", (2,))], mode="regressor")
    b.add_activation("a", "LINEAR", "x", "y", params=[3.0, 0.5])
    x = np.array([1.0, -2.0])
    assert_close(predict(b, {"x": x}, tmp_path)["y"], 3 * x + 0.5)


def test_sequence_and_batch_axes_in_a_rank5_input(tmp_path):
    b = builder([("x", (3,))], [("y", (3,))])
    b.add_activation("a", "RELU", "x", "y")
    x = rng(5).normal(size=(4, 2, 3, 1, 1))
    out = predict(b, {"x": x}, tmp_path)
    assert_close(out["y"], np.maximum(x, 0))


def test_enumerated_shapes_replan(tmp_path):
    from coremltools.models.neural_network import flexible_shape_utils as fsu
    b = builder([("x", (2, 4, 4))], [("y", None)])
    b.add_activation("a", "LINEAR", "x", "y", params=[2.0, 0.0])
    fsu.add_enumerated_multiarray_shapes(b.spec, "x", [fsu.NeuralNetworkMultiArrayShape(2, 4, 4),
                                                        fsu.NeuralNetworkMultiArrayShape(2, 8, 3)])
    rows = [{"x": rng(6).normal(size=(2, 8, 3))}, {"x": rng(7).normal(size=(2, 4, 4))}]
    out = predict(b, rows, tmp_path)
    for row, o in zip(rows, out):
        assert_close(o["y"], 2 * row["x"])
    err = predict(b, [{"x": np.zeros((2, 5, 5))}], tmp_path, expect_failure=True)
    assert "not one of the allowed shapes" in err[1]


def test_wrong_input_shape_is_a_clean_error(tmp_path):
    err = predict(chain(2), [{"x": np.zeros(5)}], tmp_path, expect_failure=True)
    assert "'x'" in err[1] and "[4]" in err[1]


def test_inspect_lists_layers_with_shapes(tmp_path):
    path = save(chain(3), tmp_path)
    proc = subprocess.run(cortado_command() + ["inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for name in ("a0", "a1", "a2"):
        assert f"{name}: activation → [1, 1, 4, 1, 1]" in proc.stdout, proc.stdout
    assert "layers: 3" in proc.stdout
