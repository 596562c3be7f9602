"""The headline experiment (784 -> 50 tanh, N coupled highway blocks of width 50 with b_T = -2,
softmax 10; Adam 5e-3, global-norm clip 5, batch 128) as each alternative implements it.

Every implementation has `train(data, depth, width, epochs, batch_size, learning_rate,
clipnorm, transform_bias, seed, max_steps) -> dict` with the same keys (see numpy_highway),
its per-epoch steady step time from `steady_step_s`. The Keras implementations run on the
Keras backend their entry names (`framework`); highway-zoo has a row on each.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple


class Implementation(NamedTuple):
    module: str
    options: dict  # extra keyword arguments of its train
    description: str
    # numpy, torch, or the Keras backend it runs on (tensorflow, jax, torch)
    framework: str
    # JAX's persistent compilation cache, warmed by a run before the measured ones
    compilation_cache: bool = False

    @property
    def keras_backend(self) -> str:
        """KERAS_BACKEND for its process: its framework where Keras has that backend."""
        return self.framework if self.framework in ("tensorflow", "jax", "torch") else (
            "tensorflow")


_KERAS = "benchmarks.implementations.keras_highway"
IMPLEMENTATIONS = {
    "numpy": Implementation("benchmarks.implementations.numpy_highway", {},
                            "NumPy, hand-written forward and backward", "numpy"),
    "pytorch": Implementation("benchmarks.implementations.torch_highway", {},
                              "PyTorch eager, two nn.Linear per block", "torch"),
    "keras_two_dense": Implementation(_KERAS, {"style": "two_dense"},
                                      "Keras, two Dense layers per block", "tensorflow"),
    "keras_per_layer": Implementation(_KERAS, {"style": "per_layer"},
                                      "Keras, one fused kernel per block (HighwayDense)",
                                      "tensorflow"),
    "highway_zoo": Implementation(_KERAS, {"style": "zoo"},
                                  "highway-zoo (HighwayStack, stacked=True), TensorFlow",
                                  "tensorflow"),
    "highway_zoo_jax": Implementation(_KERAS, {"style": "zoo"},
                                      "highway-zoo on JAX", "jax"),
    "highway_zoo_jax_cached": Implementation(
        _KERAS, {"style": "zoo"}, "highway-zoo on JAX, persistent compilation cache warm",
        "jax", compilation_cache=True),
    "highway_zoo_torch": Implementation(_KERAS, {"style": "zoo"},
                                        "highway-zoo on PyTorch", "torch"),
}
# highway-zoo's own rows, one per backend: each is compared with every other implementation.
OURS = ("highway_zoo", "highway_zoo_jax", "highway_zoo_jax_cached", "highway_zoo_torch")
# Implementations that build one graph node per layer: tracing grows with depth.
PER_LAYER_GRAPHS = ("keras_two_dense", "keras_per_layer")


def steady_step_s(batch_ends: list[float], epoch_s: float) -> float:
    """Mean time per step from the end of an epoch's first step to the end of its last: the
    rate once running, without the epoch's set-up (shuffling, a data pipeline's first batch,
    callbacks), which total times still include. The whole epoch over its steps when it has
    fewer than two."""
    if len(batch_ends) < 2:
        return epoch_s / max(len(batch_ends), 1)
    return (batch_ends[-1] - batch_ends[0]) / (len(batch_ends) - 1)


def available(name: str) -> bool:
    """Whether the implementation's framework is installed (JAX and PyTorch: extras)."""
    return importlib.util.find_spec(IMPLEMENTATIONS[name].framework) is not None


def train(name: str, data: dict, **kwargs) -> dict:
    implementation = IMPLEMENTATIONS[name]
    return importlib.import_module(implementation.module).train(
        data, **kwargs, **implementation.options)
