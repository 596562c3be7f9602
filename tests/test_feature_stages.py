"""Multi-scale features: `zoo.load(name, include_top=False, feature_stages=...)` gives one
output per stage (keras-hub's `pyramid_outputs` keys, timm's `feature_info` in `describe`),
each equal to the full network's intermediate output, from every weights source and in both
forms of the FC nets; a stage that does not exist is refused in one line."""

import warnings

import keras
import numpy as np
import pytest
from zoo_cases import SMALL, one_per_family

import zoo
from zoo import registry

IMAGE_NAMES = [n for n in zoo.list_models() if zoo.describe(n)["feature_stages"] is not None]
# One per family (zoo_cases), and the variants and heads whose stages end in other layers:
# a residual ImageNet net's blocks end in `_out`, a highway BN CIFAR net's in the block, the
# CIFAR Table 3 head in its 1x1 conv.
CASES = one_per_family() + [
    ("resnet50_imagenet", SMALL["bottleneck_imagenet"]),
    ("highway110_bn_cifar10", SMALL["bn_cifar"]),
    ("highway_cifar10", {}),
]


def run(model, x):
    """Eager, in inference mode (dropout off); a dict of NumPy arrays for a dict output."""
    out = model(x, training=False)
    if isinstance(out, dict):
        return {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
    return keras.ops.convert_to_numpy(out)


def raw_pixels(shape, batch=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("float32")


def inside(full, layer, x):
    """The full network's intermediate output at `layer`, computed from the full network."""
    return run(keras.Model(full.input, full.get_layer(layer).output), x)


def spatial(layer):
    shape = layer.output.shape
    return tuple(shape[1:3]) if len(shape) == 4 else None


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_describe_gives_strides_as_keras_hubs_levels_ending_at_the_features(name):
    """Arithmetic only: names P{log2 stride} (conv nets) or layer names (FC nets), strides
    doubling from stage to stage, and the last stage what include_top=False returns."""
    info = zoo.describe(name)
    stages, features = info["feature_stages"], info["features"]
    assert (stages[-1]["layer"], stages[-1]["shape"]) == (features["layer"], features["shape"])
    strides = [stage["stride"] for stage in stages]
    if info["family"] in ("highway_fc", "plain_fc"):
        assert strides == [None] * len(stages) == [None] * info["architecture_args"]["depth"]
        assert [s["name"] for s in stages] == [s["layer"] for s in stages]
        return
    assert all(b == 2 * a for a, b in zip(strides, strides[1:])), strides
    assert [s["name"] for s in stages] == [f"P{int(np.log2(s))}" for s in strides]
    # Each stage halves the previous one's size (rounded up or down as the family pools).
    sizes = [stage["shape"][0] for stage in stages]
    assert all(abs(b - a / 2) < 1 for a, b in zip(sizes, sizes[1:])), sizes


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_each_stage_is_the_deepest_layer_at_its_resolution_in_the_full_network(
        name, overrides):
    """What a stage is, checked on the full network's graph without the stage arithmetic:
    a conv net's stage is the last layer at its height and width (the layer before the next
    down-sampling, or the body's last); an FC net's are its stem and hidden layers."""
    full = zoo.load(name, **overrides)
    stages = registry.get(name).stages(overrides)
    if len(stages[0]["shape"]) == 1:
        hidden = [layer.name for layer in full.layers
                  if layer.weights and layer.name != "logits"]
        assert [s["layer"] for s in stages] == hidden
        return
    for stage in stages:
        size = tuple(stage["shape"][:2])
        at_size = [layer.name for layer in full.layers if spatial(layer) == size]
        assert at_size[-1] == stage["layer"], (stage, at_size)
        assert full.get_layer(stage["layer"]).output.shape[1:] == tuple(stage["shape"])


@pytest.mark.parametrize(("name", "overrides"), CASES)
def test_stages_equal_the_full_networks_intermediate_outputs(name, overrides, tmp_path):
    """Same weights (a .weights.h5 of the full net with its top): every stage equals the full
    network's output at the stage's layer, and describe's shapes are Keras's."""
    full = zoo.load(name, **overrides)
    path = tmp_path / "w.weights.h5"
    zoo.save_weights(full, path)
    x = raw_pixels(full.metadata["input_shape"])
    features = zoo.load(name, weights=path, include_top=False, feature_stages="all",
                        **overrides)
    got = run(features, x)
    stages = features.metadata["feature_stages"]
    assert stages == registry.get(name).stages(overrides)
    assert list(got) == [s["name"] for s in stages]
    for stage in stages:
        expected = inside(full, stage["layer"], x)
        assert list(got[stage["name"]].shape[1:]) == stage["shape"]
        np.testing.assert_allclose(got[stage["name"]], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=stage["name"])


def test_a_subset_of_stages_ends_the_model_at_the_deepest_one(tmp_path):
    overrides = SMALL["bottleneck_imagenet"]
    full = zoo.load("resnet50_imagenet", **overrides)
    path = tmp_path / "w.weights.h5"
    zoo.save_weights(full, path)
    x = raw_pixels(overrides["input_shape"])
    model = zoo.load("resnet50_imagenet", weights=path, include_top=False,
                     feature_stages=["P3", "P2"], **overrides)
    names = {layer.name for layer in model.layers}
    assert "conv3_block1_out" in names and not any(n.startswith("conv4") for n in names)
    got = run(model, x)
    assert list(got) == ["P2", "P3"]  # network order, whatever order was asked for
    np.testing.assert_allclose(got["P3"], inside(full, "conv3_block1_out", x), rtol=1e-5,
                               atol=1e-6)


# --- every weights source -----------------------------------------------------------------


@pytest.fixture(scope="module")
def conv_sources(tmp_path_factory):
    """The shipped conv net as each kind of source: shipped, preset, bare weights file."""
    tmp = tmp_path_factory.mktemp("sources")
    name = "highway_conv16_fashion_mnist"
    model = zoo.load(name, weights="default")
    zoo.save(model, tmp / "preset")
    zoo.save_weights(model, tmp / "file.weights.h5")
    return name, model, {"default": "default", "preset": tmp / "preset",
                         "file": tmp / "file.weights.h5"}


@pytest.mark.parametrize("kind", ["default", "preset", "file"])
def test_every_weights_source_gives_the_trained_networks_stages(conv_sources, kind):
    name, trained, weights = conv_sources
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing starts afresh: the top is left out
        model = zoo.load(name, weights=weights[kind], include_top=False,
                         feature_stages="all")
    x = raw_pixels((28, 28, 1))
    got = run(model, x)
    for stage in model.metadata["feature_stages"]:
        np.testing.assert_array_equal(got[stage["name"]], inside(trained, stage["layer"], x),
                                      err_msg=stage["name"])


def test_a_saved_feature_model_loads_back_as_itself(conv_sources, tmp_path):
    name, _, _ = conv_sources
    model = zoo.load(name, weights="default", include_top=False, feature_stages=["P1"])
    zoo.save(model, tmp_path / "p1")
    card = (tmp_path / "p1" / "README.md").read_text(encoding="utf-8")
    assert "Output: a dict of one feature per stage (`P1` (12, 12, 16);" in card
    again = zoo.load(tmp_path / "p1")
    assert again.overrides["feature_stages"] == ["P1"]
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(run(again, x)["P1"], run(model, x)["P1"])
    model.save(tmp_path / "p1.keras")
    np.testing.assert_array_equal(
        run(keras.saving.load_model(tmp_path / "p1.keras"), x)["P1"], run(model, x)["P1"])


@pytest.mark.parametrize("source_stacked", [False, True])
def test_both_fc_forms_give_the_same_stages_from_either_forms_weights(source_stacked,
                                                                      tmp_path):
    """Shipped per-layer weights, or a preset saved from the stacked form: the stacked and
    per-layer feature models agree with the full per-layer net's hidden outputs."""
    name = "highway_fc10_fashion_mnist"
    trained = zoo.load(name, weights="default")
    source = "default"
    if source_stacked:
        source = zoo.save(zoo.load(name, weights="default", stacked=True), tmp_path / "s")
    x = raw_pixels((28, 28, 1), batch=8)
    # A preset brings the form it was saved in: stacked=False asks for the other one.
    per_layer = run(zoo.load(name, weights=source, include_top=False, stacked=False,
                             feature_stages="all"), x)
    stacked = run(zoo.load(name, weights=source, include_top=False, stacked=True,
                           feature_stages="all"), x)
    assert list(per_layer) == ["stem_dense", *(f"highway_{i}" for i in range(1, 10))]
    assert list(stacked) == ["stem_dense", "highway_9"]
    for stage, values in per_layer.items():
        np.testing.assert_allclose(values, inside(trained, stage, x), rtol=1e-5, atol=1e-6)
    for stage, values in stacked.items():  # the stack's scan sums in another order
        np.testing.assert_allclose(values, per_layer[stage], rtol=1e-4, atol=1e-6)


def test_a_source_of_another_depth_is_refused_even_for_a_shallow_stage():
    """The feature model ends at highway_2, but the body it belongs to has 4 highway layers
    and the weights 9: refused as for the whole body, not loaded into the first two."""
    with pytest.raises(zoo.WeightsMismatchError, match="9 highway layers there, 4 here"):
        zoo.load("highway_fc10_fashion_mnist", weights="default", depth=5,
                 include_top=False, feature_stages=["highway_2"])


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "overrides", "message"), [
    ("highway_a_cifar10", {"feature_stages": ["P5"]},
     r"highway_a_cifar10 has no feature stage 'P5'\. Its stages: P0 \(stride 1, "
     r"\(32, 32, 16\)\), P1 \(stride 2, \(16, 16, 32\)\), P2 \(stride 4, \(8, 8, 64\)\)\. "
     r"Pass feature_stages='all'"),
    ("highway_fc10_mnist", {"stacked": True, "feature_stages": ["highway_3"]},
     r"no feature stage 'highway_3' \(stacked=True holds the highway layers in one layer.*"
     r"stacked=False.*Its stages: stem_dense \(\(50,\)\), highway_9 \(\(50,\)\)"),
    ("highway_fc100_mnist", {"feature_stages": ["highway_100"]},
     r"Its stages: stem_dense \(\(50,\)\), highway_1 \(\(50,\)\), highway_2 \(\(50,\)\), "
     r"\.\.\., highway_98 \(\(50,\)\), highway_99 \(\(50,\)\)\."),
    ("highway_a_cifar10", {"include_top": True}, "which replace the classifier.*"
     r"zoo.load\('highway_a_cifar10', include_top=False, feature_stages='all'\)"),
    ("highway_a_cifar10", {"pooling": "avg"}, "Leave pooling=None"),
    ("highway_a_cifar10", {"feature_stages": "P1"}, "must be 'all' or a list of stage names"),
    ("highway_a_cifar10", {"feature_stages": []}, "must be 'all' or a list of stage names"),
    ("lstm_char_small_ptb", {}, r"\(family 'char_lm'\) has no override 'feature_stages'"),
])
def test_a_stage_that_does_not_exist_or_a_contradiction_gets_one_clear_line(
        name, overrides, message):
    overrides = {"include_top": False, "feature_stages": "all", **overrides}
    with pytest.raises(ValueError, match=message) as err:
        zoo.load(name, **overrides)
    assert "\n" not in str(err.value)
