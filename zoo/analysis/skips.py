"""What a net of static skips learns: its skip scales, layer by layer.

The static skips (`layers.variants.STATIC_SKIPS`) weigh H(x) and x by values learned per layer
and the same for every example, so they route nothing: the gate analyses (NIPS 2015 Figs.
2-4, per-example routing, per-token gates) have no T to read there, and `highway-zoo analyze`
writes these scales instead, with the one line `layers.variants.no_routing` says. Per layer:

- rezero, y = x + α·H(x): α (`alpha`);
- layerscale, y = x + diag(λ)·H(x): λ's mean, min and max over the channels (`lambda_mean`,
  `lambda_min`, `lambda_max`);
- laurel_rw, y = α·H(x) + β·x: α and β (`alpha`, `beta`);
- laurel_lr, y = H(x) + x + B·A·x: the Frobenius and spectral norms of the map x -> B·A·x
  (`ba_frobenius`, `ba_spectral`), the (d, d) matrix `laurel_a @ laurel_b` as the layer applies
  it to a row x (x @ A @ B; per pixel over the channels in a convolution); 0 where B is 0, as
  it starts: the layer is then the residual y = H(x) + x.

gru_gate is not here: its update gate z depends on the input and is analysed as T
(`zoo.analysis.gates`).

`skip_scales(model)` returns the numbers; `skip_report(model, out)` writes them to
skip_scales.json and draws skip_scales.png (each scale against the layer index).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import keras
import numpy as np

from layers.variants import STATIC_SKIPS, no_routing
from zoo.analysis.gates import StackedLayer, skip_layers
from zoo.files import atomic_path, jsonable, write_text

SCALES_FILE = "skip_scales.json"
SCALES_FIGURE = "skip_scales.png"
DPI = 100

# Each static skip's scales, in the order they are reported and drawn, and its formula.
SCALES = {
    "rezero": ("alpha",),
    "layerscale": ("lambda_mean", "lambda_min", "lambda_max"),
    "laurel_rw": ("alpha", "beta"),
    "laurel_lr": ("ba_frobenius", "ba_spectral"),
}
FORMULAS = {
    "rezero": "y = x + alpha * H(x)",
    "layerscale": "y = x + lambda * H(x), lambda per channel",
    "laurel_rw": "y = alpha * H(x) + beta * x",
    "laurel_lr": "y = H(x) + x + B A x (norms of the map x -> B A x, x @ laurel_a @ laurel_b)",
}
_WEIGHTS = {
    "rezero": ("alpha",),
    "layerscale": ("layer_scale",),
    "laurel_rw": ("alpha", "beta"),
    "laurel_lr": ("laurel_a", "laurel_b"),
}


def layer_scales(variant: str, weights: dict[str, np.ndarray]) -> dict[str, float]:
    """One layer's scales (`SCALES[variant]`) from its skip weights by name."""
    w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    if variant == "rezero":
        return {"alpha": float(w["alpha"])}
    if variant == "layerscale":
        scale = w["layer_scale"]
        return {"lambda_mean": float(scale.mean()), "lambda_min": float(scale.min()),
                "lambda_max": float(scale.max())}
    if variant == "laurel_rw":
        return {"alpha": float(w["alpha"]), "beta": float(w["beta"])}
    if variant == "laurel_lr":
        low_rank = w["laurel_a"] @ w["laurel_b"]
        return {"ba_frobenius": float(np.linalg.norm(low_rank, "fro")),
                "ba_spectral": float(np.linalg.norm(low_rank, 2))}
    raise ValueError(f"{variant!r} is not one of the static skips {STATIC_SKIPS}")


def skip_scales(model: keras.Model) -> dict[str, Any]:
    """Every static-skip layer's scales: `{"variant", "formula", "layers", "scales": {name:
    [per layer]}, "note"}` (layers named as `zoo.analysis.highway_layers` names them, a
    stack's `highway_1`, ...). A net mixing static skips gets the union of their scales, None
    where a layer has no such scale, and `variant` "mixed"."""
    layers = skip_layers(model)
    if not layers:
        raise ValueError(f"{model.name} has no layers of a static skip "
                         f"({', '.join(STATIC_SKIPS)}): no skip scales to report.")
    stacked: dict[tuple[int, str], np.ndarray] = {}  # each stacked weight converted once

    def weight(layer, name):
        if not isinstance(layer, StackedLayer):
            return keras.ops.convert_to_numpy(getattr(layer, name))
        key = (id(layer.stack), name)
        if key not in stacked:
            stacked[key] = keras.ops.convert_to_numpy(getattr(layer.stack, name))
        return stacked[key][layer.index]

    rows = [layer_scales(layer.variant, {name: weight(layer, name)
                                         for name in _WEIGHTS[layer.variant]})
            for layer in layers]
    variants = list(dict.fromkeys(layer.variant for layer in layers))
    names = [key for v in variants for key in SCALES[v]]
    names = list(dict.fromkeys(names))
    variant = variants[0] if len(variants) == 1 else "mixed"
    return {
        "variant": variant,
        "variants": [layer.variant for layer in layers],
        "formula": FORMULAS.get(variant, "; ".join(FORMULAS[v] for v in variants)),
        "layers": [layer.name for layer in layers],
        "scales": {name: [row.get(name) for row in rows] for name in names},
        "note": "; ".join(no_routing(v) for v in variants),
    }


def plot_scales(report: dict[str, Any], path: str | os.PathLike | None = None,
                title: str = ""):
    """Each scale against the layer index (1 = the first static-skip layer); layerscale's
    mean λ with its min-max range shaded."""
    from matplotlib.figure import Figure

    scales = report["scales"]
    index = np.arange(1, len(report["layers"]) + 1)
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()

    def values(name):
        return np.array([np.nan if v is None else v for v in scales[name]], np.float64)

    if "lambda_mean" in scales:
        ax.fill_between(index, values("lambda_min"), values("lambda_max"), alpha=0.25,
                        color="tab:blue", label="lambda min to max")
    for name in scales:
        if name in ("lambda_min", "lambda_max"):
            continue
        ax.plot(index, values(name), "o-", ms=3.5, lw=1, label=name.replace("_", " "))
    ax.axhline(0.0, color="0.5", lw=0.6)
    ax.set_xlabel("highway layer")
    ax.set_ylabel("learned skip scale")
    ax.set_xlim(0.5, len(index) + 0.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title((title + ": " if title else "") + f"{report['variant']}, {report['formula']}",
                 fontsize=9)
    fig.tight_layout()
    if path is not None:
        with atomic_path(path, overwrite=True) as tmp:
            fig.savefig(tmp, dpi=DPI, format="png")
    return fig


def skip_report(model: keras.Model, out: str | os.PathLike, *,
                describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """`skip_scales(model)` into `out` (created): skip_scales.json and skip_scales.png."""
    found = skip_scales(model)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = jsonable({"model": model.name, **(describe or {}), **found,
                       "files": {"json": SCALES_FILE, "figure": SCALES_FIGURE}})
    plot_scales(report, out / SCALES_FIGURE, title=model.name)
    write_text(out / SCALES_FILE, json.dumps(report, indent=1) + "\n", overwrite=True)
    return report
