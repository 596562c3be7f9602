"""The figures: NIPS 2015 Figs. 2-4, Greff et al. 2017 Fig. 3, T-gate evolution and its GIF.

Every function draws on a fresh `matplotlib.figure.Figure` (no pyplot, no global backend, safe
in threads and callbacks) and, given `path`, saves it there. Layers run down the y-axis
(the first highway layer at the top, as in the paper), units (blocks) along the x-axis.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from zoo.analysis.gates import nanmean

DPI = 100


def _save(fig: Figure, path: str | os.PathLike | None) -> Figure:
    if path is not None:
        fig.savefig(path, dpi=DPI)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (for TensorBoard images)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def heatmap_rgb(matrix: np.ndarray, vmin: float = 0.0, vmax: float = 1.0,
                cmap: str = "viridis", cell: int | tuple[int, int] = 4) -> np.ndarray:
    """A (rows x cols) matrix as a uint8 RGB image, each cell `cell` pixels square (or
    (height, width)); NaN black."""
    height, width = (cell, cell) if isinstance(cell, int) else cell
    matrix = np.asarray(matrix, np.float64)
    scaled = np.clip((matrix - vmin) / max(vmax - vmin, 1e-12), 0.0, 1.0)
    rgb = colormaps[cmap](np.nan_to_num(scaled))[..., :3]
    rgb[np.isnan(matrix)] = 0.0
    rgb = np.repeat(np.repeat(rgb, height, axis=0), width, axis=1)
    return (rgb * 255).round().astype(np.uint8)


def _matrix(ax, fig, matrix, title, cmap="viridis", vmin=None, vmax=None, label=None,
            xlabel="unit (block)"):
    matrix = np.asarray(matrix, np.float64)
    rows, cols = matrix.shape
    image = ax.imshow(matrix, aspect="auto", interpolation="nearest", cmap=cmap, vmin=vmin,
                      vmax=vmax, extent=(0.5, cols + 0.5, rows + 0.5, 0.5))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=ax, fraction=0.08, pad=0.02, label=label).ax.tick_params(labelsize=7)
    return image


def _symmetric(matrix) -> float:
    finite = np.abs(np.asarray(matrix, np.float64))
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def _fig2_panels(stats) -> list[dict[str, Any]]:
    """Fig. 2's four panels: matrix (layers x units), title, colour map and scale."""
    bias = stats.transform_bias
    finite = bias[np.isfinite(bias)]
    # Both T panels share one scale from 0 (dark) to their largest value.
    top = max(_symmetric(stats.mean_t), _symmetric(stats.example_t))
    example = f"example {stats.example_index}"
    if stats.example_label is not None:
        example += f" (class {stats.example_label})"
    out = stats.example_output
    return [
        dict(matrix=bias, title="transform gate biases $b_T$", cmap="viridis",
             vmin=finite.min() if finite.size else None,
             vmax=finite.max() if finite.size else None),
        dict(matrix=stats.mean_t, title=f"mean T over {stats.examples} examples",
             cmap="viridis", vmin=0, vmax=top),
        dict(matrix=stats.example_t, title=f"T, {example}", cmap="viridis", vmin=0, vmax=top),
        dict(matrix=out, title=f"block outputs, {example}", cmap="RdBu_r",
             vmin=-_symmetric(out), vmax=_symmetric(out)),
    ]


def _unit_label(stats) -> str:
    return "channel (conv: mean over positions)" if any(stats.convolutional) else "unit (block)"


def fig2(stats, path=None, title: str = "") -> Figure:
    """NIPS 2015 Fig. 2: b_T, mean T over the data, T and block outputs for one example."""
    unit = _unit_label(stats)
    fig = Figure(figsize=(15, 4.6))
    axes = fig.subplots(1, 4)
    for ax, panel in zip(axes, _fig2_panels(stats)):
        _matrix(ax, fig, panel["matrix"], panel["title"], cmap=panel["cmap"], xlabel=unit,
                vmin=panel["vmin"], vmax=panel["vmax"])
    axes[0].set_ylabel("highway layer", fontsize=8)
    fig.suptitle((title + ": " if title else "") + "gates and block outputs", fontsize=10)
    # A fixed layout: tight_layout's measuring pass cost about as much as the drawing itself.
    fig.subplots_adjust(left=0.035, right=0.975, bottom=0.11, top=0.87, wspace=0.28)
    return _save(fig, path)


# fig2_rgb's layout, in pixels: a panel's heatmap area at most, the colour bar's width, the
# first heatmap's corner (room for the layer numbers and the titles), the room between panels
# (the bar and its labels).
_PANEL_WIDTH, _PANEL_HEIGHT, _BAR = 320, 300, 10
_LEFT, _TOP, _GAP = 34, 54, 96


def fig2_rgb(stats, title: str = "") -> np.ndarray:
    """Fig. 2 as a uint8 RGB image, drawn with Pillow: `fig2`'s four panels (the same
    matrices, colour maps and scales; NaN black) as heatmaps of whole-pixel cells, each with
    its title, first and last layer and unit, and colour bar with its two ends. For the
    image at the end of every training run (`training.callbacks.GateSummaries`), where
    Matplotlib took 0.5-1.2 s for the figure and this takes milliseconds; `fig2` draws the
    figure with axes for papers and the analysis."""
    from PIL import Image, ImageDraw, ImageFont

    font, small = ImageFont.load_default(size=13), ImageFont.load_default(size=11)
    panels = _fig2_panels(stats)
    rows, cols = np.shape(panels[0]["matrix"])
    cell = (max(1, min(12, _PANEL_HEIGHT // rows)), max(1, min(12, _PANEL_WIDTH // cols)))
    height, width = rows * cell[0], cols * cell[1]
    left, top = _LEFT, _TOP
    canvas = Image.new("RGB", (left + 4 * (width + _GAP), top + height + 40), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((left, 6), (title + ": " if title else "") + "gates and block outputs",
              fill="black", font=font)
    for i, panel in enumerate(panels):
        x = left + i * (width + _GAP)
        vmin = 0.0 if panel["vmin"] is None else float(panel["vmin"])
        vmax = 1.0 if panel["vmax"] is None else float(panel["vmax"])
        canvas.paste(Image.fromarray(heatmap_rgb(panel["matrix"], vmin, vmax, panel["cmap"],
                                                 cell)), (x, top))
        bar = heatmap_rgb(np.linspace(vmax, vmin, height)[:, None], vmin, vmax,
                          panel["cmap"], (1, _BAR))
        canvas.paste(Image.fromarray(bar), (x + width + 6, top))
        draw.text((x, top - 22), panel["title"].replace("$b_T$", "b_T"), fill="black",
                  font=font)
        for value, y in ((vmax, top), (vmin, top + height - 11)):
            draw.text((x + width + _BAR + 10, y), f"{value:.3g}", fill="black", font=small)
        draw.text((x - 4, top), "1", fill="black", font=small, anchor="ra")
        draw.text((x - 4, top + height), str(rows), fill="black", font=small, anchor="rd")
        draw.text((x, top + height + 4), "1", fill="black", font=small)
        draw.text((x + width, top + height + 4), str(cols), fill="black", font=small,
                  anchor="ra")
        draw.text((x + width // 2, top + height + 20), _unit_label(stats), fill="black",
                  font=small, anchor="ma")
    draw.text((4, top + height // 2), "layer", fill="black", font=small, anchor="lm")
    return np.asarray(canvas)


def fig3(stats, classes: list[int], path=None, title: str = "") -> Figure:
    """NIPS 2015 Fig. 3: per class, mean T of the class minus mean T over all data.

    One (layer x unit) panel per class in `classes`, and a (class x layer) map of the mean
    absolute difference over units for every class.
    """
    routing = stats.routing
    shown = [c for c in classes if c < len(routing)]
    vmax = _symmetric(routing[shown]) if shown else 1.0
    cols = min(len(shown), 5) or 1
    rows = -(-len(shown) // cols) if shown else 0
    fig = Figure(figsize=(3.2 * cols + 4.5, 3.0 * max(rows, 1) + 0.6))
    grid = fig.add_gridspec(max(rows, 1), cols + 1, width_ratios=[1] * cols + [1.4])
    for i, c in enumerate(shown):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        _matrix(ax, fig, routing[c], f"class {c} ({int(stats.class_counts[c])} ex.)",
                cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                xlabel="channel" if any(stats.convolutional) else "unit (block)")
        if i % cols == 0:
            ax.set_ylabel("highway layer", fontsize=8)
    ax = fig.add_subplot(grid[:, cols])
    summary = nanmean(np.abs(routing), axis=2).T  # (layer, class)
    image = ax.imshow(summary, aspect="auto", interpolation="nearest", cmap="magma",
                      extent=(-0.5, summary.shape[1] - 0.5, summary.shape[0] + 0.5, 0.5))
    ax.set_title("mean |class T - mean T| over units", fontsize=9)
    ax.set_xlabel("class", fontsize=8)
    ax.set_ylabel("highway layer", fontsize=8)
    ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=ax, fraction=0.08, pad=0.02).ax.tick_params(labelsize=7)
    fig.suptitle((title + ": " if title else "") + "data-dependent routing (class mean T "
                 "minus mean T)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def fig4(lesion: dict[str, Any], path=None, threshold: float | None = None,
         title: str = "") -> Figure:
    """NIPS 2015 Fig. 4: error with each layer lesioned, the intact error as a line."""
    errors = 100 * np.asarray(lesion["errors"])
    baseline = 100 * lesion["baseline"]
    index = np.arange(1, len(errors) + 1)
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    ax.plot(index, errors, "o-", ms=3.5, lw=1, color="tab:red", label="layer lesioned")
    ax.axhline(baseline, color="k", lw=1, label=f"intact: {baseline:.2f}%")
    if threshold is not None:
        ax.axhline(baseline + 100 * threshold, color="gray", lw=0.8, ls="--",
                   label=f"+{100 * threshold:g} pp (effective depth)")
    ax.set_xlabel("lesioned highway layer")
    ax.set_ylabel(f"error on {lesion.get('examples', '')} {lesion.get('split', '')} "
                  "examples (%)".replace("  ", " "))
    ax.set_xlim(0.5, len(errors) + 0.5)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title((title + ": " if title else "") + "lesioning one layer (T := 0)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def estimation(stages: list[dict[str, Any]], path=None, title: str = "") -> Figure:
    """Greff et al. 2017 Fig. 3: per stage, the mean and std of each block's estimation error."""
    fig = Figure(figsize=(max(3.4 * len(stages) + 1, 6), 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(stages), squeeze=False)[0])
    for ax, stage in zip(axes, stages):
        blocks = np.arange(1, len(stage["mean"]) + 1)
        mean, std = np.asarray(stage["mean"]), np.asarray(stage["std"])
        ax.fill_between(blocks, mean - std, mean + std, color="tab:blue", alpha=0.25,
                        label="mean ± std")
        ax.plot(blocks, mean, "o-", ms=3, color="tab:blue", label="mean")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_title(stage["stage"], fontsize=9)
        ax.set_xlabel("block", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("block output − stage output", fontsize=8)
    axes[0].legend(fontsize=7)
    fig.suptitle((title + ": " if title else "") + "estimation error by block\n"
                 "(Greff et al. 2017 §4.2; blocks of one stage)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def evolution(history: dict[str, Any], path=None, title: str = "") -> Figure:
    """Per-layer mean T over epochs (left) and at the last epoch (right), from gates.json."""
    epochs = [e["epoch"] for e in history["epochs"]]
    mean_t = np.array([e["mean_t"] for e in history["epochs"]])  # (epoch, layer)
    layers = len(history["layers"])
    fig = Figure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    cmap = colormaps["viridis"]
    for i in range(layers):
        left.plot(epochs, mean_t[:, i], color=cmap(i / max(layers - 1, 1)), lw=1)
    left.set_xlabel("epoch")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_ylabel("mean T (held-out batch)")
    left.set_title("mean T per layer (colour: depth, dark = first)", fontsize=9)
    left.grid(alpha=0.3)
    right.bar(np.arange(1, layers + 1), mean_t[-1], color=[cmap(i / max(layers - 1, 1))
                                                          for i in range(layers)])
    if epochs and epochs[0] == 0:
        right.plot(np.arange(1, layers + 1), mean_t[0], "k_", ms=6, label="epoch 0")
        right.legend(fontsize=8)
    right.set_xlabel("highway layer")
    right.set_ylabel("mean T")
    right.set_title(f"after epoch {epochs[-1]}", fontsize=9)
    right.grid(alpha=0.3, axis="y")
    fig.suptitle((title + ": " if title else "") + "T-gate evolution", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def evolution_gif(history: dict[str, Any], path, accuracy: dict[int, float] | None = None,
                  fps: float = 2.0, title: str = "") -> None:
    """An animated GIF, one frame per epoch: per-layer mean T bars (and the test accuracy
    so far, if `accuracy` maps epochs to it)."""
    from matplotlib.animation import PillowWriter

    entries = history["epochs"]
    layers = len(history["layers"])
    top = max(max(max(e["mean_t"]) for e in entries) * 1.1, 0.05)
    fig = Figure(figsize=(6, 5.2 if accuracy else 3.2))
    if accuracy:
        acc_ax, ax = fig.subplots(2, 1, gridspec_kw={"height_ratios": [1, 1.4]})
    else:
        acc_ax, ax = None, fig.subplots()
    writer = PillowWriter(fps=fps)
    with writer.saving(fig, os.fspath(path), dpi=80):
        for entry in entries:
            ax.clear()
            ax.bar(np.arange(1, layers + 1), entry["mean_t"], color="tab:blue")
            if entries[0]["epoch"] == 0:
                ax.plot(np.arange(1, layers + 1), entries[0]["mean_t"], "k_", ms=6)
            ax.set_ylim(0, top)
            ax.set_xlabel("highway layer")
            ax.set_ylabel("mean T")
            ax.set_title(f"{title + ': ' if title else ''}epoch {entry['epoch']}", fontsize=10)
            if acc_ax is not None:
                acc_ax.clear()
                seen = sorted(e for e in accuracy if e <= entry["epoch"])
                acc_ax.plot(seen, [accuracy[e] for e in seen], "o-", ms=3)
                acc_ax.set_xlim(0, max(max(accuracy), 1))
                acc_ax.set_ylim(0, 1)
                acc_ax.set_ylabel("test accuracy")
                acc_ax.grid(alpha=0.3)
            fig.tight_layout()
            writer.grab_frame()
