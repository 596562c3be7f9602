"""`train()`: one zoo network, one dataset, one run directory.

A run directory holds everything needed to compare and repeat the run::

    run.json                  command, versions, seed, recipe, data source, status
    model.json                architecture, overrides, metadata, weights sha256
    model.weights.h5(.sha256) final weights and their hash
    history.json              per-epoch metrics ("val_" = the test split)
    metrics.json              final test loss and accuracy

An existing run is never overwritten: a directory that already holds files is
refused before any work starts.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

import zoo
from training.data import Dataset, load_dataset
from training.recipes import get_recipe, make_optimizer
from zoo.weights import write_text


def default_run_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def claim_run_dir(path: str | os.PathLike) -> Path:
    """Creates `path` for a new run; refuses one that already holds files."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(
            f"Run directory {path} already exists and is not empty; refusing to "
            "overwrite a previous run. Pass a new --out, or move the old run away."
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def pipeline(split: tf.data.Dataset, batch_size: int, shuffle: int = 0, seed: int = 0):
    """Batches of float32 raw pixels (the model preprocesses) and int labels."""
    if shuffle:
        split = split.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    return (
        split.batch(batch_size)
        .map(lambda x, y: (tf.cast(x, tf.float32), y), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def _check_compatible(name: str, data: Dataset, overrides: dict[str, Any]) -> dict[str, Any]:
    """Checks image shapes; adapts `classes` to the dataset when they differ."""
    info = zoo.describe(name)
    if tuple(info["input_shape"]) != tuple(data.image_shape):
        raise ValueError(
            f"{name} takes images of shape {tuple(info['input_shape'])} but dataset "
            f"{data.name!r} has {tuple(data.image_shape)}. Pick a dataset of that "
            f"shape (its own is {info['dataset']!r})."
        )
    classes = overrides.get("classes", info["classes"])
    if classes != data.num_classes:
        if "classes" in overrides:
            raise ValueError(
                f"classes={classes} but dataset {data.name!r} has {data.num_classes}."
            )
        overrides = {**overrides, "classes": data.num_classes}
    return overrides


class _JsonHistory(keras.callbacks.Callback):
    """Rewrites history.json after every epoch, so a killed run keeps its curve."""

    def __init__(self, path: Path):
        super().__init__()
        self.path, self.epochs = path, []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({"epoch": epoch + 1, **{k: float(v) for k, v in (logs or {}).items()}})
        write_text(self.path, json.dumps(self.epochs, indent=2) + "\n", overwrite=True)


def train(
    name: str,
    *,
    dataset: str | Dataset | None = None,
    data_dir: str | os.PathLike | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    out: str | os.PathLike | None = None,
    seed: int = 0,
    recipe: str | None = None,
    verbose: int | str = "auto",
    **overrides: Any,
) -> dict[str, Any]:
    """Trains zoo network `name` with its recipe and writes a run directory.

    Args:
        name: a `zoo.list_models()` name.
        dataset: a dataset name (default: the architecture's own) or a
            `training.data.Dataset` already loaded.
        data_dir: where the upstream dataset files are (see `training.data`).
        epochs, batch_size, learning_rate: override the recipe's values
            (`learning_rate` replaces the base rate; a schedule keeps its shape).
        out: the run directory (default `runs/<name>-<timestamp>`); must be new
            or empty.
        seed: seeds Python, NumPy, TensorFlow and the shuffling.
        recipe: a `zoo.RECIPES` name (default: the architecture's).
        verbose: `model.fit`'s verbosity (progress bar by default).
        **overrides: architecture overrides, as for `zoo.load`.

    Returns:
        The final metrics, with `run_dir`.
    """
    info = zoo.describe(name)
    recipe_ = get_recipe(
        recipe or info["recipe"], epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate,
    )
    data = dataset if isinstance(dataset, Dataset) else load_dataset(
        dataset or info["dataset"], data_dir
    )
    overrides = _check_compatible(name, data, overrides)
    run_dir = claim_run_dir(out or default_run_dir(name))
    run = {
        "command": sys.argv,
        "architecture": name,
        "overrides": overrides,
        "recipe": recipe_,
        "seed": seed,
        "dataset": {"name": data.name, "source": data.source,
                    "num_train": data.num_train, "num_test": data.num_test},
        "versions": {"python": platform.python_version(), "tensorflow": tf.__version__,
                     "keras": keras.__version__},
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "status": "running",
    }
    write_text(run_dir / "run.json", json.dumps(run, indent=2, default=str) + "\n")

    keras.utils.set_random_seed(seed)
    model = zoo.load(name, **overrides)
    steps_per_epoch = -(-data.num_train // recipe_["batch_size"])
    model.compile(
        optimizer=make_optimizer(recipe_, steps_per_epoch),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    train_ds = pipeline(data.train, recipe_["batch_size"], shuffle=data.num_train, seed=seed)
    test_ds = pipeline(data.test, 1000)
    start = time.perf_counter()
    history = model.fit(
        train_ds,
        epochs=recipe_["epochs"],
        validation_data=test_ds,
        callbacks=[_JsonHistory(run_dir / "history.json"), keras.callbacks.TerminateOnNaN()],
        shuffle=False,  # the pipeline shuffles
        verbose=verbose,
    )
    train_seconds = time.perf_counter() - start
    test_loss, test_accuracy = model.evaluate(test_ds, verbose=0)
    metrics = {
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "final_train_loss": float(history.history["loss"][-1]),
        "final_train_accuracy": float(history.history["accuracy"][-1]),
        "train_seconds": round(train_seconds, 2),
        "epochs": len(history.history["loss"]),
    }
    zoo.save(model, run_dir)
    write_text(run_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    run.update(status="finished", finished=datetime.datetime.now().isoformat(timespec="seconds"))
    write_text(run_dir / "run.json", json.dumps(run, indent=2, default=str) + "\n", overwrite=True)
    return {**metrics, "run_dir": str(run_dir)}
