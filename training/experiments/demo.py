"""The main job: the paper's headline contrast, highway vs plain nets by depth.

Fully connected tanh nets of the optimisation study (NIPS 2015 §3.1, Fig. 1) are
trained the same way at several depths on MNIST with the seed NumPy write-up's
recipe (Adam 5e-3, global-norm clip 5, batch 128, 12 epochs). It prints a table
of test accuracy and final training loss per depth and plots accuracy against
depth. Plain nets at depth >= 20 should sit near chance while highway nets stay
high.

A `Study` like the others: run it again with the same options and its finished nets are kept.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.data import load_dataset
from training.experiments.fc import INITS, KINDS, FCStudy, architecture, depth_table
from training.experiments.study import run_study
from zoo.files import save_figure


def plot(results: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, style in zip(KINDS, ("o-", "s--")):
        rows = sorted((r for r in results if r["kind"] == kind), key=lambda r: r["depth"])
        depths = [r["depth"] for r in rows]
        ax_acc.plot(depths, [r["test_accuracy"] for r in rows], style, label=kind)
        ax_loss.plot(depths, [r["final_train_loss"] for r in rows], style, label=kind)
    ax_acc.axhline(0.1, color="grey", lw=0.8, ls=":", label="chance")
    ax_loss.axhline(math.log(10), color="grey", lw=0.8, ls=":", label="log 10 (uniform)")
    ax_acc.set(xlabel="depth (layers)", ylabel="test accuracy", ylim=(0, 1))
    ax_loss.set(xlabel="depth (layers)", ylabel="final training loss")
    depths = sorted({r["depth"] for r in results})
    for ax in (ax_acc, ax_loss):
        ax.set_xscale("log")
        ax.set_xticks(depths, [str(d) for d in depths])
        ax.minorticks_off()
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


class DemoStudy(FCStudy):
    """The demo as a `training.experiments.study.Study`: one seed, every depth, both kinds,
    trained in this process on one loaded MNIST."""

    name, figure_file, indent = "demo", "accuracy_vs_depth.png", 2

    def __init__(self, depths, *, init, epochs, data_dir, seed, overrides):
        if init not in INITS:
            raise ValueError(f"Unknown init {init!r}; choose from {', '.join(INITS)}.")
        self.depths, self.init, self.epochs, self.seed = list(depths), init, epochs, seed
        self.overrides = dict(overrides)
        # Loaded before the directory is claimed: a refusal leaves nothing behind.
        self.data = load_dataset("mnist", data_dir)
        print(f"Data: {self.data.source}")
        self.data_record = {"source": self.data.source, "num_train": self.data.num_train,
                            "num_test": self.data.num_test}

    def settings(self) -> dict[str, Any]:
        return {"data": self.data_record, "depths": self.depths, "seed": self.seed,
                "init": self.init, "epochs": self.epochs, "overrides": self.overrides}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        jobs = []
        for depth in self.depths:
            for kind in KINDS:
                name, depth_override = architecture(kind, depth)
                # b_T is the highway nets' own; the plain nets take every other override.
                extra = {k: v for k, v in self.overrides.items()
                         if kind == "highway" or k != "transform_bias"}
                extra.setdefault("kernel_initializer", INITS[self.init])
                jobs.append({"kind": kind, "depth": depth, "architecture": name,
                             "overrides": {**depth_override, **extra}, "seed": self.seed,
                             "epochs": self.epochs, "recipe": None,
                             "run_dir": str(out / f"{kind}_depth{depth}")})
        return jobs

    def label(self, job: dict[str, Any]) -> str:
        return f"{job['kind']:7s} depth {job['depth']:4d}"

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """One seed: each run as it is (kind, depth and its metrics)."""
        return [{k: r[k] for k in ("kind", "depth", "architecture", "test_accuracy",
                                   "final_train_loss")} for r in runs]

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return depth_table(summary)

    def results(self, runs, summary) -> dict[str, Any]:
        return {"data": self.data_record, "settings": self.settings(), "runs": runs,
                "summary": summary}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        plot(results["summary"], out / self.figure_file,
             f"Highway vs plain tanh nets on MNIST ({self.data.num_train} training images, "
             f"{self.init} init, seed {self.seed})")


def demo(
    depths: Sequence[int] = (10, 20, 50),
    *,
    init: str = "seed",
    epochs: int | None = None,
    data_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    seed: int = 0,
    **overrides: Any,
) -> dict[str, Any]:
    """Trains highway and plain nets at each depth; writes runs, table, JSON and PNG.

    `init` picks the kernel initialisation of both kinds of net from `INITS`. `out` is new or
    empty (default runs/demo-TIME), or an earlier demo's with the same settings, resumed.
    Returns what results.json holds.
    """
    study = DemoStudy(depths, init=init, epochs=epochs, data_dir=data_dir, seed=seed,
                      overrides=overrides)
    return run_study(study, out, isolate=False)
