"""The batch-normalised nets: Greff et al. 2017's 50-layer ImageNet highway nets beside
ResNet-50, and the 110-layer BN CIFAR highway net beside ResNet-110."""

import keras
import numpy as np
import pytest

import zoo
from layers import BNHighwayBlock
from training.data import augment


def run(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def outputs(model, names, x):
    probe = keras.Model(model.input, {n: model.get_layer(n).output for n in names})
    values = probe(x, training=False)
    return [keras.ops.convert_to_numpy(values[n]) for n in names]


def block_parts(model, name, x):
    """S, H, T and y of the `BNHighwayBlock` `name` (inference mode), from its input."""
    block = model.get_layer(name)
    block_input = run(keras.Model(model.input, block.input), x)
    parts = (block.shortcut_output(block_input), block.block_state(block_input),
             block.transform_gate(block_input), block(block_input, training=False))
    return block, [keras.ops.convert_to_numpy(p) for p in parts]


def weight(block, name):
    return next(keras.ops.convert_to_numpy(w) for w in block.weights if w.name == name)


def raw_pixels(shape, batch=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (batch, *shape)).astype("float32")


# --- ImageNet ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet50():
    return keras.applications.ResNet50(weights=None)


def test_the_residual_twin_is_keras_applications_resnet50_layer_by_layer(resnet50):
    ours = zoo.load("resnet50_imagenet")
    assert ours.count_params() == resnet50.count_params() == 25_636_712
    renamed = {"predictions": "logits"}  # keras puts the softmax in the Dense; we split it
    for layer in resnet50.layers:
        if not layer.weights:
            continue
        mine = ours.get_layer(renamed.get(layer.name, layer.name))
        assert type(mine) is type(layer), layer.name
        assert [w.shape for w in mine.weights] == [w.shape for w in layer.weights], layer.name
        for attribute in ("strides", "padding", "epsilon", "axis"):
            if hasattr(layer, attribute):
                assert getattr(mine, attribute) == getattr(layer, attribute), (layer.name,
                                                                               attribute)


def test_the_preprocessing_is_resnet50s_preprocess_input():
    x = raw_pixels((32, 32, 3), batch=3)
    model = zoo.load("resnet50_imagenet", include_top=False, input_shape=(32, 32, 3))
    (inside,) = outputs(model, ["preprocessing"], x)
    expected = keras.applications.resnet50.preprocess_input(x.copy())
    np.testing.assert_allclose(inside, expected, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("name", ["highway50_imagenet", "highway_full50_imagenet"])
def test_the_highway_nets_are_within_one_percent_of_resnet50(name, resnet50):
    model = zoo.load(name)
    assert abs(model.count_params() / resnet50.count_params() - 1) < 0.01
    # T has H's receptive fields and parameter count, block by block.
    blocks = [layer for layer in model.layers if isinstance(layer, BNHighwayBlock)]
    assert len(blocks) == 16 and blocks[-1].name == "conv5_block3"
    for block in blocks:
        assert block.kernel_sizes == ((1, 1), (3, 3), (1, 1)) and block.use_bias
        shapes = {w.name: tuple(w.shape) for w in block.weights}
        gate = {n: shape for n, shape in shapes.items() if n.startswith("t")}
        assert gate == {"t" + n[1:]: shape for n, shape in shapes.items() if n.startswith("h")}
        assert len(gate) == 3 * 6  # kernel, bias, gamma, beta, moving mean and variance


def test_a_residual_bottleneck_block_adds_its_branch():
    model = zoo.load("resnet50_imagenet", input_shape=(32, 32, 3), width_multiplier=0.125)
    block = "conv3_block1"  # a first block: projection shortcut, stride 2
    s, h, y = outputs(model, [f"{block}_0_bn", f"{block}_3_bn", f"{block}_out"],
                      raw_pixels((32, 32, 3)))
    np.testing.assert_allclose(y, np.maximum(s + h, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["highway", "highway_full"])
def test_a_highway_bottleneck_block_combines_its_branches_as_the_paper_says(variant):
    model = zoo.load("resnet50_imagenet", variant=variant, input_shape=(32, 32, 3),
                     width_multiplier=0.125, transform_bias=-1.0)
    x = raw_pixels((32, 32, 3))
    block, (s, h, t, y) = block_parts(model, "conv3_block1", x)  # projection, stride 2
    assert block.strides == (2, 2) and "shortcut_kernel" in {w.name for w in block.weights}
    np.testing.assert_allclose(y, np.maximum(s + t * (h - s), 0), rtol=1e-5, atol=1e-5)
    # Highway-Full: a third ReLU ends H; Highway: H ends in the last BN, negative values kept.
    assert (h.min() >= 0) == (variant == "highway_full")
    np.testing.assert_array_equal(block.transform_bias, -1.0)
    block, (s, h, t, y) = block_parts(model, "conv3_block2", x)  # identity shortcut
    assert "shortcut_kernel" not in {w.name for w in block.weights}
    (block_input,) = outputs(model, ["conv3_block1"], x)
    np.testing.assert_array_equal(s, block_input)
    np.testing.assert_allclose(y, np.maximum(s + t * (h - s), 0), rtol=1e-5, atol=1e-5)


def test_imagenet_features_and_a_wrong_image_size():
    assert zoo.describe("highway50_imagenet")["features"]["shape"] == [7, 7, 4 * 376]
    assert zoo.describe("resnet50_imagenet")["features"]["shape"] == [7, 7, 2048]
    with pytest.raises(ValueError, match="integers >= 32") as err:
        zoo.load("resnet50_imagenet", input_shape=(16, 16, 3))
    assert "\n" not in str(err.value)


# --- BN CIFAR ---------------------------------------------------------------------------------


def _trainable_params_by_formula(widths, blocks, highway, projection, classes=10):
    """Convs without bias, BN gamma and beta; what PyTorch counts as parameters."""
    total, channels = 3 * 3 * 3 * 16 + 2 * 16, 16  # the stem conv and its BN
    for s, width in enumerate(widths):
        for b in range(blocks):
            branch = 9 * channels * width + 2 * width + 9 * width * width + 2 * width
            total += branch * (2 if highway else 1)
            if (channels != width or (s > 0 and b == 0)) and projection:
                total += channels * width + 2 * width
            channels = width
    return total + channels * classes + classes


@pytest.mark.parametrize(("name", "widths", "highway", "projection"), [
    ("highway110_bn_cifar10", (14, 28, 56), True, True),
    ("resnet110_cifar10", (16, 32, 64), False, False),
])
def test_bn_cifar_nets_have_the_reference_codes_parameters(name, widths, highway, projection):
    model = zoo.load(name)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == _trainable_params_by_formula(widths, 18, highway, projection)
    blocks = [n for n in model.layers
              if isinstance(n, BNHighwayBlock) or n.name.endswith("_out")]
    assert len(blocks) == 54  # 3 x 18 blocks
    if name.startswith("resnet"):
        assert round(trainable / 1e6, 1) == 1.7  # He et al.'s ResNet-110: 1.7M


def test_bn_cifar_blocks_combine_as_the_reference_code():
    x = raw_pixels((32, 32, 3))
    highway = zoo.load("highway110_bn_cifar10", blocks_per_stage=2)
    block = "stage2_block1"  # stride 2, 14 -> 28 channels: a projection shortcut
    layer, (s, h, t, y) = block_parts(highway, block, x)
    np.testing.assert_allclose(y, s + t * (h - s), rtol=1e-5, atol=1e-5)
    assert h.min() >= 0  # H ends in a ReLU
    assert layer.kernel_sizes == ((3, 3), (3, 3)) and not layer.use_bias
    assert (layer.epsilon, layer.momentum) == (1e-5, 0.9)  # PyTorch's BatchNorm2d defaults
    assert weight(layer, "shortcut_kernel").shape == (1, 1, 14, 28)
    np.testing.assert_array_equal(weight(layer, "t2_beta"), -6.0)
    assert "shortcut_kernel" not in {w.name for w in highway.get_layer("stage2_block2").weights}

    residual = zoo.load("resnet110_cifar10", blocks_per_stage=2)
    before, s, h, y = outputs(residual, ["stage1_block2_out", f"{block}_shortcut",
                                         f"{block}_2_bn", f"{block}_out"], x)
    # Option A: every other pixel, the 16 new channels zero, 8 on each side.
    expected_s = np.pad(before[:, ::2, ::2, :], [(0, 0), (0, 0), (0, 0), (8, 8)])
    np.testing.assert_array_equal(s, expected_s)
    np.testing.assert_allclose(y, np.maximum(s + h, 0), rtol=1e-5, atol=1e-5)


def test_the_new_augmentations_keep_the_shape_and_repeat_by_seed():
    import tensorflow as tf

    image = tf.constant(raw_pixels((40, 30, 3), batch=1)[0])
    for name in ("pad4_crop_flip", "random_resized_crop_flip"):
        f = augment.get(name)
        a, b = f(image, tf.constant([3, 4])), f(image, tf.constant([3, 4]))
        other = f(image, tf.constant([5, 6]))
        assert a.shape == image.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert not np.array_equal(a.numpy(), other.numpy())
        assert 0 <= a.numpy().min() and a.numpy().max() <= 255.0 + 1e-3


def test_an_image_of_the_wrong_size_is_refused_in_one_line():
    model = zoo.load("resnet50_imagenet", width_multiplier=0.125, stage_blocks=(1, 1, 1, 1))
    with pytest.raises(ValueError) as err:
        model.predict(raw_pixels((32, 32, 3)), verbose=0)
    message = str(err.value)
    assert "(None, 224, 224, 3)" in message and "(2, 32, 32, 3)" in message
    assert "\n" not in message
