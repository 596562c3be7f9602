"""Layer lesioning (NIPS 2015 §4.2, Fig. 4): close one layer's gates, measure the error.

"Closing the gates" of a highway layer means T := 0 (and C := 1 for the variants whose carry
gate is not 1 - T), so the layer copies its input: y = x exactly, bit for bit, in every
variant (`HighwayBase.lesioned`; for a "residual" block it removes the block, for "c_only",
whose T is the constant 1, it still means y = x).

The flag is read when a layer's `call` runs or is traced: eager calls see it at once, while
Keras's cached `predict`/`evaluate` functions keep the graph traced before. `lesioned(...,
model=model)` drops those caches on the way in and out, and `error_rate` runs the model
eagerly, so nothing is traced per lesion and the unlesioned graph is the same as ever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import numpy as np

from zoo.analysis.gates import highway_layers


def _forget_traced_functions(model: keras.Model) -> None:
    for attr in ("predict_function", "test_function"):
        if hasattr(model, attr):
            setattr(model, attr, None)


@contextlib.contextmanager
def lesioned(*layers, model: keras.Model | None = None) -> Iterator[None]:
    """Closes the transform gates of `layers` (they return their inputs) inside the block.

    Args:
        *layers: highway layers (`HighwayDense`, `HighwayConv2D`).
        model: if given, its traced `predict`/`evaluate` functions are dropped on entry and
            exit, so `model.predict(...)` sees the lesion (and, after it, the intact layers).

    Example:
        >>> with lesioned(model.get_layer("highway_3"), model=model):
        ...     p = model.predict(x)   # as if highway_3 were not there
    """
    for layer in layers:
        if not hasattr(layer, "lesioned"):
            raise TypeError(
                f"Only highway layers can be lesioned; {layer.name!r} is a "
                f"{type(layer).__name__}."
            )
    before = [layer.lesioned for layer in layers]
    if model is not None:
        _forget_traced_functions(model)
    try:
        for layer in layers:
            layer.lesioned = True
        yield
    finally:
        for layer, state in zip(layers, before):
            layer.lesioned = state
        if model is not None:
            _forget_traced_functions(model)


def predict_classes(model: keras.Model, images: np.ndarray, batch_size: int = 1000) -> np.ndarray:
    """argmax of `model(images)`, run eagerly batch by batch (so lesions always apply)."""
    out = [
        np.argmax(keras.ops.convert_to_numpy(
            model(np.asarray(images[i : i + batch_size], np.float32), training=False)), axis=-1)
        for i in range(0, len(images), batch_size)
    ]
    return np.concatenate(out)


def error_rate(model: keras.Model, images: np.ndarray, labels: np.ndarray,
               batch_size: int = 1000) -> float:
    """The fraction of `images` that `model` misclassifies."""
    return float(np.mean(predict_classes(model, images, batch_size) != np.asarray(labels)))


def lesion_errors(
    model: keras.Model, images: np.ndarray, labels: np.ndarray, batch_size: int = 1000
) -> dict:
    """The error with no lesion and with each highway layer lesioned in turn.

    Returns:
        `{"baseline": error, "layers": [names], "errors": [error with that layer lesioned]}`,
        errors as fractions.
    """
    layers = highway_layers(model)
    baseline = error_rate(model, images, labels, batch_size)
    errors = []
    for layer in layers:
        with lesioned(layer, model=model):
            errors.append(error_rate(model, images, labels, batch_size))
    return {"baseline": baseline, "layers": [layer.name for layer in layers], "errors": errors}


def effective_depth(baseline: float, errors: list[float], threshold: float = 0.01) -> int:
    """How many layers matter: those whose lesion raises the error by more than `threshold`
    (a fraction: 0.01 is one percentage point)."""
    return int(sum(e - baseline > threshold for e in errors))
