"""Every number the analyses write, checked against an independent computation.

The references here are NumPy (a forward pass through the highway layers from their weights,
NMI, ARI, silhouette and purity from their definitions) or hand counts, never the code under
test. The inputs are chosen so that the usual slips change the result: layers and units of
different counts and widths (a mean over the wrong axis changes shape or value), gate
differences of both signs (a missing absolute value), error increases a twentieth of a point
either side of the threshold, layers narrower than the widest (NaN padding counted as data).
"""

import json
import math

import keras
import numpy as np
import pytest

import zoo
from zoo.analysis import analyze, gate_statistics, highway_layers, plots
from zoo.analysis import report as report_module
from zoo.analysis.evolution import updated_history
from zoo.analysis.routing import cluster_routes, routing_report, shared_routes

# --- independent references ------------------------------------------------------------------


def entropy(counts):
    p = np.asarray(counts, np.float64)
    p = p[p > 0] / p.sum()
    return float(-(p * np.log(p)).sum())


def contingency_of(a, b):
    table = {}
    for x, y in zip(a, b):
        table[x, y] = table.get((x, y), 0) + 1
    rows, cols = sorted(set(a)), sorted(set(b))
    return np.array([[table.get((r, c), 0) for c in cols] for r in rows], np.float64)


def nmi_ref(a, b):
    """Normalized mutual information, arithmetic mean of the entropies."""
    table = contingency_of(a, b)
    n = table.sum()
    pa, pb = table.sum(1) / n, table.sum(0) / n
    mi = sum(table[i, j] / n * math.log(table[i, j] / n / (pa[i] * pb[j]))
             for i in range(table.shape[0]) for j in range(table.shape[1]) if table[i, j])
    ha, hb = entropy(table.sum(1)), entropy(table.sum(0))
    return 1.0 if ha == hb == 0 else mi / ((ha + hb) / 2)


def ari_ref(a, b):
    """Adjusted Rand index from pair counts (Hubert and Arabie)."""
    table = contingency_of(a, b)

    def pairs(x):
        return float((np.asarray(x) * (np.asarray(x) - 1) / 2).sum())

    index, rows, cols = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    expected = rows * cols / pairs([table.sum()])
    return (index - expected) / ((rows + cols) / 2 - expected)


def silhouette_ref(x, clusters):
    distance = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    scores = []
    for i in range(len(x)):
        own = clusters == clusters[i]
        if own.sum() == 1:
            scores.append(0.0)
            continue
        a = distance[i, own].sum() / (own.sum() - 1)
        b = min(distance[i, clusters == c].mean() for c in set(clusters) if c != clusters[i])
        scores.append((b - a) / max(a, b))
    return float(np.mean(scores))


def purity_ref(clusters, labels):
    hits = 0
    for c in set(clusters.tolist()):
        members = labels[clusters == c].tolist()
        hits += max(members.count(k) for k in set(members))
    return hits / len(labels)


def layer_means_ref(patterns, units):
    """(example, layer): each layer's mean T over its own units only (not the padding)."""
    return np.array([[np.mean(example[layer, :width]) for layer, width in enumerate(units)]
                     for example in patterns])


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def forward_ref(model, x):
    """NumPy pass through a coupled FC net's highway layers, from their weights:
    (inputs, T, outputs), each (example, layer, unit)."""
    stem = keras.Model(model.inputs[0], model.get_layer("stem_dense").output)
    h = np.asarray(stem(x), np.float64)
    ins, ts, outs = [], [], []
    for layer in highway_layers(model):
        kernel, bias = (np.asarray(w, np.float64) for w in layer.get_weights())
        d = h.shape[1]
        assert layer.variant == "coupled" and layer.get_config()["activation"] == "tanh"
        block = np.tanh(h @ kernel[:, :d] + bias[:d])
        t = sigmoid(h @ kernel[:, d:] + bias[d:])
        ins.append(h)
        ts.append(t)
        h = h + t * (block - h)
        outs.append(h)
    return np.stack(ins, 1), np.stack(ts, 1), np.stack(outs, 1)


def small_fc(depth=5, width=6, seed=0):
    """A random FC net (4 highway layers of 6 units: not square) whose gate biases differ by
    layer and unit, so per-layer and per-unit means differ."""
    keras.utils.set_random_seed(seed)
    model = zoo.load("highway_fc10_mnist", depth=depth, width=width)
    for i, layer in enumerate(highway_layers(model), start=1):
        bias = layer.bias.numpy()
        bias[width:] = -0.5 * i + 0.3 * np.arange(width)
        layer.bias.assign(bias)
    return model


def images(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 28, 28, 1)).astype(np.float32)


# --- routing ---------------------------------------------------------------------------------


def routed_patterns(n=90, units=(6, 4, 2), classes=3, seed=0):
    """(n, layers, max width) T values, NaN-padded, each class with its own random template
    per layer and unit (plus a little noise): clusters that recover the classes exactly."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), n // classes)
    rng.shuffle(labels)
    templates = rng.uniform(0.05, 0.95, (classes, len(units), max(units)))
    patterns = templates[labels] + rng.normal(0, 0.02, (n, len(units), max(units)))
    for layer, width in enumerate(units):
        patterns[:, layer, width:] = np.nan
    return patterns, labels


def test_cluster_routes_numbers_against_numpy():
    units = [6, 4, 2]
    patterns, labels = routed_patterns(units=units)
    # Four classes, the last without examples: its row is NaN, its spread zero.
    result = cluster_routes(patterns, labels, k_range=(2, 4), num_classes=4)
    clusters = result["clusters"]
    x = np.concatenate([patterns[:, layer, :width] for layer, width in enumerate(units)], 1)
    assert result["features"] == 12 and result["examples"] == 90

    for row in result["by_k"]:  # each k: refit here is sklearn's; the scores are ours
        from sklearn.cluster import KMeans

        fit = KMeans(n_clusters=row["k"], n_init=4, random_state=0).fit(x)
        assert row["purity"] == pytest.approx(purity_ref(fit.labels_, labels))
        assert row["nmi"] == pytest.approx(nmi_ref(labels, fit.labels_), abs=1e-9)
        assert row["silhouette"] == pytest.approx(silhouette_ref(x, fit.labels_), abs=1e-9)
        centres = np.stack([x[fit.labels_ == c].mean(0) for c in range(row["k"])])
        assert row["inertia"] == pytest.approx(((x - centres[fit.labels_]) ** 2).sum(),
                                               rel=1e-6)
    silhouettes = {row["k"]: row["silhouette"] for row in result["by_k"]}
    assert result["k"] == max(silhouettes, key=silhouettes.get) == 3
    assert result["silhouette"] == silhouettes[3]
    assert result["purity"] == purity_ref(clusters, labels) == 1.0
    assert result["nmi"] == pytest.approx(nmi_ref(labels, clusters), abs=1e-9)
    assert result["ari"] == pytest.approx(ari_ref(labels, clusters), abs=1e-9)

    # Hand counts: class x cluster, and each class's spread over the clusters.
    counts = np.zeros((4, 3), int)
    for label, cluster in zip(labels, clusters):
        counts[label, cluster] += 1
    np.testing.assert_array_equal(result["contingency"], counts)
    np.testing.assert_array_equal(result["cluster_sizes"], [list(clusters).count(c)
                                                            for c in range(3)])
    spread = [row / max(row.sum(), 1) for row in counts]
    np.testing.assert_allclose(result["spread"], spread)
    for a in range(4):
        for b in range(4):  # Bhattacharyya coefficient, term by term
            expected = sum(math.sqrt(spread[a][c] * spread[b][c]) for c in range(3))
            assert result["overlap"][a, b] == pytest.approx(expected)

    # Mean T per cluster and per class: a layer's mean over its own units, then over examples.
    per_layer = layer_means_ref(patterns, units)
    unit_means = np.nanmean(patterns, axis=1)  # the wrong axis: (example, unit)
    assert per_layer.shape != unit_means.shape
    for c in range(3):
        np.testing.assert_allclose(result["cluster_mean_t"][c],
                                   per_layer[clusters == c].mean(0), rtol=1e-12)
    for k in range(3):
        np.testing.assert_allclose(result["class_mean_t"][k], per_layer[labels == k].mean(0),
                                   rtol=1e-12)
    assert np.isnan(result["class_mean_t"][3]).all()
    # Padding counted as zeros would pull the narrow layers' means down.
    assert not np.allclose(np.nan_to_num(patterns).mean(2), per_layer, atol=0.05)


def test_shared_routes_rank_class_pairs_by_overlap():
    overlap = np.array([[1.0, 0.2, 0.9, 0.0],
                        [0.2, 1.0, 0.5, 0.7],
                        [0.9, 0.5, 1.0, 0.1],
                        [0.0, 0.7, 0.1, 1.0]])
    assert shared_routes({"overlap": overlap}, top=3) == [
        {"classes": [0, 2], "overlap": 0.9}, {"classes": [1, 3], "overlap": 0.7},
        {"classes": [1, 2], "overlap": 0.5}]


def test_routing_report_numbers_against_numpy(tmp_path):
    from sklearn.cluster import KMeans

    model = small_fc()
    x = images(120)
    labels = np.arange(120) % 10
    report = routing_report(model, x, labels, tmp_path, k_range=(2, 4), seed=0)
    assert report == json.loads((tmp_path / "routing.json").read_text())
    _, t, _ = forward_ref(model, x)
    assert report["layers"] == ["highway_1", "highway_2", "highway_3", "highway_4"]
    assert report["units"] == [6] * 4 and report["features"] == 24

    flat = t.reshape(len(t), -1)
    clusters = KMeans(n_clusters=report["k"], n_init=4, random_state=0).fit(flat).labels_
    counts = contingency_of(labels, clusters)
    np.testing.assert_array_equal(report["contingency"], counts)
    assert report["cluster_sizes"] == counts.sum(0).tolist()
    layer_t = t.mean(2)  # (example, layer)
    np.testing.assert_allclose(report["cluster_mean_t"],
                               [layer_t[clusters == c].mean(0) for c in range(report["k"])],
                               atol=2e-6)
    np.testing.assert_allclose(report["class_mean_t"],
                               [layer_t[labels == c].mean(0) for c in range(10)], atol=2e-6)
    # The unit means of this net differ from its layer means: a wrong axis would show.
    assert np.ptp(t.mean((0, 1))) > 0.05 and np.ptp(t.mean((0, 2))) > 0.05
    for row in report["class_routes"]:
        spread = counts[row["class"]] / counts[row["class"]].sum()
        assert row["main_cluster"] == int(np.argmax(spread))
        assert row["share"] == pytest.approx(spread.max(), abs=1e-4)
    assert report["purity"] == pytest.approx(purity_ref(clusters, labels), abs=1e-6)
    assert report["nmi"] == pytest.approx(nmi_ref(labels, clusters), abs=1e-5)
    assert report["ari"] == pytest.approx(ari_ref(labels, clusters), abs=1e-5)
    for i, value in enumerate(report["layer_nmi"]):  # each layer's T alone, k = 10
        alone = KMeans(n_clusters=10, n_init=4, random_state=0).fit(t[:, i]).labels_
        assert value == pytest.approx(nmi_ref(labels, alone), abs=1e-5)
    pixels = x.reshape(len(x), -1).astype(np.float64)
    k = report["pixel_baseline"]["k"]
    baseline = KMeans(n_clusters=k, n_init=4, random_state=0).fit(pixels).labels_
    assert report["pixel_baseline"]["nmi"] == pytest.approx(nmi_ref(labels, baseline), abs=1e-5)
    assert report["pixel_baseline"]["purity"] == pytest.approx(purity_ref(baseline, labels),
                                                               abs=1e-6)


# --- analyze(): analysis.json and the figures' data --------------------------------------------


def fake_lesions(errors, baseline):
    def lesion_errors(model, images, labels, batch_size=1000):
        return {"baseline": baseline, "layers": [layer.name for layer in highway_layers(model)],
                "errors": list(errors)}
    return lesion_errors


@pytest.fixture
def analysed(tmp_path, monkeypatch):
    """analyze() of small_fc on 80 examples (class 9 without any), with lesion errors set a
    twentieth of a point either side of the 1-point threshold, and the NumPy reference."""
    model = small_fc()
    x = images(80)
    y = np.arange(80) % 10
    y[y == 9] = 8
    # Increases 1.05 and 0.95 points, none, 65 points: a threshold off by 0.1 point, or in
    # percent rather than as a fraction, counts differently.
    monkeypatch.setattr(report_module, "lesion_errors",
                        fake_lesions([0.2605, 0.2595, 0.25, 0.9], baseline=0.25))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    history = None
    for epoch, mean_t in enumerate([[0.1, 0.2, 0.3, 0.4], [0.15, 0.1, 0.35, 0.5]]):
        history = updated_history(history, {"epoch": epoch, "mean_t": mean_t},
                                  {"layers": [f"highway_{i}" for i in range(1, 5)],
                                   "units": [6] * 4, "examples": 32})
    (run_dir / "gates.json").write_text(json.dumps(history))
    report = analyze(model, x, y, tmp_path / "out", classes=[2, 8], example_index=13,
                     threshold=0.01, run_dir=run_dir)
    return model, x, y, report


def test_analysis_json_numbers_against_numpy(analysed, tmp_path):
    model, x, y, report = analysed
    assert json.loads((tmp_path / "out" / "analysis.json").read_text()) == report
    _, t, out = forward_ref(model, x)  # (example, layer, unit): 80 x 4 x 6
    biases = np.stack([layer.get_weights()[1][6:] for layer in highway_layers(model)])
    fig2 = report["fig2"]
    np.testing.assert_allclose(fig2["transform_bias"], biases, atol=1e-6)
    np.testing.assert_allclose(fig2["layer_mean_transform_bias"],
                               [np.mean(b) for b in biases], atol=1e-6)
    # By hand: b_T of layer i is -0.5 i + 0.3 (0 .. 5), mean -0.5 i + 0.75.
    np.testing.assert_allclose(fig2["layer_mean_transform_bias"], [0.25, -0.25, -0.75, -1.25],
                               atol=1e-6)
    np.testing.assert_allclose(fig2["mean_t"], t.mean(0), atol=2e-6)
    np.testing.assert_allclose(fig2["layer_mean_t"], [t[:, i].mean() for i in range(4)],
                               atol=2e-6)
    assert fig2["example_index"] == 13 and fig2["example_label"] == 3
    np.testing.assert_allclose(fig2["example_t"], t[13], atol=2e-6)
    np.testing.assert_allclose(fig2["example_output"], out[13], atol=2e-6)

    fig3 = report["fig3"]
    assert fig3["class_counts"] == [8, 8, 8, 8, 8, 8, 8, 8, 16, 0]
    routing = np.stack([t[y == c].mean(0) - t.mean(0) for c in range(9)])  # (class, layer, unit)
    signed = [[np.mean(routing[c, i]) for i in range(4)] for c in range(9)]
    absolute = [[np.mean(np.abs(routing[c, i])) for i in range(4)] for c in range(9)]
    # Differences of both signs within a layer: the absolute mean differs from the signed one.
    assert np.max(np.abs(np.array(absolute) - np.abs(signed))) > 0.005
    np.testing.assert_allclose(fig3["class_layer_mean_difference"][:9], signed, atol=2e-6)
    np.testing.assert_allclose(fig3["class_layer_mean_abs_difference"][:9], absolute, atol=2e-6)
    assert fig3["class_layer_mean_difference"][9] == [None] * 4  # no examples: no number
    assert sorted(fig3["panels"]) == ["2", "8"]
    np.testing.assert_allclose(fig3["panels"]["8"], routing[8], atol=2e-6)

    (stage,) = report["estimation_error"]
    error = out - out[:, -1:]  # each block's output minus the stage's output
    np.testing.assert_allclose(stage["mean"], [error[:, i].mean() for i in range(4)], atol=2e-6)
    np.testing.assert_allclose(stage["std"], [error[:, i].std(0).mean() for i in range(4)],
                               atol=2e-6)

    fig4 = report["fig4"]
    np.testing.assert_allclose(fig4["error_increase"], [0.0105, 0.0095, 0.0, 0.65], atol=1e-9)
    assert report["effective_depth"] == 2 and report["effective_depth_threshold_pp"] == 1.0
    assert report["layers_that_matter"] == ["highway_1", "highway_4"]
    assert report["evolution"]["epochs"] == [0, 1]
    assert report["evolution"]["mean_t"] == [[0.1, 0.2, 0.3, 0.4], [0.15, 0.1, 0.35, 0.5]]


@pytest.mark.parametrize("threshold, depth", [(0.0094, 3), (0.0096, 2), (0.0104, 2),
                                               (0.0106, 1), (0.7, 0)])
def test_effective_depth_moves_with_the_threshold(threshold, depth, tmp_path, monkeypatch):
    from zoo.analysis import effective_depth

    errors, baseline = [0.2605, 0.2595, 0.25, 0.9], 0.25
    assert effective_depth(baseline, errors, threshold) == depth
    monkeypatch.setattr(report_module, "lesion_errors", fake_lesions(errors, baseline))
    model = small_fc()
    report = analyze(model, images(10), np.arange(10), tmp_path, threshold=threshold)
    assert report["effective_depth"] == depth == len(report["layers_that_matter"])
    assert report["effective_depth_threshold_pp"] == pytest.approx(100 * threshold)


def image_of(fig, title):
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith(title)]
    return np.ma.filled(ax.images[0].get_array().astype(np.float64), np.nan)


def test_figures_draw_the_numbers(analysed):
    model, x, y, _ = analysed
    _, t, out = forward_ref(model, x)
    stats = gate_statistics(model, x, y, example_index=13)
    figure = plots.fig2(stats)
    np.testing.assert_allclose(image_of(figure, "mean T over 80"), t.mean(0), atol=2e-6)
    np.testing.assert_allclose(image_of(figure, "T, example 13"), t[13], atol=2e-6)
    np.testing.assert_allclose(image_of(figure, "block outputs"), out[13], atol=2e-6)
    routing = np.stack([t[y == c].mean(0) - t.mean(0) for c in range(9)])
    figure = plots.fig3(stats, [2, 8])
    np.testing.assert_allclose(image_of(figure, "class 8"), routing[8], atol=2e-6)
    summary = image_of(figure, "mean |class T - mean T|")  # (layer, class)
    np.testing.assert_allclose(summary[:, :9], np.abs(routing).mean(2).T, atol=2e-6)
    assert np.isnan(summary[:, 9]).all()


def test_routing_figure_draws_the_numbers(monkeypatch, tmp_path):
    import zoo.files
    from zoo.analysis.routing import plot_routing

    patterns, labels = routed_patterns()
    result = cluster_routes(patterns, labels, k_range=(2, 4))
    result["layer_nmi"] = [0.2, 0.5, 0.9]
    baseline = cluster_routes(np.random.default_rng(1).uniform(size=(90, 1, 8)), labels,
                              k_range=(2, 4))
    drawn = {}
    monkeypatch.setattr(zoo.files, "save_figure", lambda fig, path: drawn.update(fig=fig))
    plot_routing(result, baseline, ["a", "b", "c"], tmp_path / "routing.png", title="t")
    fig = drawn["fig"]
    by_title = {ax.get_title(): ax for ax in fig.axes}
    curves = by_title[next(t for t in by_title if t.startswith("k = 3 by silhouette"))]
    lines = {line.get_label(): line for line in curves.get_lines()}
    np.testing.assert_array_equal(lines["silhouette (T)"].get_xdata(), [2, 3, 4])
    np.testing.assert_allclose(lines["silhouette (T)"].get_ydata(),
                               [row["silhouette"] for row in result["by_k"]])
    np.testing.assert_allclose(lines["NMI with classes (T)"].get_ydata(),
                               [row["nmi"] for row in result["by_k"]])
    np.testing.assert_allclose(lines["NMI with classes (pixels)"].get_ydata(),
                               [row["nmi"] for row in baseline["by_k"]])
    assert f"purity {result['purity']:.2f}, NMI {result['nmi']:.2f}" in curves.get_title()
    depth = by_title["each layer's T alone, k-means with k = classes"]
    np.testing.assert_allclose(depth.get_lines()[0].get_ydata(), [0.2, 0.5, 0.9])
    np.testing.assert_array_equal(depth.get_lines()[0].get_xdata(), [1, 2, 3])

    def image(title):
        return np.asarray(by_title[title].images[0].get_array(), np.float64)

    np.testing.assert_allclose(image("where each class goes (row fractions)"),
                               result["spread"])
    # Fractions and overlaps on their whole scale, 0 to 1, whatever the data's range.
    for title in ("where each class goes (row fractions)",
                  "classes sharing routes (Bhattacharyya overlap of cluster spreads)"):
        assert by_title[title].images[0].get_clim() == (0, 1)
    assert curves.get_ylim() == (0, 1) and depth.get_ylim() == (0, 1)
    np.testing.assert_allclose(
        image("classes sharing routes (Bhattacharyya overlap of cluster spreads)"),
        result["overlap"])
    # Each cluster's mean T per layer minus the clusters' average, on a symmetric scale.
    mean_t = result["cluster_mean_t"]
    centred = [[mean_t[c][i] - np.mean([row[i] for row in mean_t]) for i in range(3)]
               for c in range(3)]
    ax = by_title["cluster's mean T per layer minus the clusters' average"]
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), centred, atol=1e-12)
    top = max(abs(v) for row in centred for v in row)
    assert ax.images[0].get_clim() == pytest.approx((-top, top))
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        f"{c} ({n})" for c, n in enumerate(result["cluster_sizes"])]


# --- what the mutation run found unchecked (docs/mutation) ---------------------------------


def test_numbers_rounds_nested_arrays_at_the_digits_asked():
    assert report_module._numbers([[1.23456789, float("nan")], [2.0, -0.000049]], 3) == \
        [[1.235, None], [2.0, -0.0]]


def test_analyze_defaults_and_types_of_analysis_json(tmp_path, monkeypatch):
    """Fig. 3's panels default to the first ten classes of a 12-class problem; class counts
    are integers; the lesion's split is "" without a description; `out` may be new and
    nested."""
    monkeypatch.setattr(report_module, "lesion_errors",
                        fake_lesions([0.3, 0.3, 0.3, 0.3], baseline=0.3))
    y = np.arange(24) % 12
    report = analyze(small_fc(), images(24), y, tmp_path / "new" / "nested", num_classes=12)
    assert sorted(report["fig3"]["panels"], key=int) == [str(c) for c in range(10)]
    counts = report["fig3"]["class_counts"]
    assert counts == [2] * 12 and all(isinstance(c, int) for c in counts)
    assert report["fig4"]["split"] == ""
    assert (tmp_path / "new" / "nested" / "analysis.json").is_file()


def test_routing_report_uses_its_seed_and_describes_its_pattern(tmp_path):
    from sklearn.cluster import KMeans

    model = small_fc()
    x = images(60)
    labels = np.arange(60) % 10
    report = routing_report(model, x, labels, tmp_path, k_range=(2, 3), seed=7)
    _, t, _ = forward_ref(model, x)
    for i, value in enumerate(report["layer_nmi"]):
        alone = KMeans(n_clusters=10, n_init=4, random_state=7).fit(t[:, i]).labels_
        assert value == pytest.approx(nmi_ref(labels, alone), abs=1e-5)
    assert report["pattern"] == ("T per example, layer and unit (conv: averaged over "
                                 "positions), flattened")
    assert report["clustering"] == "k-means (scikit-learn, n_init=4), Euclidean"
    assert report["k_criterion"] == "highest mean silhouette coefficient (Euclidean) over k_range"
