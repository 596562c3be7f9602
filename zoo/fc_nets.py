"""Fully connected nets: the optimisation study (NIPS 2015 §3.1, Fig. 1) and the
50-layer analysis nets (§4, Figs. 2-4).

Layout (spec §8): a plain Dense layer to the working width, then ``depth - 1``
highway layers (or plain layers) of that width, then the softmax classifier,
which the paper does not count: "depth 10" is 1 plain + 9 highway layers.
"""

from __future__ import annotations

from zoo.heads import classifier, feature_info, features, image_input, stage_info
from zoo.registry import register, register_family

# Keras and the layers are imported inside the builders, not here: the registry (the
# `register` calls below) is read by the command line (`highway-zoo list`, `describe`)
# without Keras, which takes seconds to import.

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


_MNIST = dict(input_shape=(28, 28, 1), preprocessing="scale", classes=10)
_FIG1 = dict(
    paper="Srivastava et al. 2015, §3.1 and Fig. 1",
    dataset="mnist",
    recipe="adam_fc",
    paper_accuracy=None,
    paper_metric="Fig. 1 plots training loss; no test accuracy is published",
    preprocessing="pixels / 255, flattened",
)
_UNKNOWN_FC = (
    "The paper chose activation, learning rate, momentum, decay and b_T by random "
    "search (100 runs per net); the winning settings were only on the IDSIA "
    "project page and are lost. tanh, Glorot-uniform kernels and b_T = -2 are "
    "the §4 analysis net's choices."
)

# (depth, highway total, plain total): spec §8, biases and softmax included.
for _depth, _hw_params, _plain_params in [
    (10, 85_660, 102_463),
    (20, 136_660, 153_583),
    (50, 289_660, 306_943),
    (100, 544_660, 562_543),
]:
    register(
        f"highway_fc{_depth}_mnist",
        "highway_fc",
        dict(
            _MNIST, depth=_depth, width=50, activation="tanh", transform_bias=-2.0,
            variant="coupled", kernel_initializer="glorot_uniform",
        ),
        **_FIG1,
        description=(
            f"{_depth}-layer fully connected highway net, 50 blocks per layer: "
            f"784 -> 50 plain, {_depth - 1} highway layers, softmax 10."
        ),
        params=_hw_params,
        paper_params="about 5,000 per layer",
        default_transform_bias=-2.0,
        provenance="DERIVED",
        reconstructed=_UNKNOWN_FC,
    )
    register(
        f"plain_fc{_depth}_mnist",
        "plain_fc",
        dict(
            _MNIST, depth=_depth, width=71, activation="tanh",
            kernel_initializer="glorot_uniform",
        ),
        **_FIG1,
        description=(
            f"{_depth}-layer plain fully connected net, 71 units per layer (the "
            "highway net's parameter budget): the baseline of Fig. 1."
        ),
        params=_plain_params,
        paper_params="about 5,000 per layer",
        default_transform_bias=None,
        provenance="DERIVED",
        reconstructed=_UNKNOWN_FC,
    )

# The gated skips (layers.variants.GATED_SKIPS) whose papers train deep nets with them, as
# the 50-layer net of Fig. 1: the same layout (784 -> plain stem, 49 hidden layers, softmax),
# each hidden layer y = x + s·H(x) with H = tanh(W x + b). The width is the variants study's
# matched width (training/experiments/variants.py, matched_width): the one whose layer has the
# parameter count closest to a coupled highway layer of 50 units (2·(50² + 50) = 5,100), so
# these nets, the plain net and the highway net have about the same budget.
REZERO = dict(
    form="rezero",
    cite="Bachlechner et al. 2020, ReZero",
    formula="y = x + a·H(x), one learned scalar a per layer",
    paper="Bachlechner, Majumder, Mao, Cottrell & McAuley 2020, ReZero is All You Need: Fast "
          "Convergence at Large Depth",
    arxiv="2003.04887",
    initialisation="a = 0 in every layer (the paper's): a fresh net is its stem and "
                   "classifier, every hidden layer the identity",
    parameters_per_layer="d² + d + 1 (layers.variants.parameter_count('rezero', d))",
)
LAYERSCALE = dict(
    form="layerscale",
    cite="Touvron et al. 2021, CaiT's LayerScale",
    formula="y = x + diag(l)·H(x), one learned factor per unit and layer",
    paper="Touvron, Cord, Sablayrolles, Synnaeve & Jégou 2021, Going deeper with Image "
          "Transformers (CaiT)",
    arxiv="2103.17239",
    initialisation=(
        "every l = 1e-5. CaiT sets it by depth: 0.1 up to 18 blocks, 1e-5 at 24, 1e-6 "
        "deeper; each CaiT block holds two scaled branches (attention and MLP), so depth 24 "
        "is 48 branches, and this net's 49 hidden layers are 49: the depth-24 value. 1e-6 "
        "is for CaiT's 36 blocks (72 branches)"),
    parameters_per_layer="d² + 2d (layers.variants.parameter_count('layerscale', d))",
)
_SKIP_NOTE = (
    "{form} in a tanh fully connected net of the 2015 paper's layout (Fig. 1's 50-layer net, "
    "here {width} units wide) is this zoo's combination: no paper trains it. {paper_says} "
    "Nothing was tuned for it: the recipe is the highway net's (adam_fc), and the width "
    "matches the highway net's parameters per layer (the variants study's matched width)."
)
_UNKNOWN_SKIP_FC = (
    "The 2015 paper's FC training settings are lost (see highway_fc50_mnist); tanh and "
    "Glorot-uniform kernels are the §4 analysis net's choices, H's bias starts at zero, and "
    "the skip's own weights start as its paper says. The width is chosen here (above)."
)
for _form, _label, _width, _params, _layer, _extra_args, _says in [
    (REZERO, "ReZero", 71, 306_992, "(71² + 71 + 1)", {},
     "ReZero's paper trains deep fully connected nets (its abstract: thousands of layers), "
     "Transformers and ResNets, not this one."),
    (LAYERSCALE, "LayerScale", 70, 302_620, "(70² + 2·70)", {"layerscale_init": 1e-5},
     "CaiT defines LayerScale for vision Transformers (pre-norm attention and MLP branches); "
     "its depth rule is read here as a count of scaled branches."),
]:
    register(
        f"{_form['form']}_fc50_mnist",
        "highway_fc",
        dict(_MNIST, depth=50, width=_width, activation="tanh", variant=_form["form"],
             kernel_initializer="glorot_uniform", **_extra_args),
        **(_FIG1 | {"paper": f"{_form['cite']} (arXiv {_form['arxiv']}); the net: "
                             f"{_FIG1['paper']}",
                    "paper_metric": "none: no paper trains this net"}),
        description=(
            f"50-layer fully connected net with {_label} skips, {_width} units per layer: "
            f"784 -> {_width} plain, 49 {_label} layers ({_form['formula'].split(',')[0]}, "
            "H = tanh), softmax 10."
        ),
        params=_params,
        params_formula=(f"784·{_width} + {_width} (stem) + 49·{_layer} (hidden) + "
                        f"{_width}·10 + 10 (softmax)"),
        paper_params=None,
        default_transform_bias=None,
        provenance="COMBINED",
        gated_skip=_form,
        not_in_any_paper=_SKIP_NOTE.format(form=_label, width=_width, paper_says=_says),
        reconstructed=_UNKNOWN_SKIP_FC,
    )

register(
    "highway_fc50_cifar100",
    "highway_fc",
    dict(
        input_shape=(32, 32, 3), preprocessing="gcn", classes=100, depth=50,
        width=50, activation="tanh", transform_bias=-4.0, variant="coupled",
        kernel_initializer="glorot_uniform",
    ),
    description=(
        "The §4 analysis net for CIFAR-100: 3072 -> 50 plain, 49 highway layers "
        "of 50 tanh blocks, b_T = -4, softmax 100."
    ),
    paper="Srivastava et al. 2015, §4 and Figs. 2-4",
    dataset="cifar100",
    recipe="adam_fc",
    params=408_650,
    paper_params=None,
    paper_accuracy=None,
    paper_metric="chosen for the best training-set error; no accuracy published",
    default_transform_bias=-4.0,
    preprocessing="per-image global contrast normalisation, flattened",
    provenance="DERIVED",
    reconstructed=(
        "The paper gives depth, width, tanh and b_T = -4; the CIFAR-100 "
        "preprocessing and the training recipe are unknown (GCN and Adam here)."
    ),
)
