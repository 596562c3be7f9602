"""Fully connected nets: the optimisation study (NIPS 2015 §3.1, Fig. 1) and the
50-layer analysis nets (§4, Figs. 2-4).

Layout (spec §8): a plain Dense layer to the working width, then ``depth - 1``
highway layers (or plain layers) of that width, then the softmax classifier,
which the paper does not count: "depth 10" is 1 plain + 9 highway layers.
"""

from __future__ import annotations

from zoo.heads import classifier, feature_info, features, image_input, stage_info
from zoo.registry import register_family

# Keras and the layers are imported inside the builders, not here: the registry (these
# builders and the presets beside them) is read by the command line (`highway-zoo list`,
# `describe`) without Keras, which takes seconds to import.

FC_OVERRIDES = (
    "depth",
    "width",
    "activation",
    "kernel_initializer",
    "classes",
    "classifier_activation",
)


def _fc_net(input_shape, preprocessing, depth, width, activation, kernel_initializer,
            classes, classifier_activation, include_top, pooling, hidden_layer=None,
            hidden_stack=None):
    """Flatten, the plain stem layer, `depth - 1` hidden layers, the classifier.

    The hidden layers are `hidden_layer(i)` for i = 1 .. depth - 1, or the single layer
    `hidden_stack` that holds all of them. Without the top, the last hidden layer's output.
    """
    if not isinstance(depth, int) or depth < 2:
        raise ValueError(
            "depth counts the first plain layer plus the hidden layers and must be "
            f"an integer >= 2. Received: depth={depth!r}"
        )
    import keras

    inputs, x = image_input(input_shape, preprocessing)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(
        width, activation=activation, kernel_initializer=kernel_initializer, name="stem_dense"
    )(x)
    if hidden_stack is not None:
        x = hidden_stack(x)
    else:
        for i in range(1, depth):
            x = hidden_layer(i)(x)
    if not include_top:
        return inputs, features(x, pooling)
    return inputs, classifier(x, classes, classifier_activation)


def _highway_features(args):
    """The last hidden layer's output: a vector of `width` units."""
    last = "highway_stack" if args.get("stacked") else f"highway_{args['depth'] - 1}"
    return feature_info(last, (args["width"],), poolable=False)


def _plain_features(args):
    return feature_info(f"plain_{args['depth'] - 1}", (args["width"],), poolable=False)


def _hidden_stages(args, prefix: str):
    """An FC net's stages: the plain stem layer and every hidden layer, by name (no stride).
    `stacked=True` holds the highway layers in one layer, which gives only the last one's
    output: its stages are the stem and that output (named as in the per-layer form)."""
    last = f"{prefix}_{args['depth'] - 1}"
    if args.get("stacked"):
        hidden = [stage_info("highway_stack", (args["width"],), name=last)]
    else:
        hidden = [stage_info(f"{prefix}_{i}", (args["width"],)) for i in range(1, args["depth"])]
    return [stage_info("stem_dense", (args["width"],)), *hidden]


def _highway_stages(args):
    return _hidden_stages(args, "highway")


def _plain_stages(args):
    return _hidden_stages(args, "plain")


@register_family("highway_fc", FC_OVERRIDES + ("transform_bias", "variant", "layerscale_init",
                                                "stacked"),
                 features=_highway_features, stages=_highway_stages)
def highway_fc(
    *, input_shape, preprocessing, depth, width, activation, variant, kernel_initializer,
    classes, transform_bias=None, layerscale_init=None, classifier_activation="softmax",
    stacked=False, include_top=True, pooling=None,
):
    """`stacked=True` keeps the highway layers as one `HighwayStack` (stacked weights, one
    scan): the same function, with a start-up that does not grow with depth.

    `transform_bias` is b_T, for the variants with a transform gate (None for the others:
    the gated skips and residual/plain have none); `layerscale_init` the initial LayerScale
    factor of `variant="layerscale"` (None: the layer's default, 1e-5)."""
    from layers import HighwayDense, HighwayStack
    from layers.variants import require_transform_bias

    require_transform_bias(variant, transform_bias, "-2.0")
    args = dict(activation=activation, variant=variant, kernel_initializer=kernel_initializer)
    if transform_bias is not None:
        args["transform_bias_initializer"] = transform_bias
    if layerscale_init is not None:
        args["layerscale_init"] = layerscale_init
    if stacked:
        stack = HighwayStack(depth - 1, name="highway_stack", **args)
        return _fc_net(input_shape, preprocessing, depth, width, activation,
                       kernel_initializer, classes, classifier_activation, include_top,
                       pooling, hidden_stack=stack)

    def highway(i):
        return HighwayDense(name=f"highway_{i}", **args)

    return _fc_net(input_shape, preprocessing, depth, width, activation, kernel_initializer,
                   classes, classifier_activation, include_top, pooling, hidden_layer=highway)


@register_family("plain_fc", FC_OVERRIDES, features=_plain_features, stages=_plain_stages)
def plain_fc(
    *, input_shape, preprocessing, depth, width, activation, kernel_initializer, classes,
    classifier_activation="softmax", include_top=True, pooling=None,
):
    import keras

    def plain(i):
        return keras.layers.Dense(
            width, activation=activation, kernel_initializer=kernel_initializer,
            name=f"plain_{i}",
        )

    return _fc_net(input_shape, preprocessing, depth, width, activation, kernel_initializer,
                   classes, classifier_activation, include_top, pooling, hidden_layer=plain)
