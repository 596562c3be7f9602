"""Hyperparameter search as in the NIPS 2015 paper, and the transform-bias study.

The paper chose its networks by random search (100 runs per network type) over the
initial learning rate, momentum, learning-rate decay, activation (ReLU or tanh) and, for
highway nets, the initial transform-gate bias b_T in [-10, -1], training with SGD and
momentum. `ZooHyperModel(name, space)` is that search space as a `keras_tuner.HyperModel`
for every zoo family; `search()` (`highway-zoo tune NAME`) runs it; `bias_study()`
(`highway-zoo bias-study`) trains deep FC highway nets at fixed biases and plots the final
training loss against b_T.

Search directory (`--dir DIR`)::

    search.json                the settings (architecture, space, tuner, objective, data...)
    search/                    KerasTuner's project: oracle.json, trial_<id>/ (trial.json,
                               best-epoch checkpoint, history.json: every epoch's metrics
                               and the trial's seconds)
    tensorboard/               HParams: the search space (once), and trial_<id>/ with each
                               trial's hyperparameters and objective
    trials.json, trials.md     the ranked table of finished trials
    best_hyperparameters.json  the best trial's values, objective and architecture overrides
    best_model/                its weights in the form `highway-zoo train` writes:
                               `zoo.load(NAME, weights="DIR/best_model")`,
                               `highway-zoo export NAME --run DIR/best_model`

Resuming: an interrupted search (killed, machine lost) continues when the same command runs
again: finished trials are kept (KerasTuner reloads its project; `overwrite=False`), a trial
that was running when the process died is run again, and `--max-trials` may be raised to
add trials. Other settings in an existing DIR are refused, naming what differs;
`--overwrite` deletes the old search and starts afresh.

Distributed search (KerasTuner's chief/worker mode). One chief process holds the oracle
(it hands out trials and records results; it trains nothing); any number of workers ask it
for trials, train them and report back. Run the same command on every machine, with the
same `--dir` (on a shared filesystem, or at least on the chief, for the final report), and
set three environment variables::

    # the chief (start it first; it runs until all trials are done)
    KERASTUNER_TUNER_ID=chief KERASTUNER_ORACLE_IP=10.0.0.1 KERASTUNER_ORACLE_PORT=8000 \\
        highway-zoo tune highway_fc50_mnist --max-trials 100 --dir runs/tune-fc50
    # each worker: a unique id, the chief's address
    KERASTUNER_TUNER_ID=worker0 KERASTUNER_ORACLE_IP=10.0.0.1 KERASTUNER_ORACLE_PORT=8000 \\
        highway-zoo tune highway_fc50_mnist --max-trials 100 --dir runs/tune-fc50

Each trial is run by exactly one worker; workers print one line per trial they ran
(`trial 03 by worker1: ...`). The chief writes the ranked table, best_hyperparameters.json
and best_model when the last trial ends (the workers' trial checkpoints must be readable
from the chief's `--dir`). Within one process, `--strategy mirrored` trains every trial
with `tf.distribute.MirroredStrategy` (KerasTuner's `distribution_strategy`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TUNERS = ("random", "bayesian", "hyperband")
ACTIVATIONS = ("relu", "tanh")
# The metrics every zoo model produces under search(): loss and accuracy, on the training
# data and ("val_") on the test split.
PRODUCED_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")
SETTINGS_FILE = "search.json"
PROJECT_NAME = "search"
BEST_HP_FILE = "best_hyperparameters.json"
BEST_MODEL_DIR = "best_model"
# Per trial, beside KerasTuner's trial.json: every epoch's metrics and the seconds taken.
TRIAL_HISTORY_FILE = "history.json"
# Settings that may change between runs of one search directory.
_RESUMABLE = ("max_trials",)


def _range(name: str, value: Sequence[float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be two numbers (lower, upper). Received: {value!r}"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} bounds must be finite. Received: {value!r}")
    if not low < high:
        raise ValueError(
            f"{name}: the lower bound must be below the upper bound. Received: "
            f"({low:g}, {high:g}); swap them, e.g. ({min(low, high):g}, {max(low, high):g})."
        )
    return low, high


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The paper's search space; narrow or widen any range.

    Args:
        learning_rate: initial learning rate range, sampled log-uniformly (> 0).
        momentum: SGD momentum range, uniform, within [0, 1).
        lr_decay: learning-rate decay factor per epoch (ExponentialDecay's rate), uniform,
            within (0, 1].
        activations: the activations to choose from ("relu", "tanh").
        transform_bias: the highway nets' initial transform-gate bias range, uniform
            (KerasTuner's log sampling rejects negative values); unused by plain nets.
    """

    learning_rate: tuple[float, float] = (1e-4, 1e-1)
    momentum: tuple[float, float] = (0.0, 0.99)
    lr_decay: tuple[float, float] = (0.8, 1.0)
    activations: tuple[str, ...] = ACTIVATIONS
    transform_bias: tuple[float, float] = (-10.0, -1.0)

    def __post_init__(self):
        lr = _range("learning_rate", self.learning_rate)
        momentum = _range("momentum", self.momentum)
        decay = _range("lr_decay", self.lr_decay)
        bias = _range("transform_bias", self.transform_bias)
        if lr[0] <= 0:
            raise ValueError(f"learning_rate bounds must be > 0 (log sampling). Received: {lr}")
        if momentum[0] < 0 or momentum[1] >= 1:
            raise ValueError(f"momentum must lie within [0, 1). Received: {momentum}")
        if decay[0] <= 0 or decay[1] > 1:
            raise ValueError(f"lr_decay must lie within (0, 1]. Received: {decay}")
        activations = tuple(self.activations)
        bad = [a for a in activations if a not in ACTIVATIONS]
        if not activations or bad or len(set(activations)) != len(activations):
            raise ValueError(
                f"activations must be distinct names from {', '.join(ACTIVATIONS)}. "
                f"Received: {list(activations)!r}"
            )
        for field, value in (("learning_rate", lr), ("momentum", momentum),
                             ("lr_decay", decay), ("transform_bias", bias),
                             ("activations", activations)):
            object.__setattr__(self, field, value)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) for k, v in dataclasses.asdict(self).items()}


def is_highway(name: str) -> bool:
    import zoo

    return "transform_bias" in zoo.describe(name)["overridable"]


def _hypermodel_base():
    import keras_tuner

    return keras_tuner.HyperModel


class ZooHyperModel(_hypermodel_base()):
    """A zoo architecture with the paper's search space, trained with SGD + momentum.

    `build(hp)` samples "learning_rate" (log), "momentum", "lr_decay", "activation" and,
    for highway families, "transform_bias", and returns `zoo.load(name, activation=...,
    transform_bias=..., **overrides)` compiled with `keras.optimizers.SGD(momentum)` on
    `keras.optimizers.schedules.ExponentialDecay(lr, steps_per_epoch, lr_decay,
    staircase=True)` (the rate falls by `lr_decay` once per epoch), sparse categorical
    cross-entropy and accuracy. `fit(hp, model, **kwargs)` trains on `data` with the
    project's pipeline (`training.trainer.training_batches`: every epoch shuffled from its
    own seed) and validates on the test split.

    Args:
        name: a `zoo.list_models()` name.
        space: the `SearchSpace` (default: the paper's).
        data: a `training.data.Dataset` (needed by `build` for the steps per epoch and
            by `fit`).
        epochs: epochs per trial.
        batch_size: the global batch size.
        seed: seeds the weights and the data order of every trial.
        **overrides: fixed architecture overrides (e.g. depth=30).
    """

    def __init__(self, name: str, space: SearchSpace | None = None, *, data=None,
                 epochs: int = 10, batch_size: int = 100, seed: int = 0, **overrides: Any):
        import zoo

        super().__init__(name=name)
        info = zoo.describe(name)
        self.architecture = name
        self.space = space or SearchSpace()
        self.highway = "transform_bias" in info["overridable"]
        searched = {"activation", "transform_bias"} & set(overrides)
        if searched:
            raise ValueError(
                f"{sorted(searched)} are searched; narrow their range in the SearchSpace "
                "instead of fixing them as overrides."
            )
        bad = sorted(set(overrides) - set(info["overridable"]))
        if bad:
            raise ValueError(f"{name} has no override {bad}; it allows "
                             f"{', '.join(info['overridable'])}.")
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer. Received: {epochs!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer. Received: {batch_size!r}")
        self.data, self.epochs, self.batch_size, self.seed = data, epochs, batch_size, seed
        self.overrides = dict(overrides)
        if data is not None and info["classes"] != data.num_classes:
            self.overrides.setdefault("classes", data.num_classes)

    @property
    def steps_per_epoch(self) -> int:
        num_train = self.data.num_train if self.data is not None else 1000
        return -(-num_train // self.batch_size)

    def declare(self, hp) -> dict[str, Any]:
        """Declares the space on `hp`; returns the architecture overrides it chose."""
        s = self.space
        hp.Float("learning_rate", *s.learning_rate, sampling="log")
        hp.Float("momentum", *s.momentum)
        hp.Float("lr_decay", *s.lr_decay)
        chosen = {"activation": hp.Choice("activation", list(s.activations))}
        if self.highway:
            chosen["transform_bias"] = hp.Float("transform_bias", *s.transform_bias)
        return chosen

    def build(self, hp):
        import keras

        import zoo

        chosen = self.declare(hp)
        keras.utils.set_random_seed(self.seed)
        model = zoo.load(self.architecture, **self.overrides, **chosen)
        schedule = keras.optimizers.schedules.ExponentialDecay(
            hp.get("learning_rate"), decay_steps=self.steps_per_epoch,
            decay_rate=hp.get("lr_decay"), staircase=True,
        )
        model.compile(
            optimizer=keras.optimizers.SGD(schedule, momentum=hp.get("momentum")),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
        )
        return model

    def fit(self, hp, model, *args, callbacks=None, verbose=0, **kwargs):
        import keras

        from training import distribute
        from training.trainer import evaluation_batches, training_batches

        if self.data is None:
            raise ValueError("ZooHyperModel needs `data` (a training.data.Dataset) to fit.")
        replicas = model.distribute_strategy.num_replicas_in_sync
        distribute.per_replica_batch(self.batch_size, replicas)
        epochs = [training_batches(self.data.train, num_examples=self.data.num_train,
                                   batch_size=self.batch_size, seed=self.seed, epoch=e)
                  for e in range(self.epochs)]
        train = epochs[0]
        for more in epochs[1:]:
            train = train.concatenate(more)
        return model.fit(
            train, epochs=self.epochs, steps_per_epoch=self.steps_per_epoch,
            validation_data=evaluation_batches(self.data.test),
            callbacks=[*(callbacks or []), keras.callbacks.TerminateOnNaN()],
            verbose=verbose, shuffle=False,
        )


# --- The search ---------------------------------------------------------------------


def _role() -> str:
    """"chief", "worker" or "standalone": this process's place in a KerasTuner cluster."""
    from keras_tuner.src.distribute import utils

    if not utils.has_chief_oracle():
        return "standalone"
    return "chief" if utils.is_chief_oracle() else "worker"


def _check_objective(objective: str) -> str:
    if objective not in PRODUCED_METRICS:
        raise ValueError(
            f"Objective {objective!r} is not a metric the model produces; it produces "
            f"{', '.join(PRODUCED_METRICS)} ('val_' = on the test split)."
        )
    return objective


def _format_hp(values: dict[str, Any]) -> str:
    parts = []
    for key in ("transform_bias", "learning_rate", "momentum", "lr_decay", "activation"):
        if key in values:
            v = values[key]
            parts.append(f"{key}={v:.4g}" if isinstance(v, float) else f"{key}={v}")
    return " ".join(parts)


def _hparams_config(tb_dir: Path, hypermodel: ZooHyperModel, objective: str) -> None:
    """Writes the HParams plugin's experiment config (the search space) once."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp_api

    s = hypermodel.space
    hparams = [
        hp_api.HParam("learning_rate", hp_api.RealInterval(*s.learning_rate)),
        hp_api.HParam("momentum", hp_api.RealInterval(*s.momentum)),
        hp_api.HParam("lr_decay", hp_api.RealInterval(*s.lr_decay)),
        hp_api.HParam("activation", hp_api.Discrete(list(s.activations))),
    ]
    if hypermodel.highway:
        hparams.append(hp_api.HParam("transform_bias", hp_api.RealInterval(*s.transform_bias)))
    with tf.summary.create_file_writer(str(tb_dir)).as_default():
        hp_api.hparams_config(hparams=hparams, metrics=[hp_api.Metric(objective)])


def _hparams_trial(tb_dir: Path, trial_id: str, values: dict[str, Any], objective: str,
                   score: float | None) -> None:
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp_api

    with tf.summary.create_file_writer(str(tb_dir / f"trial_{trial_id}")).as_default():
        hp_api.hparams(values, trial_id=trial_id)
        if score is not None:
            tf.summary.scalar(objective, score, step=1)


def _tuner_class(kind: str):
    import keras_tuner

    bases = {"random": keras_tuner.RandomSearch, "bayesian": keras_tuner.BayesianOptimization,
             "hyperband": keras_tuner.Hyperband}
    if kind not in bases:
        raise ValueError(f"Unknown tuner {kind!r}; choose from {', '.join(TUNERS)}.")
    base = bases[kind]

    class ZooTuner(base):
        """Prints a line per finished trial and writes its TensorBoard HParams."""

        tensorboard_dir: Path
        objective_name: str

        def run_trial(self, trial, *args, **kwargs):
            import time

            from zoo.weights import write_text

            start = time.monotonic()
            results = super().run_trial(trial, *args, **kwargs)
            # KerasTuner's trial.json keeps only the best epoch's metrics; the per-epoch
            # curves (Fig. 1's left panel) go beside it, in the trial's directory.
            first = results[0] if isinstance(results, list) else results
            history = getattr(first, "history", None)
            if history is not None:
                record = {"trial_id": trial.trial_id, "tuner_id": self.tuner_id,
                          "seconds": round(time.monotonic() - start, 3),
                          "history": {k: [float(v) for v in values]
                                      for k, values in history.items()}}
                write_text(Path(self.get_trial_dir(trial.trial_id)) / TRIAL_HISTORY_FILE,
                           json.dumps(record, indent=2) + "\n", overwrite=True)
            return results

        def on_trial_end(self, trial):
            super().on_trial_end(trial)
            record = self.oracle.get_trial(trial.trial_id)
            score = record.score
            score = None if score is None or not math.isfinite(score) else float(score)
            values = dict(record.hyperparameters.values)
            shown = "-" if score is None else f"{score:.4f}"
            print(f"trial {trial.trial_id} by {self.tuner_id}: {record.status} "
                  f"{_format_hp(values)} {self.objective_name}={shown}", flush=True)
            _hparams_trial(self.tensorboard_dir, trial.trial_id,
                           {k: v for k, v in values.items() if not k.startswith("tuner/")},
                           self.objective_name, score)

    ZooTuner.__name__ = f"Zoo{base.__name__}"
    return ZooTuner


def _settings_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted((set(old) | set(new)) - set(_RESUMABLE))
    return [f"{k}: recorded {old.get(k, '(absent)')!r}, now {new.get(k, '(absent)')!r}"
            for k in keys if old.get(k) != new.get(k)]


def _prepare_dir(out: Path, settings: dict[str, Any], overwrite: bool, role: str) -> bool:
    """Checks (and writes) DIR/search.json; True when an existing search resumes."""
    from zoo.weights import write_text

    settings_file = out / SETTINGS_FILE
    if role == "worker":  # the chief owns the directory
        return settings_file.exists()
    if overwrite and out.exists():
        for child in (SETTINGS_FILE, PROJECT_NAME, "tensorboard", BEST_HP_FILE,
                      BEST_MODEL_DIR, "trials.json", "trials.md"):
            path = out / child
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    resumes = False
    if settings_file.exists():
        old = json.loads(settings_file.read_text(encoding="utf-8"))
        differences = _settings_differences(old, settings)
        if differences:
            raise FileExistsError(
                f"Search directory {out} holds a search with other settings; refusing to "
                "resume or overwrite it. Differences:\n  " + "\n  ".join(differences)
                + "\nRepeat the recorded settings to resume it, pass --overwrite to delete "
                "it and start afresh, or choose another --dir."
            )
        resumes = True
    elif out.exists() and any(p for p in out.iterdir()):
        raise FileExistsError(
            f"{out} is not empty and holds no search ({SETTINGS_FILE} is missing); choose "
            "another --dir, or pass --overwrite."
        )
    out.mkdir(parents=True, exist_ok=True)
    write_text(settings_file, json.dumps(settings, indent=2) + "\n", overwrite=True)
    return resumes


def _ranked(tuner, objective: str) -> list[dict[str, Any]]:
    trials = tuner.oracle.get_best_trials(num_trials=len(tuner.oracle.trials))
    rows = []
    for rank, trial in enumerate(trials, start=1):
        values = trial.hyperparameters.values
        rows.append({"rank": rank, "trial_id": trial.trial_id,
                     **{k: v for k, v in values.items() if not k.startswith("tuner/")},
                     objective: trial.score, "best_step": trial.best_step})
    return rows


def format_trials(rows: Sequence[dict[str, Any]], objective: str) -> str:
    """A Markdown table of ranked trials."""
    lines = [f"| rank | trial | b_T | learning rate | momentum | lr decay | activation | "
             f"{objective} |", "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in rows:
        bias = f"{r['transform_bias']:.2f}" if "transform_bias" in r else "-"
        lines.append(
            f"| {r['rank']} | {r['trial_id']} | {bias} | {r['learning_rate']:.2e} | "
            f"{r['momentum']:.3f} | {r['lr_decay']:.3f} | {r['activation']} | "
            f"{r[objective]:.4f} |"
        )
    return "\n".join(lines)


def _save_best_model(tuner, out: Path) -> Path:
    import zoo

    with warnings.catch_warnings():  # the checkpoint's optimizer state is not needed
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        best = tuner.get_best_models(num_models=1)[0]
    final, tmp = out / BEST_MODEL_DIR, out / f".{BEST_MODEL_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    # Its model card shows the best trial's objective and hyperparameters.
    trial = tuner.oracle.get_best_trials(num_trials=1)[0]
    objective = tuner.oracle.objective.name
    hyperparameters = {k: v for k, v in trial.hyperparameters.values.items()
                       if not k.startswith("tuner/")}
    zoo.save(best, tmp, extra={"source": "highway-zoo tune", "search_dir": str(out)},
             metrics={objective: trial.score},
             training={"search": str(out), "trial": trial.trial_id, **hyperparameters})
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def search(
    name: str,
    *,
    space: SearchSpace | None = None,
    tuner: str = "random",
    max_trials: int = 10,
    epochs: int = 5,
    objective: str = "val_accuracy",
    out: str | os.PathLike | None = None,
    dataset: str | None = None,
    data_dir: str | os.PathLike | None = None,
    batch_size: int | None = None,
    max_train_examples: int | None = None,
    max_test_examples: int | None = None,
    seed: int = 0,
    strategy: str = "default",
    overwrite: bool = False,
    verbose: int = 0,
    **overrides: Any,
) -> dict[str, Any] | None:
    """Random / Bayesian / Hyperband search over `space` for zoo network `name`.

    Returns what best_hyperparameters.json holds (None in a worker process of a
    distributed search: the chief reports). See the module docstring for the files.

    Raises:
        ValueError: an unknown tuner or objective, a bad range or override.
        FileExistsError: `out` holds a search with other settings (and not `overwrite`).
    """
    import zoo
    from training import distribute
    from training.data import load_dataset
    from training.recipes import get_recipe
    from zoo.weights import write_text

    _tuner_class(tuner)  # unknown tuner: fail before loading anything
    _check_objective(objective)
    if not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive integer. Received: {max_trials!r}")
    for label, value in (("max_train_examples", max_train_examples),
                         ("max_test_examples", max_test_examples)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{label} must be a positive integer. Received: {value!r}")
    space = space or SearchSpace()
    info = zoo.describe(name)
    batch_size = batch_size or get_recipe(info["recipe"])["batch_size"]
    role = _role()
    out = Path(out) if out is not None else Path("runs") / (
        f"tune-{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}")

    data = load_dataset(dataset or info["dataset"], data_dir)
    if max_train_examples and max_train_examples < data.num_train:
        data = dataclasses.replace(data, train=data.train.take(max_train_examples),
                                   num_train=max_train_examples)
    if max_test_examples and max_test_examples < data.num_test:
        data = dataclasses.replace(data, test=data.test.take(max_test_examples),
                                   num_test=max_test_examples)
    if tuple(info["input_shape"]) != tuple(data.image_shape):
        raise ValueError(f"{name} takes images of shape {tuple(info['input_shape'])}, dataset "
                         f"{data.name!r} has {tuple(data.image_shape)}.")
    hypermodel = ZooHyperModel(name, space, data=data, epochs=epochs, batch_size=batch_size,
                               seed=seed, **overrides)
    strategy_ = None if strategy == "default" else distribute.make_strategy(strategy)
    replicas = strategy_.num_replicas_in_sync if strategy_ else 1
    distribute.per_replica_batch(batch_size, replicas)

    settings = {
        "architecture": name, "overrides": hypermodel.overrides, "space": space.to_json(),
        "tuner": tuner, "objective": objective, "max_trials": max_trials, "epochs": epochs,
        "batch_size": batch_size, "seed": seed,
        "dataset": {"name": data.name, "source": data.source, "num_train": data.num_train,
                    "num_test": data.num_test},
    }
    resumes = _prepare_dir(out, settings, overwrite, role)
    tb_dir = out / "tensorboard"
    if role != "worker":
        tb_dir.mkdir(parents=True, exist_ok=True)
        if not any(tb_dir.glob("events.*")):
            _hparams_config(tb_dir, hypermodel, objective)

    cls = _tuner_class(tuner)
    kwargs: dict[str, Any] = {"objective": objective, "seed": seed,
                              "max_consecutive_failed_trials": max(3, max_trials)}
    if tuner == "hyperband":
        kwargs.update(max_epochs=epochs, factor=3)
    else:
        kwargs["max_trials"] = max_trials
    tuner_ = cls(hypermodel, directory=str(out), project_name=PROJECT_NAME,
                 overwrite=False, distribution_strategy=strategy_, **kwargs)
    tuner_.tensorboard_dir, tuner_.objective_name = tb_dir, objective
    if tuner != "hyperband":
        tuner_.oracle.max_trials = max_trials  # a resumed search may get more trials
    if resumes and role != "worker":
        oracle = tuner_.oracle
        print(f"Resuming the search in {out}: {len(oracle.end_order)} trial(s) finished and "
              f"kept, {len(oracle._retry_queue)} interrupted (run again), up to {max_trials} "
              "in all.", flush=True)
    print(f"Searching {name} ({tuner}, objective {objective}, {epochs} epoch(s) per trial, "
          f"data {data.num_train}/{data.num_test}, role {role}"
          f"{f', {replicas} replicas' if replicas > 1 else ''}) in {out}", flush=True)
    tuner_.search(verbose=verbose)
    if role == "worker":
        print(f"{tuner_.tuner_id}: no trials left; the chief writes the results.", flush=True)
        return None

    rows = _ranked(tuner_, objective)
    if not rows:
        raise RuntimeError(f"No trial of the search in {out} finished; see the messages above.")
    table = format_trials(rows, objective)
    print()
    print(table)
    write_text(out / "trials.json", json.dumps(rows, indent=2) + "\n", overwrite=True)
    write_text(out / "trials.md", table + "\n", overwrite=True)
    best_trial = tuner_.oracle.get_best_trials(1)[0]
    chosen = {k: v for k, v in best_trial.hyperparameters.values.items()
              if k in ("activation", "transform_bias")}
    best = {
        "architecture": name,
        "trial_id": best_trial.trial_id,
        "objective": {"name": objective, "direction": tuner_.oracle.objective.direction,
                      "value": best_trial.score},
        "hyperparameters": {k: v for k, v in best_trial.hyperparameters.values.items()
                            if not k.startswith("tuner/")},
        "overrides": {**hypermodel.overrides, **chosen},
        "optimizer": "SGD with momentum, ExponentialDecay per epoch (staircase)",
        "epochs": epochs, "batch_size": batch_size,
        "trials": len(rows),
    }
    write_text(out / BEST_HP_FILE, json.dumps(best, indent=2) + "\n", overwrite=True)
    model_dir = _save_best_model(tuner_, out)
    print(f"\nBest: trial {best_trial.trial_id}, {objective}={best_trial.score:.4f} "
          f"({_format_hp(best['hyperparameters'])}).\nWrote {out / BEST_HP_FILE} and "
          f"{model_dir} (zoo.load({name!r}, weights={str(model_dir)!r})); TensorBoard: "
          f"highway-zoo tensorboard {tb_dir}", flush=True)
    return best


# --- The bias study -------------------------------------------------------------------


def plot_bias_study(results: dict[str, Any], path: Path) -> None:
    """Final training loss against b_T, one line per depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from training.demo import save_figure

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
    summary = [s for s in results["summary"] if s["kind"] == "highway"]
    depths = sorted({s["depth"] for s in summary})
    biases = sorted({s["transform_bias"] for s in summary}, reverse=True)
    by = {(s["depth"], s["transform_bias"]): s for s in summary}
    head = "| b_T | " + " | ".join(f"depth {d} train loss | depth {d} test acc"
                                   for d in depths) + " |"
    lines = [head, "| ---: |" + " ---: | ---: |" * len(depths)]
    for b in biases:
        cells = []
        for d in depths:
            s = by.get((d, b))
            cells += ([f"{s['final_train_loss']['mean']:.3f}",
                       f"{s['test_accuracy']['mean']:.3f}"] if s else ["-", "-"])
        lines.append(f"| {b:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    """Trains highway FC nets at every depth and fixed b_T (`training.sweep.sweep`), then
    writes bias_study.png (final training loss vs b_T, a line per depth) and
    bias_table.md beside the sweep's results.json."""
    from training.sweep import sweep
    from zoo.weights import write_text

    if not biases:
        raise ValueError("biases must hold at least one value.")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(out) if out is not None else Path("runs") / f"bias-study-{stamp}"
    results = sweep(depths, ["highway"], seeds, activation=activation,
                    transform_bias=[float(b) for b in biases], epochs=epochs,
                    data_dir=data_dir, out=out, recipe=recipe, isolate=isolate)
    table = bias_table(results)
    write_text(out / "bias_table.md", table + "\n")
    plot_bias_study(results, out / "bias_study.png")
    print(f"\n{table}\n\nWrote {out}/bias_study.png and bias_table.md")
    return results


# --- Command line -------------------------------------------------------------------


def _pair(text: str) -> tuple[float, float]:
    parts = [p for p in text.split(",") if p.strip()]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 2:
        raise argparse.ArgumentTypeError(
            f"expected two comma-separated numbers LOW,HIGH, e.g. -6,-1. Received: {text!r}")
    return values[0], values[1]


def _floats(text: str) -> list[float]:
    try:
        values = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, e.g. -1,-2,-4. Received: {text!r}")
    return values


# Comma-separated numbers, negative ones included, are values, not options, for argparse.
_NUMBER_LISTS = re.compile(r"^-\d*\.?\d+(e-?\d+)?(,-?\d*\.?\d+(e-?\d+)?)*$")


def add_parsers(sub) -> None:
    """Adds the `tune` and `bias-study` subcommands to `highway-zoo`'s subparsers."""
    from training.distribute import STRATEGIES

    defaults = SearchSpace()
    p = sub.add_parser(
        "tune", help="hyperparameter search (the NIPS 2015 random search) with KerasTuner",
        description="Searches learning rate, momentum, learning-rate decay, activation and "
        "(highway nets) the transform-gate bias, training with SGD + momentum. Resumes an "
        "interrupted search in --dir when run again; distributed with KERASTUNER_TUNER_ID, "
        "KERASTUNER_ORACLE_IP and KERASTUNER_ORACLE_PORT (see training/tuning.py).",
    )
    # Let "--bias-range -6,-1" pass: argparse takes "-6,-1" for an option otherwise (the
    # documented alternative, "--bias-range=-6,-1", works either way).
    p._negative_number_matcher = _NUMBER_LISTS
    p.add_argument("name")
    p.add_argument("--tuner", default="random", help=f"{', '.join(TUNERS)} (default random)")
    p.add_argument("--max-trials", type=int, default=10)
    p.add_argument("--epochs", type=int, default=5, help="epochs per trial (default 5)")
    p.add_argument("--objective", default="val_accuracy",
                   help=f"one of {', '.join(PRODUCED_METRICS)} (default val_accuracy)")
    p.add_argument("--dir", dest="out", help="search directory (default runs/tune-NAME-TIME)")
    p.add_argument("--overwrite", action="store_true",
                   help="delete an existing search in --dir and start afresh")
    p.add_argument("--dataset", help="default: the architecture's own")
    p.add_argument("--data-dir", help="directory holding the upstream dataset files")
    p.add_argument("--batch-size", type=int, help="global batch (default: the recipe's)")
    p.add_argument("--max-train-examples", type=int, help="train on the first N examples")
    p.add_argument("--max-test-examples", type=int, help="validate on the first N examples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr-range", type=_pair, default=defaults.learning_rate,
                   metavar="LOW,HIGH", help="learning rate, log-uniform (default 1e-4,1e-1)")
    p.add_argument("--momentum-range", type=_pair, default=defaults.momentum,
                   metavar="LOW,HIGH", help="default 0,0.99")
    p.add_argument("--decay-range", type=_pair, default=defaults.lr_decay, metavar="LOW,HIGH",
                   help="learning-rate decay factor per epoch (default 0.8,1)")
    p.add_argument("--bias-range", type=_pair, default=defaults.transform_bias,
                   metavar="LOW,HIGH", help="transform-gate bias, uniform (default -10,-1)")
    p.add_argument("--activations", default="relu,tanh", help="relu,tanh (default) or one")
    p.add_argument("--strategy", choices=[s for s in STRATEGIES if s != "multiworker"],
                   default="default", help="train each trial with this tf.distribute strategy")
    p.add_argument("--cpu-devices", type=int, metavar="N",
                   help="split the host CPU into N logical devices (for --strategy mirrored)")
    p.add_argument("--verbose", type=int, default=0, choices=[0, 1, 2])
    group = p.add_argument_group("fixed architecture overrides")
    group.add_argument("--depth", type=int)
    group.add_argument("--width", type=int)
    group.add_argument("--variant")

    p = sub.add_parser(
        "bias-study", help="final training loss of deep highway FC nets against b_T",
        description="Trains highway FC nets (MNIST) at each depth with fixed transform-gate "
        "biases and plots the final training loss against the bias, a line per depth.",
    )
    p._negative_number_matcher = _NUMBER_LISTS  # "--biases -1,-2,-4"
    p.add_argument("--depths", default="50,100", help="comma-separated (default 50,100)")
    p.add_argument("--biases", type=_floats, default=[-1, -2, -3, -4, -6, -8, -10],
                   help="comma-separated b_T values (default -1,-2,-3,-4,-6,-8,-10)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--activation", default="tanh")
    p.add_argument("--recipe", default="adam_fc")
    p.add_argument("--epochs", type=int, help="default: the recipe's 12")
    p.add_argument("--data-dir")
    p.add_argument("--out", help="output directory (new or empty)")
    p.add_argument("--in-process", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Runs the `tune` or `bias-study` subcommand parsed by `add_parsers`."""
    if args.command == "bias-study":
        depths = [int(d) for d in _floats(args.depths)]
        bias_study(depths, args.biases, args.seeds, activation=args.activation,
                   epochs=args.epochs, recipe=args.recipe, data_dir=args.data_dir,
                   out=args.out, isolate=not args.in_process)
        return 0
    if args.cpu_devices is not None:
        from training import distribute

        distribute.set_cpu_devices(args.cpu_devices)  # before anything starts TensorFlow
    space = SearchSpace(
        learning_rate=args.lr_range, momentum=args.momentum_range, lr_decay=args.decay_range,
        activations=tuple(a.strip() for a in args.activations.split(",") if a.strip()),
        transform_bias=args.bias_range,
    )
    overrides = {k: getattr(args, k) for k in ("depth", "width", "variant")
                 if getattr(args, k) is not None}
    search(args.name, space=space, tuner=args.tuner, max_trials=args.max_trials,
           epochs=args.epochs, objective=args.objective, out=args.out, dataset=args.dataset,
           data_dir=args.data_dir, batch_size=args.batch_size,
           max_train_examples=args.max_train_examples,
           max_test_examples=args.max_test_examples, seed=args.seed, strategy=args.strategy,
           overwrite=args.overwrite, verbose=args.verbose, **overrides)
    return 0
