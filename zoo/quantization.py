"""A zoo network in int8: Keras's `model.quantize("int8")` on a shipped (or any) model.

    >>> import zoo
    >>> model = zoo.quantize("highway_fc10_mnist", weights="default")  # loaded, then int8
    >>> model = zoo.quantize(zoo.load("highway_conv16_mnist", weights="default"))  # in place
    >>> model.save("fc10-int8.keras"); keras.saving.load_model("fc10-int8.keras")

As keras-hub does: the float weights are loaded first, then quantized in memory (post-training,
no data needed), so the shipped `.weights.h5` files, their sha256 and the parameter counts of
the float models stay as they are. Every layer with an int8 mode is quantized: the highway
layers (`HighwayDense`, `HighwayConv2D`, `HighwayStack`: `layers._highway.Int8Kernel`) and
Keras's `Dense`; the others (Keras's `Conv2D`, batch norms, ...) have none in Keras 3.15 and
stay float, as do the layers inside a layer (the character CNN's highways and embedding: the
saved config names the model's own layers only). `quantized_layers(model)` lists what was
done. A full-integer TFLite file, which also needs a representative sample to calibrate its
activations, is `zoo.export(..., format="tflite", quantize="int8", representative=images)`
(zoo/serving/tflite.py).

A quantized zoo model saves as a `.keras` file (`model.save`) whose config records its
quantized layers; `keras.saving.load_model` rebuilds them in int8 before loading the weights.
`zoo.save` (presets of float `.weights.h5`) refuses it.
"""

from __future__ import annotations

import os
from typing import Any

from zoo.model import quantized_layers

MODES = ("int8",)


def _quantizable(model):
    """`model.quantize`'s filter: the model's own layers that have an int8 mode."""
    import keras

    # Keras's own model.quantize tries every layer and warns for each one without an int8
    # mode (the input, reshapes, activations): ask only those that have one. It also goes
    # into a layer's own layers (the CharCNNEmbedder's highways), which the saved config
    # could not name (`model.get_layer` sees the model's own layers only): those stay float.
    own = {id(layer) for layer in model.layers}
    return lambda layer: (id(layer) in own
                          and type(layer).quantize is not keras.layers.Layer.quantize)


def quantize(model_or_name: Any, mode: str = "int8", *, weights: str | os.PathLike | None = None,
             **overrides: Any):
    """The model with its weights in `mode` ("int8"); a model object is quantized in place.

    Args:
        model_or_name: a built Keras model (`zoo.load(...)`), a registered name (with
            `weights=`), or a preset directory.
        mode: "int8" (Keras's int8: int8 kernels with one scale per output channel, the
            dense layers' inputs quantized per row at run time).
        weights: for a name: "default" (the shipped weights), a run directory or a
            `.weights.h5` file, as for `zoo.load`. Quantizing random weights is refused.
        **overrides: for a name: architecture overrides, as for `zoo.load`.

    Returns:
        The quantized model (`quantized_layers(model)` says which layers are int8).
    """
    import keras

    from zoo import loading

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}. Received: mode={mode!r}")
    if isinstance(model_or_name, (str, os.PathLike)):
        if weights is None and not loading.is_preset(model_or_name):
            raise ValueError(
                f"Quantizing {str(model_or_name)!r} with no weights would quantize an untrained "
                "network: pass weights='default' (the shipped weights), a run directory or a "
                ".weights.h5 file.")
        model = loading.load(model_or_name, **({} if weights is None else {"weights": weights}),
                             **overrides)
    else:
        if weights is not None or overrides:
            raise ValueError("weights= and overrides apply to an architecture name only; a "
                             "model object is quantized with the weights it has.")
        if not isinstance(model_or_name, keras.Model):
            raise ValueError(
                "model_or_name must be a keras.Model, a registered architecture name or a "
                f"preset directory. Received: {type(model_or_name).__name__}")
        model = model_or_name
    done = sorted(set(quantized_layers(model).values()))
    if done:
        raise ValueError(f"{model.name} is quantized already ({', '.join(done)}): quantize the "
                         "float model once.")
    model.quantize(mode, filters=_quantizable(model))
    return model
