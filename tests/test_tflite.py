"""Deployment formats beyond TF Serving: `zoo.export(..., format="tflite")`
(zoo/serving/tflite.py) and Keras's own `model.export(format="tf_saved_model" | "litert")`,
for a model of every family, stacked included."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from zoo_cases import one_per_family

import zoo
import zoo.serving.tflite
from highway_zoo.cli import main

FC = "highway_fc10_mnist"


MODELS = one_per_family()
IDS = [name + ("-stacked" if overrides.get("stacked") else "") for name, overrides in MODELS]


def _pixels(shape, n=3, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, *shape)).astype(np.float32)


def _close(actual, desired, what):
    """Equal within float32 round-off, relative to the array's scale."""
    desired = np.asarray(desired)
    np.testing.assert_allclose(actual, desired, rtol=1e-5,
                               atol=1e-6 * max(1.0, np.abs(desired).max()), err_msg=what)


def _model(name, overrides):
    keras.utils.set_random_seed(0)
    model = zoo.load(name, **overrides)
    stack = [layer for layer in model.layers if layer.name == "highway_stack"]
    if stack:  # gate biases that differ by layer, so a mix-up of the gates' outputs shows
        bias = keras.ops.convert_to_numpy(stack[0].bias)
        width = bias.shape[1] // 2
        bias[:, width:] -= np.linspace(0.0, 2.0, len(bias))[:, None]
        stack[0].bias.assign(bias)
    return model


@pytest.mark.parametrize("name, overrides", MODELS, ids=IDS)
def test_every_tflite_signature_equals_the_saved_models(name, overrides, tmp_path):
    model = _model(name, overrides)
    saved = tf.saved_model.load(str(zoo.export(model, base_dir=tmp_path, warmup=False)))
    path = zoo.export(model, base_dir=tmp_path, format="tflite")
    assert path == tmp_path / name / "1.tflite"
    lite = zoo.serving.tflite.load(path)
    # The SavedModel's signatures but classify (string outputs: the SavedModel's alone).
    assert lite.signatures == sorted(set(saved.signatures) - {"classify"})
    assert lite.input_shape == tuple(model.input_shape[1:])
    x = _pixels(lite.input_shape)
    for signature in lite.signatures:
        expected = {k: v.numpy() for k, v in saved.signatures[signature](pixels=x).items()}
        got = lite(x, signature=signature)
        assert sorted(got) == sorted(expected), signature
        for key, value in expected.items():
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            if key == "class_ids":
                np.testing.assert_array_equal(got[key], got["probabilities"].argmax(axis=-1))
            else:
                _close(got[key], value, f"{signature}/{key}")
    if overrides.get("stacked"):  # the stack's gates: one output per layer, per-layer names
        gates = lite(x, signature="gates")
        names = model.get_layer("highway_stack").layer_names()  # highway_1, ...
        assert sorted(gates) == sorted(names)
        means = [gates[layer].mean() for layer in names]
        assert np.all(np.diff(means) < 0)  # b_T falls by layer, and so does T


@pytest.mark.parametrize("name, overrides", MODELS, ids=IDS)
def test_keras_model_export_formats(name, overrides, tmp_path):
    model = _model(name, overrides)
    x = _pixels(model.input_shape[1:])
    expected = np.asarray(model(x))
    model.export(str(tmp_path / "saved"), format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))  # kept: it owns the variables
    _close(reloaded.serve(x).numpy(), expected, "serve")
    model.export(str(tmp_path / "model.tflite"), format="litert", verbose=False)
    lite = zoo.serving.tflite.load(tmp_path / "model.tflite")
    (signature,) = lite.signatures
    (got,) = lite(x, signature=signature).values()
    _close(got, expected, "litert")


@pytest.fixture(scope="module")
def small_tflite(tmp_path_factory):
    keras.utils.set_random_seed(0)
    base = tmp_path_factory.mktemp("exported")
    path = zoo.export(zoo.load(FC, depth=3), base_dir=base, format="tflite")
    return zoo.serving.tflite.load(path)


@pytest.mark.parametrize(
    "pixels, message",
    [
        (np.zeros((2, 28, 28, 3)), r"takes pixels of shape \(batch, 28, 28, 1\).*\(2, 28, 28, 3\)"),
        (np.zeros((2, 784)), r"\(batch, 28, 28, 1\).*received an array of shape \(2, 784\)\.$"),
        (np.zeros((28, 28, 1)), r"\(28, 28, 1\)\. Add a batch axis for one image"),
        (np.zeros((0, 28, 28, 1)), r"received an array of shape \(0, 28, 28, 1\)"),
        (np.full((1, 28, 28, 1), "x"), r"takes real pixel values; received an array of <U1"),
    ],
)
def test_a_wrong_input_is_one_clear_error(small_tflite, pixels, message):
    with pytest.raises(ValueError, match=message):
        small_tflite(pixels)


def test_tflite_model_refusals(small_tflite, tmp_path):
    with pytest.raises(ValueError, match=r"no signature 'probabilities'; it has \['gates', "):
        small_tflite(np.zeros((1, 28, 28, 1)), signature="probabilities")
    with pytest.raises(FileNotFoundError, match="No TFLite file at"):
        zoo.serving.tflite.load(tmp_path / "missing.tflite")
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer")
    with pytest.raises(ValueError, match="is not a readable TFLite model"):
        zoo.serving.tflite.load(junk)
    # Integer pixels are pixels: converted, same answer as float32.
    x = np.random.default_rng(0).integers(0, 256, (2, 28, 28, 1))
    np.testing.assert_array_equal(small_tflite(x)["probabilities"],
                                  small_tflite(x.astype(np.float32))["probabilities"])


def test_tflite_files_are_numbered_and_never_overwritten(tmp_path, capsys):
    base = tmp_path / "exported"
    args = ["export", FC, "--random-weights", "--base-dir", str(base), "--format", "tflite"]
    assert main(args) == 0
    first = base / FC / "1.tflite"
    assert f"exported {FC} to {first}" in capsys.readouterr().out
    content = first.read_bytes()
    assert main([*args, "--version", "1"]) == 2
    err = capsys.readouterr().err
    assert "never overwritten" in err and len(err.strip().splitlines()) == 1
    assert first.read_bytes() == content
    assert zoo.export(FC, random_weights=True, base_dir=base, format="tflite", depth=3) == (
        base / FC / "2.tflite")
    assert zoo.export(FC, random_weights=True, base_dir=base, format="tflite", depth=3,
                      version=7) == base / FC / "7.tflite"
    assert zoo.serving.tflite.versions(base / FC) == [1, 2, 7]
    # Nothing else: no temporary file left, no SavedModel version, no models.config (TF
    # Serving does not serve TFLite); a SavedModel export numbers its versions apart.
    assert sorted(p.name for p in (base / FC).iterdir()) == ["1.tflite", "2.tflite", "7.tflite"]
    assert sorted(p.name for p in base.iterdir()) == [FC]
    saved_model = zoo.export(FC, random_weights=True, base_dir=base, depth=3, warmup=False)
    assert saved_model == base / FC / "1" and (saved_model / "saved_model.pb").is_file()
    with pytest.raises(ValueError, match=r"format must be one of \('tf_saved_model', 'tflite', "
                       r"'onnx'\)\. Received: format='coreml'"):
        zoo.export(FC, random_weights=True, base_dir=base, format="coreml")


def test_an_unknown_cli_format_is_refused():
    with pytest.raises(SystemExit) as exit_info:
        main(["export", FC, "--random-weights", "--format", "coreml"])
    assert exit_info.value.code == 2
