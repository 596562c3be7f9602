"""50-layer bottleneck nets for ImageNet: Greff et al. 2017's Highway and Highway-Full beside
their residual twin, ResNet-50 (He et al. 2015), built by one family builder.

Layout (spec §10; keras.applications.ResNet50's, and its layer names for ResNet-50): a 7x7/2
conv, BN, ReLU and a 3x3/2 max pool, then 3, 4, 6 and 3 bottleneck blocks in four stages, global
average pooling and a 1000-way classifier. Every convolution is followed by batch
normalisation. A block's branch H is Conv1x1-BN-ReLU-Conv3x3-BN-ReLU-Conv1x1-BN (the stride on
the first 1x1, as ResNet v1) and its shortcut s(x) is the identity, or a strided 1x1 conv + BN
where the shape changes (each stage's first block). The variants combine them:

- ``"residual"``: y = ReLU(s(x) + H(x)): ResNet-50 itself;
- ``"highway"``: y = ReLU(s(x) + T(x) (H(x) - s(x))), the coupled highway form, T a second
  branch like H with its own weights ending in a sigmoid (the same receptive fields and
  parameter count as H: the paper's point that 1x1 gates made training unstable), its last
  BN's beta, the gate's bias, starting at -1;
- ``"highway_full"``: as ``"highway"`` with a third ReLU ending H.

A highway block is one `layers.BNHighwayBlock` layer, `conv{s}_block{b}` (so the gate
analyses, the export's "gates" signature and the TensorBoard summaries see its T); the
residual blocks are keras.applications' layers, ending in the ReLU `conv{s}_block{b}_out`.
The ReLU after the combination is ResNet's, kept for the highway nets (RECON: the paper says
only that they follow ResNet's design). H and T together double a block's parameters, and
the paper reduced the feature maps to stay close to ResNet-50's count without saying how;
here every block width is multiplied by one factor (`width_multiplier`, 0.735, rounded to
whole channels), which brings both highway nets within 1% of ResNet-50's 25,636,712.
"""

from __future__ import annotations

from zoo.heads import (
    check_input_shape,
    classifier,
    feature_info,
    features,
    image_input,
    stage_info,
)
from zoo.registry import register_family

# Keras is imported inside the builders, not here: the registry (these builders and the
# presets beside them) is read by the command line (`highway-zoo list`, `describe`) without
# Keras, which takes seconds to import.

_STAGES = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]  # (width, blocks, stride)
_BLOCKS = [blocks for _, blocks, _ in _STAGES]  # 50 layers; (3, 4, 23, 3) would be 101
_EXPANSION = 4  # a bottleneck's output has 4x its inner width
_EPSILON = 1.001e-5  # keras.applications.ResNet50's
VARIANTS = ("residual", "highway", "highway_full")
HIGHWAY_WIDTH_MULTIPLIER = 0.735


def _widths(width_multiplier):
    return [max(1, round(w * width_multiplier)) for w, _, _ in _STAGES]


def _conv_bn(x, filters, kernel, stride, name):
    import keras

    x = keras.layers.Conv2D(filters, kernel, strides=stride,
                            padding="same" if kernel > 1 else "valid", name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(axis=3, epsilon=_EPSILON, name=f"{name}_bn")(x)


def _residual_block(x, width, stride, name, first):
    """keras.applications.ResNet50's block, layer for layer."""
    import keras

    shortcut = _conv_bn(x, _EXPANSION * width, 1, stride, f"{name}_0") if first else x
    h = _conv_bn(x, width, 1, stride, f"{name}_1")
    h = keras.layers.Activation("relu", name=f"{name}_1_relu")(h)
    h = _conv_bn(h, width, 3, 1, f"{name}_2")
    h = keras.layers.Activation("relu", name=f"{name}_2_relu")(h)
    h = _conv_bn(h, _EXPANSION * width, 1, 1, f"{name}_3")
    y = keras.layers.Add(name=f"{name}_add")([shortcut, h])
    return keras.layers.Activation("relu", name=f"{name}_out")(y)


def _highway_block(x, width, stride, name, variant, transform_bias, first):
    """One `layers.BNHighwayBlock`: H and T bottleneck stacks, a projection shortcut in a
    stage's first block, ResNet's ReLU after the combination."""
    from layers import BNHighwayBlock

    return BNHighwayBlock(
        _EXPANSION * width, kernel_sizes=(1, 3, 1), inner_filters=width, strides=stride,
        shortcut="projection" if first else "auto",
        activation="relu" if variant == "highway_full" else None, output_activation="relu",
        use_bias=True, transform_bias_initializer=transform_bias, epsilon=_EPSILON, name=name,
    )(x)


def _size(args, stride: int):
    """conv1 (7x7/2, pad 3), the max pool (3x3/2, pad 1) and three strided stages each take
    a size d to ceil(d / 2): 224 -> 7 at stride 32."""
    return [None if d is None else -(-d // stride) for d in args["input_shape"][:2]]


def _stage_end(s: int, args) -> str:
    # A highway block is one layer (conv5_block3); a residual one ends in a ReLU (..._out).
    last = f"conv{s}_block{args['stage_blocks'][s - 2]}"
    return last + ("_out" if args["variant"] == "residual" else "")


def _imagenet_features(args):
    width = _EXPANSION * _widths(args["width_multiplier"])[-1]
    return feature_info(_stage_end(5, args), (*_size(args, 32), width), True)


def _imagenet_stages(args):
    """conv1's ReLU before the max pool (stride 2), then each stage's last block (strides 4
    to 32): keras-hub's P1 to P5 (its ResNet backbone gives P2 to P5; timm adds conv1's)."""
    stages = [stage_info("conv1_relu", (*_size(args, 2), 64), 2)]
    for s, width in enumerate(_widths(args["width_multiplier"]), start=2):
        stages.append(stage_info(_stage_end(s, args), (*_size(args, 2**s), _EXPANSION * width),
                                 2**s))
    return stages


@register_family("bottleneck_imagenet",
                 ("variant", "transform_bias", "width_multiplier", "stage_blocks",
                  "input_shape"),
                 features=_imagenet_features, stages=_imagenet_stages)
def bottleneck_imagenet(
    *, input_shape, variant, transform_bias, width_multiplier, stage_blocks, classes,
    classifier_activation="softmax", include_top=True, pooling=None,
):
    """ResNet-50's layout with residual or highway blocks (see the module docstring)."""
    import keras

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS} for the ImageNet nets. "
                         f"Received: variant={variant!r}")
    input_shape = check_input_shape(input_shape, 32)
    inputs, x = image_input(input_shape, "imagenet_caffe")
    x = keras.layers.ZeroPadding2D(3, name="conv1_pad")(x)
    x = keras.layers.Conv2D(64, 7, strides=2, name="conv1_conv")(x)
    x = keras.layers.BatchNormalization(axis=3, epsilon=_EPSILON, name="conv1_bn")(x)
    x = keras.layers.Activation("relu", name="conv1_relu")(x)
    x = keras.layers.ZeroPadding2D(1, name="pool1_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    if len(stage_blocks) != len(_STAGES) or min(stage_blocks) < 1:
        raise ValueError(f"stage_blocks takes {len(_STAGES)} positive block counts, e.g. "
                         f"{tuple(_BLOCKS)}. Received: stage_blocks={stage_blocks!r}")
    for s, (width, blocks, (_, _, stride)) in enumerate(
            zip(_widths(width_multiplier), stage_blocks, _STAGES), start=2):
        for b in range(1, blocks + 1):
            name, block_stride = f"conv{s}_block{b}", stride if b == 1 else 1
            if variant == "residual":
                x = _residual_block(x, width, block_stride, name, first=b == 1)
            else:
                x = _highway_block(x, width, block_stride, name, variant, transform_bias,
                                   first=b == 1)
    if not include_top:
        return inputs, features(x, pooling)
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return inputs, classifier(x, classes, classifier_activation)
