"""The main job: the paper's headline contrast, highway vs plain nets by depth.

Fully connected tanh nets of the optimisation study (NIPS 2015 §3.1, Fig. 1) are
trained the same way at several depths on MNIST with the seed NumPy write-up's
recipe (Adam 5e-3, global-norm clip 5, batch 128, 12 epochs). It prints a table
of test accuracy and final training loss per depth and plots accuracy against
depth. Plain nets at depth >= 20 should sit near chance while highway nets stay
high.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.data import load_dataset
from training.experiments.fc import INITS, KINDS, architecture, depth_table
from training.run_dir import claim_dir, default_dir
from training.trainer import train
from zoo.files import save_figure, write_text


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


def demo(
    depths: Sequence[int] = (10, 20, 50),
    *,
    init: str = "seed",
    epochs: int | None = None,
    data_dir: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    seed: int = 0,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Trains highway and plain nets at each depth; writes runs, table, JSON and PNG.

    `init` picks the kernel initialisation of both kinds of net from `INITS`.
    """
    if init not in INITS:
        raise ValueError(f"Unknown init {init!r}; choose from {', '.join(INITS)}.")
    data = load_dataset("mnist", data_dir)  # before the directory: a refusal leaves nothing
    out = claim_dir(out or default_dir("demo"))
    print(f"Data: {data.source}")
    results = []
    jobs = [(d, k) for d in depths for k in KINDS]
    for i, (depth, kind) in enumerate(jobs, start=1):
        name, depth_override = architecture(kind, depth)
        extra = {k: v for k, v in overrides.items() if kind == "highway" or k != "transform_bias"}
        extra.setdefault("kernel_initializer", INITS[init])
        start = time.perf_counter()
        metrics = train(
            name, dataset=data, epochs=epochs, out=out / f"{kind}_depth{depth}",
            seed=seed, verbose=0, **depth_override, **extra,
        )
        results.append({"kind": kind, "depth": depth, "architecture": name, **metrics})
        print(
            f"[{i}/{len(jobs)}] {kind:7s} depth {depth:4d}: test accuracy "
            f"{metrics['test_accuracy']:.3f}, final training loss "
            f"{metrics['final_train_loss']:.3f} ({time.perf_counter() - start:.1f} s)",
            flush=True,
        )
    table = depth_table(results)
    print()
    print(table)
    summary = {"data": data.source, "seed": seed, "init": init, "overrides": overrides,
               "results": results}
    write_text(out / "results.json", json.dumps(summary, indent=2) + "\n")
    write_text(out / "table.md", table + "\n")
    plot(results, out / "accuracy_vs_depth.png",
         f"Highway vs plain tanh nets on MNIST ({data.num_train} training images, "
         f"{init} init, seed {seed})")
    print(f"\nWrote {out}/results.json, table.md and accuracy_vs_depth.png")
    return results
