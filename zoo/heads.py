"""The pieces every zoo network shares: the raw-pixel input and the classifier."""

from __future__ import annotations

import keras

from layers import GlobalContrastNormalization

# Preprocessing lives inside the model, so a model takes raw pixels 0-255.
PREPROCESSING = {
    "scale": "pixels / 255",
    "caffe_scale": "pixels x 0.00390625 (= 1/256, as the Caffe data layer)",
    "gcn": "per-image global contrast normalisation",
}


def image_input(input_shape, preprocessing: str):
    """An `Input` of raw pixel values and the preprocessed tensor."""
    inputs = keras.Input(shape=tuple(input_shape), name="pixels")
    if preprocessing == "scale":
        x = keras.layers.Rescaling(1.0 / 255.0, name="rescale")(inputs)
    elif preprocessing == "caffe_scale":
        x = keras.layers.Rescaling(1.0 / 256.0, name="rescale")(inputs)
    elif preprocessing == "gcn":
        x = GlobalContrastNormalization(name="gcn")(inputs)
    else:
        raise ValueError(
            f"Unknown preprocessing {preprocessing!r}; expected one of "
            f"{sorted(PREPROCESSING)}."
        )
    return inputs, x


def classifier(x, classes: int, classifier_activation, kernel_initializer="glorot_uniform"):
    """Logits (layer "logits") then the output activation (layer "predictions").

    As in keras.applications, `classifier_activation=None` returns the logits.
    """
    if not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2. Received: classes={classes!r}")
    logits = keras.layers.Dense(
        classes, kernel_initializer=kernel_initializer, name="logits"
    )(x)
    if classifier_activation is None:
        return logits
    return keras.layers.Activation(classifier_activation, name="predictions")(logits)
