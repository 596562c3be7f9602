"""`train()`: one zoo network, one dataset, one run directory; runs that survive faults.

A run directory holds everything needed to compare, repeat and resume the run::

    run.json                  command, versions, seed, recipe, data source, model metadata,
                              distribution (strategy, replicas, global batch), status
    history.json              per-epoch metrics ("val_" = the test split), rewritten each epoch
    checkpoint/               the latest checkpoint while the run is going (weights, optimizer
                              state, iteration count), written every epoch and every
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
name and renamed into place (`zoo.weights.atomic_path`), so a kill never leaves a
half-written file, and a lock (`.lock`) keeps a second process out of a live run.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import math
import os
import platform
import shutil
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import zoo
from training import augment, distribute
from training.callbacks import GateSummaries
from training.data import Dataset, load_dataset
from training.recipes import (
    FIELD_NAMES,
    apply_weight_decay,
    get_recipe,
    is_bias,
    make_optimizer,
    recipe_name,
)
from zoo.analysis.evolution import GATES_FILE
from zoo.weights import MODEL_FILE, WEIGHTS_FILE, atomic_path, hash_path, sha256_of, write_text

RUN_FILE = "run.json"
HISTORY_FILE = "history.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_DIR = "checkpoint"
WORKERS_DIR = "workers"
LOCK_FILE = ".lock"
NON_FINITE = "failed: non-finite loss"


class RunDirError(FileExistsError):
    """A run directory that this run may neither resume nor write."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the run stopped."""


class RunWriteError(OSError):
    """A run's file could not be written (disk full, read-only); what was kept is named."""


# Files a run writes through a temporary `.<name>.<random>` beside them (zoo.weights.atomic_path).
_RUN_FILES = (RUN_FILE, HISTORY_FILE, METRICS_FILE, MODEL_FILE, WEIGHTS_FILE,
              hash_path(WEIGHTS_FILE).name, GATES_FILE)


def _is_temporary(path: Path) -> bool:
    """A temporary file of an atomic write that a killed process left behind."""
    return path.is_file() and any(path.name.startswith(f".{name}.") for name in _RUN_FILES)


def remove_temporary_files(run_dir: Path) -> list[Path]:
    """Removes what killed writers left in `run_dir` and its checkpoint directory (call it
    holding the run's lock: no live writer then); returns what was removed."""
    checkpoint_dir = run_dir / CHECKPOINT_DIR
    left = [p for p in run_dir.iterdir() if _is_temporary(p)] if run_dir.is_dir() else []
    if checkpoint_dir.is_dir():
        left += [p for p in checkpoint_dir.iterdir() if p.name.startswith(".") and p.is_file()]
    for path in left:
        path.unlink(missing_ok=True)
    return left


def default_run_dir(name: str) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{name}-{stamp}"


def claim_run_dir(path: str | os.PathLike) -> Path:
    """Creates `path` for new output; refuses one that already holds files."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(
            f"Run directory {path} already exists and is not empty; refusing to "
            "overwrite a previous run. Pass a new --out, or move the old run away."
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- Input pipelines ----------------------------------------------------------------


def _with_data_sharding(ds: tf.data.Dataset) -> tf.data.Dataset:
    # Multi-worker: every worker reads all data in the same order and keeps its share of
    # each batch (datasets with one file cannot be split by file).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def _to_float(x, y):
    return tf.cast(x, tf.float32), y


def pipeline(split: tf.data.Dataset, batch_size: int, shuffle: int = 0, seed: int = 0):
    """Batches of float32 raw pixels (the model preprocesses) and int labels."""
    if shuffle:
        split = split.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    return (
        split.batch(batch_size)
        .map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def training_batches(
    split: tf.data.Dataset,
    *,
    num_examples: int,
    batch_size: int,
    seed: int,
    epoch: int,
    augmentation: str = "none",
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """The training batches of epoch `epoch` (0-based), float32 raw pixels and labels.

    The epoch is shuffled (and augmented) from a seed made of `seed` and `epoch` alone,
    so it holds the same batches whether or not the run was interrupted before it;
    `skip_batches` drops the first batches, which a checkpoint already saw.
    """
    augment_fn = augment.get(augmentation)
    epoch_seed = seed * 1_000_003 + epoch
    ds = split.shuffle(num_examples, seed=epoch_seed, reshuffle_each_iteration=False)
    if augment_fn is None:
        ds = ds.batch(batch_size).map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.enumerate().map(
            lambda i, xy: (augment_fn(xy[0], tf.stack([tf.constant(epoch_seed, tf.int64), i])),
                           xy[1]),
            num_parallel_calls=tf.data.AUTOTUNE,
        ).batch(batch_size)
    return _with_data_sharding(ds.skip(skip_batches).prefetch(tf.data.AUTOTUNE))


def evaluation_batches(split: tf.data.Dataset, batch_size: int = 1000) -> tf.data.Dataset:
    """The test split as it is: no shuffling, no augmentation."""
    return _with_data_sharding(pipeline(split, batch_size))


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


# --- Run directories: claim, resume or refuse ---------------------------------------


def _json(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists, numbers stay numbers)."""
    return json.loads(json.dumps(value, default=str))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def _config_differences(recorded: dict[str, Any], config: dict[str, Any]) -> list[str]:
    old, new = _flat(_json({k: recorded.get(k) for k in config})), _flat(_json(config))
    return [
        f"{key}: recorded {old.get(key, '(absent)')!r}, now {new.get(key, '(absent)')!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]


def _run_config(record: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to resume: the recipe's settings, not its description."""
    recipe = record.get("recipe") or {}
    return {
        "architecture": record.get("architecture"),
        "overrides": record.get("overrides"),
        "recipe": {k: recipe.get(k) for k in ("name", *FIELD_NAMES)},
        "seed": record.get("seed"),
        "dataset": record.get("dataset"),
    }


def inspect_run_dir(
    run_dir: Path, config: dict[str, Any], ignore: tuple[str, ...] = (LOCK_FILE,)
) -> dict[str, Any] | None:
    """The run.json record of an interrupted run in `run_dir` that this `config` resumes;
    None for a new or empty directory.

    Raises:
        RunDirError: the directory holds a finished or failed run, a run of another
            configuration, or files that are not a run; the message says which.
    """
    if not run_dir.exists():
        return None
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} exists and is not a directory; choose another --out.")
    if not [p for p in run_dir.iterdir() if p.name not in ignore and not _is_temporary(p)]:
        return None
    run_file = run_dir / RUN_FILE
    try:
        record = json.loads(run_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(
            f"Run directory {run_dir} already exists and is not empty; refusing to "
            "overwrite a previous run. Pass a new --out, or move the old run away."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunDirError(
            f"{run_file} is damaged ({err}); it is always written whole, so it was changed "
            "by hand or by a failing disk. Restore it, or choose a new --out."
        ) from None
    status = record.get("status")
    if status == "finished":
        raise RunDirError(
            f"Run directory {run_dir} holds a run that already finished (results in "
            f"{run_dir / METRICS_FILE}); refusing to redo or overwrite it. Choose a new --out."
        )
    if status != "running":
        raise RunDirError(
            f"Run directory {run_dir} holds a run with status {status!r}, which cannot be "
            f"resumed; refusing to overwrite it (its last good checkpoint, if any, is in "
            f"{run_dir / CHECKPOINT_DIR}). Choose a new --out."
        )
    differences = _config_differences(_run_config(record), _run_config(config))
    if differences:
        raise RunDirError(
            f"Run directory {run_dir} holds an interrupted run of another configuration; "
            "refusing to resume or overwrite it. Differences:\n  " + "\n  ".join(differences)
            + "\nRepeat the recorded configuration to resume it (its command: "
            f"{' '.join(record.get('command') or [])}), or choose a new --out."
        )
    return record


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Holds an exclusive lock on `run_dir` (released by the kernel if the process dies)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(
                f"Run directory {run_dir} is in use by another training process (it holds "
                f"{run_dir / LOCK_FILE}); wait for it to end or choose another --out."
            ) from None
        try:
            yield
        finally:
            (run_dir / LOCK_FILE).unlink(missing_ok=True)


# --- Checkpoints --------------------------------------------------------------------


class Checkpoints:
    """The latest training states of a run: `ckpt-<iteration>.keras` (model and optimizer
    variables, the iteration count among them) and `checkpoint.json`, which names the
    latest with its sha256 and is replaced only after the file is complete.

    A checkpoint is a `.keras` archive because Keras writes those through Python's file
    I/O: a full disk is a clean OSError. (A `.weights.h5` is written by HDF5, which
    crashed the process with a segmentation fault when the disk filled up.)

    `keep` states are kept (the newest this process saved or restored): multi-worker runs
    keep two, so that workers killed one checkpoint apart can agree on a common one.
    """

    POINTER = "checkpoint.json"

    def __init__(self, directory: Path, steps_per_epoch: int, keep: int = 1):
        self.directory, self.steps_per_epoch, self.keep = directory, steps_per_epoch, keep
        self._kept: list[str] = []

    @staticmethod
    def file_name(iterations: int) -> str:
        return f"ckpt-{iterations:09d}.keras"

    def record(self, iterations: int) -> dict[str, Any]:
        epoch, batch = divmod(iterations, self.steps_per_epoch)
        return {"file": self.file_name(iterations), "iterations": iterations,
                "epoch": epoch, "batch": batch}

    def latest(self) -> dict[str, Any] | None:
        pointer = self.directory / self.POINTER
        if not pointer.is_file():
            return None
        record = json.loads(pointer.read_text(encoding="utf-8"))
        if not (self.directory / record["file"]).is_file():
            raise RunDirError(
                f"{pointer} names {record['file']}, which is missing; the checkpoint "
                "directory was changed by hand. Restore the file or choose a new --out."
            )
        return record

    def save(self, model: keras.Model, iterations: int, train_seconds: float = 0.0) -> None:
        record = self.record(iterations)
        try:
            with atomic_path(self.directory / record["file"], overwrite=True) as tmp:
                model.save(tmp, overwrite=True)
                record["sha256"] = sha256_of(tmp)
            record["saved"] = datetime.datetime.now().isoformat(timespec="seconds")
            record["train_seconds"] = round(train_seconds, 2)
            write_text(self.directory / self.POINTER, json.dumps(record, indent=2) + "\n",
                       overwrite=True)
        except OSError as err:
            (self.directory / record["file"]).unlink(missing_ok=True)
            previous = self.latest()
            kept = (f"the previous checkpoint ({_position(previous)}) stays" if previous
                    else "no checkpoint was kept")
            raise RunWriteError(
                f"Could not write the checkpoint of iteration {iterations} in "
                f"{self.directory}: {err.strerror or err}; {kept}. Free some space (or fix the "
                "directory), then run the same command again to resume."
            ) from err
        self._kept = [*self._kept, record["file"]][-self.keep:]
        for old in self.directory.glob("ckpt-*"):
            if old.name not in self._kept:  # older ones, or newer ones not agreed on
                old.unlink(missing_ok=True)

    def restore(self, model: keras.Model, iterations: int) -> dict[str, Any]:
        """Loads the checkpoint of `iterations` into the compiled `model`; its record."""
        record = self.record(iterations)
        latest = self.latest()
        if latest and latest["iterations"] == iterations:
            record = {**record, **latest}  # its file name, sha256 and training time
        path = self.directory / record["file"]
        if not path.is_file():
            raise RunDirError(
                f"No checkpoint of iteration {iterations} in {self.directory} (the workers "
                "agreed on it, but this one's were lost); choose a new --out."
            )
        restart = (f"delete {self.directory} to train this run again from epoch 1, or choose "
                   "a new --out")
        if "sha256" in record and (actual := sha256_of(path)) != record["sha256"]:
            raise RunDirError(
                f"Checkpoint {path} is damaged: its sha256 is {actual}, but "
                f"{self.POINTER} records {record['sha256']}; {restart}."
            )
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        try:
            model.load_weights(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise RunDirError(
                f"Checkpoint {path} cannot be read ({type(err).__name__}: "
                f"{' '.join(str(err).split())}); {restart}."
            ) from None
        restored = _iterations(model)
        if restored != iterations:
            raise RunDirError(
                f"Checkpoint {path} holds iteration {restored}, not {iterations}; it does not "
                "belong to this run. Choose a new --out."
            )
        self._kept = [record["file"]]
        return record

    def remove(self) -> None:
        for path in self.directory.glob("*"):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.directory.rmdir()


def _position(record: dict[str, Any]) -> str:
    """Where a checkpoint stands, for people: "end of epoch 2", "epoch 3, batch 50"."""
    where = (f"end of epoch {record['epoch']}" if not record["batch"]
             else f"epoch {record['epoch'] + 1}, batch {record['batch']}")
    return f"{where}, iteration {record['iterations']}"


def _iterations(model: keras.Model) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations.value))


def _scalar(value: Any) -> float:
    return float(np.mean(keras.ops.convert_to_numpy(value)))


class _RunMonitor(keras.callbacks.Callback):
    """Stops at a non-finite loss, then (if the loss is fine) writes history.json and
    checkpoints: every epoch, and every `checkpoint_every` steps."""

    def __init__(self, run_dir: Path, checkpoints: Checkpoints, history: list[dict],
                 checkpoint_every: int | None):
        super().__init__()
        self.run_dir, self.checkpoints, self.history = run_dir, checkpoints, history
        self.checkpoint_every = checkpoint_every
        self.failure: dict[str, Any] | None = None
        self.first_batch = 0  # of the first epoch of a fit() that resumes mid-epoch
        # Training time of the whole run: before this process (from the checkpoint) + since.
        self.seconds_before = 0.0
        self.started = time.perf_counter()

    def train_seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    def on_train_batch_end(self, batch, logs=None):
        loss = _scalar((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            self._fail(loss)
            return
        if self.checkpoint_every:
            iterations = _iterations(self.model)
            if iterations % self.checkpoint_every == 0 and (
                iterations % self.checkpoints.steps_per_epoch
            ):  # epoch ends are saved by on_epoch_end, after validation
                self.checkpoints.save(self.model, iterations, self.train_seconds())

    def _fail(self, loss: float) -> None:
        iterations = _iterations(self.model)
        epoch, batch = divmod(iterations - 1, self.checkpoints.steps_per_epoch)
        last = self.checkpoints.latest()
        kept = (
            f"the last good checkpoint ({_position(last)}) stays in "
            f"{self.checkpoints.directory}" if last else "no checkpoint had been written yet"
        )
        message = (
            f"The training loss became {loss} at epoch {epoch + 1}, batch {batch + 1} "
            f"(iteration {iterations}); training stopped and {kept}. The learning rate is "
            "probably too high: lower it (--learning-rate), clip gradients "
            "(--global-clipnorm), or check the data for NaN or infinite values."
        )
        self.failure = {"epoch": epoch + 1, "batch": batch + 1, "iterations": iterations,
                        "loss": str(loss), "message": message}
        self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.failure is not None:
            return  # the weights are not finite: keep the last good checkpoint
        logs = {k: _scalar(v) for k, v in (logs or {}).items()}
        if not math.isfinite(logs.get("loss", 0.0)):
            self._fail(logs["loss"])
            return
        entry = {"epoch": epoch + 1, **logs,
                 "learning_rate": _scalar(self.model.optimizer.learning_rate)}
        if self.first_batch:
            entry["resumed_at_batch"] = self.first_batch  # metrics cover the rest
            self.first_batch = 0
        self.history.append(entry)
        write_text(self.run_dir / HISTORY_FILE, json.dumps(self.history, indent=2) + "\n",
                   overwrite=True)
        self.checkpoints.save(self.model, _iterations(self.model), self.train_seconds())


# --- train() ------------------------------------------------------------------------


def _strategy(strategy: str | tf.distribute.Strategy | None) -> tuple[str, Any]:
    if strategy is None:
        return "default", tf.distribute.get_strategy()
    if isinstance(strategy, str):
        return strategy, distribute.make_strategy(strategy)
    return type(strategy).__name__, strategy


def _write_run(run_dir: Path, run: dict[str, Any]) -> None:
    write_text(run_dir / RUN_FILE, json.dumps(run, indent=2, default=str) + "\n", overwrite=True)


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
    strategy: str | tf.distribute.Strategy | None = None,
    checkpoint_every: int | None = None,
    gate_summaries: bool = True,
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
        verbose: `model.fit`'s verbosity (progress bar by default).
        recipe_overrides: recipe fields to change (`training.recipes.FIELDS`), e.g.
            `{"weight_decay": 0.0, "augmentation": "none"}`.
        strategy: "default", "mirrored", "multiworker" (`training.distribute`) or a
            `tf.distribute.Strategy`. The learning rate is not scaled with replicas.
        checkpoint_every: also checkpoint every this many steps (default: every epoch).
        gate_summaries: write the transform gates' TensorBoard summaries and gates.json
            every epoch (`training.callbacks.GateSummaries`, in `RUN_DIR/tensorboard`).
        **overrides: architecture overrides, as for `zoo.load`.

    Returns:
        The final metrics, with `run_dir`.

    Raises:
        RunDirError: `out` holds a finished, failed or different run, or is in use.
        NonFiniteLossError: the loss became NaN or infinite (run.json says so).
    """
    # The strategy first: MultiWorkerMirroredStrategy must start before TF runs anything.
    strategy_name, strategy_ = _strategy(strategy)
    info = zoo.describe(name)
    recipe_ = get_recipe(
        recipe_name(info["recipe"], recipe), recipe_overrides, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate,
    )
    if checkpoint_every is not None and (
        not isinstance(checkpoint_every, int) or checkpoint_every < 1
    ):
        raise ValueError(
            f"checkpoint_every must be a positive number of steps. Received: {checkpoint_every!r}"
        )
    data = dataset if isinstance(dataset, Dataset) else load_dataset(
        dataset or info["dataset"], data_dir
    )
    overrides = _check_compatible(name, data, overrides)
    distribute.per_replica_batch(recipe_["batch_size"], strategy_.num_replicas_in_sync)
    role = distribute.role(strategy_)
    if role.workers > 1 and out is None:
        raise ValueError("A multi-worker run needs --out, the same on every worker.")
    base_dir = Path(out) if out is not None else default_run_dir(name)
    run_dir = base_dir if role.is_chief else base_dir / WORKERS_DIR / str(role.index)
    ignore = (LOCK_FILE, WORKERS_DIR) if role.is_chief else (LOCK_FILE,)
    config = {
        "architecture": name,
        "overrides": overrides,
        "recipe": recipe_,
        "seed": seed,
        "dataset": {"name": data.name, "source": data.source,
                    "num_train": data.num_train, "num_test": data.num_test},
    }
    inspect_run_dir(run_dir, config, ignore)  # refuse before touching anything
    with _locked(run_dir):
        previous = inspect_run_dir(run_dir, config, ignore)
        if previous is not None:
            remove_temporary_files(run_dir)  # of the killed process; none is live (the lock)
        return _train_in(run_dir, base_dir, previous, config, data, strategy_, strategy_name,
                         role, checkpoint_every, verbose, gate_summaries)


def _train_in(run_dir, base_dir, previous, config, data, strategy, strategy_name, role,
              checkpoint_every, verbose, gate_summaries) -> dict[str, Any]:
    name, recipe, seed = config["architecture"], config["recipe"], config["seed"]
    steps_per_epoch = -(-data.num_train // recipe["batch_size"])
    multi_worker = role.workers > 1
    checkpoints = Checkpoints(run_dir / CHECKPOINT_DIR, steps_per_epoch,
                              keep=2 if multi_worker else 1)
    run = previous or {
        "command": sys.argv,
        **config,
        "versions": {"python": platform.python_version(), "tensorflow": tf.__version__,
                     "keras": keras.__version__},
        "started": _now(),
    }
    run.update(
        status="running",
        distribution=distribute.describe(strategy, strategy_name, recipe["batch_size"]),
        role={"chief": role.is_chief, "worker_index": role.index},
        steps_per_epoch=steps_per_epoch,
        checkpoint_every=checkpoint_every,
    )
    _write_run(run_dir, run)

    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = zoo.load(name, **config["overrides"])
        decay = apply_weight_decay(model, recipe)
        model.compile(
            optimizer=make_optimizer(recipe, steps_per_epoch),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
        )
        model.optimizer.build(model.trainable_variables)  # its variables under the strategy
    latest = checkpoints.latest()
    if previous is not None and latest is None and (run_dir / METRICS_FILE).is_file():
        # Killed as it was finishing: the final files are complete (metrics.json comes last).
        print(f"Finishing the interrupted run in {run_dir}: its final files are complete.",
              flush=True)
        run.setdefault("resumed", []).append({"at": _now(), "command": sys.argv,
                                              "finished_only": True})
        return _finish(run_dir, base_dir, run, checkpoints)
    start = latest["iterations"] if latest else 0
    if multi_worker:  # workers killed one checkpoint apart resume from the common one
        start = distribute.minimum_over_workers(strategy, start)
    # Outside the scope: restoring reads variables eagerly.
    restored = checkpoints.restore(model, start) if start else None
    first_epoch, skip = divmod(start, steps_per_epoch)
    history: list[dict] = []
    if previous is not None:
        if latest and latest["iterations"] != start:
            print(f"This worker's latest checkpoint is at iteration {latest['iterations']}, "
                  f"another worker's at {start}: all resume from {start}.", flush=True)
        if restored and first_epoch >= recipe["epochs"]:
            print(f"Resuming the interrupted run in {run_dir} from its checkpoint "
                  f"({_position(restored)}): all {recipe['epochs']} epochs are trained; "
                  "writing the final files.", flush=True)
        elif restored:
            print(f"Resuming the interrupted run in {run_dir} from its checkpoint "
                  f"({_position(restored)}): epoch {first_epoch + 1} of {recipe['epochs']} "
                  f"goes on after batch {skip}.", flush=True)
        else:
            print(f"Restarting the interrupted run in {run_dir} from epoch 1: there is no "
                  "checkpoint to resume from.", flush=True)
        history_file = run_dir / HISTORY_FILE
        if history_file.is_file():  # epochs after the checkpoint are trained again
            history = [e for e in json.loads(history_file.read_text(encoding="utf-8"))
                       if e["epoch"] <= first_epoch]
        run.setdefault("resumed", []).append({
            "at": _now(), "command": sys.argv, "iterations": start,
            "epoch": first_epoch, "batch": skip,
        })
    run.update(
        metadata=model.metadata,
        weight_decay_l2=decay,
        bias_lr_mult={"value": recipe["bias_lr_mult"],
                      "biases": sum(is_bias(v) for v in model.trainable_variables)},
    )
    _write_run(run_dir, run)

    def batches(epoch: int, skip_batches: int = 0) -> tf.data.Dataset:
        return training_batches(
            data.train, num_examples=data.num_train, batch_size=recipe["batch_size"],
            seed=seed, epoch=epoch, augmentation=recipe["augmentation"],
            skip_batches=skip_batches,
        )

    test_ds = evaluation_batches(data.test)
    distribute.prepare_model(model, strategy, batches(0).element_spec)
    monitor = _RunMonitor(run_dir, checkpoints, history, checkpoint_every)
    monitor.seconds_before = (restored or {}).get("train_seconds", 0.0)
    callbacks = [monitor]
    if gate_summaries and role.is_chief:  # one set of summaries per run
        # Before the checkpoint: an epoch whose checkpoint exists has its summaries.
        callbacks.insert(0, GateSummaries(run_dir / "tensorboard", data.test,
                                          final_epoch=recipe["epochs"]))
    # One fit() per epoch: each epoch's data order comes from its own seed.
    for epoch in range(first_epoch, recipe["epochs"]):
        skip_batches = skip if epoch == first_epoch else 0
        monitor.first_batch = skip_batches
        model.fit(
            batches(epoch, skip_batches), initial_epoch=epoch, epochs=epoch + 1,
            validation_data=test_ds, callbacks=callbacks, shuffle=False, verbose=verbose,
        )
        if monitor.failure:
            break
    train_seconds = monitor.train_seconds()
    if monitor.failure:
        run.update(status=NON_FINITE, failure=monitor.failure, failed=_now())
        _write_run(run_dir, run)
        raise NonFiniteLossError(monitor.failure["message"])

    last = history[-1]  # its val_* come from the final weights: no second test pass
    metrics = {
        "test_accuracy": last["val_accuracy"],
        "test_loss": last["val_loss"],
        "final_train_loss": last["loss"],
        "final_train_accuracy": last["accuracy"],
        "train_seconds": round(train_seconds, 2),
        "epochs": recipe["epochs"],
        "iterations": _iterations(model),
    }
    if previous is not None:  # final files of this same run, if it was killed finishing
        for leftover in (WEIGHTS_FILE, hash_path(WEIGHTS_FILE), MODEL_FILE, METRICS_FILE):
            (run_dir / leftover).unlink(missing_ok=True)
    _check_space_for_final_files(run_dir, model, checkpoints)
    # The run directory is a preset: its model card shows what was measured and how.
    zoo.save(model, run_dir, metrics=metrics, training={
        "dataset": f"{config['dataset']['name']} ({config['dataset']['num_train']} train / "
                   f"{config['dataset']['num_test']} test; {config['dataset']['source']})",
        "recipe": recipe.get("name"), "seed": seed, "command": " ".join(run["command"]),
    })
    # Written last (every worker: it marks its final files complete), then the checkpoint
    # goes: a process killed in between finds metrics.json and only finishes.
    write_text(run_dir / METRICS_FILE, json.dumps(metrics, indent=2) + "\n")
    return _finish(run_dir, base_dir, run, checkpoints)


def _finish(run_dir: Path, base_dir: Path, run: dict[str, Any],
            checkpoints: Checkpoints) -> dict[str, Any]:
    """Removes the checkpoints of a run whose final files are complete; marks it finished."""
    metrics = json.loads((run_dir / METRICS_FILE).read_text(encoding="utf-8"))
    checkpoints.remove()
    run.update(status="finished", finished=_now(), iterations=metrics["iterations"])
    _write_run(run_dir, run)
    return {**metrics, "run_dir": str(base_dir)}


def _check_space_for_final_files(run_dir: Path, model: keras.Model,
                                 checkpoints: Checkpoints) -> None:
    """Refuses to start the final save without room for it: HDF5, which writes the final
    weights (zoo.save), crashes the process (segmentation fault) when the disk fills up."""
    # The weights, HDF5's few KB per variable, and the small files beside them.
    needed = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize + 4096
                 for w in model.weights) + (256 << 10)
    free = shutil.disk_usage(run_dir).free
    if free < needed:
        latest = checkpoints.latest()
        kept = f"The last checkpoint ({_position(latest)}) stays" if latest else "Nothing is lost"
        raise RunWriteError(
            f"Not enough space in {run_dir} for the final weights: about {needed / 1e6:.2f} MB "
            f"needed, {free / 1e6:.2f} MB free. {kept}: free some space, then run the same "
            "command again to finish."
        )
