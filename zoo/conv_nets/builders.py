"""Convolutional highway nets: MNIST (NIPS 2015 Table 1) and CIFAR (Tables 2, 3).

Layer by layer as in ../shared/specs/architectures.md §2-6. Dimensions change
only in plain layers (the paper's rule); every highway layer keeps its input's
shape. Kernels use the authors' Caffe "xavier", which in their fork is He-normal
without truncation.
"""

from __future__ import annotations

import itertools

from zoo.heads import (
    check_input_shape,
    classifier,
    feature_info,
    features,
    image_input,
    stage_info,
)
from zoo.registry import register_family

# Keras and the layers are imported inside the builders, not here: the registry (these
# builders and the presets beside them) is read by the command line (`highway-zoo list`,
# `describe`) without Keras, which takes seconds to import.

CAFFE_XAVIER = {
    "class_name": "VarianceScaling",
    "config": {"scale": 2.0, "mode": "fan_in", "distribution": "untruncated_normal"},
}


def _init(config):
    import keras

    return keras.initializers.get(config)


def _highway_stack(x, n, kernel_sizes, prefix, activation, transform_bias, variant):
    from layers import HighwayConv2D

    for i, k in zip(range(1, n + 1), itertools.cycle(kernel_sizes)):
        x = HighwayConv2D(
            k,
            activation=activation,
            variant=variant,
            kernel_initializer=_init(CAFFE_XAVIER),
            transform_bias_initializer=transform_bias,
            name=f"{prefix}_highway{i}",
        )(x)
    return x


_CONV_OVERRIDES = (
    "activation",
    "transform_bias",
    "variant",
    "classes",
    "classifier_activation",
)


_MNIST_STAGES = [(2, 3), (3, 3), (3, 2)]  # (highway convs, pool size)
_MNIST_STEM = 5
# The released nets' dropout rates: on the input pixels, then after each stage's pool (and,
# on CIFAR, before the classifier; spec §2-3).
MNIST_DROPOUT = (0.2, 0.3, 0.4, 0.5)
CIFAR_DROPOUT = 0.2


def _dropout_rates(dropout, released: tuple[float, ...]) -> tuple[float, ...]:
    """`dropout` as one rate per dropout layer of a net whose released rates are `released`:
    a number is every layer's rate."""
    rates = (dropout,) * len(released) if isinstance(dropout, int | float) else dropout
    try:
        rates = tuple(float(r) for r in rates)
    except (TypeError, ValueError):
        rates = ()
    if len(rates) != len(released) or not all(0.0 <= r < 1.0 for r in rates):
        raise ValueError(
            "dropout must be a rate in [0, 1) for every dropout layer, or "
            f"{len(released)} of them (the released net's are {released}). "
            f"Received: dropout={dropout!r}"
        )
    return rates


def _half(size):
    return None if size is None else -(-size // 2)  # ceil: Caffe's pooling, padding="same"


def _mnist_features(args):
    """The last stage's output: 28 -> 24 (5x5 valid) -> 12 -> 6 -> 3."""
    h, w, _ = args["input_shape"]
    h, w = (None if d is None else d - _MNIST_STEM + 1 for d in (h, w))
    for _ in _MNIST_STAGES:
        h, w = _half(h), _half(w)
    return feature_info(f"stage{len(_MNIST_STAGES)}_dropout", (h, w, args["width"]), True)


def _mnist_stages(args):
    """Each stage's last highway conv, before its pool (strides 1, 2, 4: the stem's 5x5 conv
    is unpadded, not strided), then the body's output after the last pool (stride 8)."""
    size = [None if d is None else d - _MNIST_STEM + 1 for d in args["input_shape"][:2]]
    stages = []
    for s, (n, _) in enumerate(_MNIST_STAGES, start=1):
        stages.append(stage_info(f"stage{s}_highway{n}", (*size, args["width"]), 2 ** (s - 1)))
        size = [_half(d) for d in size]
    last = _mnist_features(args)
    return stages + [stage_info(last["layer"], last["shape"], 2 ** len(_MNIST_STAGES))]


@register_family("highway_conv_mnist", ("width", "input_shape", "dropout") + _CONV_OVERRIDES,
                 features=_mnist_features, stages=_mnist_stages)
def highway_conv_mnist(
    *,
    input_shape,
    preprocessing,
    width,
    activation,
    transform_bias,
    variant,
    classes,
    classifier_stddev,
    classifier_activation="softmax",
    dropout=MNIST_DROPOUT,
    include_top=True,
    pooling=None,
):
    """Table 1: conv 5x5 then 2 + 3 + 3 highway convs, 3x3/2 and 2x2/2 pools.

    The classifier reads the flattened last feature map, so with the top the input is 28x28
    (as keras.applications' VGG16); without it any size from 5x5 up. `dropout`: the rate of
    each dropout layer (`MNIST_DROPOUT`), or one rate for all; 0 turns dropout off (the
    layers hold no weights: every weights file loads whatever the rates).
    """
    import keras

    input_rate, *stage_rates = _dropout_rates(dropout, MNIST_DROPOUT)
    input_shape = check_input_shape(input_shape, _MNIST_STEM)
    if include_top and tuple(input_shape[:2]) != (28, 28):
        raise ValueError(
            "The MNIST conv nets' classifier reads the flattened 3x3 feature map of a 28x28 "
            f"image; input_shape={input_shape} needs include_top=False (features of any size "
            "from 5x5, e.g. with pooling='avg' and your own head)."
        )
    inputs, x = image_input(input_shape, preprocessing)
    x = keras.layers.Dropout(input_rate, name="input_dropout")(x)
    x = keras.layers.Conv2D(
        width, 5, padding="valid", activation="relu",
        kernel_initializer=_init(CAFFE_XAVIER), name="stem_conv",
    )(x)
    # padding="same" reproduces Caffe's ceil-mode pooling: 24 -> 12 -> 6 (spec §2).
    for s, ((n, pool), rate) in enumerate(zip(_MNIST_STAGES, stage_rates), start=1):
        x = _highway_stack(x, n, (3,), f"stage{s}", activation, transform_bias, variant)
        x = keras.layers.MaxPooling2D(pool, 2, padding="same", name=f"stage{s}_pool")(x)
        x = keras.layers.Dropout(rate, name=f"stage{s}_dropout")(x)
    if not include_top:
        return inputs, features(x, pooling)
    x = keras.layers.Flatten(name="flatten")(x)
    init = keras.initializers.RandomNormal(stddev=classifier_stddev)
    return inputs, classifier(x, classes, classifier_activation, init)


def _cifar_stage_end(s: int, highway: int) -> str:
    """The last layer of stage `s`: its last highway conv, or its plain conv if it has none."""
    return f"stage{s}_highway{highway}" if highway else f"stage{s}_conv"


def _cifar_size(args, pools: int):
    """The 2x2/2 pools between stages halve the size, rounding down."""
    return [None if d is None else d // 2**pools for d in args["input_shape"][:2]]


def _cifar_features(args):
    """The last stage's output (Table 2 head), or the 1x1 head conv's (Table 3 head)."""
    stages = len(args["stage_widths"])
    h, w = _cifar_size(args, stages - 1)
    if args["head"] == "conv1x1_gap":
        return feature_info("head_conv", (h, w, args["head_width"]), True)
    last = _cifar_stage_end(stages, args["highway_per_stage"][-1])
    return feature_info(last, (h, w, args["stage_widths"][-1]), True)


def _cifar_stages(args):
    """Each stage but the last, before its pool (strides 1, 2, ...), then the body's output:
    the last stage's, or the 1x1 head conv's at the same stride."""
    widths, highway = args["stage_widths"], args["highway_per_stage"]
    stages = [stage_info(_cifar_stage_end(s, n), (*_cifar_size(args, s - 1), width), 2 ** (s - 1))
              for s, (width, n) in enumerate(zip(widths[:-1], highway[:-1]), start=1)]
    last = _cifar_features(args)
    return stages + [stage_info(last["layer"], last["shape"], 2 ** (len(widths) - 1))]


@register_family(
    "highway_cifar",
    ("stage_widths", "highway_per_stage", "input_shape", "dropout", "first_conv_stddev",
     "gcn_scale") + _CONV_OVERRIDES,
    features=_cifar_features, stages=_cifar_stages,
)
def highway_cifar(
    *,
    input_shape,
    preprocessing,
    stage_widths,
    highway_per_stage,
    highway_kernel_sizes,
    head,
    head_width,
    activation,
    transform_bias,
    variant,
    classes,
    classifier_stddev=None,
    classifier_activation="softmax",
    dropout=CIFAR_DROPOUT,
    first_conv_stddev=None,
    gcn_scale=1.0,
    include_top=True,
    pooling=None,
):
    """Stages of one plain 3x3 conv (the width change) plus highway convs, 2x2/2
    max pools between stages, then one of two heads:

    - ``"conv1x1_gap"`` (Table 3): 1x1 conv to `head_width`, global average pool;
    - ``"maxpool_fc"`` (Table 2, reconstructed): global max pool, Dense `head_width`.

    Both heads pool globally, so any input size from 2**(stages - 1) up works. The 1x1
    conv belongs to the body: `include_top=False` returns its output; the global pool, the
    Dense of the Table 2 head and the classifier are the top. `dropout`: the rate of each
    dropout layer (on the input, after each pool, before the classifier: 0.2 in the released
    net), or one rate for all; 0 turns dropout off, and every weights file loads whatever
    the rates. `first_conv_stddev`: None starts the first conv He-normal as every other conv;
    a number starts it N(0, first_conv_stddev**2). The released 19-layer prototxt asks for
    `gaussian` with `value: 0.05`, which Caffe's Gaussian filler ignores (it reads `std`,
    default 1), so the authors' first conv started N(0, 1): `first_conv_stddev=1.0`.
    `gcn_scale`: the standard deviation the model's GCN gives each image (1; the authors'
    constants are not published, and their untrained net's loss points to about 0.7).
    """
    import keras

    if len(stage_widths) != len(highway_per_stage):
        raise ValueError(
            "stage_widths and highway_per_stage need one entry per stage. "
            f"Received: stage_widths={stage_widths!r}, "
            f"highway_per_stage={highway_per_stage!r}"
        )
    if first_conv_stddev is not None and not (
        isinstance(first_conv_stddev, int | float) and first_conv_stddev > 0
    ):
        raise ValueError("first_conv_stddev must be a positive number (or None: He-normal). "
                         f"Received: first_conv_stddev={first_conv_stddev!r}")
    input_rate, *pool_rates, head_rate = _dropout_rates(
        dropout, (CIFAR_DROPOUT,) * (len(stage_widths) + 1)
    )
    input_shape = check_input_shape(input_shape, 2 ** (len(stage_widths) - 1))
    inputs, x = image_input(input_shape, preprocessing, gcn_scale=gcn_scale)
    x = keras.layers.Dropout(input_rate, name="input_dropout")(x)
    for s, (width, n) in enumerate(zip(stage_widths, highway_per_stage), start=1):
        if s > 1:
            x = keras.layers.MaxPooling2D(2, 2, name=f"stage{s - 1}_pool")(x)
            x = keras.layers.Dropout(pool_rates[s - 2], name=f"stage{s - 1}_dropout")(x)
        first = s == 1 and first_conv_stddev is not None
        x = keras.layers.Conv2D(
            width, 3, padding="same", activation="relu",
            kernel_initializer=(keras.initializers.RandomNormal(stddev=first_conv_stddev)
                                if first else _init(CAFFE_XAVIER)),
            name=f"stage{s}_conv",
        )(x)
        x = _highway_stack(
            x, n, highway_kernel_sizes, f"stage{s}", activation, transform_bias, variant
        )
    if head == "conv1x1_gap":
        x = keras.layers.Conv2D(
            head_width, 1, activation="relu",
            kernel_initializer=_init(CAFFE_XAVIER), name="head_conv",
        )(x)
    if not include_top:
        return inputs, features(x, pooling)
    if head == "conv1x1_gap":
        x = keras.layers.GlobalAveragePooling2D(name="head_pool")(x)
    elif head == "maxpool_fc":
        x = keras.layers.GlobalMaxPooling2D(name="head_pool")(x)
        x = keras.layers.Dense(
            head_width, activation="relu",
            kernel_initializer=_init(CAFFE_XAVIER), name="head_dense",
        )(x)
    else:
        raise ValueError(f"Unknown head {head!r}; expected 'conv1x1_gap' or 'maxpool_fc'.")
    x = keras.layers.Dropout(head_rate, name="head_dropout")(x)
    init = (
        _init(CAFFE_XAVIER)
        if classifier_stddev is None
        else keras.initializers.RandomNormal(stddev=classifier_stddev)
    )
    return inputs, classifier(x, classes, classifier_activation, init)
