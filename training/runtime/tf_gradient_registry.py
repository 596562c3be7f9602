"""Frees the graphs that TensorFlow's gradient registry keeps (tensorflow/tensorflow#97697).

In graph mode every use of `tf.custom_gradient` registers its gradient function in
TensorFlow's global gradient registry under a new name ("CustomGradient-<uid>") and never
removes it; in TensorFlow 2.21 that function's closure holds the forward pass's tensors, and
through them the whole traced graph. Keras's TensorFlow trainer uses it in every train step it
traces (the default strategy's `all_reduce`), so each model trained in a process leaves its
train-step graphs behind, `keras.backend.clear_session()` notwithstanding: measured here
about 7 MB per 10-layer FC net and 25-40 MB per 50-100-layer one, which is what made a
KerasTuner search of hundreds of trials grow to gigabytes.

`released_custom_gradients()` around work whose models are discarded afterwards (a tuner's
trial, a study's in-process run) drops the entries registered inside it. An entry is read only
while TensorFlow differentiates the graph that registered it, which for Keras's train step is
when the step is traced, inside the block; a model retraced later registers new ones. So
dropping them changes no result. Without TensorFlow imported (JAX, PyTorch) it does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from training.runtime.private_api import custom_gradient_registry as _registry

_PREFIX = "CustomGradient-"


@contextlib.contextmanager
def released_custom_gradients() -> Iterator[None]:
    """Drops the custom gradients registered inside the block when it ends."""
    registry = _registry()
    before = set(registry) if registry is not None else set()
    try:
        yield
    finally:
        registry = _registry()  # TensorFlow may have been imported inside the block
        if registry is not None:
            for name in [n for n in registry if n.startswith(_PREFIX) and n not in before]:
                del registry[name]
