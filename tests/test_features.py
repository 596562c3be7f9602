"""Feature extraction in keras.applications' vocabulary: `include_top=False`, `pooling`, and
`input_shape` where the family pools globally; driven from the registry."""

import keras
import numpy as np
import pytest
from zoo_cases import one_per_family

import zoo
from zoo import registry

NAMES = zoo.list_models()
# One architecture per family and head: the builders differ by family, not by name.
PER_FAMILY = ["highway_fc10_mnist", "plain_fc10_mnist", "highway_conv16_mnist",
              "highway_a_cifar10", "highway_cifar10"]
SMALL_PER_FAMILY = one_per_family()


def run(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def raw_pixels(shape, batch=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("float32")


@pytest.mark.parametrize("name", NAMES)
def test_describe_says_what_the_features_are_and_the_model_agrees(name):
    features = zoo.describe(name)["features"]
    model = zoo.load(name, include_top=False)
    # describe() computes the shape by arithmetic; Keras infers it from the built graph.
    assert list(model.output.shape[1:]) == features["shape"]
    assert model.get_layer(features["layer"]).output is model.output
    assert not {"logits", "predictions"} & {layer.name for layer in model.layers}
    assert model.metadata["classes"] is None
    if features["pooled_shape"] is not None and name in PER_FAMILY:
        for pooling in ("avg", "max"):
            pooled = zoo.load(name, include_top=False, pooling=pooling)
            assert list(pooled.output.shape[1:]) == features["pooled_shape"]


@pytest.mark.parametrize(("name", "overrides"), SMALL_PER_FAMILY)
def test_features_are_the_full_networks_intermediate_output(name, overrides, tmp_path):
    """Same weights (a .weights.h5 with its sha256): the features equal the body's output inside
    the full network, and pooling equals NumPy's mean / max over positions."""
    full = zoo.load(name, **overrides)
    path = tmp_path / "w.weights.h5"
    zoo.save_weights(full, path)
    x = raw_pixels(full.metadata["input_shape"])
    info = registry.get(name).features(overrides)
    # Eager calls: for a graph of hundreds of layers, tracing predict() costs more than running.
    inside = run(keras.Model(full.input, full.get_layer(info["layer"]).output), x)
    assert list(inside.shape[1:]) == info["shape"]
    features = zoo.load(name, weights=path, include_top=False, **overrides)
    np.testing.assert_allclose(run(features, x), inside, rtol=1e-5, atol=1e-6)
    if inside.ndim == 4:
        for pooling, reduce in (("avg", np.mean), ("max", np.max)):
            pooled = zoo.load(name, weights=path, include_top=False, pooling=pooling,
                              **overrides)
            np.testing.assert_allclose(run(pooled, x), reduce(inside, axis=(1, 2)),
                                       rtol=1e-5, atol=1e-6)


def test_global_pooling_nets_take_another_input_size_with_the_same_weights(tmp_path):
    small = zoo.load("highway_a_cifar10")
    path = tmp_path / "a.weights.h5"
    zoo.save_weights(small, path)
    big = zoo.load("highway_a_cifar10", weights=path, input_shape=(64, 48, 3))
    probabilities = big.predict(raw_pixels((64, 48, 3)), verbose=0)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert big.metadata["input_shape"] == [64, 48, 3]
    features = zoo.load("highway_a_cifar10", weights=path, input_shape=(64, 48, 3),
                        include_top=False)
    assert features.output.shape[1:] == (16, 12, 64)
    assert zoo.load("highway_conv16_mnist", include_top=False,
                    input_shape=(40, 40, 1)).output.shape[1:] == (5, 5, 16)  # 36->18->9->5


def test_stacked_nets_give_the_stacks_output_as_features():
    model = zoo.load("highway_fc10_mnist", include_top=False, stacked=True, depth=4)
    assert model.output.shape[1:] == (50,) and model.layers[-1].name == "highway_stack"


@pytest.mark.parametrize(("name", "overrides", "message"), [
    ("highway_conv16_mnist", {"include_top": False, "classes": 5}, "classes configure the"),
    ("highway_fc10_mnist", {"include_top": False, "classifier_activation": None},
     "classifier_activation configure"),
    ("highway_a_cifar10", {"include_top": False, "pooling": "min"}, "pooling must be None"),
    ("highway_a_cifar10", {"pooling": "avg"}, "applies to the features of include_top=False"),
    ("highway_fc10_mnist", {"include_top": False, "pooling": "avg"}, "features are a vector"),
    ("highway_fc10_mnist", {"include_top": "no"}, "include_top must be True or False"),
    ("highway_conv16_mnist", {"input_shape": (40, 40, 1)}, "needs include_top=False"),
    ("highway_a_cifar10", {"input_shape": (2, 32, 3)}, "integers >= 4"),
    ("highway_fc10_mnist", {"input_shape": (32, 32, 1)}, "has no override 'input_shape'"),
])
def test_contradictory_or_unknown_top_arguments_get_one_clear_line(name, overrides, message):
    with pytest.raises(ValueError, match=message) as err:
        zoo.load(name, **overrides)
    assert "\n" not in str(err.value)
