"""Where the transform gates of a Fig. 1 search's highway runs end up after training.

    KERAS_BACKEND=tensorflow python -m benchmarks.research.fig1_gates STUDY_DIR \\
        [--data-dir DIR] [--images 2000] --out docs/results/fig1/full_mnist/gates.json

For every highway cell of a `highway-zoo fig1` study (STUDY_DIR/highway_fc<depth>/) and every
finished trial whose checkpoint is still there (KerasTuner keeps the trial's best epoch):
rebuilds the net with the trial's activation and b_T, loads the checkpoint and reads T(x) on
the first N training images. Writes, per run, the mean T of each highway layer beside
sigmoid(b_T), the T every layer starts from at zero input, and the run's step size and final
loss (`training.experiments.fig1`). The study's searches keep every trial's checkpoint; a
session's save keeps only each cell's best, so run this where the study ran.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

import zoo
from training.data import load_dataset
from training.experiments.fc import architecture
from training.experiments.fig1 import cell_dir_name, step_size, summarize_cell
from training.experiments.study import study_settings
from zoo.analysis.gates import GateProbe
from zoo.files import write_text


def run_gates(checkpoint: Path, depth: int, run: dict, images: np.ndarray) -> list[float]:
    """The mean T of each highway layer of `run`'s net, its weights from `checkpoint`, on
    `images`."""
    hp = run["hyperparameters"]
    name, overrides = architecture("highway", depth)
    model = zoo.load(name, **overrides, activation=hp["activation"],
                     transform_bias=hp["transform_bias"])
    model.load_weights(checkpoint)
    return [round(float(np.mean(np.asarray(t))), 5)
            for t in GateProbe(model).gates(images).values()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--data-dir", default=None, help="default: the offline MNIST sample")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    settings = study_settings(args.study, "fig1")
    data = load_dataset("mnist", args.data_dir)
    images = data.train.images[:args.images]
    runs, missing = [], 0
    for depth in settings["depths"]:
        cell_dir = args.study / cell_dir_name("highway", depth)
        if not cell_dir.is_dir():
            continue
        cell = summarize_cell(cell_dir, "highway", depth, settings["epochs"], top=10)
        for run in cell["runs"]:
            checkpoint = cell_dir / "search" / f"trial_{run['trial_id']}" / "checkpoint.weights.h5"
            if not checkpoint.is_file():
                missing += 1
                continue
            hp = run["hyperparameters"]
            per_layer = run_gates(checkpoint, depth, run, images)
            runs.append({
                "depth": depth, "trial_id": run["trial_id"], "activation": hp["activation"],
                "transform_bias": hp["transform_bias"],
                "initial_T": round(1.0 / (1.0 + math.exp(-hp["transform_bias"])), 5),
                "step_size": step_size(hp), "final_loss": run["final_loss"],
                "mean_T": round(float(np.mean(per_layer)), 5), "mean_T_per_layer": per_layer})
            print(f"depth {depth} trial {run['trial_id']}: b_T {hp['transform_bias']:.2f}, "
                  f"mean T {runs[-1]['mean_T']:.4f} (starts at {runs[-1]['initial_T']:.4f}), "
                  f"final loss {run['final_loss']}", flush=True)
    write_text(args.out, json.dumps({
        "study": str(args.study), "code": settings.get("code"), "data": data.source,
        "images": len(images), "runs_without_checkpoint": missing, "runs": runs},
        indent=1) + "\n", overwrite=True)
    print(f"Wrote {args.out}: {len(runs)} runs ({missing} without a checkpoint)")


if __name__ == "__main__":
    main()
