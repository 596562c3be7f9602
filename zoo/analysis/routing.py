"""Per-example routing: do examples take different paths through a highway net?

The NIPS 2015 paper's Fig. 3 shows class averages of T only. Here every example's full
transform-gate pattern (layer x unit; a conv layer's T averaged over positions, a unit is a
channel) is one vector, the patterns are clustered with k-means, and the clusters are compared
with the classes:

- k is chosen by the mean silhouette coefficient (Euclidean, the k-means metric) over
  `k_range`: the k whose clusters are most compact and best separated. NMI at k = the number of
  classes is reported too, since NMI depends on k.
- purity: the fraction of examples whose cluster's majority class is their own; NMI
  (normalized mutual information, arithmetic mean; 1: clusters are the classes, 0: independent)
  and the adjusted Rand index.
- which classes share routes: for each class, how its examples spread over the clusters, and
  for each pair of classes the overlap of those spreads (Bhattacharyya coefficient: 1 for the
  same spread, 0 for disjoint clusters).
- a reference: the same clustering of the raw input pixels. Routes that follow the classes
  better than the pixels do carry class information the input layout does not show plainly.

Only layers with an input-dependent transform gate count (coupled, full, t_only, and gru_gate,
whose T is GTrXL's update gate z); a net with none (c_only, residual, plain layers, or the
static skips rezero, layerscale, laurel_rw, laurel_lr, which scale every example alike) is
refused with a message (one line for the static skips: `layers.variants.no_routing`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import keras
import numpy as np

from layers.variants import has_transform_gate
from zoo.analysis.gates import (
    GateProbe,
    highway_layers,
    no_gates_reason,
    per_unit,
    skip_layers,
)
from zoo.files import jsonable, write_text

ROUTING_FILE = "routing.json"
ROUTING_FIGURE = "routing.png"


def _learns_t(layer) -> bool:
    return has_transform_gate(layer.variant)


def routing_patterns(model: keras.Model, images: np.ndarray, batch_size: int = 500
                     ) -> tuple[np.ndarray, list[str], list[int]]:
    """Every example's T pattern, `(examples, layers, units)` (NaN-padded where layers differ
    in width), with the layers' names and widths."""
    layers = [layer for layer in highway_layers(model) if _learns_t(layer)]
    if not layers:
        found = highway_layers(model)
        if not found and skip_layers(model):  # a static skip: the one line
            raise ValueError(no_gates_reason(model))
        reason = (f"its highway layers are variant {found[0].variant!r}, which has no "
                  "transform gate (T is the constant 1)." if found else no_gates_reason(model))
        raise ValueError(f"{model.name} has no transform gates to route by: {reason}")
    probe = GateProbe(model, layers)
    rows = []
    for start in range(0, len(images), batch_size):
        batch = np.asarray(images[start:start + batch_size], np.float32)
        gates = probe.gates(batch, numpy=True)
        rows.append([per_unit(gates[layer.name], layer.channel_axis) for layer in layers])
    units = [rows[0][i].shape[1] for i in range(len(layers))]
    out = np.full((len(images), len(layers), max(units)), np.nan, np.float32)
    for i in range(len(layers)):
        out[:, i, : units[i]] = np.concatenate([r[i] for r in rows])
    return out, [layer.name for layer in layers], units


def _flat(patterns: np.ndarray) -> np.ndarray:
    flat = np.asarray(patterns, np.float64).reshape(len(patterns), -1)
    return flat[:, np.all(np.isfinite(flat), axis=0)]  # drop the padding


def _kmeans(x: np.ndarray, k: int, seed: int):
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=4, random_state=seed).fit(x)


def purity(clusters: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of examples that belong to their cluster's most common class."""
    total = 0
    for c in np.unique(clusters):
        total += np.bincount(labels[clusters == c]).max()
    return float(total / len(labels))


def class_overlap(spread: np.ndarray) -> np.ndarray:
    """(class, class) Bhattacharyya coefficient of the rows of a (class, cluster) matrix of
    fractions: 1 where two classes spread over the clusters alike, 0 where they share none."""
    root = np.sqrt(spread)
    return root @ root.T


def cluster_routes(patterns: np.ndarray, labels: np.ndarray, *,
                   k_range: tuple[int, int] = (2, 12), num_classes: int | None = None,
                   seed: int = 0, silhouette_examples: int = 3000) -> dict[str, Any]:
    """k-means on the flattened patterns for every k in `k_range` (inclusive), k chosen by
    silhouette; the chosen clustering compared with `labels`.

    Returns a dict: `k`, `clusters` (per example), `by_k` (silhouette, NMI, purity per k),
    `purity`, `nmi`, `ari`, `nmi_at_classes` (k = number of classes), `contingency`
    (class x cluster counts), `spread` (its rows as fractions), `overlap` (class x class),
    `cluster_mean_t` (cluster x layer), `class_mean_t` (class x layer).
    """
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score, silhouette_score

    labels = np.asarray(labels, np.int64)
    x = _flat(patterns)
    n = len(x)
    if n != len(labels):
        raise ValueError(f"{n} patterns but {len(labels)} labels: pass one label per example.")
    low, high = k_range
    if not 2 <= low <= high or high >= n:
        raise ValueError(f"k_range must satisfy 2 <= low <= high < examples ({n}). "
                         f"Received: {k_range!r}")
    num_classes = int(num_classes or labels.max() + 1)
    by_k, fits = [], {}
    for k in range(low, high + 1):
        fit = _kmeans(x, k, seed)
        fits[k] = fit.labels_
        by_k.append({
            "k": k,
            "silhouette": float(silhouette_score(x, fit.labels_,
                                                 sample_size=min(n, silhouette_examples),
                                                 random_state=seed)),
            "nmi": float(normalized_mutual_info_score(labels, fit.labels_)),
            "purity": purity(fit.labels_, labels),
            "inertia": float(fit.inertia_),
        })
    best = max(by_k, key=lambda row: row["silhouette"])
    k = best["k"]
    clusters = fits[k]
    at_classes = (fits[num_classes] if num_classes in fits
                  else _kmeans(x, num_classes, seed).labels_)
    contingency = np.zeros((num_classes, k), np.int64)
    np.add.at(contingency, (labels, clusters), 1)
    spread = contingency / np.maximum(contingency.sum(axis=1, keepdims=True), 1)
    layer_t = np.nanmean(np.asarray(patterns, np.float64), axis=2)  # (example, layer)
    return {
        "k": k,
        "k_criterion": "highest mean silhouette coefficient (Euclidean) over k_range",
        "k_range": [low, high],
        "examples": n,
        "features": int(x.shape[1]),
        "clusters": clusters,
        "by_k": by_k,
        "silhouette": best["silhouette"],
        "purity": best["purity"],
        "nmi": best["nmi"],
        "ari": float(adjusted_rand_score(labels, clusters)),
        "nmi_at_classes": float(normalized_mutual_info_score(labels, at_classes)),
        "purity_at_classes": purity(at_classes, labels),
        "contingency": contingency,
        "spread": spread,
        "overlap": class_overlap(spread),
        "cluster_sizes": np.bincount(clusters, minlength=k),
        "cluster_mean_t": np.stack([layer_t[clusters == c].mean(axis=0) for c in range(k)]),
        "class_mean_t": np.stack([layer_t[labels == c].mean(axis=0) if np.any(labels == c)
                                  else np.full(layer_t.shape[1], np.nan)
                                  for c in range(num_classes)]),
    }


def layer_nmi(patterns: np.ndarray, labels: np.ndarray, units: list[int], num_classes: int,
              seed: int = 0) -> list[float]:
    """Per layer, NMI between the classes and k-means (k = the number of classes) on that
    layer's T alone: where in depth routing starts to follow the classes."""
    from sklearn.metrics import normalized_mutual_info_score

    return [float(normalized_mutual_info_score(
        labels, _kmeans(np.asarray(patterns[:, i, :u], np.float64), num_classes, seed).labels_))
        for i, u in enumerate(units)]


def shared_routes(result: dict[str, Any], top: int = 5) -> list[dict[str, Any]]:
    """The `top` pairs of distinct classes whose examples spread over the clusters most alike."""
    overlap = result["overlap"]
    pairs = [(float(overlap[a, b]), a, b) for a in range(len(overlap))
             for b in range(a + 1, len(overlap))]
    return [{"classes": [a, b], "overlap": round(v, 4)}
            for v, a, b in sorted(pairs, reverse=True)[:top]]


def plot_routing(result: dict[str, Any], baseline: dict[str, Any] | None, layers: list[str],
                 path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.files import save_figure

    fig, axes = plt.subplots(2, 3 if "layer_nmi" in result else 2,
                             figsize=(19 if "layer_nmi" in result else 13, 10))
    if "layer_nmi" in result:
        ax = axes[0, 2]
        ax.plot(range(1, len(layers) + 1), result["layer_nmi"], "o-", ms=3)
        ax.set(xlabel="highway layer", ylabel="NMI with classes", ylim=(0, 1),
               title="each layer's T alone, k-means with k = classes")
        ax.grid(alpha=0.3)
        axes[1, 2].axis("off")
    ax = axes[0, 0]
    ks = [row["k"] for row in result["by_k"]]
    ax.plot(ks, [row["silhouette"] for row in result["by_k"]], "o-", label="silhouette (T)")
    ax.plot(ks, [row["nmi"] for row in result["by_k"]], "s--", label="NMI with classes (T)")
    if baseline is not None:
        ax.plot(ks, [row["nmi"] for row in baseline["by_k"]], "^:", color="grey",
                label="NMI with classes (pixels)")
    ax.axvline(result["k"], color="black", lw=0.8, ls=":")
    ax.set(xlabel="k (k-means clusters)", ylim=(0, 1),
           title=f"k = {result['k']} by silhouette: purity {result['purity']:.2f}, "
                 f"NMI {result['nmi']:.2f}")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[0, 1]
    image = ax.imshow(result["spread"], cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set(xlabel="route cluster", ylabel="class", title="where each class goes (row fractions)",
           xticks=range(result["k"]), yticks=range(len(result["spread"])))
    fig.colorbar(image, ax=ax)

    ax = axes[1, 0]
    image = ax.imshow(result["overlap"], cmap="magma", vmin=0, vmax=1)
    ax.set(xlabel="class", ylabel="class", title="classes sharing routes (Bhattacharyya "
           "overlap of cluster spreads)", xticks=range(len(result["overlap"])),
           yticks=range(len(result["overlap"])))
    fig.colorbar(image, ax=ax)

    ax = axes[1, 1]
    mean_t = result["cluster_mean_t"]
    image = ax.imshow(mean_t - np.mean(mean_t, axis=0, keepdims=True), cmap="RdBu_r",
                      aspect="auto", vmin=-np.abs(mean_t - mean_t.mean(0)).max(),
                      vmax=np.abs(mean_t - mean_t.mean(0)).max())
    ax.set(xlabel=f"highway layer (1 .. {len(layers)})", ylabel="route cluster (size)",
           title="cluster's mean T per layer minus the clusters' average",
           yticks=range(result["k"]),
           yticklabels=[f"{c} ({s})" for c, s in enumerate(result["cluster_sizes"])])
    fig.colorbar(image, ax=ax)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, Path(path))


def routing_report(model: keras.Model, images: np.ndarray, labels: np.ndarray,
                   out: str | os.PathLike, *, k_range: tuple[int, int] = (2, 12),
                   num_classes: int | None = None, batch_size: int = 500, seed: int = 0,
                   describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """Routing patterns of `model` on `images`, clustered and compared with `labels` (and the
    same clustering of the pixels); writes routing.json and routing.png into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labels = np.asarray(labels, np.int64)
    num_classes = num_classes or int(model.outputs[0].shape[-1])
    print(f"Routing: T patterns of {len(images)} examples ...", flush=True)
    patterns, layers, units = routing_patterns(model, images, batch_size)
    print(f"Clustering {patterns.shape[1]} layers x {max(units)} units, k = {k_range[0]} .. "
          f"{k_range[1]} ...", flush=True)
    result = cluster_routes(patterns, labels, k_range=k_range, num_classes=num_classes,
                            seed=seed)
    print("Clustering each layer's T alone ...", flush=True)
    result["layer_nmi"] = layer_nmi(patterns, labels, units, num_classes, seed)
    print("Clustering the raw pixels (reference) ...", flush=True)
    pixels = np.asarray(images, np.float64).reshape(len(images), 1, -1)
    baseline = cluster_routes(pixels, labels, k_range=k_range, num_classes=num_classes,
                              seed=seed)
    spread = result["spread"]
    report = {
        "model": model.name,
        **(describe or {}),
        "examples": len(images),
        "layers": layers,
        "units": units,
        "pattern": "T per example, layer and unit (conv: averaged over positions), flattened",
        "clustering": "k-means (scikit-learn, n_init=4), Euclidean",
        **{key: result[key] for key in (
            "k", "k_criterion", "k_range", "features", "silhouette", "purity", "nmi", "ari",
            "nmi_at_classes", "purity_at_classes", "by_k", "cluster_sizes", "contingency",
            "overlap", "cluster_mean_t", "class_mean_t", "layer_nmi")},
        "class_routes": [
            {"class": c, "main_cluster": int(np.argmax(spread[c])),
             "share": round(float(spread[c].max()), 4)} for c in range(len(spread))],
        "shared_routes": shared_routes(result),
        "pixel_baseline": {key: baseline[key] for key in (
            "k", "silhouette", "purity", "nmi", "ari", "nmi_at_classes", "purity_at_classes",
            "by_k")},
        "files": {"json": ROUTING_FILE, "figure": ROUTING_FIGURE},
    }
    report = jsonable(report)
    plot_routing(result, baseline, layers, out / ROUTING_FIGURE,
                 title=f"{model.name}: per-example routing on {len(images)} examples")
    write_text(out / ROUTING_FILE, json.dumps(report, indent=1) + "\n", overwrite=True)
    return report
