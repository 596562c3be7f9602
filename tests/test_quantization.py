"""int8: Keras's `model.quantize("int8")` on the highway layers (`layers._highway.Int8Kernel`),
`zoo.quantize`, and the full-integer TFLite file (`zoo.export(..., format="tflite",
quantize="int8")`, `highway-zoo export NAME --format tflite --quantize int8`), on one FC and one
conv shipped model and a few hundred images of the offline MNIST sample."""

import gc
import hashlib

import keras
import numpy as np
import pytest

import zoo
import zoo.serving.tflite
from highway_zoo.cli import main
from layers import HighwayConv2D, HighwayDense, HighwayStack
from training.data import load_dataset, representative_sample
from zoo import pretrained
from zoo.quantization import quantized_layers

FC, CONV = "highway_fc10_mnist", "highway_conv16_mnist"
# Test images the accuracies are taken on, and how far int8 may fall below float on them
# (measured on the full test splits, docs/guide/quantization.md: at most 0.2 points for the
# Keras int8 models, 0.6 for the int8 TFLite files; 400 images make a point 4 of them).
IMAGES = 400
BOUND = 0.02


@pytest.fixture(scope="module")
def mnist():
    data = load_dataset("mnist")  # the 5,000-digit sample here
    return data.test.images[:IMAGES].astype(np.float32), data.test.labels[:IMAGES]


def _accuracy(probabilities, labels):
    return float(np.mean(np.argmax(probabilities, -1) == labels))


# -- the layers: the int8 kernel against an independent reference -------------------------------


def _abs_max_int8(kernel, axes):
    """The reference: per output channel (and layer), q = round(k * 127 / max|k|)."""
    scale = 127.0 / (np.max(np.abs(kernel), axis=axes, keepdims=True) + keras.config.epsilon())
    return np.clip(np.round(kernel * scale), -127, 127).astype(np.int8), scale


@pytest.mark.parametrize("make, shape, axes", [
    (lambda: HighwayDense(activation="tanh"), (12,), (0,)),
    (lambda: HighwayDense(variant="full"), (12,), (0,)),
    (lambda: HighwayConv2D(3), (6, 6, 5), (0, 1, 2)),
    (lambda: HighwayStack(4), (12,), (1,)),
], ids=["dense", "dense-full", "conv", "stack"])
def test_the_int8_kernel_is_the_float_kernel_within_half_a_step(make, shape, axes, tmp_path):
    keras.utils.set_random_seed(0)
    x = keras.Input(shape)
    model = keras.Model(x, make()(x))
    layer = model.layers[1]
    kernel = keras.ops.convert_to_numpy(layer.kernel)
    bias = keras.ops.convert_to_numpy(layer.bias)
    weights_before = [v.shape for v in layer.weights]
    model.quantize("int8")
    assert layer.quantization_mode == "int8" and layer.dtype_policy.name == "int8_from_float32"
    q, scale = _abs_max_int8(kernel, axes)
    int8 = keras.ops.convert_to_numpy(layer.kernel)
    assert int8.dtype == np.int8 and int8.shape == kernel.shape
    np.testing.assert_array_equal(int8, q)
    kernel_scale = keras.ops.convert_to_numpy(layer.kernel_scale)
    np.testing.assert_allclose(kernel_scale, np.squeeze(scale, axes), rtol=1e-6)
    dequantized = int8 / np.expand_dims(kernel_scale, axes)
    assert np.all(np.abs(dequantized - kernel) <= 0.5 / scale + 1e-7)  # half a step
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.bias), bias)  # stays float
    assert [v.shape for v in layer.trainable_weights] == [bias.shape]
    assert len(weights_before) == 2 and len(layer.weights) == 3
    # Saved and reloaded: the same int8 variables and outputs.
    xs = np.random.default_rng(1).normal(size=(5, *shape)).astype(np.float32)
    y = model.predict(xs, verbose=0)
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again.layers[1].kernel), int8)
    np.testing.assert_array_equal(again.predict(xs, verbose=0), y)


def test_dense_int8_is_an_int8_product_of_rows_quantized_per_row():
    """HighwayDense's int8 call against NumPy: inputs quantized per row (abs max), an integer
    product, divided by both scales, then the coupled highway formula."""
    keras.utils.set_random_seed(0)
    layer = HighwayDense(activation="tanh", transform_bias_initializer=-1.0)
    x = np.random.default_rng(0).normal(size=(6, 10)).astype(np.float32)
    layer(x)
    bias = keras.ops.convert_to_numpy(layer.bias)
    layer.quantize("int8")
    k = keras.ops.convert_to_numpy(layer.kernel).astype(np.int64)
    k_scale = keras.ops.convert_to_numpy(layer.kernel_scale)
    x_scale = 127.0 / (np.max(np.abs(x), axis=-1, keepdims=True) + keras.config.epsilon())
    xq = np.clip(np.round(x * x_scale), -127, 127).astype(np.int64)
    z = (xq @ k) / (k_scale * x_scale) + bias
    h, t = np.tanh(z[:, :10]), 1 / (1 + np.exp(-z[:, 10:]))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), x + t * (h - x),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.transform_gate(x)), t,
                               rtol=1e-5, atol=1e-6)


def test_conv_int8_is_the_float_layer_on_the_dequantized_kernel():
    keras.utils.set_random_seed(0)
    layer = HighwayConv2D(3)
    x = np.random.default_rng(0).normal(size=(2, 5, 5, 4)).astype(np.float32)
    layer(x)
    reference = HighwayConv2D(3)
    reference(x)
    reference.bias.assign(layer.bias)
    layer.quantize("int8")
    scale = keras.ops.convert_to_numpy(layer.kernel_scale)
    reference.kernel.assign(keras.ops.convert_to_numpy(layer.kernel) / scale)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)),
                               keras.ops.convert_to_numpy(reference(x)), rtol=1e-5, atol=1e-6)


def test_other_modes_and_a_second_quantize_are_refused():
    layer = HighwayDense()
    layer(np.zeros((1, 4), np.float32))
    with pytest.raises(NotImplementedError, match=r"supports quantize\('int8'\) only"):
        layer.quantize("int4")
    layer.quantize("int8")
    with pytest.raises(ValueError, match="already quantized"):
        layer.quantize("int8")
    stack = HighwayStack(2)
    stack(np.zeros((1, 4), np.float32))
    stack.quantize("int8")
    with pytest.raises(ValueError, match="needs a float stack"):
        stack.to_layers()


def test_quantize_replaces_the_kernel_and_leaves_the_collector_as_it_was():
    """The float kernel is deleted with the process's objects frozen (gc.freeze, for a fast
    collection): afterwards as many are frozen as before, and the layer holds one kernel."""
    before = gc.get_freeze_count()
    layer = HighwayDense()
    layer(np.zeros((1, 4), np.float32))
    layer.quantize("int8")
    assert gc.get_freeze_count() == before
    assert [(w.name, str(w.dtype)) for w in layer.weights if w.name == "kernel"] == [
        ("kernel", "int8")]


# -- shipped models ---------------------------------------------------------------------------


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", [FC, CONV])
def test_a_quantized_shipped_model_saved_and_reloaded_predicts_the_same(name, mnist, tmp_path):
    images, labels = mnist
    weights_file = pretrained.weights_dir(name) / pretrained.record(name)["file"]  # as shipped
    before = _sha256(weights_file)
    float_model = zoo.load(name, weights="default")
    assert float_model.count_params() == zoo.describe(name)["params"]
    float_accuracy = _accuracy(float_model.predict(images, verbose=0), labels)
    model = zoo.quantize(name, weights="default")
    layers = quantized_layers(model)
    assert layers and set(layers.values()) == {"int8"} and "logits" in layers
    probabilities = model.predict(images, verbose=0)
    assert _accuracy(probabilities, labels) >= float_accuracy - BOUND
    model.save(tmp_path / "int8.keras")
    again = keras.saving.load_model(tmp_path / "int8.keras")
    assert quantized_layers(again) == layers
    np.testing.assert_array_equal(again.predict(images, verbose=0), probabilities)
    # The float weight file is as shipped, and the float model as it was.
    assert _sha256(weights_file) == before == pretrained.record(name)["sha256"]
    assert not quantized_layers(float_model)


def test_a_model_of_nested_layers_quantizes_its_own_layers_and_reloads(tmp_path):
    """The character-aware LM's embedder holds layers of its own (highways, an embedding):
    the model's own int8 layers are what its config records, so the saved file reloads (it
    used to quantize the inner highways too, which `load_model` could not find by name)."""
    model = zoo.load("lstm_char_small_ptb", lstm_units=8, classes=40)
    embedder = model.get_layer("embedder")
    inner = list(embedder.highways)
    zoo.quantize(model)
    assert quantized_layers(model) == {"logits": "int8"}
    assert all(layer.quantization_mode is None for layer in inner)
    words = np.random.default_rng(0).integers(1, 51, size=(2, 5, 21)).astype("int32")
    out = model.predict(words, verbose=0)
    model.save(tmp_path / "lm-int8.keras")
    again = keras.saving.load_model(tmp_path / "lm-int8.keras")
    assert quantized_layers(again) == {"logits": "int8"}
    np.testing.assert_array_equal(again.predict(words, verbose=0), out)


def test_zoo_quantize_refusals(tmp_path):
    with pytest.raises(ValueError, match="untrained network: pass weights='default'"):
        zoo.quantize(FC)
    with pytest.raises(ValueError, match="mode must be one of"):
        zoo.quantize(FC, "int4", weights="default")
    model = zoo.load(FC, depth=3)
    zoo.quantize(model)
    with pytest.raises(ValueError, match="quantized already"):
        zoo.quantize(model)
    with pytest.raises(ValueError, match=r"this model is quantized .*model\.save"):
        zoo.save(model, tmp_path / "preset")


# -- the full-integer TFLite file -------------------------------------------------------------


def _tflite_accuracy(path, images, labels):
    lite = zoo.serving.tflite.load(path)
    assert lite.quantized
    details = lite._input_details["serving_default"]
    assert np.dtype(details["dtype"]) == np.uint8 and details["quantization"] == (1.0, 0)
    return _accuracy(lite(images)["probabilities"], labels), lite


def test_int8_tflite_by_the_command_line_stays_near_float(mnist, tmp_path, capsys):
    images, labels = mnist
    assert main(["export", FC, "--weights", "default", "--format", "tflite", "--quantize", "int8",
                 "--calibration-images", "200", "--base-dir", str(tmp_path)]) == 0
    path = tmp_path / FC / "1.int8.tflite"
    assert f"to {path}" in capsys.readouterr().out
    float_accuracy = _accuracy(zoo.load(FC, weights="default").predict(images, verbose=0), labels)
    accuracy, lite = _tflite_accuracy(path, images, labels)
    assert accuracy >= float_accuracy - BOUND
    gates = lite(images[:50], signature="gates")
    assert sorted(gates) == [f"highway_{i}" for i in range(1, 10)]
    assert all(g.dtype == np.float32 and np.all((g >= 0) & (g <= 1)) for g in gates.values())
    params = zoo.describe(FC)["params"]
    assert path.stat().st_size < 0.75 * 4 * params  # int8 weights, not float32


def test_int8_tflite_of_a_conv_net_stays_near_float(mnist, tmp_path):
    images, labels = mnist
    model = zoo.load(CONV, weights="default")
    float_probabilities = model.predict(images, verbose=0)
    path = zoo.export(model, base_dir=tmp_path, format="tflite", quantize="int8",
                      representative=representative_sample("mnist", 200))
    assert path == tmp_path / CONV / "1.int8.tflite"
    accuracy, lite = _tflite_accuracy(path, images, labels)
    assert accuracy >= _accuracy(float_probabilities, labels) - BOUND
    # Dequantized outputs: probabilities near float's (uint8 steps of 1/256 and int8 layers).
    probabilities = lite(images[:100])["probabilities"]
    assert probabilities.dtype == np.float32
    assert np.mean(np.abs(probabilities - float_probabilities[:100])) < 0.02


def test_bad_int8_input_is_one_clear_line(tmp_path, capsys):
    model = zoo.load(FC, depth=3)
    with pytest.raises(ValueError, match=r"calibrated on a representative sample .* pass "
                                         r"representative=images"):
        zoo.export(model, base_dir=tmp_path, format="tflite", quantize="int8")
    with pytest.raises(ValueError, match=r"takes images of shape \(n, 28, 28, 1\)"):
        zoo.export(model, base_dir=tmp_path, format="tflite", quantize="int8",
                   representative=np.zeros((5, 28, 28)))
    with pytest.raises(ValueError, match="applies to format='tflite'"):
        zoo.export(model, base_dir=tmp_path, quantize="int8",
                   representative=np.zeros((1, 28, 28, 1)))
    with pytest.raises(ValueError, match="quantize must be one of"):
        zoo.export(model, base_dir=tmp_path, format="tflite", quantize="int4")
    assert not (tmp_path / model.name).exists() or not any((tmp_path / model.name).iterdir())
    # A model whose dataset is not here (CIFAR-100): one line, exit status 2.
    code = main(["export", "highway_fc50_cifar100", "--random-weights", "--format", "tflite",
                 "--quantize", "int8", "--base-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "cifar100 is not on this machine" in err and "--data-dir DIR" in err
    assert main(["export", FC, "--weights", "default", "--calibration-images", "5",
                 "--base-dir", str(tmp_path)]) == 2
    assert "--calibration-images applies to --quantize int8 only" in capsys.readouterr().err


def test_gradients_pass_through_an_int8_dense_layer():
    """As Dense's: the int8 product's gradient is the dequantized kernel's, so the bias of a
    layer below a quantized one still trains (rounding alone has no gradient)."""
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x = keras.Input((12,))
    first = HighwayDense(activation="tanh")
    model = keras.Model(x, HighwayDense(activation="tanh")(first(x)))
    model.quantize("int8")
    xs = np.random.default_rng(0).normal(size=(8, 12)).astype(np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(xs) ** 2)
    grads = dict(zip([v.path for v in model.trainable_variables],
                     tape.gradient(loss, model.trainable_variables)))
    assert sorted(grads) == sorted(f"{layer.name}/bias" for layer in model.layers[1:])
    assert float(tf.norm(grads[first.bias.path])) > 0


@pytest.mark.parametrize("variant", ["rezero", "layerscale", "gru_gate", "laurel_rw",
                                     "laurel_lr"])
def test_a_gated_skip_quantizes_its_kernel_and_keeps_its_own_weights_float(variant):
    """The gated skips (issue 31) quantize H's kernel alone: their own weights stay float and
    the layer computes what the float layer computes on the dequantized kernel."""
    rng = np.random.default_rng(1)
    layer = HighwayDense(variant=variant, activation="tanh")
    x = rng.normal(size=(8, 12)).astype("float32")
    layer(x)
    for weight in layer.weights:  # away from the identity start, so that H matters
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))
    own = {w.name: keras.ops.convert_to_numpy(w) for w in layer.weights
           if w.name not in ("kernel", "bias")}
    float_layer = HighwayDense.from_config(layer.get_config())
    float_layer(x)
    float_layer.set_weights(layer.get_weights())
    layer.quantize("int8")
    assert str(layer.kernel.dtype) == "int8"
    for name, value in own.items():
        kept = next(w for w in layer.weights if w.name == name)
        assert str(kept.dtype) == "float32" and np.array_equal(
            keras.ops.convert_to_numpy(kept), value), name
    dequantized = (keras.ops.convert_to_numpy(layer.kernel).astype("float32")
                   / keras.ops.convert_to_numpy(layer.kernel_scale))
    float_layer.kernel.assign(dequantized)
    # HighwayDense's int8 path also quantizes its inputs per row: within a few steps of it.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)),
                               keras.ops.convert_to_numpy(float_layer(x)), atol=0.05)
