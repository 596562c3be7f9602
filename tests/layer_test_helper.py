"""The standard battery every layer of the zoo passes (after keras/src/testing/test_case.py).

`keras.src.testing` is private, so this is a small helper of our own: symbolic and eager
output shapes, weight shapes, `get_config`/`from_config` round trip, `.keras` save/load, mixed
precision, a short training step, and masking (`check_masking`).

Backend-neutral (it imports no framework but through Keras), so the masking check also runs
in the JAX and PyTorch subprocesses of tests/test_masking.py.
"""

import warnings

import keras
import numpy as np
from keras import ops


def normal_input(rng, shape):
    """The battery's default input: float32 standard normal values."""
    return rng.normal(size=shape).astype("float32")


def character_ids(rng, shape, vocabulary=9):
    """Integer inputs of a layer over characters, `(..., word_length)`: words of 1 to
    `word_length` random ids in 1..vocabulary-1, padded with 0."""
    ids = rng.integers(1, vocabulary, size=shape).astype("int32")
    lengths = rng.integers(1, shape[-1] + 1, size=shape[:-1])
    return np.where(np.arange(shape[-1]) < lengths[..., None], ids, 0).astype("int32")


def channels_first_call(fn):
    """`fn`, made to run NCHW convolutions on this machine's CPU: TensorFlow's own CPU kernels
    have none (keras.layers.Conv2D fails the same way; oneDNN builds on CPUs with AVX-512 do
    have them), so on TensorFlow `fn` runs compiled by XLA, which has them everywhere."""
    if keras.backend.backend() != "tensorflow":
        return fn
    import tensorflow as tf

    return tf.function(fn, jit_compile=True)


def run_layer_battery(
    make_layer,
    input_shape: tuple[int, ...],
    expected_weight_shapes: list[tuple[int, ...]],
    tmp_path,
    seed: int = 0,
    mixed_precision: bool = True,
    expected_output_shape: tuple[int, ...] | None = None,
    expected_weight_names: list[str] | None = None,
    make_input=None,
    masking: bool = True,
    masking_input_shape: tuple[int, ...] | None = None,
    mask_fronts=None,
    call=lambda fn: fn,
    jit_compile: bool = False,
) -> None:
    """Run the battery on the layer `make_layer()` returns, fed inputs of `input_shape`.

    `call(fn)` wraps each eager call of the layer or a model holding it, and `jit_compile` is
    the training step's: a channels_first convolution passes `channels_first_call` and True.

    `mixed_precision=False` skips the float16 check (TensorFlow's CPU Conv2D has no float16 NCHW).
    `expected_output_shape` defaults to `input_shape`; `expected_weight_names` to
    `["kernel", "bias"]` when the layer has weights. `make_input(rng, shape)` makes the inputs
    (default `normal_input`; integer ids for a layer over token or character ids).

    `masking=True`: the layer supports Keras masking as `keras.layers.Dense` does
    (`check_masking` on inputs of `masking_input_shape`, default `input_shape`, which must be
    `(batch, steps, ...)`, with `mask_fronts`); `masking=False`: it declares that it does not
    (`supports_masking` False, as `keras.layers.Conv2D`: a mask reaching it is dropped).
    """
    make_input = make_input or normal_input
    rng = np.random.default_rng(seed)
    x = make_input(rng, input_shape)
    output_shape = tuple(expected_output_shape or input_shape)
    if expected_weight_names is None and expected_weight_shapes:
        expected_weight_names = ["kernel", "bias"]

    # Symbolic call: output shape, weights created with the expected names and shapes.
    layer = make_layer()
    inputs = keras.Input(shape=input_shape[1:], batch_size=None, dtype=str(x.dtype))
    outputs = layer(inputs)
    expected_shape = (None, *output_shape[1:])
    assert tuple(outputs.shape) == expected_shape
    assert tuple(layer.compute_output_shape((None, *input_shape[1:]))) == expected_shape
    assert [tuple(w.shape) for w in layer.weights] == [tuple(s) for s in expected_weight_shapes]
    if expected_weight_shapes:
        assert [w.name for w in layer.weights] == list(expected_weight_names)
    model = keras.Model(inputs, outputs)

    # Eager call.
    y = keras.ops.convert_to_numpy(call(layer)(x))
    assert y.shape == output_shape
    assert np.all(np.isfinite(y))

    # Config round trip: the same config, and the same outputs once the weights are copied.
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    clone.build(input_shape)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(call(clone)(x)), y)

    # .keras save/load inside a model: bit-exact outputs.
    path = tmp_path / f"{layer.name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(call(loaded)(x)), y)
    assert loaded.layers[-1].get_config() == config

    if mixed_precision:
        _check_mixed_precision(layer, config, input_shape, x, y)

    # A short training step changes every weight and keeps the loss finite. (Flatten drops a
    # mask the layer makes itself, warning so: not what is tested here.)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*destroy the mask")
        head = keras.layers.Dense(1)(keras.layers.Flatten()(outputs))
        trainer = keras.Model(inputs, head)
        trainer.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse",
                        jit_compile=jit_compile)
        before = [keras.ops.convert_to_numpy(w).copy() for w in layer.weights]
        targets = rng.normal(size=(input_shape[0], 1)).astype("float32")
        history = trainer.fit(x, targets, batch_size=max(1, input_shape[0] // 2), epochs=1,
                              verbose=0)
    assert all(np.isfinite(history.history["loss"]))
    for old, weight in zip(before, layer.weights):
        assert not np.array_equal(old, keras.ops.convert_to_numpy(weight)), (
            f"{weight.name} did not change")

    # Masking, as keras.layers.Dense (supports it, passes the mask on) or keras.layers.Conv2D
    # (does not: a mask reaching it is dropped, with Keras's "will destroy the mask" warning).
    assert make_layer().supports_masking is masking, (
        f"{type(layer).__name__}.supports_masking should be {masking}")
    if masking:
        check_masking(make_layer, masking_input_shape or input_shape, make_input=make_input,
                      fronts=mask_fronts, seed=seed)


def _check_mixed_precision(layer, config, input_shape, x, y):
    """A mixed_float16 copy of the layer gives float16 outputs close to the float32 ones."""
    mixed = type(layer).from_config({**config, "dtype": "mixed_float16"})
    mixed.build(input_shape)
    mixed.set_weights(layer.get_weights())
    y16 = mixed(x)
    assert keras.backend.standardize_dtype(y16.dtype) == "float16"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(y16), y, rtol=2e-2, atol=2e-2)


# == Masking ======================================================================================

class _MaskProbe(keras.layers.Layer):
    """Returns the mask it receives as float32 `(batch, steps)`: 1 kept, 0 masked; -1
    everywhere when no mask reached it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True  # (a last layer: only so Keras does not warn)

    def call(self, inputs, mask=None):
        first = ops.cast(inputs[..., 0], "float32")
        while len(first.shape) > 2:
            first = first[..., 0]
        if mask is None:
            return -ops.ones_like(first)
        return ops.cast(mask, "float32") + ops.zeros_like(first)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:2])


MASK_FRONTS = ("masking", "embedding")
VOCABULARY = 11  # token ids of the Embedding front: 1..10 real, 0 padding


def padding_plan(batch, steps):
    """Per example: (length, left-padded?). Every example has padding, one of them before its
    steps (a mask need not be a suffix), the lengths differ, and the first fills all but one
    step."""
    if steps < 3:
        raise ValueError(f"check_masking needs >= 3 steps to pad; received {steps}")
    return [(max(1, steps - 1 - i), i == 1) for i in range(batch)]


def _padded(real, plan, steps):
    """Each example's first `length` steps of `real`, zero padded to `steps` (before them where
    left-padded), and the mask that says which steps are real."""
    padded = np.zeros((len(plan), steps, *real.shape[2:]), real.dtype)
    mask = np.zeros((len(plan), steps), bool)
    for i, (length, left) in enumerate(plan):
        where = slice(steps - length, steps) if left else slice(0, length)
        padded[i, where] = real[i, :length]
        mask[i, where] = True
    return padded, mask


def weight_gradients(model, x, training=True):
    """The gradients of `sum(sin(model(x)))` for each of `model.trainable_variables`, as NumPy
    arrays, on whichever backend Keras runs (zeros where a variable gets none)."""
    backend = keras.backend.backend()
    variables = model.trainable_variables
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.sin(model(x, training=training)))
        grads = [None if g is None else tf.convert_to_tensor(g)  # (Embedding: IndexedSlices)
                 for g in tape.gradient(loss, variables)]
    elif backend == "jax":
        import jax

        other = [v.value for v in model.non_trainable_variables]

        def loss(trainable):
            y, _ = model.stateless_call(trainable, other, x, training=training)
            return jax.numpy.sum(jax.numpy.sin(y))

        grads = jax.grad(loss)([v.value for v in variables])
    elif backend == "torch":
        import torch

        for v in variables:
            v.value.grad = None
        torch.sin(model(ops.convert_to_tensor(x), training=training)).sum().backward()
        grads = [v.value.grad for v in variables]
    else:
        raise ValueError(f"no gradients for backend {backend!r}")
    return [np.zeros(v.shape, "float32") if g is None else keras.ops.convert_to_numpy(g)
            for v, g in zip(variables, grads)]


def _close(actual, desired, what, rtol=1e-5, atol=1e-5):
    """float32 round-off (batch sizes differ: a kernel may sum in another order), relative to
    the array's scale."""
    desired = np.asarray(desired)
    scale = max(1.0, float(np.abs(desired).max())) if desired.size else 1.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol * scale, err_msg=what)


def check_masking(make_layer, input_shape, make_input=None, fronts=None, seed=0, units=4):
    """The layer `make_layer()` supports Keras masking as `keras.layers.Dense` does.

    For each front in `fronts` (default `MASK_FRONTS`): `"masking"`, `keras.layers.Masking()`
    on inputs of `input_shape` (`(batch, steps, *step)`, made by `make_input`, zeros for padded
    steps); `"embedding"`, `keras.layers.Embedding(mask_zero=True)` on token ids `(batch,
    steps)`, embedding to the layer's `input_shape[-1]` features; None, no front: the layer
    computes the mask itself from the zero-padded inputs. After the layer, an LSTM. A batch of
    examples padded to `steps` (different lengths, one padded before its steps; see
    `padding_plan`) and each example alone, unpadded, must give:

    - the same layer outputs at the real steps (padding changes no unmasked result);
    - the mask of the real steps, passed on to the next layer (so that Keras raises no
      "will destroy the mask" warning), and an all-true mask for the unpadded example;
    - the same LSTM outputs at the real steps and the same final state;
    - in training mode, the same weight gradients (layer, front and LSTM) of
      `sum(sin(final state))`: the padded batch's equal the sum of the examples' (behind the
      first front only: on JAX each input shape compiles the LSTM's gradient afresh).
    """
    make_input = make_input or normal_input
    batch, steps, *step_shape = input_shape
    plan = padding_plan(batch, steps)
    for n, front in enumerate(MASK_FRONTS if fronts is None else fronts):
        keras.utils.set_random_seed(seed)
        rng = np.random.default_rng(seed)
        if front == "embedding":
            real = rng.integers(1, VOCABULARY, size=(batch, steps)).astype("int32")
            inputs = keras.Input((None,), dtype="int32")
            x = keras.layers.Embedding(VOCABULARY, step_shape[-1], mask_zero=True)(inputs)
        else:
            real = make_input(rng, (batch, steps, *step_shape))
            inputs = keras.Input((None, *step_shape), dtype=str(real.dtype))
            x = keras.layers.Masking(0.0)(inputs) if front == "masking" else inputs
        layer = make_layer()
        y = layer(x)
        mask_seen = _MaskProbe()(y)
        sequence, state, _ = keras.layers.LSTM(units, return_sequences=True,
                                               return_state=True)(y)
        model = keras.Model(inputs, [y, mask_seen, sequence, state])
        last_state = keras.Model(inputs, state)

        padded, mask = _padded(real, plan, steps)
        what = f"{type(layer).__name__} behind {front or 'its own mask'}"
        out = [keras.ops.convert_to_numpy(v) for v in model(padded, training=False)]
        np.testing.assert_array_equal(out[1], mask.astype("float32"),
                                      err_msg=f"{what}: the mask passed on (-1: none)")
        grads = weight_gradients(last_state, padded) if n == 0 else []
        summed = [np.zeros_like(g) for g in grads]
        for i, (length, _) in enumerate(plan):
            alone = real[i : i + 1, :length]
            kept = mask[i]
            y_alone, mask_alone, seq_alone, state_alone = [
                keras.ops.convert_to_numpy(v) for v in model(alone, training=False)]
            np.testing.assert_array_equal(mask_alone, np.ones((1, length), "float32"),
                                          err_msg=f"{what}: the mask of an unpadded example")
            _close(out[0][i][kept], y_alone[0], f"{what}: layer output, example {i}")
            _close(out[2][i][kept], seq_alone[0], f"{what}: LSTM outputs, example {i}")
            _close(out[3][i], state_alone[0], f"{what}: LSTM final state, example {i}")
            if grads:
                for total, g in zip(summed, weight_gradients(last_state, alone)):
                    total += g
        for variable, g, g_sum in zip(last_state.trainable_variables, grads, summed):
            _close(g, g_sum, f"{what}: gradient of {variable.path}", rtol=1e-4)
