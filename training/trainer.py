"""`train()`: one zoo network, one dataset, one run directory; runs that survive faults.

A run directory (`training.run_dir.RunDir`) holds everything needed to compare, repeat and
resume the run::

    run.json                  command, versions, seed, recipe, data source, model metadata,
                              distribution (strategy, replicas, global batch), status,
                              the seconds of each phase (`training.timeline`)
    history.json              per-epoch metrics ("val_" = the test split), rewritten each epoch
    checkpoint/               the latest checkpoint while the run is going (weights, dropout
                              seeds, optimizer state, iteration count: `ckpt-<iteration>.npz`
                              and checkpoint.json), written every epoch and every
                              `checkpoint_every` steps; removed when the run finishes
    model.json                architecture, overrides, metadata, weights sha256
    model.weights.h5(.sha256) final weights and their hash
    metrics.json              final test loss and accuracy
    workers/<i>/              multi-worker runs: worker i's checkpoints, status, history and
                              final weights (only the chief writes the files above)

What happens to an existing `out`:

- status "running" (the run was interrupted: killed, out of memory, a machine lost) and
  the same configuration (architecture, overrides, recipe, seed, dataset): the run
  resumes from its latest checkpoint, with the epoch counter, the optimizer state, the
  learning-rate schedule, the data order and history.json where they were;
- status "running" and another configuration: refused, naming the differing fields;
- status "finished": refused (never redone or overwritten); status "failed: ...": refused;
- anything else non-empty: refused.

A non-finite training loss stops the run (`NonFiniteLossError`, status "failed: non-finite
loss"); the last checkpoint taken before it stays. Every file is written to a temporary
name and renamed into place (`zoo.files.atomic_path`), so a kill never leaves a
half-written file, and a lock (`.lock`) keeps a second process out of a live run.

Backends: a run trains on whichever Keras backend the process runs (`KERAS_BACKEND`:
tensorflow, jax or torch), with the same data order (tf.data reads the data on every
backend), checkpoints, resumption and gate summaries; run.json's "versions" records the
backend. `--strategy mirrored|multiworker` are TensorFlow's, `--strategy data_parallel` is
Keras's `keras.distribution` on JAX (`training.runtime.distribute`): its processes > 0 write under
`workers/<i>/` as multi-worker runs do. The run
directory's `.weights.h5` loads on any backend, e.g. into a TensorFlow process that exports
it (`highway-zoo export NAME --weights RUN_DIR`). A run resumed on another backend than it
started on goes on (the checkpoint holds the variables' values, readable on any backend) but
is not bit-identical to an uninterrupted one; the resume message says so.

The pieces: `training.run_core` (what a run is, for every task: the directory, resumption,
checkpoints, history, the non-finite stop, the final files, the timeline, the progress),
with `training.run_dir` and `training.checkpoints`; here the image task (`ImageTask`: its
dataset, compile, batches from `training.data.pipeline`, gate summaries and final metrics).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import keras

import zoo
from training import timeline
from training.callbacks import GateSummaries
from training.checkpoints import trained_iterations
from training.data import Dataset, Examples, load_dataset
from training.data.pipeline import EVALUATION_BATCH, evaluation_batches, training_batches
from training.evaluation import flip_averaged_accuracy
from training.optimizers import apply_weight_decay, is_bias, make_loss, make_optimizer
from training.recipes import LANGUAGE_MODEL_DEFAULTS, get_recipe, recipe_name
from training.run_core import (
    NonFiniteLossError,
    RunSettings,
    Task,
    check_checkpoint_every,
    run,
)
from training.run_dir import LOCK_FILE, WORKERS_DIR, RunDir, RunDirError, RunWriteError
from training.runtime import distribute, tensorflow_on_demand

tensorflow_on_demand.install()

__all__ = ["ImageTask", "NonFiniteLossError", "RunDirError", "RunSettings", "RunWriteError",
           "train", "evaluation_batches", "training_batches"]


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


def _strategy(strategy: Any) -> tuple[str, Any]:
    if strategy is None:
        return "default", distribute.make_strategy("default")
    if isinstance(strategy, str):
        return strategy, distribute.make_strategy(strategy)
    return type(strategy).__name__, distribute.check_strategy(strategy)


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
    recipe_overrides: dict[str, Any] | None = None,
    strategy: Any = None,
    checkpoint_every: int | None = None,
    gate_summaries: bool = True,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Trains zoo network `name` with a recipe and writes (or resumes) a run directory.

    Args:
        name: a `zoo.list_models()` name.
        dataset: a dataset name (default: the architecture's own) or a
            `training.data.Dataset` already loaded.
        data_dir: where the upstream dataset files are (see `training.data`).
        epochs, batch_size, learning_rate: override the recipe's values
            (`learning_rate` replaces the base rate; a schedule keeps its shape;
            `batch_size` is the global batch).
        out: the run directory (default `runs/<name>-<timestamp>`): new, empty, or an
            interrupted run of the same configuration, which is resumed.
        seed: seeds Python, NumPy, TensorFlow, the shuffling and the augmentation.
        recipe: "paper" (default: the architecture's recipe), "quick" (its quick
            version) or a `zoo.RECIPES` name.
        verbose: `model.fit`'s verbosity (progress bar by default). The progress counts
            the run's epochs ("Epoch 3/400"), also in a resumed run.
        recipe_overrides: recipe fields to change (`training.recipes.FIELDS`), e.g.
            `{"weight_decay": 0.0, "augmentation": "none"}`.
        strategy: "default", "mirrored", "multiworker", "data_parallel"
            (`training.runtime.distribute`) or a `tf.distribute.Strategy`. The learning rate is not
            scaled with replicas. "mirrored" and "multiworker" are TensorFlow's and
            "data_parallel" is JAX's (Keras's `keras.distribution`, set for the whole
            process); each is refused with a ValueError on the other backends.
        checkpoint_every: also checkpoint every this many steps (default: every epoch).
        gate_summaries: write the transform gates' TensorBoard summaries and gates.json
            every epoch (`training.callbacks.GateSummaries`, in `RUN_DIR/tensorboard`).
        callbacks: your own Keras callbacks, called after the run's own: an epoch's
            history.json entry and checkpoint are written when your `on_epoch_end`
            sees its logs (the metrics, "val_" ones on the test split). Their
            `params["epochs"]` is the run's epoch count, and epochs are numbered as the
            run numbers them (0-based; a resumed run starts at its checkpoint's epoch).
            The run calls `fit` once per epoch (each epoch's data order comes from its
            own seed), so `on_train_begin`/`on_train_end` come around every epoch, and
            the first epoch of a run resumed mid-epoch has only its remaining batches.
            An exception in a callback stops the run as an interruption does: the same
            call resumes it from its last checkpoint.
        **overrides: architecture overrides, as for `zoo.load`.

    Returns:
        The final metrics, with `run_dir`.

    Raises:
        RunDirError: `out` holds a finished, failed or different run, or is in use.
        ValueError: a bad setting, e.g. a tf.distribute strategy on JAX or PyTorch.
        NonFiniteLossError: the loss became NaN or infinite (run.json says so).
    """
    clock = timeline.Clock()
    info = zoo.describe(name)
    if info["family"] == "char_lm":
        raise ValueError(f"{name} is a language model: train it on a text with "
                         f"training.language_model.train_lm({name!r}, corpus=DIR) or "
                         f"`highway-zoo train {name} --corpus DIR`.")
    # The strategy first: MultiWorkerMirroredStrategy must start before TF runs anything.
    strategy_name, strategy_ = _strategy(strategy)
    recipe_ = get_recipe(
        recipe_name(info["recipe"], recipe), recipe_overrides, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate,
    )
    callbacks = _checked(name, recipe_, checkpoint_every, callbacks)
    data = dataset if isinstance(dataset, Dataset) else load_dataset(
        dataset or info["dataset"], data_dir
    )
    clock.lap("data")
    overrides = _check_compatible(name, data, overrides)
    settings = _settings(name, data, strategy_name, strategy_, recipe_, seed, overrides,
                         checkpoint_every=checkpoint_every, verbose=verbose,
                         callbacks=callbacks)
    if settings.role.workers > 1 and out is None:
        raise ValueError("A multi-worker run needs --out, the same on every worker.")
    base_dir = RunDir(out) if out is not None else RunDir.default(name)
    task = ImageTask(settings, data, gate_summaries=gate_summaries)
    if settings.role.is_chief:
        return run(task, base_dir, clock, ignore=(LOCK_FILE, WORKERS_DIR))
    return run(task, base_dir, clock, run_dir=base_dir.worker(settings.role.index))


def _settings(name: str, data: Dataset, strategy_name: str, strategy: Any,
              recipe: dict[str, Any], seed: int, overrides: dict[str, Any],
              **rest: Any) -> RunSettings:
    """The run's settings, once its batches are checked against the strategy."""
    distribute.per_replica_batch(recipe["batch_size"], strategy.num_replicas_in_sync)
    if isinstance(strategy, distribute.JaxDataParallel):  # tf.distribute pads a last batch
        replicas = strategy.num_replicas_in_sync
        distribute.check_even_batches(replicas, data.num_train, recipe["batch_size"],
                                      "training split")
        distribute.check_even_batches(replicas, data.num_test, EVALUATION_BATCH, "test split")
    return RunSettings(
        config={
            "architecture": name,
            "overrides": overrides,
            "recipe": recipe,
            "seed": seed,
            "dataset": {"name": data.name, "source": data.source,
                        "num_train": data.num_train, "num_test": data.num_test},
        },
        strategy=strategy, strategy_name=strategy_name, role=distribute.role(strategy),
        steps_per_epoch=-(-data.num_train // recipe["batch_size"]), **rest,
    )


def _checked(name: str, recipe: dict[str, Any], checkpoint_every: int | None,
             callbacks: Sequence[keras.callbacks.Callback] | None
             ) -> tuple[keras.callbacks.Callback, ...]:
    """Refuses the language models' recipe fields, a bad `checkpoint_every` and callbacks that
    are not Keras's; the callbacks as a tuple."""
    lm_fields = [k for k, v in LANGUAGE_MODEL_DEFAULTS.items() if recipe[k] != v]
    if lm_fields:
        raise ValueError(f"{', '.join(lm_fields)} apply to language models; {name} is an "
                         "image classifier: leave them out.")
    check_checkpoint_every(checkpoint_every)
    callbacks = tuple(callbacks or ())
    for callback in callbacks:
        if not isinstance(callback, keras.callbacks.Callback):
            raise TypeError(
                f"callbacks must be keras.callbacks.Callback instances. Received: {callback!r}"
            )
    return callbacks


class ImageTask(Task):
    """An image classifier on a dataset: the recipe's optimizer and weight decay, each epoch's
    batches from its own seed, the test split as validation, gate summaries, accuracy."""

    def __init__(self, settings: RunSettings, data: Dataset, gate_summaries: bool = True):
        self.settings, self.data, self.gate_summaries = settings, data, gate_summaries
        self.share = distribute.input_share(settings.strategy)  # this process's slice
        self.decay = None

    def compile(self) -> keras.Model:
        """The run's model, seeded and compiled under its strategy."""
        settings, recipe = self.settings, self.settings.recipe
        keras.utils.set_random_seed(settings.seed)
        with settings.strategy.scope():
            model = zoo.load(settings.architecture, **settings.config["overrides"])
            self.decay = apply_weight_decay(model, recipe)
            model.compile(
                optimizer=make_optimizer(recipe, settings.steps_per_epoch),
                loss=make_loss(recipe),
                metrics=["accuracy"],
            )
            model.optimizer.build(model.trainable_variables)  # its variables under the strategy
        return model

    def record(self, model: keras.Model) -> dict[str, Any]:
        recipe = self.settings.recipe
        return {"metadata": model.metadata, "weight_decay_l2": self.decay,
                "bias_lr_mult": {"value": recipe["bias_lr_mult"],
                                 "biases": sum(is_bias(v) for v in model.trainable_variables)}}

    def batches(self, epoch: int, skip: int) -> dict[str, Any]:
        recipe, data = self.settings.recipe, self.data
        return {"x": training_batches(  # a tf.data.Dataset or a keras PyDataset
            data.train, num_examples=data.num_train, batch_size=recipe["batch_size"],
            seed=self.settings.seed, epoch=epoch, augmentation=recipe["augmentation"],
            skip_batches=skip, share=self.share,
        )}

    def prepare(self, model: keras.Model) -> None:
        self.validation_data = evaluation_batches(self.data.test, share=self.share)
        distribute.prepare_model(model, self.settings.strategy, self.batches(0, 0)["x"])

    def callbacks(self, run_dir: RunDir, history: list[dict]) -> list[keras.callbacks.Callback]:
        # With a weight average, each epoch's test pass ("val_" metrics) evaluates it.
        average = ([keras.callbacks.SwapEMAWeights()]
                   if self.settings.recipe["ema_momentum"] is not None else [])
        if not (self.gate_summaries and self.settings.role.is_chief):  # one set per run
            return average
        # Before the checkpoint: an epoch whose checkpoint exists has its summaries.
        return [*average, GateSummaries(run_dir.tensorboard_dir, _pairs(self.data.test),
                                        final_epoch=self.settings.epochs)]

    def final_metrics(self, model: keras.Model, history: list[dict],
                      train_seconds: float) -> dict[str, Any]:
        recipe = self.settings.recipe
        if recipe["ema_momentum"] is not None:  # the run ends with (and saves) the average
            model.optimizer.put_average_in(model.trainable_variables)
        last = history[-1]  # its val_* come from the final weights: no second test pass
        metrics = {
            "test_accuracy": last["val_accuracy"],
            "test_loss": last["val_loss"],
            "final_train_loss": last["loss"],
            "final_train_accuracy": last["accuracy"],
            "train_seconds": round(train_seconds, 2),
            "epochs": self.settings.epochs,
            "iterations": trained_iterations(model),
            "precision": precision_of(history),
            "weights": ("moving average of the weights, momentum "
                        f"{recipe['ema_momentum']} per step"
                        if recipe["ema_momentum"] is not None else "the last step's"),
        }
        # A second view, reported beside the first, in a one-process run (the processes of a
        # JAX data-parallel run each hold only a part of the predictions).
        if isinstance(self.data.test, Examples) and self.settings.role.workers == 1:
            metrics["test_accuracy_flip_average"] = flip_averaged_accuracy(model, self.data.test)
        return metrics

    def save(self, model: keras.Model, run_dir: RunDir, metrics: dict[str, Any],
             run: dict[str, Any]) -> None:
        # The run directory is a preset: its model card shows what was measured and how.
        dataset = self.settings.config["dataset"]
        zoo.save(model, run_dir.path, metrics=metrics, training={
            "dataset": f"{dataset['name']} ({dataset['num_train']} train / "
                       f"{dataset['num_test']} test; {dataset['source']})",
            "recipe": self.settings.recipe.get("name"), "seed": self.settings.seed,
            "command": " ".join(run["command"]),
        })


def precision_of(history: list[dict]) -> str:
    """The dtype policy the run's epochs trained in: one name, or each with its epochs
    ("float32 (epochs 1-40), mixed_bfloat16 (epochs 41-100)") when the run changed it."""
    spans: list[list] = []  # [precision, first epoch, last epoch]
    for entry in history:
        precision = entry.get("precision", "float32")  # before precisions were recorded
        if spans and spans[-1][0] == precision:
            spans[-1][2] = entry["epoch"]
        else:
            spans.append([precision, entry["epoch"], entry["epoch"]])
    if len(spans) == 1:
        return spans[0][0]
    return ", ".join(f"{p} (epochs {a}-{b})" if a != b else f"{p} (epoch {a})"
                     for p, a, b in spans)


def _pairs(split: Any) -> Any:
    """A split as GateSummaries takes it: `(images, labels)` arrays, or the tf.data split."""
    return (split.images, split.labels) if isinstance(split, Examples) else split
