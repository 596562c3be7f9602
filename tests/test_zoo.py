"""The zoo, driven by its registry: every registered network is tested the moment
it is registered (timm / torchvision style)."""

import json
import re

import keras
import numpy as np
import pytest

import zoo
from layers import BNHighwayBlock, HighwayConv2D, HighwayDense
from zoo import registry

EXPECTED_NAMES = {
    *(f"{kind}_fc{d}_mnist" for kind in ("highway", "plain") for d in (10, 20, 50, 100)),
    "highway_fc50_cifar100",
    "highway_conv16_mnist",
    "highway_conv32_mnist",
    "highway_a_cifar10",
    "highway_b_cifar10",
    "highway_c_cifar10",
    "highway_cifar10",
    "highway_cifar100",
    "resnet50_imagenet",
    "highway50_imagenet",
    "highway_full50_imagenet",
    "highway110_bn_cifar10",
    "resnet110_cifar10",
    # The gated-skip versions of the 50-layer net (issue 31; tests/test_skip_models.py).
    "rezero_fc50_mnist",
    "layerscale_fc50_mnist",
}
# The MNIST family again for Fashion-MNIST, same architectures.
EXPECTED_NAMES |= {n.removesuffix("_mnist") + "_fashion_mnist" for n in set(EXPECTED_NAMES)
                   if n.endswith("_mnist")}

# Exact counts, by hand from each net's layout (weights + biases), not copied from the
# registry: a highway layer of width w holds H and T side by side (a Dense or conv of 2w).
def _dense(n_in, n_out):
    return n_in * n_out + n_out


def _conv(k, c_in, c_out):
    return k * k * c_in * c_out + c_out


def _fc(inputs, width, depth, classes, highway=True):
    hidden = _dense(width, 2 * width if highway else width)
    return _dense(inputs, width) + (depth - 1) * hidden + _dense(width, classes)


def _mnist_conv(w):
    # conv 5x5, 8 highway convs 3x3, three 2x2 pools (28 -> 3), softmax on the 3x3xw map
    return _conv(5, 1, w) + 8 * _conv(3, w, 2 * w) + _dense(3 * 3 * w, 10)


def _table3(classes):
    # 3 stages (32/80/128): a plain 3x3 conv, then 4/5/5 highway 3x3 convs; 1x1 conv to
    # 100, global average pool, softmax
    stages = [(3, 32, 4), (32, 80, 5), (80, 128, 5)]
    body = sum(_conv(3, c_in, w) + n * _conv(3, w, 2 * w) for c_in, w, n in stages)
    return body + _conv(1, 128, 100) + _dense(100, classes)


EXACT_PARAMS = {
    "highway_conv16_mnist": _mnist_conv(16),
    "highway_conv32_mnist": _mnist_conv(32),
    "highway_cifar10": _table3(10),
    "highway_cifar100": _table3(100),
    **{f"highway_fc{d}_mnist": _fc(784, 50, d, 10) for d in (10, 20, 50, 100)},
    **{f"plain_fc{d}_mnist": _fc(784, 71, d, 10, highway=False) for d in (10, 20, 50, 100)},
    "highway_fc50_cifar100": _fc(32 * 32 * 3, 50, 50, 100),
    # H (w x w + w) and the skip's own: ReZero one scalar, LayerScale one factor per unit.
    "rezero_fc50_mnist": _dense(784, 71) + 49 * (_dense(71, 71) + 1) + _dense(71, 10),
    "layerscale_fc50_mnist": _dense(784, 70) + 49 * (_dense(70, 70) + 70) + _dense(70, 10),
}
# The spec's totals (§8) agree with the hand counts: a check of the counts themselves.
assert (EXACT_PARAMS["highway_fc10_mnist"], EXACT_PARAMS["plain_fc10_mnist"],
        EXACT_PARAMS["highway_conv16_mnist"], EXACT_PARAMS["highway_cifar10"]) == (
    85_660, 102_463, 38_986, 2_256_838)
# Counted by formula below (the BN CIFAR nets) or matched to ResNet-50 (the ImageNet ones).
OTHER_CHECKS = {"highway50_imagenet", "highway_full50_imagenet", "highway110_bn_cifar10",
                "resnet110_cifar10"}
# The paper's rounded counts for the reconstructed Table 2 nets.
PAPER_ROUNDED = {
    "highway_a_cifar10": 236e3, "highway_b_cifar10": 2.3e6, "highway_c_cifar10": 1.25e6,
}


def raw_pixels(shape, batch=2, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("float32")


# The language models have their own tests (tests/test_char_lm.py).
LANGUAGE_MODELS = {"lstm_char_small_ptb", "lstm_char_large_ptb", "lstm_char_small_rezero_ptb"}


def test_registry_holds_exactly_the_papers_architectures():
    assert set(zoo.list_models()) == EXPECTED_NAMES | LANGUAGE_MODELS
    assert zoo.list_models("highway_*_cifar10") == [
        "highway_a_cifar10", "highway_b_cifar10", "highway_c_cifar10",
    ]
    assert zoo.list_models("nothing*") == []


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_model_builds_runs_and_matches_its_metadata(name):
    meta = zoo.describe(name)
    model = zoo.load(name)
    assert model.count_params() == meta["params"]
    base = name.replace("_fashion_mnist", "_mnist")
    if base in EXACT_PARAMS:
        assert meta["params"] == EXACT_PARAMS[base]
    elif base == "resnet50_imagenet":  # Keras's own ResNet-50, built here
        assert meta["params"] == keras.applications.ResNet50(weights=None).count_params()
    elif base not in OTHER_CHECKS:
        assert abs(meta["params"] / PAPER_ROUNDED[base] - 1) < 0.05
    # An eager call: tracing predict() for nets of hundreds of layers costs more than running.
    probs = keras.ops.convert_to_numpy(model(raw_pixels(meta["input_shape"]), training=False))
    assert probs.shape == (2, meta["classes"])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert model.metadata["name"] == name
    assert meta["provenance"] in registry.PROVENANCE
    assert meta["recipe"] in zoo.RECIPES
    for key in ("paper", "dataset", "paper_accuracy", "default_transform_bias",
                "preprocessing", "reconstructed", "description"):
        assert key in meta, key
    if meta["provenance"] == "RECON":
        assert meta["reconstructed"]


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_default_transform_bias_lands_in_every_highway_layer(name):
    model = zoo.load(name)
    expected = zoo.describe(name)["default_transform_bias"]
    if expected is None and name.startswith(("rezero_", "layerscale_")):
        layers = highway_layers(model)  # the gated skips: highway layers without a T
        assert len(layers) == 49 and all(layer.transform_bias is None for layer in layers)
        return
    biases = transform_biases(model)
    if expected is None:  # plain and residual nets have no gates
        assert biases == [] and (name.startswith("plain_") or "resnet" in name)
        return
    assert biases
    for bias in biases:
        np.testing.assert_array_equal(bias, expected)


def transform_biases(model):
    """b_T of every gate: a highway layer's (a BN block's is its last gate BN's beta)."""
    return [keras.ops.convert_to_numpy(layer.transform_bias) for layer in highway_layers(model)]


def highway_layers(model):
    kinds = (HighwayDense, HighwayConv2D, BNHighwayBlock)
    return [layer for layer in model.layers if isinstance(layer, kinds)]


def test_layer_counts_follow_the_paper():
    assert len(highway_layers(zoo.load("highway_fc50_mnist"))) == 49
    conv = highway_layers(zoo.load("highway_c_cifar10"))
    assert len(conv) == 27
    assert [layer.kernel_size[0] for layer in conv[:4]] == [1, 3, 1, 3]
    hw32 = zoo.load("highway_conv32_mnist")
    assert hw32.get_layer("stage3_pool").output.shape[1:3] == (3, 3)  # 24 -> 12 -> 6 -> 3


def test_overrides_change_the_network_and_its_metadata():
    model = zoo.load("highway_fc10_mnist", depth=30, transform_bias=-3.0, variant="full")
    highway = highway_layers(model)
    assert len(highway) == 29
    assert all(layer.variant == "full" for layer in highway)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(highway[0].transform_bias), -3.0)
    assert model.metadata["overrides"]["depth"] == 30
    # By hand: stem 784*50 + 50; 29 full highway layers of 50*150 + 150 (H | T | C); 50*10 + 10.
    assert model.metadata["params"] == 784 * 50 + 50 + 29 * (50 * 150 + 150) + 50 * 10 + 10
    ten = zoo.load("highway_cifar10", classes=7, classifier_activation=None)
    assert ten.output_shape == (None, 7)
    assert ten.layers[-1].name == "logits"


def test_a_1000_layer_net_builds_within_pythons_recursion_limit():
    import sys

    limit = sys.getrecursionlimit()
    model = zoo.load("highway_fc10_mnist", depth=1000)  # Keras maps graphs recursively
    assert len(highway_layers(model)) == 999
    assert sys.getrecursionlimit() == limit


def test_a_stacked_fc_net_computes_what_the_per_layer_one_does():
    from layers.highway_stack import stack_weights

    per_layer = zoo.load("highway_fc50_mnist", depth=12)
    stacked = zoo.load("highway_fc50_mnist", depth=12, stacked=True)
    assert stacked.count_params() == per_layer.count_params()
    assert highway_layers(stacked) == [] and stacked.get_layer("highway_stack").depth == 11
    for name in ("stem_dense", "logits"):
        stacked.get_layer(name).set_weights(per_layer.get_layer(name).get_weights())
    stacked.get_layer("highway_stack").set_weights(
        [keras.ops.convert_to_numpy(w) for w in stack_weights(highway_layers(per_layer))]
    )
    x = raw_pixels((28, 28, 1), batch=4)
    np.testing.assert_allclose(stacked.predict(x, verbose=0), per_layer.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)


def test_unknown_name_lists_the_closest_names():
    with pytest.raises(ValueError, match="highway_b_cifar10") as err:
        zoo.load("highway_b_cifar")
    assert "Unknown model" in str(err.value)


def test_override_the_family_does_not_have_is_refused():
    with pytest.raises(ValueError, match=r"no override 'depth'.*stage_widths"):
        zoo.load("highway_b_cifar10", depth=50)
    with pytest.raises(ValueError, match="transform_bias"):
        zoo.load("plain_fc10_mnist", transform_bias=-2.0)


def _dropout_rates(model):
    return [layer.rate for layer in model.layers if isinstance(layer, keras.layers.Dropout)]


def test_mnist_conv_dropout_is_an_override_that_keeps_the_weights():
    released = zoo.load("highway_conv16_mnist")
    assert _dropout_rates(released) == [0.2, 0.3, 0.4, 0.5]  # the released net's (spec §2)
    off = zoo.load("highway_conv16_mnist", dropout=0.0)
    assert _dropout_rates(off) == [0.0] * 4
    assert _dropout_rates(zoo.load("highway_conv16_mnist", dropout=[0.1, 0.2, 0.3, 0.4])) == [
        0.1, 0.2, 0.3, 0.4]
    # Dropout holds no weights: weights trained at any rate load into the released net, and
    # in inference mode the nets compute the same function.
    off.set_weights([np.asarray(w) + 0.01 for w in released.get_weights()])
    released.set_weights(off.get_weights())
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(off.predict(x, verbose=0), released.predict(x, verbose=0))
    # In training mode the rate is used: no dropout leaves the output deterministic.
    np.testing.assert_array_equal(off(x, training=True), off(x, training=True))
    assert not np.array_equal(released(x, training=True), released(x, training=True))
    for bad in (1.0, -0.1, [0.1, 0.2], "high"):
        with pytest.raises(ValueError, match="dropout must be a rate in"):
            zoo.load("highway_conv16_mnist", dropout=bad)


def test_cifar_dropout_is_an_override_of_every_dropout_layer():
    # The released CIFAR net's 0.2 on the input, after each pool and before the classifier
    # (spec §3): four layers for three stages; Highway A, reconstructed, has the same.
    released = zoo.load("highway_a_cifar10")
    assert _dropout_rates(released) == [0.2] * 4
    assert _dropout_rates(zoo.load("highway_a_cifar10", dropout=0.0)) == [0.0] * 4
    rates = [0.1, 0.2, 0.3, 0.4]
    chosen = zoo.load("highway_a_cifar10", dropout=rates)
    assert [(layer.name, layer.rate) for layer in chosen.layers
            if isinstance(layer, keras.layers.Dropout)] == list(zip(
                ["input_dropout", "stage1_dropout", "stage2_dropout", "head_dropout"], rates))
    chosen.set_weights(released.get_weights())  # dropout holds no weights
    with pytest.raises(ValueError, match=r"dropout must be a rate in.*4 of them"):
        zoo.load("highway_a_cifar10", dropout=[0.1, 0.2, 0.3])


def test_shipped_weights_bring_the_settings_they_were_trained_with():
    # As a keras-hub preset's config: the Fashion-MNIST conv weights were trained without
    # dropout (index.json's training_overrides), so they load into a net without dropout,
    # unless the caller asks for a rate; the MNIST ones keep the released rates.
    from zoo import pretrained

    name = "highway_conv16_fashion_mnist"
    assert pretrained.record(name)["training_overrides"] == {"dropout": 0.0}
    shipped = zoo.load(name, weights="default")
    assert shipped.overrides["dropout"] == 0.0 and _dropout_rates(shipped) == [0.0] * 4
    chosen = zoo.load(name, weights="default", dropout=0.3, include_top=False)
    assert _dropout_rates(chosen) == [0.3] * 4
    assert _dropout_rates(zoo.load("highway_conv16_mnist", weights="default")) == [
        0.2, 0.3, 0.4, 0.5]
    fc100 = zoo.load("highway_fc100_mnist", weights="default")
    assert fc100.overrides["transform_bias"] == -4.0  # its b_T initialisation, recorded


def test_input_of_the_wrong_shape_is_refused():
    model = zoo.load("highway_conv16_mnist")
    with pytest.raises(ValueError, match=r"28, 28, 1"):
        model.predict(raw_pixels((32, 32, 3)), verbose=0)


def test_preprocessing_is_inside_the_model():
    model = zoo.load("highway_fc10_mnist")
    x = raw_pixels((28, 28, 1))
    scaled = keras.Model(model.input, model.get_layer("rescale").output)(x)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scaled), x / 255.0, rtol=1e-6)
    cifar = zoo.load("highway_cifar10")
    gcn = keras.Model(cifar.input, cifar.get_layer("gcn").output)(raw_pixels((32, 32, 3)))
    gcn = keras.ops.convert_to_numpy(gcn).reshape(2, -1)
    np.testing.assert_allclose(gcn.mean(axis=1), 0.0, atol=1e-4)
    np.testing.assert_allclose(gcn.std(axis=1), 1.0, atol=1e-3)


def test_keras_file_round_trip_is_bit_exact_and_keeps_metadata(tmp_path):
    model = zoo.load("highway_conv16_mnist", transform_bias=-1.5)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, zoo.HighwayZooModel)
    assert loaded.metadata == model.metadata
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))


def test_saved_directory_loads_with_its_overrides(tmp_path):
    model = zoo.load("highway_fc10_mnist", depth=4)
    zoo.save(model, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "model.json").read_text())
    assert record["overrides"] == {"depth": 4}
    loaded = zoo.load("highway_fc10_mnist", weights=tmp_path / "run")
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))
    # Another architecture of the family takes the recorded overrides: the same network.
    twin = zoo.load("highway_fc10_fashion_mnist", weights=tmp_path / "run")
    np.testing.assert_array_equal(model.predict(x, verbose=0), twin.predict(x, verbose=0))
    with pytest.raises(ValueError, match="holds weights for 'highway_fc10_mnist'.*family"):
        zoo.load("plain_fc10_mnist", weights=tmp_path / "run")


def test_weights_file_with_a_wrong_sha256_is_refused(tmp_path):
    model = zoo.load("highway_fc10_mnist")
    path = tmp_path / "fc.weights.h5"
    recorded = zoo.save_weights(model, path)
    assert (tmp_path / "fc.weights.h5.sha256").read_text().split() == [recorded, path.name]
    zoo.load("highway_fc10_mnist", weights=path)  # the intact file loads
    with open(path, "r+b") as f:
        f.seek(-100, 2)
        f.write(b"\x00" * 100)
    with pytest.raises(zoo.WeightsHashError) as err:
        zoo.load("highway_fc10_mnist", weights=path)
    message = str(err.value)
    assert str(path) in message and recorded in message
    assert re.search(r"sha256 [0-9a-f]{64}", message)


def test_weights_without_a_recorded_hash_or_missing_are_refused(tmp_path):
    model = zoo.load("highway_fc10_mnist")
    path = tmp_path / "bare.weights.h5"
    model.save_weights(path)
    with pytest.raises(FileNotFoundError, match="No sha256 beside"):
        zoo.load("highway_fc10_mnist", weights=path)
    with pytest.raises(FileNotFoundError, match="No weights file"):
        zoo.load("highway_fc10_mnist", weights=tmp_path / "missing.weights.h5")
    with pytest.raises(FileNotFoundError, match="is not 'default'"):
        zoo.load("highway_fc10_mnist", weights="imagenet")
    with pytest.raises(ValueError, match="No pretrained weights for 'highway110_bn_cifar10'"):
        zoo.load("highway110_bn_cifar10", weights="default")
    # A net whose weights cannot be trained here yet says why, in one line (its preset's
    # "weights_pending")
    with pytest.raises(ValueError, match=r"No weights for 'highway_cifar100' yet: .*no copy of "
                       r"CIFAR-100.*needs a GPU.* Train your own") as error:
        zoo.load("highway_cifar100", weights="default")
    assert "\n" not in str(error.value)


def test_saved_weights_leave_the_optimizer_state_out(tmp_path):
    model = zoo.load("highway_fc10_mnist", depth=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(raw_pixels((28, 28, 1), batch=8), np.arange(8) % 10, epochs=1, verbose=0)
    zoo.save_weights(model, tmp_path / "w.weights.h5")
    bare = zoo.load("highway_fc10_mnist", depth=3)
    bare.save_weights(tmp_path / "bare.weights.h5")
    # Adam's two moments would triple the file; the weights alone match an uncompiled save.
    assert abs((tmp_path / "w.weights.h5").stat().st_size
               - (tmp_path / "bare.weights.h5").stat().st_size) < 4096
    loaded = zoo.load("highway_fc10_mnist", depth=3)
    loaded.load_weights(tmp_path / "w.weights.h5")
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))


def test_saving_never_overwrites_existing_weights(tmp_path):
    model = zoo.load("highway_fc10_mnist")
    path = tmp_path / "w.weights.h5"
    zoo.save_weights(model, path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        zoo.save_weights(zoo.load("highway_fc10_mnist"), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.weights.h5", "w.weights.h5.sha256"]
