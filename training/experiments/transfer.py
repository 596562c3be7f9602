"""Transfer learning, measured: a body pretrained on Fashion-MNIST, fine-tuned on MNIST.

    highway-zoo transfer [--sizes 100,1000,4000] [--seeds 3] [--steps 240] [--out DIR]

For each training-set size (the first N digits of the MNIST sample's training split, shuffled
once) and seed, the same network is trained three ways with the same optimiser and the same
budget of optimiser steps (as many epochs of the N digits as it takes, batch 50):

- ``scratch``: `zoo.load(target, include_top=False)`, freshly initialised, plus a new head;
- ``fine-tune``: the body of `source`'s shipped weights (`weights="default"`,
  `include_top=False`) plus the same new head, every weight trained;
- ``linear probe``: that pretrained body frozen, only the new head trained.

The head is what the zoo's MNIST conv nets have on top (Flatten, a Dense softmax), started
afresh. Test accuracy on the sample's 1,000 test digits is reported as mean ± std over seeds,
with results.json, table.md and transfer.png. A `Study` like the others: run it again with
the same options and its finished runs are kept.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.experiments.study import Study, format_table, mean_std, run_study, summarise

SOURCE = "highway_conv32_fashion_mnist"
TARGET = "highway_conv32_mnist"
METHODS = ("scratch", "fine-tune", "linear probe")


def build(method: str, seed: int, source: str = SOURCE, target: str = TARGET):
    """The network for `method`: a zoo body (pretrained or not) and a fresh head."""
    import keras

    import zoo

    keras.utils.set_random_seed(seed)
    if method == "scratch":
        body = zoo.load(target, include_top=False)
    else:
        body = zoo.load(source, weights="default", include_top=False)
        body.trainable = method != "linear probe"
    classes = zoo.describe(target)["classes"]
    model = keras.Sequential([
        body,
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(classes, activation="softmax", name="predictions"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _method_slug(method: str) -> str:
    return method.replace(" ", "_").replace("-", "_")


def _training_data(data_dir) -> dict[str, Any]:
    """MNIST as arrays: the training digits in one shuffled order (the same for every size and
    seed), the test digits, and where they came from."""
    from training.data import first_examples, load_dataset

    data = load_dataset("mnist", data_dir)
    x_train, y_train = first_examples(data.train)
    x_test, y_test = first_examples(data.test)
    order = np.random.default_rng(0).permutation(len(x_train))
    return {"x_train": x_train[order], "y_train": y_train[order], "x_test": x_test,
            "y_test": y_test, "source": data.source}


def train_one(job: dict[str, Any], data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trains one (size, method, seed) for its steps; its test accuracy and loss."""
    if data is None:  # in a run's own process
        data = _training_data(job["data_dir"])
    model = build(job["method"], job["seed"], job["source"], job["target"])
    size = job["size"]
    started = time.perf_counter()
    model.fit(data["x_train"][:size], data["y_train"][:size], batch_size=job["batch_size"],
              epochs=job["epochs"], verbose=0, shuffle=True)
    seconds = time.perf_counter() - started
    loss, accuracy = model.evaluate(data["x_test"], data["y_test"], verbose=0)
    return {"test_accuracy": float(accuracy), "test_loss": float(loss),
            "train_seconds": round(seconds, 2)}


class TransferStudy(Study):
    """The transfer experiment as a `training.experiments.study.Study`: a job per (size,
    method, seed), all trained in this process on one loaded MNIST."""

    name, figure_file, indent = "transfer", "transfer.png", 2
    run_one = staticmethod(train_one)

    def __init__(self, sizes, seeds, steps, *, batch_size=50, data_dir=None, source=SOURCE,
                 target=TARGET):
        if not sizes or min(sizes) < 1 or seeds < 1 or steps < 1:
            raise ValueError("sizes, seeds and steps must be positive. Received: "
                             f"sizes={list(sizes)!r}, seeds={seeds!r}, steps={steps!r}")
        self.data = _training_data(data_dir)
        available = len(self.data["x_train"])
        if max(sizes) > available:
            raise ValueError(f"--sizes {max(sizes)} exceeds the {available} training images "
                             f"of {self.data['source']}.")
        self.sizes, self.seeds, self.steps, self.batch_size = list(sizes), seeds, steps, batch_size
        self.data_dir, self.source, self.target = data_dir, source, target

    def settings(self) -> dict[str, Any]:
        return {
            "source": f"{self.source} weights='default' (trained on Fashion-MNIST)",
            "target": f"{self.target} architecture, include_top=False + Flatten + Dense softmax",
            "data": self.data["source"],
            "num_test": len(self.data["x_test"]),
            "recipe": {"optimizer": "adam", "learning_rate": 1e-3,
                       "batch_size": self.batch_size, "steps": self.steps},
            "sizes": self.sizes, "seeds": self.seeds,
        }

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        jobs = []
        for size in self.sizes:
            steps_per_epoch = -(-size // self.batch_size)
            epochs = max(1, round(self.steps / steps_per_epoch))
            for method in METHODS:
                for seed in range(self.seeds):
                    jobs.append({
                        "size": size, "method": method, "seed": seed, "epochs": epochs,
                        "steps": epochs * steps_per_epoch, "batch_size": self.batch_size,
                        "source": self.source, "target": self.target,
                        "run_dir": str(out / f"n{size}_{_method_slug(method)}_seed{seed}"),
                        "data_dir": None if self.data_dir is None else str(self.data_dir),
                    })
        return jobs

    def label(self, job: dict[str, Any]) -> str:
        return f"N={job['size']:5d} {job['method']:12s} seed {job['seed']}"

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        return f"test accuracy {result['test_accuracy']:.4f} ({result['train_seconds']:.1f} s)"

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return transfer_summary(runs)

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return transfer_table(summary)

    def results(self, runs, summary) -> dict[str, Any]:
        return {**self.settings(), "runs": runs, "summary": summary}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        plot(results["summary"], out / self.figure_file)


def transfer(sizes: Sequence[int] = (100, 1000, 4000), seeds: int = 3, steps: int = 240, *,
             batch_size: int = 50, data_dir: str | os.PathLike | None = None,
             out: str | os.PathLike | None = None) -> dict[str, Any]:
    """Trains every (size, method, seed) and writes results.json, table.md and transfer.png
    under `out` (new or empty, default runs/transfer-TIME, or an earlier run of the same
    settings, resumed); returns the results (see the module docstring)."""
    study = TransferStudy(sizes, seeds, steps, batch_size=batch_size, data_dir=data_dir)
    return run_study(study, out, isolate=False)


def transfer_summary(runs) -> list[dict[str, Any]]:
    """Mean and (sample) standard deviation of the test accuracy per (size, method)."""
    groups = {(g["size"], g["method"]): g["test_accuracy"]
              for g in summarise(runs, ("size", "method"), ("test_accuracy",), ddof=1)}
    return [{"size": size, "method": method, "seeds": s["n"], "mean": s["mean"],
             "std": s["std"]}
            for size in sorted({r["size"] for r in runs}) for method in METHODS
            if (s := groups.get((size, method)))]


def transfer_table(summary) -> str:
    by = {(r["size"], r["method"]): r for r in summary}
    return format_table(
        ["training digits", *METHODS],
        [[f"{size:,}", *(mean_std(by[size, m]) for m in METHODS)]
         for size in sorted({r["size"] for r in summary})])


def plot(summary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.files import atomic_path

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for method in METHODS:
        rows = [r for r in summary if r["method"] == method]
        ax.errorbar([r["size"] for r in rows], [r["mean"] for r in rows],
                    yerr=[r["std"] for r in rows], marker="o", capsize=3, label=method)
    ax.set_xscale("log")
    ax.set_xlabel("MNIST training digits")
    ax.set_ylabel("test accuracy")
    ax.set_title("Fashion-MNIST body -> MNIST (same steps)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
