"""The headline experiment in Keras, three ways: this project (`zoo.load(..., stacked=True)`),
this project's per-layer `HighwayDense` net, and plain Keras with two `Dense` layers per block
(what a Keras user writes without this library).

Same network, initialisation, optimiser and data as `numpy_highway` / `torch_highway`; trained
with `model.fit`. `train(...)` returns the same dict as theirs.
"""

from __future__ import annotations

import math
import time

import keras

from benchmarks.implementations import steady_step_s

# The seed write-up's uniform +-1/sqrt(fan_in) (training/demo.py's "seed" init).
SEED_INIT = {
    "class_name": "VarianceScaling",
    "config": {"scale": 1.0 / 3.0, "mode": "fan_in", "distribution": "uniform"},
}
STYLES = ("zoo", "per_layer", "two_dense")


def build_model(style: str, depth: int, width: int = 50, transform_bias: float = -2.0):
    """784 -> width tanh, `depth` coupled highway blocks of `width`, softmax 10."""
    if style in ("zoo", "per_layer"):
        import zoo

        # zoo's FC nets count the stem layer in `depth` (spec §8): N blocks = depth N + 1.
        return zoo.load(
            "highway_fc10_mnist", depth=depth + 1, width=width, transform_bias=transform_bias,
            kernel_initializer=SEED_INIT, stacked=style == "zoo",
        )
    if style != "two_dense":
        raise ValueError(f"style must be one of {STYLES}. Received: style={style!r}")
    init = keras.initializers.get(SEED_INIT)
    inputs = keras.Input((28, 28, 1))
    x = keras.layers.Rescaling(1 / 255)(keras.layers.Flatten()(inputs))
    x = keras.layers.Dense(width, "tanh", kernel_initializer=init)(x)
    for _ in range(depth):
        h = keras.layers.Dense(width, "tanh", kernel_initializer=init)(x)
        t = keras.layers.Dense(width, "sigmoid", kernel_initializer=init,
                               bias_initializer=keras.initializers.Constant(transform_bias))(x)
        x = keras.layers.Add()([keras.layers.Multiply()([h, t]),
                                keras.layers.Multiply()([x, 1.0 - t])])
    outputs = keras.layers.Dense(10, "softmax", kernel_initializer=init)(x)
    return keras.Model(inputs, outputs)


def train(data: dict, depth: int, width: int = 50, epochs: int = 12, batch_size: int = 128,
          learning_rate: float = 5e-3, clipnorm: float = 5.0, transform_bias: float = -2.0,
          seed: int = 0, max_steps: int | None = None, style: str = "zoo",
          steps_per_execution: int = 1, jit_compile: bool | str = "auto") -> dict:
    # The zoo nets take raw 0-255 pixels, like the datasets they were made for.
    x_train = (data["x_train"] * 255.0).reshape(-1, 28, 28, 1)
    x_test = (data["x_test"] * 255.0).reshape(-1, 28, 28, 1)
    steps_per_epoch = math.ceil(len(x_train) / batch_size)
    if max_steps is not None:  # fit trains whole epochs: rounded up to one
        epochs = min(epochs, math.ceil(max_steps / steps_per_epoch))
    keras.utils.set_random_seed(seed)
    # jit_compile "auto" is Keras's default and what training.train uses: no XLA for
    # TensorFlow on a CPU, the whole train step compiled on JAX (False there would run it
    # op by op), eager on PyTorch.

    start = time.perf_counter()
    model = build_model(style, depth, width, transform_bias)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, global_clipnorm=clipnorm),
        loss="sparse_categorical_crossentropy",
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )
    build_s = time.perf_counter() - start

    timer = _Timer()
    history = model.fit(x_train, data["y_train"], batch_size=batch_size, epochs=epochs,
                        shuffle=True, verbose=0, callbacks=[timer])
    probabilities = model.predict(x_test, batch_size=1000, verbose=0)
    return {
        "build_s": build_s,
        "first_step_s": timer.first_step_s,
        "epoch_s": timer.epoch_s,
        "step_s": [t / steps_per_execution for t in timer.step_s],  # per execution -> per step
        "steps": epochs * steps_per_epoch,
        "steps_per_epoch": steps_per_epoch,
        "total_s": build_s + sum(timer.epoch_s),
        "final_loss": float(history.history["loss"][-1]),
        "test_accuracy": float((probabilities.argmax(-1) == data["y_test"]).mean()),
        "params": model.count_params(),
        "backend": keras.backend.backend(),
    }


class _Timer(keras.callbacks.Callback):
    """Epoch wall times, the steady step time inside each epoch (`steady_step_s`) and the time
    to the end of the first step (the first execution when `steps_per_execution` > 1), from the
    start of the training loop."""

    def on_train_begin(self, logs=None):
        self.loop_start = time.perf_counter()
        self.first_step_s = None
        self.epoch_s, self.step_s = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start = self.loop_start if epoch == 0 else time.perf_counter()
        self.batch_ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.batch_ends.append(time.perf_counter())
        if self.first_step_s is None:
            self.first_step_s = self.batch_ends[0] - self.loop_start

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_s.append(time.perf_counter() - self.epoch_start)
        self.step_s.append(steady_step_s(self.batch_ends, self.epoch_s[-1]))
