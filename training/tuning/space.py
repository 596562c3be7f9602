"""The NIPS 2015 paper's search space, as a `keras_tuner.HyperModel` for every zoo family.

The paper chose its networks by random search (100 runs per network type) over the initial
learning rate, momentum, learning-rate decay, activation (ReLU or tanh) and, for highway
nets, the initial transform-gate bias b_T in [-10, -1], training with SGD and momentum.
`SearchSpace` holds those ranges (`training.tuning.hypermodel.ZooHyperModel` samples them);
it imports neither Keras nor KerasTuner, so the command line can show its defaults at once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

ACTIVATIONS = ("relu", "tanh")


def _range(name: str, value: Sequence[float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be two numbers (lower, upper). Received: {value!r}"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} bounds must be finite. Received: {value!r}")
    if not low < high:
        raise ValueError(
            f"{name}: the lower bound must be below the upper bound. Received: "
            f"({low:g}, {high:g}); swap them, e.g. ({min(low, high):g}, {max(low, high):g})."
        )
    return low, high


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The paper's search space; narrow or widen any range.

    Args:
        learning_rate: initial learning rate range, sampled log-uniformly (> 0).
        momentum: SGD momentum range, uniform, within [0, 1).
        lr_decay: learning-rate decay factor per epoch (ExponentialDecay's rate), uniform,
            within (0, 1].
        activations: the activations to choose from ("relu", "tanh").
        transform_bias: the highway nets' initial transform-gate bias range, uniform
            (KerasTuner's log sampling rejects negative values); unused by plain nets.
    """

    learning_rate: tuple[float, float] = (1e-4, 1e-1)
    momentum: tuple[float, float] = (0.0, 0.99)
    lr_decay: tuple[float, float] = (0.8, 1.0)
    activations: tuple[str, ...] = ACTIVATIONS
    transform_bias: tuple[float, float] = (-10.0, -1.0)

    def __post_init__(self):
        lr = _range("learning_rate", self.learning_rate)
        momentum = _range("momentum", self.momentum)
        decay = _range("lr_decay", self.lr_decay)
        bias = _range("transform_bias", self.transform_bias)
        if lr[0] <= 0:
            raise ValueError(f"learning_rate bounds must be > 0 (log sampling). Received: {lr}")
        if momentum[0] < 0 or momentum[1] >= 1:
            raise ValueError(f"momentum must lie within [0, 1). Received: {momentum}")
        if decay[0] <= 0 or decay[1] > 1:
            raise ValueError(f"lr_decay must lie within (0, 1]. Received: {decay}")
        activations = tuple(self.activations)
        bad = [a for a in activations if a not in ACTIVATIONS]
        if not activations or bad or len(set(activations)) != len(activations):
            raise ValueError(
                f"activations must be distinct names from {', '.join(ACTIVATIONS)}. "
                f"Received: {list(activations)!r}"
            )
        for field, value in (("learning_rate", lr), ("momentum", momentum),
                             ("lr_decay", decay), ("transform_bias", bias),
                             ("activations", activations)):
            object.__setattr__(self, field, value)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}
