"""Layer lesioning (NIPS 2015 §4.2, Fig. 4): close one layer's gates, measure the error.

"Closing the gates" of a highway layer means T := 0 (and C := 1 for the variants whose carry
gate is not 1 - T), so the layer copies its input: y = x exactly, bit for bit, in every
variant (`HighwayBase.lesioned`; for a "residual" block it removes the block, for "c_only",
whose T is the constant 1, it still means y = x). For "gru_gate" it is z := 0 for GTrXL's
update gate, which the analyses read as T: out = (1 - z)·x + z·g is then x, so Fig. 4 means
there what it means for a coupled layer (what the net loses when the layer only carries). A
batch-normalised block (`layers.BNHighwayBlock`) then carries its input through its shortcut
only: y = S(x) (and its output activation, if any), x itself where the shortcut is the
identity.

The flag is read when a layer's `call` runs or is traced: eager calls see it at once, while
Keras's cached `predict`/`evaluate` functions keep the graph traced before. `lesioned(...,
model=model)` drops those caches on the way in and out, and `error_rate` runs the model
eagerly, so nothing is traced per lesion and the unlesioned graph is the same as ever.

A layer of a `HighwayStack` (a `StackedLayer` of `highway_layers`) is lesioned through the
stack's `lesioned_layers`, which its loop reads in the same way (it copies its input, bit for
bit, too); the stack's set is restored on the way out. A stack's graph takes the same short
time to trace at any depth, so `lesion_errors` runs a net whose highway layers are all stacked
through a freshly traced function per lesion (about 3x faster than eager at depth 1000 on
2,000 examples here), and per-layer nets eagerly as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import keras
import numpy as np

from zoo.analysis.gates import StackedLayer, highway_layers


def _forget_traced_functions(model: keras.Model) -> None:
    for attr in ("predict_function", "test_function"):
        if hasattr(model, attr):
            setattr(model, attr, None)


@contextlib.contextmanager
def lesioned(*layers, model: keras.Model | None = None) -> Iterator[None]:
    """Closes the transform gates of `layers` (they return their inputs) inside the block.

    Args:
        *layers: highway layers (`HighwayDense`, `HighwayConv2D`, `BNHighwayBlock`, or a
            `StackedLayer`: one layer of a `HighwayStack`, as `highway_layers` and
            `highway_layer` give them).
        model: if given, its traced `predict`/`evaluate` functions are dropped on entry and
            exit, so `model.predict(...)` sees the lesion (and, after it, the intact layers).

    Example:
        >>> with lesioned(highway_layer(model, "highway_3"), model=model):
        ...     p = model.predict(x)   # as if highway_3 were not there (stacked or not)
    """
    for layer in layers:
        if not hasattr(layer, "lesioned"):
            hint = ""
            if hasattr(layer, "lesioned_layers"):
                hint = (" Lesion its layers one by one: zoo.analysis.highway_layer(model, "
                        "'highway_3'), or the entries of zoo.analysis.highway_layers(model).")
            raise TypeError(
                f"Only highway layers can be lesioned; {layer.name!r} is a "
                f"{type(layer).__name__}.{hint}"
            )
    before = [layer.lesioned for layer in layers]
    stacks = {id(layer.stack): layer.stack for layer in layers if isinstance(layer, StackedLayer)}
    stacks_before = {key: set(stack.lesioned_layers) for key, stack in stacks.items()}
    if model is not None:
        _forget_traced_functions(model)
    try:
        for layer in layers:
            layer.lesioned = True
        yield
    finally:
        for layer, state in zip(layers, before):
            if not isinstance(layer, StackedLayer):
                layer.lesioned = state
        for key, stack in stacks.items():
            stack.lesioned_layers = stacks_before[key]
        if model is not None:
            _forget_traced_functions(model)


def _fresh_trace(model: keras.Model):
    """`model(x, training=False)` traced afresh (so it sees the lesions set now), one trace
    for every batch size."""
    import tensorflow as tf

    spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], tf.float32)
    return tf.function(lambda x: model(x, training=False), input_signature=[spec])


def predict_classes(model: keras.Model, images: np.ndarray, batch_size: int = 1000,
                    traced: bool = False) -> np.ndarray:
    """argmax of `model(images)` batch by batch, run eagerly (so lesions always apply) or,
    with `traced`, through a function traced afresh for this call (the same; only for a
    single-input model on the TensorFlow backend)."""
    run = _fresh_trace(model) if traced else (lambda x: model(x, training=False))
    out = [
        np.argmax(keras.ops.convert_to_numpy(
            run(np.asarray(images[i : i + batch_size], np.float32))), axis=-1)
        for i in range(0, len(images), batch_size)
    ]
    return np.concatenate(out)


def error_rate(model: keras.Model, images: np.ndarray, labels: np.ndarray,
               batch_size: int = 1000, traced: bool = False) -> float:
    """The fraction of `images` that `model` misclassifies (`traced`: see `predict_classes`)."""
    return float(np.mean(predict_classes(model, images, batch_size, traced)
                         != np.asarray(labels)))


def _trace_per_lesion(model: keras.Model, layers: list) -> bool:
    """Whether to trace afresh per lesion: every highway layer stacked (a stack's graph
    traces in about a second at any depth; a per-layer net's grows with depth), one input,
    the TensorFlow backend."""
    return (bool(layers) and all(isinstance(layer, StackedLayer) for layer in layers)
            and len(model.inputs) == 1 and keras.backend.backend() == "tensorflow")


def lesion_errors(
    model: keras.Model, images: np.ndarray, labels: np.ndarray, batch_size: int = 1000
) -> dict:
    """The error with no lesion and with each highway layer lesioned in turn.

    The layers of a `HighwayStack` are lesioned one at a time through its `lesioned_layers`
    and named as in the per-layer net (`highway_layers`).

    Returns:
        `{"baseline": error, "layers": [names], "errors": [error with that layer lesioned]}`,
        errors as fractions.
    """
    layers = highway_layers(model)
    traced = _trace_per_lesion(model, layers)
    baseline = error_rate(model, images, labels, batch_size, traced)
    errors = []
    for layer in layers:
        with lesioned(layer, model=model):
            errors.append(error_rate(model, images, labels, batch_size, traced))
    return {"baseline": baseline, "layers": [layer.name for layer in layers], "errors": errors}


def effective_depth(baseline: float, errors: list[float], threshold: float = 0.01) -> int:
    """How many layers matter: those whose lesion raises the error by more than `threshold`
    (a fraction: 0.01 is one percentage point)."""
    return int(sum(e - baseline > threshold for e in errors))


# Far below any W x: |x| < 1 (tanh), |W| ~ 0.1-0.3 and 525 to 1,100 inputs in Kim's nets.
SILENT_H_BIAS = -1e4


@contextlib.contextmanager
def h_silenced(model, bias: float = SILENT_H_BIAS) -> Iterator[None]:
    """Silences H in every highway layer of a character-aware language model's embedder
    inside the block, and restores the weights on the way out: b_H := `bias` (-1e4), so that
    H = ReLU(W x + b_H) is 0 for every word and each layer's output is its carry path alone:
    C·x (the gated variants), x (Residual) or 0 (Plain). The lesion of
    docs/results/token_gates.md ("does the perplexity need H?"), as `lesioned` is Fig. 4's:
    where H gives a few per cent of the output, silencing it should cost little.

    Args:
        model: a character-aware language model (or its `CharCNNEmbedder`); its highway
            layers' H has a ReLU.
        bias: the value b_H is set to.

    Example:
        >>> with h_silenced(model):
        ...     silenced = stored_test_perplexity(settings, model)
    """
    from layers import CharCNNEmbedder

    embedders = [model] if isinstance(model, CharCNNEmbedder) else [
        layer for layer in getattr(model, "layers", []) if isinstance(layer, CharCNNEmbedder)]
    if not embedders:
        raise ValueError(f"{getattr(model, 'name', model)!r} has no CharCNNEmbedder: H is "
                         "silenced in a character-aware language model's highway layers "
                         "(zoo.list_models('lstm_char_*')).")
    highways = embedders[0].highways
    saved = [np.asarray(layer.bias).copy() for layer in highways]
    try:
        for layer, before in zip(highways, saved):
            silenced = before.copy()
            silenced[..., layer.bias_columns("h")] = bias
            layer.bias.assign(silenced)
        yield
    finally:
        for layer, before in zip(highways, saved):
            layer.bias.assign(before)
