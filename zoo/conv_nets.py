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
from zoo.registry import register, register_family

# Keras and the layers are imported inside the builders, not here: the registry (the
# `register` calls below) is read by the command line (`highway-zoo list`, `describe`)
# without Keras, which takes seconds to import.

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
# The released nets' dropout rates: on the input pixels, then after each stage's pool.
MNIST_DROPOUT = (0.2, 0.3, 0.4, 0.5)


def _dropout_rates(dropout) -> tuple[float, ...]:
    """`dropout` as one rate per dropout layer: a number is every layer's rate."""
    rates = (dropout,) * len(MNIST_DROPOUT) if isinstance(dropout, int | float) else dropout
    try:
        rates = tuple(float(r) for r in rates)
    except (TypeError, ValueError):
        rates = ()
    if len(rates) != len(MNIST_DROPOUT) or not all(0.0 <= r < 1.0 for r in rates):
        raise ValueError(
            "dropout must be a rate in [0, 1) for every dropout layer, or "
            f"{len(MNIST_DROPOUT)} of them (input, after stages 1-3; the released net's are "
            f"{MNIST_DROPOUT}). Received: dropout={dropout!r}"
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

    input_rate, *stage_rates = _dropout_rates(dropout)
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
    "highway_cifar", ("stage_widths", "highway_per_stage", "input_shape") + _CONV_OVERRIDES,
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
    include_top=True,
    pooling=None,
):
    """Stages of one plain 3x3 conv (the width change) plus highway convs, 2x2/2
    max pools between stages, then one of two heads:

    - ``"conv1x1_gap"`` (Table 3): 1x1 conv to `head_width`, global average pool;
    - ``"maxpool_fc"`` (Table 2, reconstructed): global max pool, Dense `head_width`.

    Both heads pool globally, so any input size from 2**(stages - 1) up works. The 1x1
    conv belongs to the body: `include_top=False` returns its output; the global pool, the
    Dense of the Table 2 head and the classifier are the top.
    """
    import keras

    if len(stage_widths) != len(highway_per_stage):
        raise ValueError(
            "stage_widths and highway_per_stage need one entry per stage. "
            f"Received: stage_widths={stage_widths!r}, "
            f"highway_per_stage={highway_per_stage!r}"
        )
    input_shape = check_input_shape(input_shape, 2 ** (len(stage_widths) - 1))
    inputs, x = image_input(input_shape, preprocessing)
    x = keras.layers.Dropout(0.2, name="input_dropout")(x)
    for s, (width, n) in enumerate(zip(stage_widths, highway_per_stage), start=1):
        if s > 1:
            x = keras.layers.MaxPooling2D(2, 2, name=f"stage{s - 1}_pool")(x)
            x = keras.layers.Dropout(0.2, name=f"stage{s - 1}_dropout")(x)
        x = keras.layers.Conv2D(
            width, 3, padding="same", activation="relu",
            kernel_initializer=_init(CAFFE_XAVIER), name=f"stage{s}_conv",
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
    x = keras.layers.Dropout(0.2, name="head_dropout")(x)
    init = (
        _init(CAFFE_XAVIER)
        if classifier_stddev is None
        else keras.initializers.RandomNormal(stddev=classifier_stddev)
    )
    return inputs, classifier(x, classes, classifier_activation, init)


# --- Table 1: MNIST -------------------------------------------------------------

for _width, _params, _paper_params, _acc, _prov in [
    (16, 38_986, "39K", 99.43, "DERIVED"),
    (32, 151_690, "151K", 99.55, "CODE"),
]:
    register(
        f"highway_conv{_width}_mnist",
        "highway_conv_mnist",
        dict(
            input_shape=(28, 28, 1), preprocessing="caffe_scale", width=_width,
            activation="relu", transform_bias=-1.0, variant="coupled", classes=10,
            classifier_stddev=0.1,
        ),
        description=(
            f"10-layer convolutional highway net of width {_width}: conv 5x5, "
            "8 highway convs 3x3 (b_T = -1) in 3 stages with max pooling and "
            "dropout, softmax 10."
        ),
        paper="Srivastava et al. 2015, §3.2 and Table 1",
        dataset="mnist",
        recipe="caffe_mnist_conv",
        params=_params,
        paper_params=_paper_params,
        paper_accuracy=_acc,
        paper_metric="test accuracy %, best run (Table 1)",
        default_transform_bias=-1.0,
        preprocessing="pixels x 1/256 (the Caffe data layer's 0.00390625)",
        provenance=_prov,
        reconstructed=(
            ""
            if _width == 32
            else "Width 16 is the released width-32 net with every 32 replaced "
            "by 16; it matches the published 39K exactly."
        ),
    )

# --- Tables 2 and 3: CIFAR ------------------------------------------------------

_CIFAR = dict(input_shape=(32, 32, 3), preprocessing="gcn", activation="relu", variant="coupled")
_GCN = "per-image global contrast normalisation (constants unknown: mean 0, std 1)"
_CONV1 = (
    "The authors' first conv used Caffe's gaussian filler with no std, i.e. N(0, 1); "
    "He-normal is used here."
)
_TABLE3 = dict(
    stage_widths=[32, 80, 128], highway_per_stage=[4, 5, 5], highway_kernel_sizes=[3],
    head="conv1x1_gap", head_width=100, transform_bias=-2.0,
)

register(
    "highway_a_cifar10",
    "highway_cifar",
    dict(
        _CIFAR, stage_widths=[16, 32, 64], highway_per_stage=[2, 2, 2],
        highway_kernel_sizes=[3], head="maxpool_fc", head_width=256,
        transform_bias=-1.0, classes=10,
    ),
    description=(
        "Highway A (11 layers, after FitNet A): 3 stages of a plain conv and 2 "
        "highway convs at widths 16/32/64, global max pool, FC 256, softmax."
    ),
    paper="Srivastava et al. 2015, §3.3.1 and Table 2",
    dataset="cifar10",
    recipe="caffe_cifar",
    params=236_778,
    paper_params="236K",
    paper_accuracy=89.18,
    paper_metric="test accuracy % (Table 2)",
    default_transform_bias=-1.0,
    preprocessing=_GCN,
    provenance="RECON",
    reconstructed=(
        "Whole architecture reconstructed from FitNet A and the 236K count "
        "(spec §5): stage widths, 2 highway layers per stage, b_T = -1 (the "
        "paper's rule for depth ~10), the max-pool + FC 256 head. Recipe assumed "
        "to be the released CIFAR solver."
    ),
)
register(
    "highway_b_cifar10",
    "highway_cifar",
    dict(_CIFAR, **{**_TABLE3, "head": "maxpool_fc", "head_width": 256}, classes=10),
    description=(
        "Highway B (19 layers, after FitNet B): the authors' 17-conv trunk "
        "(32/80/128), global max pool, FC 256, softmax."
    ),
    paper="Srivastava et al. 2015, §3.3.1 and Table 2",
    dataset="cifar10",
    recipe="caffe_cifar",
    params=2_278_522,
    paper_params="2.3M",
    paper_accuracy=92.46,
    paper_metric="test accuracy %, best run; 92.28 +- 0.16 mean (Table 2)",
    default_transform_bias=-2.0,
    preprocessing=_GCN,
    provenance="RECON",
    reconstructed=(
        "The conv trunk is the released Table 3 net's (DERIVED); the head (global "
        "max pool, FC 256) is reconstructed: any FC width 100-500 rounds to 2.3M "
        "(spec §4). " + _CONV1
    ),
)
register(
    "highway_c_cifar10",
    "highway_cifar",
    dict(
        _CIFAR, stage_widths=[32, 64, 96], highway_per_stage=[9, 9, 9],
        highway_kernel_sizes=[1, 3], head="maxpool_fc", head_width=100,
        transform_bias=-3.0, classes=10,
    ),
    description=(
        "Highway C (32 layers, thin and deep): 3 stages of a plain conv and 9 "
        "highway convs alternating 1x1 and 3x3 kernels at widths 32/64/96, "
        "global max pool, FC 100, softmax."
    ),
    paper="Srivastava et al. 2015, §3.3.1 and Table 2",
    dataset="cifar10",
    recipe="caffe_cifar",
    params=1_264_502,
    paper_params="1.25M",
    paper_accuracy=91.20,
    paper_metric="test accuracy % (Table 2)",
    default_transform_bias=-3.0,
    preprocessing=_GCN,
    provenance="RECON",
    reconstructed=(
        "The paper says only '32 layers, alternating 3x3 and 1x1, ~1.25M'. Widths "
        "32/64/96, 1x1 first, 9 highway layers per stage and the head are one of "
        "several fits within 3% (spec §6); b_T = -3 from the paper's rule for "
        "depth ~30."
    ),
)
for _classes, _params, _acc, _std in [
    (10, 2_256_838, 92.40, 0.05),
    (100, 2_265_928, 67.76, None),
]:
    register(
        f"highway_cifar{_classes}",
        "highway_cifar",
        dict(_CIFAR, **_TABLE3, classes=_classes, classifier_stddev=_std),
        description=(
            "The authors' released 19-layer net: 3 stages (32/80/128) of a plain "
            "conv and 4/5/5 highway convs, 1x1 conv to 100, global average pool, "
            f"softmax {_classes}."
        ),
        paper="Srivastava et al. 2015, §3.3.2 and Table 3",
        dataset=f"cifar{_classes}",
        recipe="caffe_cifar",
        params=_params,
        paper_params=None,
        paper_accuracy=_acc,
        paper_metric="test accuracy % with augmentation, best of 5 runs (Table 3)",
        default_transform_bias=-2.0,
        preprocessing=_GCN + "; the authors also subtracted a per-pixel mean image",
        provenance="CODE",
        reconstructed=_CONV1,
    )
