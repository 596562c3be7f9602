"""The transform-bias study (`highway-zoo bias-study`): deep FC highway nets trained at fixed
initial transform-gate biases b_T, the final training loss plotted against b_T (a line per
depth). The nets are trained by `training.experiments.sweep`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_bias_study(results: dict[str, Any], path: Path) -> None:
    """Final training loss against b_T, one line per depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.files import save_figure

    summary = [s for s in results["summary"] if s["kind"] == "highway"]
    depths = sorted({s["depth"] for s in summary})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for depth in depths:
        rows = sorted((s for s in summary if s["depth"] == depth),
                      key=lambda s: s["transform_bias"])
        ax.errorbar([s["transform_bias"] for s in rows],
                    [s["final_train_loss"]["mean"] for s in rows],
                    yerr=[s["final_train_loss"]["std"] for s in rows],
                    marker="o", capsize=3, label=f"depth {depth}")
    ax.axhline(math.log(10), color="grey", lw=0.8, ls=":", label="chance (log 10)")
    settings = results["settings"]
    ax.set(xlabel="initial transform-gate bias b_T", ylabel="final training loss",
           yscale="log", title=f"Highway {settings['activation']} FC nets on MNIST "
           f"({results['data']['num_train']} images, {settings['recipe']['name']}, "
           f"{settings['recipe']['epochs']} epochs)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def bias_table(results: dict[str, Any]) -> str:
    """Markdown: final training loss (and test accuracy) per b_T, a column per depth."""
    from training.experiments.study import format_table

    summary = [s for s in results["summary"] if s["kind"] == "highway"]
    depths = sorted({s["depth"] for s in summary})
    biases = sorted({s["transform_bias"] for s in summary}, reverse=True)
    by = {(s["depth"], s["transform_bias"]): s for s in summary}

    def cells(s):
        return ([f"{s['final_train_loss']['mean']:.3f}", f"{s['test_accuracy']['mean']:.3f}"]
                if s else ["-", "-"])

    return format_table(
        ["b_T", *(f"depth {d} {what}" for d in depths for what in ("train loss", "test acc"))],
        [[f"{b:g}", *(c for d in depths for c in cells(by.get((d, b))))] for b in biases])


def bias_study(
    depths: Sequence[int] = (50, 100),
    biases: Sequence[float] = (-1, -2, -3, -4, -6, -8, -10),
    seeds: int = 1,
    *,
    activation: str = "tanh",
    epochs: int | None = None,
    recipe: str = "adam_fc",
    data_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    isolate: bool = True,
) -> dict[str, Any]:
    """Trains highway FC nets at every depth and fixed b_T (`training.experiments.sweep`), then
    writes bias_study.png (final training loss vs b_T, a line per depth) and
    bias_table.md beside the sweep's results.json."""
    from training.experiments.sweep import sweep
    from training.run_dir import default_dir
    from zoo.files import write_text

    if not biases:
        raise ValueError("biases must hold at least one value.")
    out = Path(out) if out is not None else default_dir("bias-study")
    results = sweep(depths, ["highway"], seeds, activation=activation,
                    transform_bias=[float(b) for b in biases], epochs=epochs,
                    data_dir=data_dir, out=out, recipe=recipe, isolate=isolate)
    table = bias_table(results)
    write_text(out / "bias_table.md", table + "\n", overwrite=True)
    plot_bias_study(results, out / "bias_study.png")
    print(f"\n{table}\n\nWrote {out}/bias_study.png and bias_table.md")
    return results


