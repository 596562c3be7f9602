"""Fine-tuning and one model in two forms: every weights source (shipped, preset or run
directory, `.weights.h5`) loads its body into a new classifier, into `include_top=False`, and
into stacked and per-layer nets alike; a body that does not match is refused whole."""

import warnings

import keras
import numpy as np
import pytest

import zoo
from zoo import pretrained
from zoo.loading import load_into, weights_source

SHIPPED_FC = sorted(n for n in pretrained.index() if n.startswith("highway_fc"))


def raw_pixels(shape, batch=4, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("float32")


def weights_by_layer(model):
    return {layer.name: [keras.ops.convert_to_numpy(w) for w in layer.weights]
            for layer in model.layers if layer.weights}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same trained-looking conv net as each kind of source: shipped, preset, file."""
    tmp = tmp_path_factory.mktemp("sources")
    name = "highway_conv16_fashion_mnist"
    model = zoo.load(name, weights="default")
    zoo.save(model, tmp / "preset")
    zoo.save_weights(model, tmp / "file.weights.h5")
    return name, model, {"default": "default", "preset": tmp / "preset",
                         "file": tmp / "file.weights.h5"}


@pytest.mark.parametrize("kind", ["default", "preset", "file"])
def test_classes_loads_the_body_and_starts_a_new_classifier_saying_so_once(sources, kind):
    name, trained, weights = sources
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = zoo.load(name, weights=weights[kind], classes=5)
    said = [str(w.message) for w in caught if "freshly initialised" in str(w.message)]
    assert len(said) == 1 and "logits" in said[0] and "(144, 5)" in said[0], said
    assert model.output.shape[1:] == (5,)
    source, loaded = weights_by_layer(trained), weights_by_layer(model)
    assert set(loaded) == set(source)
    for layer, values in loaded.items():
        if layer != "logits":
            for a, b in zip(values, source[layer]):
                np.testing.assert_array_equal(a, b, err_msg=layer)
    assert loaded["logits"][0].shape == (144, 5)
    np.testing.assert_array_equal(loaded["logits"][1], 0.0)  # the Dense's fresh zero bias


@pytest.mark.parametrize("kind", ["default", "preset", "file"])
def test_include_top_false_loads_the_body_for_your_own_head(sources, kind):
    name, trained, weights = sources
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing starts afresh: the top is left out
        body = zoo.load(name, weights=weights[kind], include_top=False, pooling="avg")
    x = raw_pixels((28, 28, 1))
    inside = keras.Model(trained.input, trained.get_layer("stage3_dropout").output)
    np.testing.assert_allclose(body.predict(x, verbose=0),
                               inside.predict(x, verbose=0).mean(axis=(1, 2)), rtol=1e-5)
    head = keras.Sequential([body, keras.layers.Dense(3, activation="softmax")])
    assert head.predict(x, verbose=0).shape == (4, 3)


@pytest.mark.parametrize("name", SHIPPED_FC)
def test_stacked_and_per_layer_nets_predict_alike_from_shipped_weights(name):
    x = raw_pixels((28, 28, 1), batch=16)
    per_layer = zoo.load(name, weights="default").predict(x, verbose=0)
    stacked = zoo.load(name, weights="default", stacked=True).predict(x, verbose=0)
    np.testing.assert_allclose(stacked, per_layer, rtol=1e-4, atol=1e-6)
    assert np.abs(per_layer - 0.1).max() > 0.1  # trained: far from uniform


def test_every_source_of_either_form_loads_into_both_forms(tmp_path):
    name, x = "highway_fc10_mnist", raw_pixels((28, 28, 1))
    reference = zoo.load(name, weights="default").predict(x, verbose=0)
    for stacked in (False, True):
        model = zoo.load(name, weights="default", stacked=stacked)
        zoo.save(model, tmp_path / f"preset-{stacked}")
        zoo.save_weights(model, tmp_path / f"file-{stacked}.weights.h5")
    for source in ("preset-False", "preset-True", "file-False.weights.h5",
                   "file-True.weights.h5"):
        for stacked in (False, True):
            model = zoo.load(name, weights=tmp_path / source, stacked=stacked)
            assert any(layer.name == "highway_stack" for layer in model.layers) == stacked
            np.testing.assert_allclose(model.predict(x, verbose=0), reference, rtol=1e-4,
                                       atol=1e-6, err_msg=f"{source} -> stacked={stacked}")


@pytest.mark.parametrize(("overrides", "shown"), [
    ({"depth": 5}, "9 highway layers there, 4 here"),
    ({"depth": 5, "stacked": True}, "9 highway layers there, 4 here"),
    ({"depth": 12, "stacked": True},
     "a stack of 11 highway layers; the weights have 9|9 highway layers there, 11 here"),
    ({"width": 40}, "(784, 50) + (50,) there and (784, 40) + (40,) here"),
    ({"variant": "full"}, "(50, 100) + (100,) there and (50, 150) + (150,) here"),
])
@pytest.mark.parametrize("kind", ["default", "preset", "file"])
def test_a_body_that_does_not_match_is_refused_naming_both_shapes(tmp_path, overrides, shown,
                                                                   kind):
    name = "highway_fc10_mnist"
    weights = {"default": "default", "preset": tmp_path / "preset",
               "file": tmp_path / "w.weights.h5"}[kind]
    if kind != "default":
        trained = zoo.load(name, weights="default")
        zoo.save(trained, tmp_path / "preset")
        zoo.save_weights(trained, tmp_path / "w.weights.h5")
    with pytest.raises(zoo.WeightsMismatchError) as err:
        zoo.load(name, weights=weights, **overrides)
    message = str(err.value)
    assert any(part in message for part in shown.split("|")), message
    assert "\n" not in message


def test_a_stack_of_another_depth_is_refused_naming_both_shapes(tmp_path):
    zoo.save(zoo.load("highway_fc10_mnist", stacked=True), tmp_path / "stacked")
    with pytest.raises(zoo.WeightsMismatchError, match=r"'highway_stack' has weights of shape "
                       r"\(9, 50, 100\) \+ \(9, 100\) there and \(4, 50, 100\)"):
        zoo.load("highway_fc10_mnist", weights=tmp_path / "stacked", depth=5)
    with pytest.raises(zoo.WeightsMismatchError, match="9 highway layers there, 4 here"):
        zoo.load("highway_fc10_mnist", weights=tmp_path / "stacked", depth=5, stacked=False)


def test_nothing_is_loaded_half_way(tmp_path):
    """The deeper file fits the first layers; the refusal comes before any of them changes."""
    deep = zoo.load("highway_fc10_mnist", depth=6)
    zoo.save(deep, tmp_path / "deep")
    shallow = zoo.load("highway_fc10_mnist", depth=4)
    before = weights_by_layer(shallow)
    source = weights_source("highway_fc10_mnist", tmp_path / "deep")
    with pytest.raises(zoo.WeightsMismatchError, match="5 highway layers there, 3 here"):
        load_into(shallow, source)
    for layer, values in weights_by_layer(shallow).items():
        for a, b in zip(values, before[layer]):
            np.testing.assert_array_equal(a, b, err_msg=layer)


def test_a_bare_file_of_another_class_count_needs_classes(tmp_path):
    five = zoo.load("highway_fc10_mnist", classes=5, depth=3)
    path = tmp_path / "five.weights.h5"
    zoo.save_weights(five, path)
    with pytest.raises(zoo.WeightsMismatchError, match="'logits' has weights of shape"):
        zoo.load("highway_fc10_mnist", weights=path, depth=3)
    x = raw_pixels((28, 28, 1))
    same = zoo.load("highway_fc10_mnist", weights=path, depth=3, classes=5)
    np.testing.assert_array_equal(same.predict(x, verbose=0), five.predict(x, verbose=0))


def test_a_preset_of_features_gets_a_new_top(tmp_path):
    body = zoo.load("highway_conv16_mnist", include_top=False)
    zoo.save(body, tmp_path / "body")
    fresh = r"logits \(144, 10\) \+ \(10,\) is freshly initialised \(not in the weights\)"
    with pytest.warns(UserWarning, match=fresh):
        model = zoo.load(tmp_path / "body", classes=10)
    assert model.output.shape[1:] == (10,)
    np.testing.assert_array_equal(model.get_layer("stem_conv").get_weights()[0],
                                  body.get_layer("stem_conv").get_weights()[0])
