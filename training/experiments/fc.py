"""The fully connected nets the image studies compare, and how one of them is trained.

- `KINDS`, `INITS`, `architecture(kind, depth)`: the fully connected nets of the NIPS 2015
  optimisation study by kind ("highway" or "plain") and depth, and the two kernel
  initialisations compared.
- `FCStudy`: what the studies of these nets (sweep, variants) share: `run_one` (`train_one`:
  one net trained by `training.train`, in this process or a child), its progress line and
  its summary over seeds.
- `depth_table`: accuracy and training loss per depth, one column pair per series.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import warnings
from collections.abc import Sequence
from typing import Any

from training.experiments.study import Study, format_table, summarise

KINDS = ("highway", "plain")

# Kernel initialisations compared by the experiments (both are JSON-able overrides).
INITS = {
    # The paper's "normalized initialization" (Glorot & Bengio), the zoo's default.
    "glorot": "glorot_uniform",
    # The seed NumPy write-up's uniform +-1/sqrt(fan_in): a third of Glorot's
    # variance for square layers, so a plain tanh stack shrinks its signal by
    # about 1/sqrt(3) per layer.
    "seed": {
        "class_name": "VarianceScaling",
        "config": {"scale": 1.0 / 3.0, "mode": "fan_in", "distribution": "uniform"},
    },
}

# What FCStudy.summary averages over seeds.
SUMMARISED = ("test_accuracy", "final_train_loss", "seconds_per_epoch", "peak_rss_mb")
_FAILED_METRICS = ("test_accuracy", "test_loss", "final_train_loss")


def architecture(kind: str, depth: int) -> tuple[str, dict[str, Any]]:
    """The registered net of that depth, or the depth-10 one with a depth override (same
    width, same layout)."""
    import zoo

    name = f"{kind}_fc{depth}_mnist"
    if name in zoo.list_models():
        return name, {}
    return f"{kind}_fc10_mnist", {"depth": depth}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return f"{value['mean']:.3f} ± {value['std']:.3f}"
    return f"{value:.3f}"


def depth_table(results: Sequence[dict[str, Any]], series: Sequence[str] = KINDS) -> str:
    """One row per depth: test accuracy, then final training loss, of each series.

    A result belongs to series `r.get("series", r["kind"])`; its values are numbers,
    or `{"mean", "std"}` dicts printed as "mean ± std".
    """
    by = {(r.get("series", r["kind"]), r["depth"]): r for r in results}
    depths = sorted({r["depth"] for r in results})
    header = [f"{s} test acc" for s in series] + [f"{s} train loss" for s in series]
    return format_table(["depth", *header], [
        [d, *(_cell(by.get((s, d), {}).get(key))
              for key in ("test_accuracy", "final_train_loss") for s in series)]
        for d in depths])


def subset(data, max_train: int | None = None, max_test: int | None = None):
    """`data` (a `training.data.Dataset`) cut to its first examples."""
    if max_train and max_train < data.num_train:
        data = dataclasses.replace(data, train=data.train.take(max_train), num_train=max_train)
    if max_test and max_test < data.num_test:
        data = dataclasses.replace(data, test=data.test.take(max_test), num_test=max_test)
    return data


def _job_data(job: dict[str, Any]):
    """The data a job names (in a run's own process: the parent loaded it once and warned)."""
    from training.data import OfflineFallbackWarning, load_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OfflineFallbackWarning)  # the parent warned
        return subset(load_dataset(job.get("dataset", "mnist"), job["data_dir"]),
                      job.get("max_train_examples"), job.get("max_test_examples"))


def train_one(job: dict[str, Any], data=None) -> dict[str, Any]:
    """Trains one net of a study in this process; returns its metrics and timings.

    `job` names the architecture, overrides, epochs, recipe, seed and run directory; without
    `data`, also the dataset ("dataset", "data_dir", optional "max_train_examples" /
    "max_test_examples"), loaded if the net is to be trained."""
    from training import train
    from training.callbacks import EpochClock
    from training.run_dir import FINISHED, NON_FINITE, RunDir
    from training.runtime.tf_gradient_registry import released_custom_gradients
    from zoo.model import recursion_headroom

    run_dir = RunDir(job["run_dir"])
    status = run_dir.status
    clock = EpochClock()  # the run tells it of each epoch it records
    if status == FINISHED:  # the study was stopped after the run, before its result.json
        metrics = run_dir.read_metrics()
    elif status == NON_FINITE:  # likewise, after the run diverged: what train raised then
        metrics = {"failed": run_dir.read_run()["failure"]["message"],
                   **dict.fromkeys(_FAILED_METRICS, math.nan)}
    else:
        data = _job_data(job) if data is None else data
        # released_custom_gradients: the study trains many nets in one process
        # (training.runtime.tf_gradient_registry).
        with recursion_headroom(job["depth"]), released_custom_gradients():
            try:
                metrics = train(
                    job["architecture"], dataset=data, epochs=job["epochs"],
                    learning_rate=job.get("learning_rate"),  # None: the recipe's
                    out=run_dir.path, seed=job["seed"], recipe=job["recipe"], verbose=0,
                    callbacks=[clock], **job["overrides"],
                )
            except FloatingPointError as err:  # the loss diverged (NonFiniteLossError)
                metrics = {"failed": str(err), **dict.fromkeys(_FAILED_METRICS, math.nan)}
    seconds = clock.seconds()
    history = run_dir.read_history()
    return {
        **metrics,
        "first_epoch_seconds": round(seconds[0], 3) if seconds else None,
        "seconds_per_epoch": (
            round(statistics.median(seconds[1:] or seconds), 3) if seconds else None
        ),
        "loss_curve": [e["loss"] for e in history],
        "val_accuracy_curve": [e["val_accuracy"] for e in history],
    }


class FCStudy(Study):
    """A study of FC nets on an image dataset: each job one `train_one`."""

    run_one = staticmethod(train_one)

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        parts = [f"test accuracy {result['test_accuracy']:.3f}",
                 f"final training loss {result['final_train_loss']:.3f}"]
        if result["seconds_per_epoch"] is not None:
            parts.append(f"{result['seconds_per_epoch']:.2f} s/epoch")
        if result["peak_rss_mb"] is not None:
            parts.append(f"peak RSS {result['peak_rss_mb']:.0f} MB")
        if "failed" in result:
            parts.append(f"FAILED: {result['failed']}")
        return ", ".join(parts)

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Mean and (population) std over seeds of each series and depth."""
        return [{
            "series": g["series"], "kind": g["runs"][0]["kind"], "depth": g["depth"],
            "transform_bias": g["runs"][0]["transform_bias"],
            "seeds": [r["seed"] for r in g["runs"]], **{k: g[k] for k in SUMMARISED},
            # A run stopped early (TerminateOnNaN) leaves NaN at its missing epochs.
            "loss_curve_mean": g["loss_curve"].mean(axis=0).tolist(),
            "loss_curve_std": g["loss_curve"].std(axis=0).tolist(),
        } for g in summarise(runs, ("series", "depth"), SUMMARISED, ("loss_curve",))]
