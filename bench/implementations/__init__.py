"""The headline experiment (784 -> 50 tanh, N coupled highway blocks of width 50 with b_T = -2,
softmax 10; Adam 5e-3, global-norm clip 5, batch 128) as each alternative implements it.

Every implementation has `train(data, depth, width, epochs, batch_size, learning_rate,
clipnorm, transform_bias, seed, max_steps) -> dict` with the same keys (see numpy_highway),
its per-epoch steady step time from `steady_step_s`.
"""

from __future__ import annotations

import importlib

# name -> (module, extra keyword arguments of its train, what it is)
IMPLEMENTATIONS = {
    "numpy": ("bench.implementations.numpy_highway", {},
              "NumPy, hand-written forward and backward"),
    "pytorch": ("bench.implementations.torch_highway", {},
                "PyTorch eager, two nn.Linear per block"),
    "keras_two_dense": ("bench.implementations.keras_highway", {"style": "two_dense"},
                        "Keras, two Dense layers per block"),
    "keras_per_layer": ("bench.implementations.keras_highway", {"style": "per_layer"},
                        "Keras, one fused kernel per block (HighwayDense)"),
    "highway_zoo": ("bench.implementations.keras_highway", {"style": "zoo"},
                    "highway-zoo (HighwayStack, stacked=True)"),
}
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
    """Whether the implementation's framework is installed (PyTorch is an optional extra)."""
    if name == "pytorch":
        return importlib.util.find_spec("torch") is not None
    return name in IMPLEMENTATIONS


def train(name: str, data: dict, **kwargs) -> dict:
    module, extra, _ = IMPLEMENTATIONS[name]
    return importlib.import_module(module).train(data, **kwargs, **extra)
