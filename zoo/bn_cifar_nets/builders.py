"""110-layer batch-normalised CIFAR nets: the highway net of the first author's 2025
comparison beside its residual twin, ResNet-110 (He et al. 2015, §4.2), by one builder.

Spec §10, after `flukeskywalker/highway-resnet-comparison` (`resnet.py`): a 3x3 conv of 16
filters, BN, ReLU; 3 stages of 18 blocks at widths 16/32/64 (x `width_multiplier`; strides
1, 2, 2); global average pooling; a 10-way classifier. Convolutions have no bias (BN follows
each). A block:

- ``"highway"``: H = Conv3x3-BN-ReLU-Conv3x3-BN-ReLU, T = Conv3x3-BN-ReLU-Conv3x3-BN-sigmoid
  with the last gate BN's beta (the gate's bias) starting at -6, y = s(x) + T (H - s(x)):
  one `layers.BNHighwayBlock` layer, `stage{s}_block{b}`, so the gate analyses, the
  export's "gates" signature and the TensorBoard summaries see its T;
- ``"residual"``: y = ReLU(Conv3x3-BN-ReLU-Conv3x3-BN(x) + s(x)), ResNet's basic block, in
  plain Keras layers ending in the ReLU `stage{s}_block{b}_out`;

with s(x) the identity, or, where the shape changes, a strided 1x1 conv + BN
(``shortcut="projection"``, the highway net's) or the parameter-free ``"zero_pad"`` shortcut
of ResNet's CIFAR nets (every other pixel, channels zero-padded: option A).
"""

from __future__ import annotations

import math

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

_WIDTHS, _STRIDES = (16, 32, 64), (1, 2, 2)
_EPSILON = 1e-5  # PyTorch's BatchNorm2d default, as the reference code
_MOMENTUM = 0.9  # PyTorch's momentum 0.1 in Keras's convention
_HE = {"class_name": "VarianceScaling",  # torch.nn.init.kaiming_normal_
       "config": {"scale": 2.0, "mode": "fan_in", "distribution": "untruncated_normal"}}


def _conv_bn(x, filters, stride, name, kernel=3):
    import keras

    x = keras.layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                            kernel_initializer=keras.initializers.get(_HE),
                            name=f"{name}_conv")(x)
    return keras.layers.BatchNormalization(epsilon=_EPSILON, momentum=_MOMENTUM,
                                           name=f"{name}_bn")(x)


def _shortcut(x, width, stride, name, kind):
    import keras

    if stride == 1 and x.shape[-1] == width:
        return x
    if kind == "projection":
        return _conv_bn(x, width, stride, f"{name}_shortcut", kernel=1)
    extra = width - x.shape[-1]
    if stride != 2 or extra < 0 or extra % 2:
        raise ValueError(f"The zero_pad shortcut needs stride 2 and an even number of new "
                         f"channels; {name} has stride {stride}, {x.shape[-1]} -> {width}. "
                         "Use shortcut='projection'.")

    def subsample_and_pad(t):  # ResNet's option A: x[:, ::2, ::2], channels padded with 0
        return keras.ops.pad(t[:, ::2, ::2, :], [[0, 0], [0, 0], [0, 0],
                                                 [extra // 2, extra // 2]])

    return keras.layers.Lambda(subsample_and_pad, name=f"{name}_shortcut")(x)


def _block(x, width, stride, name, variant, shortcut, gate_beta):
    import keras

    if variant == "highway":
        from layers import BNHighwayBlock

        return BNHighwayBlock(
            width, kernel_sizes=(3, 3), strides=stride,
            shortcut="auto" if shortcut == "projection" else "zero_pad",
            activation="relu", transform_bias_initializer=gate_beta,
            kernel_initializer=keras.initializers.get(_HE), momentum=_MOMENTUM,
            epsilon=_EPSILON, name=name,
        )(x)
    s = _shortcut(x, width, stride, name, shortcut)
    h = keras.layers.Activation("relu", name=f"{name}_1_relu")(
        _conv_bn(x, width, stride, f"{name}_1"))
    h = _conv_bn(h, width, 1, f"{name}_2")
    y = keras.layers.Add(name=f"{name}_add")([s, h])
    return keras.layers.Activation("relu", name=f"{name}_out")(y)


def _stage_widths(width_multiplier):
    return [int(w * width_multiplier) for w in _WIDTHS]  # the reference code truncates


def _stage_end(s: int, args) -> str:
    # A highway block is one layer (stage3_block18); a residual one ends in a ReLU (..._out).
    last = f"stage{s}_block{args['blocks_per_stage']}"
    return last + ("" if args["variant"] == "highway" else "_out")


def _stride(s: int) -> int:
    """Stage `s`'s stride, 1, 2, 4: the product of the first blocks' strides so far."""
    return math.prod(_STRIDES[:s])


def _size(args, stride: int):
    return [None if d is None else -(-d // stride) for d in args["input_shape"][:2]]


def _bn_cifar_features(args):
    last = len(_STRIDES)
    return feature_info(_stage_end(last, args), (*_size(args, _stride(last)),
                                                 _stage_widths(args["width_multiplier"])[-1]),
                        True)


def _bn_cifar_stages(args):
    """Each stage's last block: stages 2 and 3 down-sample in their first block's strided
    convs, so stages 1 and 2 end before a down-sampling; stage 3 is the body's output."""
    return [stage_info(_stage_end(s, args), (*_size(args, _stride(s)), width), _stride(s))
            for s, width in enumerate(_stage_widths(args["width_multiplier"]), start=1)]


@register_family("bn_cifar", ("variant", "blocks_per_stage", "width_multiplier", "shortcut",
                              "gate_beta", "input_shape"), features=_bn_cifar_features,
                 stages=_bn_cifar_stages)
def bn_cifar(
    *, input_shape, preprocessing, variant, blocks_per_stage, width_multiplier, shortcut,
    gate_beta, classes, classifier_activation="softmax", include_top=True, pooling=None,
):
    """See the module docstring."""
    import keras

    if variant not in ("highway", "residual"):
        raise ValueError("variant must be 'highway' or 'residual' for the BN CIFAR nets. "
                         f"Received: variant={variant!r}")
    if shortcut not in ("projection", "zero_pad"):
        raise ValueError("shortcut must be 'projection' or 'zero_pad'. "
                         f"Received: shortcut={shortcut!r}")
    input_shape = check_input_shape(input_shape, 4)
    inputs, x = image_input(input_shape, preprocessing)
    x = keras.layers.Activation("relu", name="stem_relu")(_conv_bn(x, 16, 1, "stem"))
    for s, (width, stride) in enumerate(zip(_stage_widths(width_multiplier), _STRIDES),
                                        start=1):
        for b in range(1, blocks_per_stage + 1):
            x = _block(x, width, stride if b == 1 else 1, f"stage{s}_block{b}", variant,
                       shortcut, gate_beta)
    if not include_top:
        return inputs, features(x, pooling)
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return inputs, classifier(x, classes, classifier_activation, keras.initializers.get(_HE))
