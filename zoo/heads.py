"""The pieces every zoo network shares: the raw-pixel input and the classifier."""

from __future__ import annotations

# Keras and the layers are imported inside the functions that build layers, not here: the
# registry is read by the command line (`highway-zoo list`, `describe`) without Keras, and
# `feature_info` / `check_input_shape` / `TOP_LAYERS` need none.

# Preprocessing lives inside the model, so a model takes raw pixels 0-255.
PREPROCESSING = {
    "scale": "pixels / 255",
    "caffe_scale": "pixels x 0.00390625 (= 1/256, as the Caffe data layer)",
    "gcn": "per-image global contrast normalisation",
    "imagenet_caffe": "RGB -> BGR minus the ImageNet channel means (keras.applications' "
    "'caffe' mode, as ResNet50's preprocess_input)",
}


def image_input(input_shape, preprocessing: str, gcn_scale: float = 1.0):
    """An `Input` of raw pixel values and the preprocessed tensor (`gcn_scale`: the standard
    deviation "gcn" gives each image)."""
    import keras

    from layers import CaffeImageNetPreprocessing, GlobalContrastNormalization

    inputs = keras.Input(shape=tuple(input_shape), name="pixels")
    if preprocessing == "scale":
        x = keras.layers.Rescaling(1.0 / 255.0, name="rescale")(inputs)
    elif preprocessing == "caffe_scale":
        x = keras.layers.Rescaling(1.0 / 256.0, name="rescale")(inputs)
    elif preprocessing == "gcn":
        x = GlobalContrastNormalization(scale=gcn_scale, name="gcn")(inputs)
    elif preprocessing == "imagenet_caffe":
        x = CaffeImageNetPreprocessing(name="preprocessing")(inputs)
    else:
        raise ValueError(
            f"Unknown preprocessing {preprocessing!r}; expected one of "
            f"{sorted(PREPROCESSING)}."
        )
    return inputs, x


def classifier(x, classes: int, classifier_activation, kernel_initializer="glorot_uniform"):
    """Logits (layer "logits") then the output activation (layer "predictions").

    As in keras.applications, `classifier_activation=None` returns the logits. Both layers
    compute in float32 under any dtype policy (the Keras mixed-precision guide's advice): a
    float16 or bfloat16 softmax has rows summing to 1 only within about 1e-2.
    """
    import keras

    if not isinstance(classes, int) or classes < 2:
        raise ValueError(f"classes must be an integer >= 2. Received: classes={classes!r}")
    logits = keras.layers.Dense(
        classes, kernel_initializer=kernel_initializer, name="logits", dtype="float32"
    )(x)
    if classifier_activation is None:
        return logits
    return keras.layers.Activation(
        classifier_activation, name="predictions", dtype="float32"
    )(logits)


# The weighted layers that `include_top=False` removes (the rest of a top has no weights):
# a weights source may lack them or differ in them, and the model then starts them afresh.
TOP_LAYERS = ("head_dense", "logits")
_POOLING_LAYERS = {"avg": ("GlobalAveragePooling2D", "avg_pool"),
                   "max": ("GlobalMaxPooling2D", "max_pool")}


def features(x, pooling):
    """The body's output for `include_top=False`, pooled over positions as in
    keras.applications (`"avg"` -> layer "avg_pool", `"max"` -> "max_pool") or not."""
    if pooling is None:
        return x
    if len(x.shape) != 4:
        raise ValueError(
            f"pooling={pooling!r} pools a feature map over its positions, but this network's "
            f"features are a vector of shape {tuple(x.shape[1:])}: leave pooling=None."
        )
    import keras

    cls, name = _POOLING_LAYERS[pooling]
    return getattr(keras.layers, cls)(name=name)(x)


def feature_info(layer: str, shape, poolable: bool) -> dict:
    """`describe(name)["features"]`: what `include_top=False` returns."""
    shape = [None if d is None else int(d) for d in shape]
    kind = "feature map (height, width, channels)" if poolable else "vector"
    return {
        "layer": layer,
        "shape": shape,
        "pooled_shape": [shape[-1]] if poolable else None,
        "description": f"include_top=False returns the output of layer {layer!r}, a {kind} "
        f"of shape {tuple(shape)} per example"
        + (f"; pooling='avg' or 'max' reduces it to ({shape[-1]},)." if poolable else "."),
    }


def stage_info(layer: str, shape, stride: int | None = None, name: str | None = None) -> dict:
    """One entry of `describe(name)["feature_stages"]`: the output of `layer`, of `shape`
    per example, at `stride` (the input's height and width over the stage's).

    A conv net's stage is named after keras-hub's pyramid levels, `"P{log2(stride)}"`
    (`"P3"`: 1/8 of the input's height and width), so code written for a keras-hub
    backbone's `pyramid_outputs` reads these; an FC net's (no stride) after its layer.
    """
    shape = [None if d is None else int(d) for d in shape]
    if name is None:
        name = layer if stride is None else f"P{stride.bit_length() - 1}"
    return {"name": name, "layer": layer, "stride": stride, "shape": shape}


def check_input_shape(input_shape, min_size: int):
    """`input_shape` as a tuple (height, width, channels), checked; None sizes allowed."""
    shape = tuple(input_shape) if isinstance(input_shape, (list, tuple)) else None
    ok = shape is not None and len(shape) == 3 and all(
        d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= min_size)
        for d in shape[:2]
    ) and isinstance(shape[2], int) and shape[2] >= 1
    if not ok:
        raise ValueError(
            "input_shape must be (height, width, channels) with height and width integers "
            f">= {min_size} (or None) and channels a positive integer. "
            f"Received: input_shape={input_shape!r}"
        )
    return shape
