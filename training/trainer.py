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

The pieces: `training.run_dir` (the directory: layout, lock, records, status),
`training.checkpoints` (checkpoints and the run's monitoring callback),
`training.data.pipeline` (the input pipelines).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shutil
import sys
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

import zoo
from training import timeline
from training.callbacks import GateSummaries, ProgressBar
from training.checkpoints import Checkpoints, RunMonitor, position_of, trained_iterations
from training.data import Dataset, Examples, load_dataset
from training.data.pipeline import EVALUATION_BATCH, evaluation_batches, training_batches
from training.optimizers import apply_weight_decay, is_bias, make_optimizer
from training.recipes import FIELD_DEFAULTS, get_recipe, recipe_name
from training.run_dir import (
    FINISHED,
    LOCK_FILE,
    NON_FINITE,
    RUNNING,
    WORKERS_DIR,
    RunDir,
    RunDirError,
    RunWriteError,
)
from training.runtime import backend as runtime_backend
from training.runtime import distribute, tensorflow_on_demand
from zoo.weights import hash_path

tensorflow_on_demand.install()

__all__ = ["NonFiniteLossError", "RunDirError", "RunSettings", "RunWriteError", "train",
           "evaluation_batches", "training_batches"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the run stopped."""


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


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a run trains and how: all `train()` settles before it takes the directory."""

    config: dict[str, Any]  # architecture, overrides, recipe, seed, dataset: what a resume
    data: Dataset           # must match (training.run_dir.run_config)
    strategy: Any  # a tf.distribute.Strategy, distribute.SingleDevice (JAX, PyTorch) or
    # distribute.JaxDataParallel
    strategy_name: str
    role: distribute.Role
    checkpoint_every: int | None = None
    verbose: int | str = "auto"
    gate_summaries: bool = True
    callbacks: tuple[keras.callbacks.Callback, ...] = ()

    @property
    def architecture(self) -> str:
        return self.config["architecture"]

    @property
    def recipe(self) -> dict[str, Any]:
        return self.config["recipe"]

    @property
    def seed(self) -> int:
        return self.config["seed"]

    @property
    def epochs(self) -> int:
        return self.recipe["epochs"]

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.data.num_train // self.recipe["batch_size"])


def _strategy(strategy: Any) -> tuple[str, Any]:
    if strategy is None:
        return "default", distribute.make_strategy("default")
    if isinstance(strategy, str):
        return strategy, distribute.make_strategy(strategy)
    return type(strategy).__name__, distribute.check_strategy(strategy)


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


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
    lm_fields = [k for k, v in FIELD_DEFAULTS.items() if recipe_[k] != v]
    if lm_fields:
        raise ValueError(f"{', '.join(lm_fields)} apply to language models; {name} is an "
                         "image classifier: leave them out.")
    if checkpoint_every is not None and (
        not isinstance(checkpoint_every, int) or checkpoint_every < 1
    ):
        raise ValueError(
            f"checkpoint_every must be a positive number of steps. Received: {checkpoint_every!r}"
        )
    callbacks = tuple(callbacks or ())
    for callback in callbacks:
        if not isinstance(callback, keras.callbacks.Callback):
            raise TypeError(
                f"callbacks must be keras.callbacks.Callback instances. Received: {callback!r}"
            )
    data = dataset if isinstance(dataset, Dataset) else load_dataset(
        dataset or info["dataset"], data_dir
    )
    clock.lap("data")
    overrides = _check_compatible(name, data, overrides)
    distribute.per_replica_batch(recipe_["batch_size"], strategy_.num_replicas_in_sync)
    if isinstance(strategy_, distribute.JaxDataParallel):  # tf.distribute pads a last batch
        replicas = strategy_.num_replicas_in_sync
        distribute.check_even_batches(replicas, data.num_train, recipe_["batch_size"],
                                      "training split")
        distribute.check_even_batches(replicas, data.num_test, EVALUATION_BATCH, "test split")
    role = distribute.role(strategy_)
    if role.workers > 1 and out is None:
        raise ValueError("A multi-worker run needs --out, the same on every worker.")
    base_dir = RunDir(out) if out is not None else RunDir.default(name)
    run_dir = base_dir if role.is_chief else base_dir.worker(role.index)
    ignore = (LOCK_FILE, WORKERS_DIR) if role.is_chief else (LOCK_FILE,)
    settings = RunSettings(
        config={
            "architecture": name,
            "overrides": overrides,
            "recipe": recipe_,
            "seed": seed,
            "dataset": {"name": data.name, "source": data.source,
                        "num_train": data.num_train, "num_test": data.num_test},
        },
        data=data, strategy=strategy_, strategy_name=strategy_name, role=role,
        checkpoint_every=checkpoint_every, verbose=verbose, gate_summaries=gate_summaries,
        callbacks=callbacks,
    )
    run_dir.inspect(settings.config, ignore)  # refuse before touching anything
    # Built before the run directory is made: overrides the builder refuses (a dropout rate
    # of 1, say) leave nothing behind.
    compiled = _compiled_model(settings)
    with run_dir.locked():
        previous = run_dir.inspect(settings.config, ignore)
        if previous is not None:
            run_dir.remove_temporary_files()  # of the killed process; none is live (the lock)
        return _train_in(settings, compiled, run_dir=run_dir, base_dir=base_dir,
                         previous=previous, clock=clock)


def _train_in(settings: RunSettings, compiled: tuple[keras.Model, Any], *, run_dir: RunDir,
              base_dir: RunDir, previous: dict[str, Any] | None,
              clock: timeline.Clock) -> dict[str, Any]:
    """Trains the `_compiled_model` in `run_dir`, which this process has locked: from scratch,
    or on from `previous` (the run.json of the interrupted run there); `clock` times it."""
    recipe, role = settings.recipe, settings.role
    steps_per_epoch = settings.steps_per_epoch
    checkpoints = Checkpoints(run_dir.checkpoint_dir, steps_per_epoch,
                              keep=2 if role.workers > 1 else 1)
    run = previous or {
        "command": sys.argv,
        **settings.config,
        "versions": {"python": platform.python_version(), **runtime_backend.versions()},
        "started": _now(),
    }
    run.update(
        status=RUNNING,
        distribution=distribute.describe(settings.strategy, settings.strategy_name,
                                         recipe["batch_size"]),
        role={"chief": role.is_chief, "worker_index": role.index},
        steps_per_epoch=steps_per_epoch,
        checkpoint_every=settings.checkpoint_every,
    )
    run_dir.write_run(run)

    model, decay = compiled
    latest = checkpoints.latest()
    if previous is not None and latest is None and run_dir.metrics_file.is_file():
        # Killed as it was finishing: the final files are complete (metrics.json comes last).
        print(f"Finishing the interrupted run in {run_dir}: its final files are complete.",
              flush=True)
        run.setdefault("resumed", []).append({"at": _now(), "command": sys.argv,
                                              "finished_only": True})
        run["timeline"] = clock.phases()
        return _finish(run_dir, base_dir, run, checkpoints)
    start = latest["iterations"] if latest else 0
    if role.workers > 1:  # workers killed one checkpoint apart resume from the common one
        start = distribute.minimum_over_workers(settings.strategy, start)
    # Outside the scope: restoring reads variables eagerly.
    restored = checkpoints.restore(model, start) if start else None
    first_epoch, skip = divmod(start, steps_per_epoch)
    history: list[dict] = []
    if previous is not None:
        _say_how_it_resumes(run_dir, settings, latest, start, restored,
                            _backend_so_far(previous))
        # Epochs after the checkpoint are trained again.
        history = [e for e in run_dir.read_history() if e["epoch"] <= first_epoch]
        run.setdefault("resumed", []).append({
            "at": _now(), "command": sys.argv, "iterations": start,
            "epoch": first_epoch, "batch": skip, "backend": distribute.backend(),
        })
    run.update(
        metadata=model.metadata,
        weight_decay_l2=decay,
        bias_lr_mult={"value": recipe["bias_lr_mult"],
                      "biases": sum(is_bias(v) for v in model.trainable_variables)},
    )
    run_dir.write_run(run)

    monitor = RunMonitor(run_dir, checkpoints, history, settings.checkpoint_every)
    monitor.seconds_before = (restored or {}).get("train_seconds", 0.0)
    _fit(model, settings, run_dir, monitor, start, clock)
    train_seconds = monitor.train_seconds()
    if monitor.failure:
        run.update(status=NON_FINITE, failure=monitor.failure, failed=_now())
        run_dir.write_run(run)
        raise NonFiniteLossError(monitor.failure["message"])

    last = history[-1]  # its val_* come from the final weights: no second test pass
    metrics = {
        "test_accuracy": last["val_accuracy"],
        "test_loss": last["val_loss"],
        "final_train_loss": last["loss"],
        "final_train_accuracy": last["accuracy"],
        "train_seconds": round(train_seconds, 2),
        "epochs": settings.epochs,
        "iterations": trained_iterations(model),
    }
    if previous is not None:  # final files of this same run, if it was killed finishing
        for leftover in (run_dir.weights_file, hash_path(run_dir.weights_file),
                         run_dir.model_file, run_dir.metrics_file):
            leftover.unlink(missing_ok=True)
    _check_space_for_final_files(run_dir, model, checkpoints)
    # The run directory is a preset: its model card shows what was measured and how.
    dataset = settings.config["dataset"]
    zoo.save(model, run_dir.path, metrics=metrics, training={
        "dataset": f"{dataset['name']} ({dataset['num_train']} train / "
                   f"{dataset['num_test']} test; {dataset['source']})",
        "recipe": recipe.get("name"), "seed": settings.seed, "command": " ".join(run["command"]),
    })
    # Written last (every worker: it marks its final files complete), then the checkpoint
    # goes: a process killed in between finds metrics.json and only finishes.
    run_dir.write_metrics(metrics)
    run["timeline"] = clock.phases()
    return _finish(run_dir, base_dir, run, checkpoints)


def _compiled_model(settings: RunSettings) -> tuple[keras.Model, Any]:
    """The run's model, seeded and compiled under its strategy; its weight decay."""
    recipe = settings.recipe
    keras.utils.set_random_seed(settings.seed)
    with settings.strategy.scope():
        model = zoo.load(settings.architecture, **settings.config["overrides"])
        decay = apply_weight_decay(model, recipe)
        model.compile(
            optimizer=make_optimizer(recipe, settings.steps_per_epoch),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
        )
        model.optimizer.build(model.trainable_variables)  # its variables under the strategy
    return model, decay


def _backend_so_far(run: dict[str, Any]) -> str:
    """The backend the run last trained on (runs from before backends were recorded: TF)."""
    for resumed in reversed(run.get("resumed", [])):
        if "backend" in resumed:
            return resumed["backend"]
    return run.get("versions", {}).get("backend", "tensorflow")


def _say_how_it_resumes(run_dir: RunDir, settings: RunSettings, latest: dict | None,
                        start: int, restored: dict | None, before: str) -> None:
    first_epoch, skip = divmod(start, settings.steps_per_epoch)
    epochs = settings.epochs
    if restored and before != distribute.backend():
        print(f"The run trained on the {before} backend so far and continues on "
              f"{distribute.backend()}: the rest of its curve will not be bit-identical to an "
              f"uninterrupted run's (resume with KERAS_BACKEND={before} for that).", flush=True)
    if latest and latest["iterations"] != start:
        print(f"This worker's latest checkpoint is at iteration {latest['iterations']}, "
              f"another worker's at {start}: all resume from {start}.", flush=True)
    if restored and first_epoch >= epochs:
        print(f"Resuming the interrupted run in {run_dir} from its checkpoint "
              f"({position_of(restored)}): all {epochs} epochs are trained; "
              "writing the final files.", flush=True)
    elif restored:
        print(f"Resuming the interrupted run in {run_dir} from its checkpoint "
              f"({position_of(restored)}): epoch {first_epoch + 1} of {epochs} "
              f"goes on after batch {skip}.", flush=True)
    else:
        print(f"Restarting the interrupted run in {run_dir} from epoch 1: there is no "
              "checkpoint to resume from.", flush=True)


def _fit(model: keras.Model, settings: RunSettings, run_dir: RunDir, monitor: RunMonitor,
         start: int, clock: timeline.Clock) -> None:
    """Trains from iteration `start` to the last epoch (or a non-finite loss), one `fit`
    per epoch: each epoch's data order comes from its own seed."""
    recipe, data = settings.recipe, settings.data
    first_epoch, skip = divmod(start, settings.steps_per_epoch)
    share = distribute.input_share(settings.strategy)  # this process's slice of each batch

    def batches(epoch: int, skip_batches: int = 0):  # tf.data.Dataset or keras PyDataset
        return training_batches(
            data.train, num_examples=data.num_train, batch_size=recipe["batch_size"],
            seed=settings.seed, epoch=epoch, augmentation=recipe["augmentation"],
            skip_batches=skip_batches, share=share,
        )

    test_ds = evaluation_batches(data.test, share=share)
    distribute.prepare_model(model, settings.strategy, batches(0))
    clock_head, clock_tail = clock.callbacks()  # around the run's own callbacks
    callbacks: list[keras.callbacks.Callback] = [monitor, clock_tail, *settings.callbacks]
    if settings.gate_summaries and settings.role.is_chief:  # one set of summaries per run
        # Before the checkpoint: an epoch whose checkpoint exists has its summaries.
        callbacks.insert(0, GateSummaries(run_dir.tensorboard_dir, _pairs(data.test),
                                          final_epoch=settings.epochs))
    callbacks.insert(0, clock_head)
    for epoch in range(first_epoch, settings.epochs):
        skip_batches = skip if epoch == first_epoch else 0
        monitor.first_batch = skip_batches
        epoch_batches = batches(epoch, skip_batches)
        model.fit(
            epoch_batches, initial_epoch=epoch, epochs=epoch + 1, validation_data=test_ds,
            callbacks=_run_callbacks(model, callbacks, epoch_batches, settings),
            shuffle=False, verbose=settings.verbose,
        )
        if monitor.failure:
            break


def _pairs(split: Any) -> Any:
    """A split as GateSummaries takes it: `(images, labels)` arrays, or the tf.data split."""
    return (split.images, split.labels) if isinstance(split, Examples) else split


def _run_callbacks(model: keras.Model, callbacks: list[keras.callbacks.Callback],
                   epoch_batches: Any,  # a tf.data.Dataset or a keras PyDataset
                   settings: RunSettings) -> keras.callbacks.CallbackList:
    """The callbacks of one epoch's `fit`, as `fit` would make them (with its history and
    progress bar) but told the run's epoch count: the progress says "Epoch k/N" with the
    run's N, not k/k."""
    steps = len(epoch_batches) if isinstance(epoch_batches, keras.utils.PyDataset) else int(
        epoch_batches.cardinality())
    # Keras's defaults in its order, with a bar that lets the batch hooks run asynchronously.
    bar = [ProgressBar()] if settings.verbose != 0 else []
    return keras.callbacks.CallbackList(
        [*callbacks, keras.callbacks.History(), *bar], add_history=True, add_progbar=False,
        verbose=settings.verbose, epochs=settings.epochs, steps=steps if steps >= 0 else None,
        model=model,
    )


def _finish(run_dir: RunDir, base_dir: RunDir, run: dict[str, Any],
            checkpoints: Checkpoints) -> dict[str, Any]:
    """Removes the checkpoints of a run whose final files are complete; marks it finished."""
    metrics = run_dir.read_metrics()
    checkpoints.remove()
    run.update(status=FINISHED, finished=_now(), iterations=metrics["iterations"])
    run_dir.write_run(run)
    return {**metrics, "run_dir": str(base_dir)}


def _check_space_for_final_files(run_dir: RunDir, model: keras.Model,
                                 checkpoints: Checkpoints) -> None:
    """Refuses to start the final save without room for it: HDF5, which writes the final
    weights (zoo.save), crashes the process (segmentation fault) when the disk fills up."""
    # The weights, HDF5's few KB per variable, and the small files beside them.
    needed = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize + 4096
                 for w in model.weights) + (256 << 10)
    free = shutil.disk_usage(run_dir.path).free
    if free < needed:
        latest = checkpoints.latest()
        kept = (f"The last checkpoint ({position_of(latest)}) stays" if latest
                else "Nothing is lost")
        raise RunWriteError(
            f"Not enough space in {run_dir} for the final weights: about {needed / 1e6:.2f} MB "
            f"needed, {free / 1e6:.2f} MB free. {kept}: free some space, then run the same "
            "command again to finish."
        )
