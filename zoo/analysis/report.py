"""`analyze()`: every analysis of a trained highway net, as PNGs plus the numbers in JSON."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import keras
import numpy as np

from zoo.analysis import plots
from zoo.analysis.evolution import GATES_FILE, read_gate_history
from zoo.analysis.gates import gate_statistics, highway_layers, nanmean
from zoo.analysis.lesion import effective_depth, lesion_errors
from zoo.files import write_text

REPORT_FILE = "analysis.json"
FILES = {
    "fig2": "fig2_gates.png",
    "fig3": "fig3_routing.png",
    "fig4": "fig4_lesioning.png",
    "estimation": "estimation_error.png",
    "evolution": "t_gate_evolution.png",
    "evolution_gif": "t_gate_evolution.gif",
}


def _numbers(values: Any, digits: int = 6) -> Any:
    """Arrays as nested lists of rounded floats, NaN as null (strict JSON)."""
    array = np.asarray(values, np.float64)
    if array.ndim == 0:
        value = float(array)
        return None if not math.isfinite(value) else round(value, digits)
    return [_numbers(v, digits) for v in array]


def _accuracy_by_epoch(run_dir: Path) -> dict[int, float] | None:
    history_file = run_dir / "history.json"
    if not history_file.is_file():
        return None
    history = json.loads(history_file.read_text(encoding="utf-8"))
    accuracy = {int(e["epoch"]): float(e["val_accuracy"]) for e in history
                if "val_accuracy" in e}
    return accuracy or None


def analyze(
    model: keras.Model,
    images: np.ndarray,
    labels: np.ndarray,
    out: str | os.PathLike,
    *,
    num_classes: int | None = None,
    classes: list[int] | None = None,
    example_index: int = 0,
    threshold: float = 0.01,
    batch_size: int = 500,
    run_dir: str | os.PathLike | None = None,
    describe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Writes the gate analyses of `model` on `images` into `out` and returns their numbers.

    For a gru_gate net, T is GTrXL's update gate z throughout (`HighwayDense.transform_gate`;
    Fig. 4's lesion sets z := 0: the layer returns its input); a net of a static skip has no
    gate and is refused (`zoo.analysis.skips` reports its learned scales instead).

    Files (in `out`): fig2_gates.png (NIPS 2015 Fig. 2: b_T, mean T, one example's T and
    block outputs), fig3_routing.png (Fig. 3: per-class mean T minus mean T),
    fig4_lesioning.png (Fig. 4: error with each layer lesioned), estimation_error.png
    (Greff et al. 2017 §4.2), t_gate_evolution.png and .gif (if `run_dir` holds a
    gates.json) and analysis.json with every number plotted.

    Args:
        model: a trained zoo model (raw pixels in, probabilities out).
        images, labels: the examples (raw pixel values, integer classes).
        out: output directory (created).
        num_classes: default: the model's output width.
        classes: classes drawn as Fig. 3 panels (default: the first ten).
        example_index: the example of Fig. 2's single-example columns.
        threshold: error increase (a fraction) beyond which a lesioned layer counts
            towards the effective depth; 0.01 is one percentage point.
        batch_size: examples per forward pass.
        run_dir: a run directory whose gates.json (and history.json) to plot.
        describe: extra fields for analysis.json (dataset, split, weights).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labels = np.asarray(labels, np.int64)
    title = model.name
    gru = any(layer.variant == "gru_gate" for layer in highway_layers(model))
    if gru:
        title += " (T: gru_gate's update gate z)"
    stats = gate_statistics(model, images, labels, num_classes=num_classes,
                            example_index=example_index, batch_size=batch_size)
    num_classes = len(stats.class_counts)
    classes = list(range(min(num_classes, 10))) if classes is None else list(classes)
    bad = [c for c in classes if not 0 <= c < num_classes]
    if bad:
        raise ValueError(f"classes must lie in [0, {num_classes}). Received: {bad}")
    files = {}

    plots.fig2(stats, out / FILES["fig2"], title=title)
    files["fig2"] = FILES["fig2"]
    plots.fig3(stats, classes, out / FILES["fig3"], title=title)
    files["fig3"] = FILES["fig3"]

    lesion = lesion_errors(model, images, labels, batch_size=max(batch_size, 1000))
    lesion.update(examples=len(images), split=(describe or {}).get("split", ""))
    depth = effective_depth(lesion["baseline"], lesion["errors"], threshold)
    plots.fig4(lesion, out / FILES["fig4"], threshold=threshold, title=title)
    files["fig4"] = FILES["fig4"]

    plots.estimation(stats.estimation, out / FILES["estimation"], title=title)
    files["estimation"] = FILES["estimation"]

    evolution = _evolution(run_dir, out, title, files)
    report = _report(model, images, stats, lesion, depth, threshold, classes, gru, describe,
                     evolution, files)
    files["json"] = REPORT_FILE
    write_text(out / REPORT_FILE, json.dumps(report, indent=1) + "\n", overwrite=True)
    return report


def _evolution(run_dir: str | os.PathLike | None, out: Path, title: str,
               files: dict[str, str]) -> dict[str, Any] | None:
    """The T-gate evolution figures of `run_dir`'s gates.json (added to `files`), and their
    numbers; None without a gate history."""
    if run_dir is None or not (Path(run_dir) / GATES_FILE).is_file():
        return None
    history = read_gate_history(run_dir)
    if not history["epochs"]:
        return None
    plots.evolution(history, out / FILES["evolution"], title=title)
    plots.evolution_gif(history, out / FILES["evolution_gif"],
                        accuracy=_accuracy_by_epoch(Path(run_dir)), title=title)
    files["evolution"] = FILES["evolution"]
    files["evolution_gif"] = FILES["evolution_gif"]
    return {
        "source": str(Path(run_dir) / GATES_FILE),
        "examples": history.get("examples"),
        "epochs": [e["epoch"] for e in history["epochs"]],
        "mean_t": _numbers([e["mean_t"] for e in history["epochs"]]),
    }


def _report(model: keras.Model, images: np.ndarray, stats, lesion: dict[str, Any], depth,
            threshold: float, classes: list[int], gru: bool, describe: dict[str, Any] | None,
            evolution: dict[str, Any] | None, files: dict[str, str]) -> dict[str, Any]:
    """What analysis.json holds: every number the figures plot."""
    increase = np.asarray(lesion["errors"]) - lesion["baseline"]
    routing = stats.routing
    return {
        "model": model.name,
        **(describe or {}),
        "examples": len(images),
        "layers": stats.layers,
        "units": stats.units,
        "transform_gate": ("z, the update gate of GTrXL's gate (gru_gate layers), read as T; "
                           "b_T is its bias -b_g" if gru else "T"),
        "spatial_reduction": (
            "conv layers: T and block outputs averaged over height and width (a unit is a "
            "channel); estimation errors per position and channel, then averaged"
            if any(stats.convolutional) else None
        ),
        "fig2": {
            "transform_bias": _numbers(stats.transform_bias),
            "mean_t": _numbers(stats.mean_t),
            "example_index": stats.example_index,
            "example_label": stats.example_label,
            "example_t": _numbers(stats.example_t),
            "example_output": _numbers(stats.example_output),
            "layer_mean_t": _numbers(stats.layer_mean_t),
            "layer_mean_transform_bias": _numbers(nanmean(stats.transform_bias, axis=1)),
        },
        "fig3": {
            "class_counts": stats.class_counts.tolist(),
            "class_layer_mean_abs_difference": _numbers(nanmean(np.abs(routing), axis=2)),
            "class_layer_mean_difference": _numbers(nanmean(routing, axis=2)),
            "panels": {str(c): _numbers(routing[c]) for c in classes},
        },
        "fig4": {
            "baseline_error": lesion["baseline"],
            "errors": lesion["errors"],
            "error_increase": _numbers(increase),
            "split": lesion["split"],
            "examples": len(images),
        },
        "effective_depth": depth,
        "effective_depth_threshold_pp": 100 * threshold,
        "layers_that_matter": [n for n, d in zip(lesion["layers"], increase) if d > threshold],
        "estimation_error": stats.estimation,
        "evolution": evolution,
        "files": files,
    }
