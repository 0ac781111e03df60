"""`cortado update` (Core ML's MLUpdateTask) against a NumPy re-implementation of the same
training (updharness.Reference): weights after 1 and 5 epochs, the loss it reports, the
predictions of the written model, that coremltools reads the written model back still
updatable, and the bad inputs that must stop an update without writing anything.

Models come from coremltools (NeuralNetworkBuilder.make_updatable and its loss and optimizer
setters, KNearestNeighborsClassifierBuilder), as an app developer makes them. The reference
reads its initial weights from the same spec, so the builder's weight layouts never matter.
"""

import re

import numpy as np
import pytest

from updharness import (Conv, Dense, Fn, Reference, avgpool2, batchnorm, cortado_predict, cortado_update, flatten, leaky_relu,
                        load_spec, maxpool2, relu, relu_sigmoid_concat, save, sigmoid, tanh, weights)

ct = pytest.importorskip("coremltools")
from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import AdamParams, NeuralNetworkBuilder, SgdParams  # noqa: E402

RTOL, ATOL = 1e-4, 1e-7
BATCHES = [1, 2, 3, 4, 5, 8]
EPOCHS = list(range(1, 11))


def softmax():
    def f(z):
        e = np.exp(z - z.max())
        return e / e.sum()
    return Fn(f, None)  # the cross-entropy gradient is taken through it at once


def set_optimizer(b, opt, lr, batch, momentum=0.0):
    if opt == "sgd":
        p = SgdParams(lr=lr, batch=batch, momentum=momentum)
        p.set_batch(batch, BATCHES)
        b.set_sgd_optimizer(p)
    else:
        p = AdamParams(lr=lr, batch=batch, beta1=0.9, beta2=0.999, eps=1e-8)
        p.set_batch(batch, BATCHES)
        b.set_adam_optimizer(p)
    b.set_epochs(1, allowed_set=EPOCHS)
    # Shuffling off: the reference then visits the rows in file order, as Cortado must.
    b.spec.neuralNetwork.updateParams.shuffle.defaultValue = False


def dense_classifier(opt="sgd", lr=0.1, batch=4, momentum=0.0):
    """x[4] -> dense 8 -> ReLU -> dense 3 -> softmax, both dense layers updatable, CE loss."""
    rng = np.random.default_rng(1)
    b = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("probs", None)])
    b.add_inner_product("d1", W=rng.normal(size=(8, 4)) * 0.5, b=rng.normal(size=8) * 0.1, input_channels=4, output_channels=8,
                        has_bias=True, input_name="x", output_name="h")
    b.add_activation("r1", "RELU", "h", "hr")
    b.add_inner_product("d2", W=rng.normal(size=(3, 8)) * 0.5, b=rng.normal(size=3) * 0.1, input_channels=8, output_channels=3,
                        has_bias=True, input_name="hr", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["d1", "d2"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    ref = lambda: Reference([Dense("d1", *weights(spec, "d1"), True), relu(), Dense("d2", *weights(spec, "d2"), True), softmax()], "ce")
    return spec, ref


def regression(opt="sgd", lr=0.05, batch=3, momentum=0.0):
    """x[3] -> dense 6 -> tanh -> dense 2, MSE loss on the output."""
    rng = np.random.default_rng(2)
    b = NeuralNetworkBuilder([("x", datatypes.Array(3))], [("y", None)])
    b.add_inner_product("d1", W=rng.normal(size=(6, 3)) * 0.5, b=rng.normal(size=6) * 0.1, input_channels=3, output_channels=6,
                        has_bias=True, input_name="x", output_name="h")
    b.add_activation("t1", "TANH", "h", "ht")
    b.add_inner_product("d2", W=rng.normal(size=(2, 6)) * 0.5, b=rng.normal(size=2) * 0.1, input_channels=6, output_channels=2,
                        has_bias=True, input_name="ht", output_name="y")
    b.make_updatable(["d1", "d2"])
    b.set_mean_squared_error_loss("loss", input_feature=("y", datatypes.Array(2)))
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    ref = lambda: Reference([Dense("d1", *weights(spec, "d1"), True), tanh(), Dense("d2", *weights(spec, "d2"), True)], "mse")
    return spec, ref


def conv_net(opt="sgd", lr=0.1, batch=2, momentum=0.0):
    """x[1,6,6] -> conv 2x3x3 (valid) -> ReLU -> max pool 2x2 -> flatten -> dense 3 -> softmax."""
    rng = np.random.default_rng(3)
    b = NeuralNetworkBuilder([("x", datatypes.Array(1, 6, 6))], [("probs", None)])
    b.add_convolution("c1", kernel_channels=1, output_channels=2, height=3, width=3, stride_height=1, stride_width=1,
                      border_mode="valid", groups=1, W=rng.normal(size=(3, 3, 1, 2)) * 0.5, b=rng.normal(size=2) * 0.1,
                      has_bias=True, input_name="x", output_name="c")
    b.add_activation("r1", "RELU", "c", "cr")
    b.add_pooling("p1", height=2, width=2, stride_height=2, stride_width=2, layer_type="MAX", padding_type="VALID",
                  input_name="cr", output_name="p")
    b.add_flatten("f1", mode=0, input_name="p", output_name="f")
    b.add_inner_product("d1", W=rng.normal(size=(3, 8)) * 0.5, b=rng.normal(size=3) * 0.1, input_channels=8, output_channels=3,
                        has_bias=True, input_name="f", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["c1", "d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    ref = lambda: Reference([Conv("c1", *weights(spec, "c1"), True), relu(), maxpool2(), flatten(),
                             Dense("d1", *weights(spec, "d1"), True), softmax()], "ce")
    return spec, ref


def strided_conv_net(opt="sgd", lr=0.05, batch=3, momentum=0.0):
    """x[2,7,7] -> conv 3x3x3 stride 2, same padding (4x4) -> leaky ReLU -> average pool 2x2 ->
    reshape [12,1,1] -> dense 3 -> softmax."""
    rng = np.random.default_rng(6)
    b = NeuralNetworkBuilder([("x", datatypes.Array(2, 7, 7))], [("probs", None)])
    b.add_convolution("c1", kernel_channels=2, output_channels=3, height=3, width=3, stride_height=2, stride_width=2,
                      border_mode="same", groups=1, W=rng.normal(size=(3, 3, 2, 3)) * 0.4, b=rng.normal(size=3) * 0.1,
                      has_bias=True, input_name="x", output_name="c")
    b.add_activation("a1", "LEAKYRELU", "c", "ca", params=[0.1])
    b.add_pooling("p1", height=2, width=2, stride_height=2, stride_width=2, layer_type="AVERAGE", padding_type="VALID",
                  input_name="ca", output_name="p")
    b.add_reshape("rs", "p", "f", target_shape=(12, 1, 1), mode=0)
    b.add_inner_product("d1", W=rng.normal(size=(3, 12)) * 0.5, b=rng.normal(size=3) * 0.1, input_channels=12, output_channels=3,
                        has_bias=True, input_name="f", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["c1", "d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    ref = lambda: Reference([Conv("c1", *weights(spec, "c1"), True, stride=2, padding="same"), leaky_relu(np.float32(0.1)),
                             avgpool2(), flatten(), Dense("d1", *weights(spec, "d1"), True), softmax()], "ce")
    return spec, ref


def branching(opt="sgd", lr=0.2, batch=4, momentum=0.0):
    """One blob feeds two layers whose outputs are concatenated: the gradients of the two
    branches add up. x[4] -> dense 5 -> (ReLU, sigmoid) -> concat [10] -> dense 3 -> softmax."""
    rng = np.random.default_rng(7)
    b = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("probs", None)])
    b.add_inner_product("d1", W=rng.normal(size=(5, 4)) * 0.5, b=rng.normal(size=5) * 0.1, input_channels=4, output_channels=5,
                        has_bias=True, input_name="x", output_name="h")
    b.add_activation("r", "RELU", "h", "hr")
    b.add_activation("s", "SIGMOID", "h", "hs")
    b.add_elementwise("cat", ["hr", "hs"], "hc", mode="CONCAT")
    b.add_inner_product("d2", W=rng.normal(size=(3, 10)) * 0.5, b=rng.normal(size=3) * 0.1, input_channels=10, output_channels=3,
                        has_bias=True, input_name="hc", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["d1", "d2"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    ref = lambda: Reference([Dense("d1", *weights(spec, "d1"), True), relu_sigmoid_concat(), Dense("d2", *weights(spec, "d2"), True),
                             softmax()], "ce")
    return spec, ref


def frozen_middle(opt="sgd", lr=0.2, batch=4, momentum=0.0):
    """The gradient must cross layers that do not learn: dense (updatable) -> batchnorm ->
    sigmoid -> dense (fixed) -> softmax."""
    rng = np.random.default_rng(4)
    b = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("probs", None)])
    b.add_inner_product("d1", W=rng.normal(size=(5, 4)) * 0.5, b=rng.normal(size=5) * 0.1, input_channels=4, output_channels=5,
                        has_bias=True, input_name="x", output_name="h")
    gamma, beta = rng.uniform(0.5, 1.5, 5), rng.normal(size=5) * 0.1
    mean, var = rng.normal(size=5) * 0.1, rng.uniform(0.5, 2, 5)
    b.add_batchnorm("bn", 5, gamma, beta, mean, var, input_name="h", output_name="hb", epsilon=1e-5)
    b.add_activation("s1", "SIGMOID", "hb", "hs")
    b.add_inner_product("d2", W=rng.normal(size=(3, 5)), b=rng.normal(size=3) * 0.1, input_channels=5, output_channels=3,
                        has_bias=True, input_name="hs", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, opt, lr, batch, momentum)
    spec = b.spec
    g32 = lambda a: a.astype(np.float32).astype(np.float64)
    ref = lambda: Reference([Dense("d1", *weights(spec, "d1"), True), batchnorm(g32(gamma), g32(beta), g32(mean), g32(var), 1e-5),
                             sigmoid(), Dense("d2", *weights(spec, "d2"), False), softmax()], "ce")
    return spec, ref


def class_data(n, shape, classes=3, seed=10):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=shape) for _ in range(n)]
    T = [int(t) for t in rng.integers(0, classes, n)]
    return X, T, [{"x": x, "probs_true": [t]} for x, t in zip(X, T)]


def regression_data(n=10, seed=11):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=3) for _ in range(n)]
    T = [np.array([np.sin(x[0]) + x[1], x[2] * 0.5]) for x in X]
    return X, T, [{"x": x, "y_true": t} for x, t in zip(X, T)]


def epoch_losses(stderr):
    return [float(m) for m in re.findall(r"epoch \d+/\d+: loss (\S+)", stderr)]


def check_against_reference(tmp_path, spec, ref, X, T, rows, names, opt, lr, batch, momentum=0.0, extra=()):
    """Trains 1 and 5 epochs with cortado and with the reference; compares weights and losses."""
    model = save(spec, tmp_path / "model.mlmodel")
    for epochs in (1, 5):
        out = tmp_path / f"trained{epochs}.mlmodel"
        proc = cortado_update(model, rows, out, "--epochs", epochs, *extra)
        assert proc.returncode == 0, proc.stderr
        r = ref()
        losses = r.train(X, T, epochs, batch, lr, optimizer=opt, momentum=momentum)
        trained = load_spec(out)
        layers = {l.name: l for l in r.layers if hasattr(l, "W")}
        for name in names:
            w, b = weights(trained, name)
            np.testing.assert_allclose(w, layers[name].W, rtol=RTOL, atol=ATOL, err_msg=f"{name} weights after {epochs} epochs")
            np.testing.assert_allclose(b, layers[name].b, rtol=RTOL, atol=ATOL, err_msg=f"{name} bias after {epochs} epochs")
        # The per-epoch loss on stderr is the mean over the epoch's examples.
        np.testing.assert_allclose(epoch_losses(proc.stderr), losses, rtol=1e-5)
    return r, out


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_dense_classifier_sgd(tmp_path, momentum):
    spec, ref = dense_classifier("sgd", lr=0.1, batch=4, momentum=momentum)
    X, T, rows = class_data(10, 4)  # 10 rows in batches of 4: the last batch has 2
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1", "d2"], "sgd", 0.1, 4, momentum)


def test_dense_classifier_adam(tmp_path):
    spec, ref = dense_classifier("adam", lr=0.01, batch=3)
    X, T, rows = class_data(10, 4)
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1", "d2"], "adam", 0.01, 3)


@pytest.mark.parametrize("opt,momentum", [("sgd", 0.0), ("sgd", 0.5), ("adam", 0.0)])
def test_regression_mse(tmp_path, opt, momentum):
    lr = 0.05 if opt == "sgd" else 0.02
    spec, ref = regression(opt, lr=lr, batch=3, momentum=momentum)
    X, T, rows = regression_data()
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1", "d2"], opt, lr, 3, momentum)


@pytest.mark.parametrize("opt,momentum", [("sgd", 0.0), ("sgd", 0.9), ("adam", 0.0)])
def test_conv_net(tmp_path, opt, momentum):
    lr = 0.1 if opt == "sgd" else 0.01
    spec, ref = conv_net(opt, lr=lr, batch=2, momentum=momentum)
    X, T, rows = class_data(6, (1, 6, 6))
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["c1", "d1"], opt, lr, 2, momentum)


@pytest.mark.parametrize("opt,momentum", [("sgd", 0.9), ("adam", 0.0)])
def test_strided_same_padding_conv_average_pool_reshape(tmp_path, opt, momentum):
    lr = 0.05 if opt == "sgd" else 0.01
    spec, ref = strided_conv_net(opt, lr=lr, batch=3, momentum=momentum)
    X, T, rows = class_data(7, (2, 7, 7))
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["c1", "d1"], opt, lr, 3, momentum)


def test_branches_and_concat(tmp_path):
    spec, ref = branching("sgd", lr=0.2, batch=4, momentum=0.5)
    X, T, rows = class_data(10, 4)
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1", "d2"], "sgd", 0.2, 4, 0.5)


def test_gradient_crosses_fixed_layers(tmp_path):
    """batchnorm, sigmoid and a dense layer that is not updatable sit between the updatable
    layer and the loss; only d1 changes."""
    spec, ref = frozen_middle("sgd", lr=0.2, batch=4, momentum=0.5)
    X, T, rows = class_data(10, 4)
    r, out = check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1"], "sgd", 0.2, 4, 0.5)
    w0, b0 = weights(spec, "d2")
    w1, b1 = weights(load_spec(out), "d2")
    assert np.array_equal(w0, w1) and np.array_equal(b0, b1)


def test_cli_overrides_match_reference(tmp_path):
    """--learning-rate, --batch-size and --momentum override the spec's defaults."""
    spec, ref = dense_classifier("sgd", lr=0.1, batch=4)
    X, T, rows = class_data(10, 4)
    model = save(spec, tmp_path / "model.mlmodel")
    out = tmp_path / "t.mlmodel"
    proc = cortado_update(model, rows, out, "--epochs", 3, "--learning-rate", 0.3, "--batch-size", 5, "--momentum", 0.2)
    assert proc.returncode == 0, proc.stderr
    r = ref()
    r.train(X, T, 3, 5, 0.3, momentum=0.2)
    np.testing.assert_allclose(weights(load_spec(out), "d1")[0], r.layers[0].W, rtol=RTOL, atol=ATOL)


def test_shuffle_with_seed_is_reproducible(tmp_path):
    """With shuffling, each epoch's order comes from SplitMix64 seeded with --seed: the same
    seed gives the same model, and the reference that draws the same orders agrees."""
    spec, ref = dense_classifier("sgd", lr=0.1, batch=4)
    X, T, rows = class_data(10, 4)
    model = save(spec, tmp_path / "model.mlmodel")
    outs = []
    for i, seed in enumerate((7, 7, 8)):
        out = tmp_path / f"s{i}.mlmodel"
        proc = cortado_update(model, rows, out, "--epochs", 3, "--shuffle", "--seed", seed)
        assert proc.returncode == 0, proc.stderr
        outs.append(weights(load_spec(out), "d1")[0])
    assert np.array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])
    r = ref()
    r.train(X, T, 3, 4, 0.1, shuffle=True, seed=7)
    np.testing.assert_allclose(outs[0], r.layers[0].W, rtol=RTOL, atol=ATOL)


def test_written_model_predicts_and_stays_updatable(tmp_path):
    spec, ref = dense_classifier("adam", lr=0.01, batch=3)
    X, T, rows = class_data(10, 4)
    r, out = check_against_reference(tmp_path, spec, ref, X, T, rows, ["d1", "d2"], "adam", 0.01, 3)
    # Predictions of the written model agree with the reference network's.
    got = cortado_predict(out, [{"x": x} for x in X])
    for g, x in zip(got, X):
        np.testing.assert_allclose(g["probs"].reshape(-1), r.predict(x), rtol=1e-4, atol=1e-6)
    # coremltools reads it back: still updatable, with its loss, optimizer and training inputs.
    written = load_spec(out)
    assert written.isUpdatable
    assert [l.isUpdatable for l in written.neuralNetwork.layers] == [l.isUpdatable for l in spec.neuralNetwork.layers]
    assert written.neuralNetwork.layers[0].innerProduct.weights.isUpdatable
    assert written.neuralNetwork.updateParams == spec.neuralNetwork.updateParams
    assert written.description.trainingInput == spec.description.trainingInput
    ct.models.MLModel(written, skip_model_load=True)
    # ...and it can be updated again.
    again = tmp_path / "again.mlmodel"
    proc = cortado_update(out, rows, again, "--epochs", 1)
    assert proc.returncode == 0, proc.stderr


def test_classifier_trains_on_labels(tmp_path):
    """A neural-network classifier's target is its class label (coremltools names the training
    input after the predicted feature)."""
    rng = np.random.default_rng(5)
    b = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("probs", None)], mode="classifier")
    b.add_inner_product("d1", W=rng.normal(size=(3, 4)) * 0.5, b=np.zeros(3), input_channels=4, output_channels=3,
                        has_bias=True, input_name="x", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.set_class_labels(["cat", "dog", "eel"], predicted_feature_name="label", prediction_blob="probs")
    b.make_updatable(["d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    p = SgdParams(lr=0.1, batch=2)
    p.set_batch(2, BATCHES)
    b.set_sgd_optimizer(p)
    b.set_epochs(2, allowed_set=EPOCHS)
    b.spec.neuralNetworkClassifier.updateParams.shuffle.defaultValue = False
    spec = b.spec
    X, T, _ = class_data(8, 4)
    names = ["cat", "dog", "eel"]
    rows = [{"x": x, "label": names[t]} for x, t in zip(X, T)]
    model = save(spec, tmp_path / "model.mlmodel")
    out = tmp_path / "t.mlmodel"
    proc = cortado_update(model, rows, out)
    assert proc.returncode == 0, proc.stderr
    r = Reference([Dense("d1", *weights(spec, "d1"), True), softmax()], "ce")
    r.train(X, T, 2, 2, 0.1)
    np.testing.assert_allclose(weights(load_spec(out), "d1")[0], r.layers[0].W, rtol=RTOL, atol=ATOL)
    bad = cortado_update(model, [{"x": X[0], "label": "fox"}], tmp_path / "bad.mlmodel")
    assert bad.returncode != 0 and "fox" in bad.stderr and "class labels" in bad.stderr


# ---------------------------------------------------------------- k-NN


def knn_model(tmp_path):
    from coremltools.models.nearest_neighbors import KNearestNeighborsClassifierBuilder
    k = KNearestNeighborsClassifierBuilder(input_name="x", output_name="label", number_of_dimensions=2,
                                           default_class_label="none", number_of_neighbors=1)
    k.is_updatable = True
    k.add_samples(np.array([[0, 0], [10, 10]], dtype=np.float32), ["a", "b"])
    return save(k.spec, tmp_path / "knn.mlmodel")


def test_knn_update_appends_examples(tmp_path):
    model = knn_model(tmp_path)
    out = tmp_path / "knn2.mlmodel"
    rows = [{"x": np.array([20.0, 0.0]), "label": "c"}, {"x": np.array([0.0, 20.0]), "label": "d"}]
    proc = cortado_update(model, rows, out)
    assert proc.returncode == 0, proc.stderr
    assert "2 examples appended" in proc.stderr
    written = load_spec(out)
    assert written.isUpdatable
    index = written.kNearestNeighborsClassifier.nearestNeighborsIndex
    assert [list(s.vector) for s in index.floatSamples] == [[0, 0], [10, 10], [20, 0], [0, 20]]
    assert list(written.kNearestNeighborsClassifier.stringClassLabels.vector) == ["a", "b", "c", "d"]
    ct.models.MLModel(written, skip_model_load=True)
    got = cortado_predict(out, [{"x": np.array([19.0, 1.0])}, {"x": np.array([1.0, 19.0])}, {"x": np.array([1.0, 1.0])}])
    assert [g["label"] for g in got] == ["c", "d", "a"]


def test_knn_bad_examples(tmp_path):
    model = knn_model(tmp_path)
    out = tmp_path / "k.mlmodel"
    # A label of the wrong type, a vector of the wrong length, and a learning rate (k-NN has none).
    for rows, args, words in [
        ([{"x": np.array([1.0, 2.0]), "label": 3}], (), "label"),
        ([{"x": np.array([1.0, 2.0, 3.0]), "label": "c"}], (), "x"),
        ([{"x": np.array([1.0, 2.0]), "label": "c"}], ("--learning-rate", 0.1), "learningRate"),
    ]:
        proc = cortado_update(model, rows, out, *args)
        assert proc.returncode != 0 and words in proc.stderr, proc.stderr
        assert not out.exists()


# ---------------------------------------------------------------- bad input: clear errors, nothing written


@pytest.fixture
def classifier_file(tmp_path):
    spec, _ = dense_classifier("sgd", lr=0.1, batch=4)
    return save(spec, tmp_path / "model.mlmodel")


def refused(tmp_path, model, rows, *args, rows_text=None):
    """Runs an update that must fail; checks that an existing output is left as it was."""
    out = tmp_path / "out.mlmodel"
    out.write_bytes(b"previous model")
    proc = cortado_update(model, rows, out, *args, rows_text=rows_text)
    assert proc.returncode != 0, proc.stdout
    assert out.read_bytes() == b"previous model"
    assert "nothing was written" in proc.stderr
    return proc.stderr


def test_missing_target(tmp_path, classifier_file):
    err = refused(tmp_path, classifier_file, [{"x": np.ones(4), "probs_true": [1]}, {"x": np.ones(4)}])
    assert "line 2" in err and "probs_true" in err and "missing" in err


def test_wrong_type_and_shape(tmp_path, classifier_file):
    err = refused(tmp_path, classifier_file, [{"x": np.ones(4), "probs_true": "two"}])
    assert "probs_true" in err
    err = refused(tmp_path, classifier_file, [{"x": np.ones(3), "probs_true": [1]}])
    assert "line 1" in err and "'x'" in err and "shape" in err
    err = refused(tmp_path, classifier_file, [{"x": np.ones(4), "probs_true": [7]}])
    assert "probs_true" in err and "7" in err  # not a class index of the 3 classes


def test_not_updatable(tmp_path):
    spec, _ = dense_classifier()
    spec.isUpdatable = False
    model = save(spec, tmp_path / "plain.mlmodel")
    err = refused(tmp_path, model, [{"x": np.ones(4), "probs_true": [1]}])
    assert "not updatable" in err


@pytest.mark.parametrize("args,words", [
    (("--learning-rate=-0.1",), "learningRate"),  # "=": a bare -0.1 reads as an option
    (("--epochs", 0), "epochs"),
    (("--epochs", 50), "epochs"),            # outside the allowed set 1..10
    (("--batch-size", 7), "miniBatchSize"),  # not in the allowed set
    (("--momentum", 1.5), "momentum"),
])
def test_hyperparameters_out_of_range(tmp_path, classifier_file, args, words):
    err = refused(tmp_path, classifier_file, [{"x": np.ones(4), "probs_true": [1]}], *args)
    assert words in err


def test_divergence_stops_and_keeps_old_model(tmp_path):
    spec, _ = regression("sgd", lr=0.05, batch=1)
    opt = spec.neuralNetwork.updateParams.optimizer.sgdOptimizer
    opt.learningRate.range.maxValue = 1e9
    model = save(spec, tmp_path / "model.mlmodel")
    _, _, rows = regression_data()
    rows = [{"x": r["x"] * 100, "y_true": r["y_true"] * 1e6} for r in rows]
    err = refused(tmp_path, model, rows, "--learning-rate", 1e6, "--epochs", 10)
    assert "diverged" in err


def test_layer_without_gradient_is_named(tmp_path):
    """A layer training cannot differentiate, between an updatable layer and the loss, fails
    the update at once with the layer's name."""
    b = NeuralNetworkBuilder([("x", datatypes.Array(4))], [("probs", None)])
    b.add_inner_product("d1", W=np.ones((3, 4)), b=np.zeros(3), input_channels=4, output_channels=3, has_bias=True,
                        input_name="x", output_name="h")
    b.add_l2_normalize("norm", input_name="h", output_name="hn")
    b.add_softmax("sm", "hn", "probs")
    b.make_updatable(["d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, "sgd", 0.1, 4)
    model = save(b.spec, tmp_path / "model.mlmodel")
    err = refused(tmp_path, model, [{"x": np.ones(4), "probs_true": [1]}])
    assert "'norm'" in err and "l2normalize" in err.lower()


def test_malformed_json(tmp_path, classifier_file):
    err = refused(tmp_path, classifier_file, None, rows_text='{"x": [1,2,3,4], "probs_true": [1]}\n{"x": \n')
    assert "line 2" in err


def test_inspect_shows_training_inputs(classifier_file):
    import subprocess
    from nnharness import cortado_command
    out = subprocess.run(cortado_command() + ["inspect", str(classifier_file)], capture_output=True, text=True).stdout
    assert "Training inputs:" in out and "probs_true" in out
    assert re.search(r"Updatable: +yes \(.*learningRate=0\.1", out)


def test_cli_adam_overrides_match_reference(tmp_path):
    """--beta1, --beta2 and --eps override Adam's constants."""
    spec, ref = regression("adam", lr=0.02, batch=3)
    X, T, rows = regression_data()
    model = save(spec, tmp_path / "model.mlmodel")
    out = tmp_path / "t.mlmodel"
    proc = cortado_update(model, rows, out, "--epochs", 4, "--beta1", 0.8, "--beta2", 0.99, "--eps", 1e-6)
    assert proc.returncode == 0, proc.stderr
    r = ref()
    r.train(X, T, 4, 3, 0.02, optimizer="adam", beta1=0.8, beta2=0.99, eps=1e-6)
    for k, name in ((0, "d1"), (2, "d2")):
        np.testing.assert_allclose(weights(load_spec(out), name)[0], r.layers[k].W, rtol=RTOL, atol=ATOL)
    # An Adam constant on an SGD network is refused by name.
    spec, _ = dense_classifier("sgd")
    err = refused(tmp_path, save(spec, tmp_path / "sgd.mlmodel"), [{"x": np.ones(4), "probs_true": [1]}], "--beta1", 0.5)
    assert "beta1" in err and "does not apply" in err


def test_global_average_pooling(tmp_path):
    """conv (valid) -> sigmoid -> global average pool -> flatten -> dense -> softmax."""
    rng = np.random.default_rng(8)
    b = NeuralNetworkBuilder([("x", datatypes.Array(2, 5, 5))], [("probs", None)])
    b.add_convolution("c1", kernel_channels=2, output_channels=4, height=3, width=3, stride_height=1, stride_width=1,
                      border_mode="valid", groups=1, W=rng.normal(size=(3, 3, 2, 4)) * 0.5, b=rng.normal(size=4) * 0.1,
                      has_bias=True, input_name="x", output_name="c")
    b.add_activation("s1", "SIGMOID", "c", "cs")
    b.add_pooling("gap", height=1, width=1, stride_height=1, stride_width=1, layer_type="AVERAGE", padding_type="VALID",
                  input_name="cs", output_name="g", is_global=True)
    b.add_flatten("f1", mode=0, input_name="g", output_name="f")
    b.add_inner_product("d1", W=rng.normal(size=(3, 4)), b=np.zeros(3), input_channels=4, output_channels=3, has_bias=True,
                        input_name="f", output_name="z")
    b.add_softmax("sm", "z", "probs")
    b.make_updatable(["c1", "d1"])
    b.set_categorical_cross_entropy_loss("loss", "probs")
    set_optimizer(b, "sgd", 0.5, 2, 0.0)
    spec = b.spec
    gap = Fn(lambda x: x.mean(axis=(1, 2), keepdims=True), lambda x, y, dy: np.broadcast_to(dy, x.shape) / (x.shape[1] * x.shape[2]))
    ref = lambda: Reference([Conv("c1", *weights(spec, "c1"), True), sigmoid(), gap, flatten(), Dense("d1", *weights(spec, "d1"), True),
                             softmax()], "ce")
    X, T, rows = class_data(6, (2, 5, 5))
    check_against_reference(tmp_path, spec, ref, X, T, rows, ["c1", "d1"], "sgd", 0.5, 2)
