"""How well a run's net fits its own training images, where the run stands.

    KERAS_BACKEND=tensorflow python -m benchmarks.research.run_fit RUN_DIR --data-dir DIR \\
        [--examples 10000] [--out FILE]

Rebuilds the net of a `highway-zoo train` run directory (its architecture and overrides, from
run.json), gives it the weights of the run's latest checkpoint (or its final weights once it
has finished) and classifies, in inference mode (no dropout, no augmentation), N training
images drawn at random (seed 0) and the whole test split. A training accuracy far above the
test's says the net overfits; one near it, below what the net should reach, that it
underfits: what the accuracy logged during training (under dropout and augmentation) cannot
say. Prints the result as JSON and writes it to `--out` if given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import zoo
from training.checkpoints import Checkpoints, assign_model_weights
from training.data import load_dataset
from training.data.images import published_source
from training.run_dir import FINISHED, RunDir
from zoo.files import write_text


def scores(model, images: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy (%) and mean cross-entropy (nats, without the weight decay) of `model`."""
    probs = np.asarray(model.predict(images, batch_size=500, verbose=0), dtype=np.float64)
    picked = probs[np.arange(len(labels)), labels]
    return {"accuracy": round(100 * float(np.mean(probs.argmax(1) == labels)), 2),
            "cross_entropy": round(float(-np.mean(np.log(np.maximum(picked, 1e-12)))), 4)}


def run_fit(run_dir: str | Path, data_dir: str | Path | None, examples: int) -> dict:
    run_dir = RunDir(run_dir)
    run = run_dir.read_run()
    model = zoo.load(run["architecture"], weights=None, **run["overrides"])
    if run_dir.status == FINISHED:
        model.load_weights(run_dir.path / "model.weights.h5")
        where = {"epoch": len(run_dir.read_history()), "weights": "model.weights.h5"}
    else:
        checkpoint = Checkpoints(run_dir.path / "checkpoint", run["steps_per_epoch"]).latest()
        if checkpoint is None:
            raise ValueError(f"{run_dir.path} has no checkpoint yet: no epoch has ended; "
                             "run it again once one has.")
        assign_model_weights(model, run_dir.path / "checkpoint" / checkpoint["file"])
        where = {"epoch": checkpoint["epoch"], "weights": checkpoint["file"]}
    data = load_dataset(run["dataset"]["name"], data_dir, fallback=False)
    picked = np.random.default_rng(0).choice(len(data.train), min(examples, len(data.train)),
                                             replace=False)
    # named as published, without this machine's paths: the study folder and the run's
    return {"run": f"{run_dir.path.parent.name}/{run_dir.path.name}",
            "architecture": run["architecture"], "overrides": run["overrides"], **where,
            "data": published_source(data.source),
            "train": {"examples": len(picked),
                      **scores(model, data.train.images[picked], data.train.labels[picked])},
            "test": {"examples": len(data.test),
                     **scores(model, data.test.images, data.test.labels)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-dir", required=True, help="the data the run trained on")
    parser.add_argument("--examples", type=int, default=10000,
                        help="training images to classify (default 10000)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        result = run_fit(args.run_dir, args.data_dir, args.examples)
    except (OSError, ValueError) as err:  # no run there, no checkpoint, other data: one line
        parser.exit(2, f"run_fit: {' '.join(str(err).split())}\n")
    text = json.dumps(result, indent=1) + "\n"
    print(text, end="")
    if args.out:
        write_text(args.out, text)


if __name__ == "__main__":
    main()
