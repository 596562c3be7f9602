"""Per-example routing (zoo/analysis/routing.py): k-means on gate patterns, compared with the
classes; synthetic patterns with and without structure, and a real net end to end."""

import json

import numpy as np
import pytest

import zoo
from zoo.analysis.routing import (
    class_overlap,
    cluster_routes,
    purity,
    routing_patterns,
    routing_report,
)


def _synthetic(structured, n=300, layers=4, units=6, classes=3, seed=0):
    """(n, layers, units) gate values in (0, 1) and their classes: with structure, each class
    opens its own units (T near 0.8 there, 0.1 elsewhere, plus noise); without, uniform noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    if not structured:
        return rng.uniform(0, 1, (n, layers, units)), labels
    templates = np.full((classes, layers, units), 0.1)
    for c in range(classes):
        templates[c, :, 2 * c : 2 * c + 2] = 0.8
    return np.clip(templates[labels] + rng.normal(0, 0.05, (n, layers, units)), 0, 1), labels


def test_known_routes_are_recovered():
    patterns, labels = _synthetic(structured=True)
    result = cluster_routes(patterns, labels, k_range=(2, 6))
    assert result["k"] == 3  # chosen by silhouette, not told
    assert result["nmi"] > 0.99 and result["purity"] == 1.0 and result["ari"] > 0.99
    assert result["nmi_at_classes"] > 0.99
    # Each class goes to one cluster of its own: its spread is one-hot, classes share nothing.
    assert np.allclose(np.sort(result["spread"], axis=1)[:, -1], 1.0)
    np.testing.assert_allclose(result["overlap"], np.eye(3), atol=1e-12)
    assert result["contingency"].sum() == len(labels)


def test_layer_nmi_finds_the_layers_that_route_by_class():
    from zoo.analysis.routing import layer_nmi

    patterns, labels = _synthetic(structured=True, layers=3)
    noise = np.random.default_rng(1).uniform(0, 1, patterns.shape[:1] + patterns.shape[2:])
    patterns[:, 1] = noise  # layer 2 ignores the class
    nmi = layer_nmi(patterns, labels, [6, 6, 6], num_classes=3)
    assert nmi[0] > 0.99 and nmi[2] > 0.99 and nmi[1] < 0.05


def test_patterns_without_structure_say_nothing_about_the_classes():
    patterns, labels = _synthetic(structured=False)
    result = cluster_routes(patterns, labels, k_range=(2, 6))
    assert result["nmi"] < 0.05 and result["nmi_at_classes"] < 0.05
    assert result["silhouette"] < 0.1  # no cluster structure either
    assert np.all(result["overlap"][~np.eye(3, dtype=bool)] > 0.9)  # all classes alike


def test_purity_and_overlap_against_hand_counts():
    clusters = np.array([0, 0, 0, 1, 1, 2])
    labels = np.array([0, 0, 1, 1, 1, 0])
    assert purity(clusters, labels) == pytest.approx(5 / 6)  # 2 + 2 + 1 of 6
    spread = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0], [0.25, 0.75, 0.0]])
    overlap = class_overlap(spread)
    assert overlap[0, 1] == 0.0 and overlap[1, 1] == pytest.approx(1.0)
    assert overlap[0, 2] == pytest.approx(np.sqrt(0.125) + np.sqrt(0.375))


def test_bad_input_is_refused():
    patterns, labels = _synthetic(structured=True, n=20)
    with pytest.raises(ValueError, match="one label per example"):
        cluster_routes(patterns, labels[:-1])
    with pytest.raises(ValueError, match="k_range must satisfy"):
        cluster_routes(patterns, labels, k_range=(1, 4))
    residual = zoo.load("highway_fc10_mnist", depth=3, variant="residual")
    with pytest.raises(ValueError, match="variant 'residual', which has no transform gate"):
        routing_patterns(residual, np.zeros((2, 28, 28, 1), np.float32))


def test_report_on_a_stacked_net(tmp_path):
    """Stacked and per-layer nets give the same patterns; the report writes JSON and figure."""
    per_layer = zoo.load("highway_fc10_mnist", depth=4)
    stacked = zoo.load("highway_fc10_mnist", depth=4, stacked=True)
    stack = stacked.get_layer("highway_stack")
    weights = [per_layer.get_layer(f"highway_{i}").get_weights() for i in range(1, 4)]
    stack.set_weights([np.stack([w[0] for w in weights]), np.stack([w[1] for w in weights])])
    for name in ("stem_dense", "logits"):
        stacked.get_layer(name).set_weights(per_layer.get_layer(name).get_weights())
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (60, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, 10, 60)
    patterns, layers, units = routing_patterns(stacked, images, batch_size=25)
    assert patterns.shape == (60, 3, 50) and layers == ["highway_1", "highway_2", "highway_3"]
    np.testing.assert_allclose(patterns, routing_patterns(per_layer, images)[0], atol=1e-5)

    report = routing_report(stacked, images, labels, tmp_path, k_range=(2, 4))
    written = json.loads((tmp_path / "routing.json").read_text())
    assert written["k"] == report["k"] in (2, 3, 4)
    assert len(written["class_routes"]) == 10 and written["pixel_baseline"]["k"] in (2, 3, 4)
    assert sum(written["cluster_sizes"]) == 60
    assert len(written["layer_nmi"]) == 3 and all(0 <= v <= 1 for v in written["layer_nmi"])
    png = (tmp_path / "routing.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_analyze_routing_command(tmp_path, capsys):
    from highway_zoo import cli
    from training.data import OfflineFallbackWarning

    out = tmp_path / "routing"
    with pytest.warns(OfflineFallbackWarning):
        code = cli.main(["analyze", "highway_fc10_mnist", "--weights", "default", "--dataset",
                         "mnist", "--examples", "80", "--routing", "--max-clusters", "3",
                         "--data-dir", str(tmp_path), "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "route clusters (silhouette" in printed and str(out / "routing.png") in printed
    report = json.loads((out / "routing.json").read_text())
    assert report["examples"] == 80 and len(report["layers"]) == 9
    assert report["architecture"] == "highway_fc10_mnist" and 2 <= report["k"] <= 3
    assert not (out / "analysis.json").exists()  # the routing analysis only
