"""The standard battery every layer of the zoo passes (after keras/src/testing/test_case.py).

`keras.src.testing` is private, so this is a small helper of our own: symbolic and eager
output shapes, weight shapes, `get_config`/`from_config` round trip, `.keras` save/load, mixed
precision and a short training step.
"""

import keras
import numpy as np


def run_layer_battery(
    make_layer,
    input_shape: tuple[int, ...],
    expected_weight_shapes: list[tuple[int, ...]],
    tmp_path,
    seed: int = 0,
    mixed_precision: bool = True,
) -> None:
    """Run the battery on the layer `make_layer()` returns, fed float32 inputs of `input_shape`.

    `mixed_precision=False` skips the float16 check (TensorFlow's CPU Conv2D has no float16 NCHW).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=input_shape).astype("float32")

    # Symbolic call: output shape, weights created with the expected names and shapes.
    layer = make_layer()
    inputs = keras.Input(shape=input_shape[1:], batch_size=None)
    outputs = layer(inputs)
    expected_shape = (None, *input_shape[1:])
    assert tuple(outputs.shape) == expected_shape
    assert tuple(layer.compute_output_shape(expected_shape)) == expected_shape
    assert [tuple(w.shape) for w in layer.weights] == [tuple(s) for s in expected_weight_shapes]
    if expected_weight_shapes:
        assert [w.name for w in layer.weights] == ["kernel", "bias"]
    model = keras.Model(inputs, outputs)

    # Eager call.
    y = keras.ops.convert_to_numpy(layer(x))
    assert y.shape == input_shape
    assert np.all(np.isfinite(y))

    # Config round trip: the same config, and the same outputs once the weights are copied.
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    clone.build(input_shape)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(x)), y)

    # .keras save/load inside a model: bit-exact outputs.
    path = tmp_path / f"{layer.name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), y)
    assert loaded.layers[-1].get_config() == config

    if mixed_precision:
        _check_mixed_precision(layer, config, input_shape, x, y)

    # A short training step changes every weight and keeps the loss finite.
    head = keras.layers.Dense(1)(keras.layers.Flatten()(outputs))
    trainer = keras.Model(inputs, head)
    trainer.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
    before = [w.numpy().copy() for w in layer.weights]
    targets = rng.normal(size=(input_shape[0], 1)).astype("float32")
    history = trainer.fit(x, targets, batch_size=max(1, input_shape[0] // 2), epochs=1, verbose=0)
    assert all(np.isfinite(history.history["loss"]))
    for old, weight in zip(before, layer.weights):
        assert not np.array_equal(old, weight.numpy()), f"{weight.name} did not change"


def _check_mixed_precision(layer, config, input_shape, x, y):
    """A mixed_float16 copy of the layer gives float16 outputs close to the float32 ones."""
    mixed = type(layer).from_config({**config, "dtype": "mixed_float16"})
    mixed.build(input_shape)
    mixed.set_weights(layer.get_weights())
    y16 = mixed(x)
    assert keras.backend.standardize_dtype(y16.dtype) == "float16"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(y16), y, rtol=2e-2, atol=2e-2)
