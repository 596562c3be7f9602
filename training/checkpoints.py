"""A run's checkpoints and the callback that takes them.

`Checkpoints` keeps the latest training states of a run in its `checkpoint/` directory;
`RunMonitor` is the Keras callback of every run (`training.run_core`): it stops the
run at a non-finite loss, and otherwise writes history.json and a checkpoint at the end of
every epoch (and every `checkpoint_every` steps).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from training.run_dir import RunDir, RunDirError, RunWriteError
from zoo.files import atomic_path, sha256_of, write_text


class Checkpoints:
    """The latest training states of a run: `ckpt-<iteration>.npz` and `checkpoint.json`,
    which names the latest with its sha256 and is replaced only after the file is complete.

    A checkpoint holds the values of the model's variables (weights, and the dropout layers'
    random-seed states, so that a resumed run draws the masks an uninterrupted one would)
    and the optimizer's (the iteration count among them), in that order, with their paths:
    a NumPy `.npz` archive, written through Python's file I/O (a full disk is a clean OSError;
    HDF5 crashed the process with a segmentation fault). Keras's `.keras` archive held the
    same numbers but the seeds, and took 40-55 ms a save for the 30-layer headline net, nearly
    all in walking the model's attributes, against 7 ms; a run saves one every epoch.
    The `.keras` checkpoints of runs started by earlier versions are still restored.

    `keep` states are kept (the newest this process saved or restored): multi-worker runs
    keep two, so that workers killed one checkpoint apart can agree on a common one.
    """

    POINTER = "checkpoint.json"

    def __init__(self, directory: Path, steps_per_epoch: int, keep: int = 1):
        self.directory, self.steps_per_epoch, self.keep = directory, steps_per_epoch, keep
        self._kept: list[str] = []

    @staticmethod
    def file_name(iterations: int) -> str:
        return f"ckpt-{iterations:09d}.npz"

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
                with open(tmp, "wb") as f:
                    np.savez(f, **_state_arrays(model))
                record["sha256"] = sha256_of(tmp)
            record["saved"] = datetime.datetime.now().isoformat(timespec="seconds")
            record["train_seconds"] = round(train_seconds, 2)
            write_text(self.directory / self.POINTER, json.dumps(record, indent=2) + "\n",
                       overwrite=True)
        except OSError as err:
            (self.directory / record["file"]).unlink(missing_ok=True)
            raise RunWriteError(
                f"Could not write the checkpoint of iteration {iterations} in "
                f"{self.directory}: {err.strerror or err}; {self.what_stays()}. Free some "
                "space (or fix the directory), then run the same command again to resume."
            ) from err
        self._kept = [*self._kept, record["file"]][-self.keep:]
        for old in self.directory.glob("ckpt-*"):
            if old.name not in self._kept:  # older ones, or newer ones not agreed on
                old.unlink(missing_ok=True)

    def what_stays(self) -> str:
        """What a run refused a write keeps, for its one-line error."""
        latest = self.latest()
        return (f"the last checkpoint ({position_of(latest)}) stays" if latest
                else "there is no checkpoint yet")

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
            if path.suffix == ".keras":  # a run started by an earlier version
                model.load_weights(path)
            else:
                _assign_state(model, path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise RunDirError(
                f"Checkpoint {path} cannot be read ({type(err).__name__}: "
                f"{' '.join(str(err).split())}); {restart}."
            ) from None
        restored = trained_iterations(model)
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


def _state(model: keras.Model) -> tuple[list[Any], list[str]]:
    """The variables a checkpoint holds, in its order, and their names: the model's paths,
    then the optimizer's as "optimizer/..."."""
    names = [v.path for v in model.variables]
    names += ["optimizer/" + v.path.split("/", 1)[-1] for v in model.optimizer.variables]
    return [*model.variables, *model.optimizer.variables], names


def _state_arrays(model: keras.Model) -> dict[str, np.ndarray]:
    """A checkpoint's arrays: "0", "1", ... the variables' values; "names": theirs."""
    variables, names = _state(model)
    arrays = {str(i): keras.ops.convert_to_numpy(v) for i, v in enumerate(variables)}
    return {**arrays, "names": np.array(names)}


def _assign_state(model: keras.Model, path: Path) -> None:
    """Assigns a checkpoint's arrays to the model's and optimizer's variables in order, once
    it has checked that they fit: as many, each of the same shape and kind (floating point
    or integer). (By order, as Keras loads weights: Keras numbers the names of unnamed
    objects, random-seed generators and optimizers among them, per process.)"""
    _assign(*_state(model), path, whole=True)


def assign_model_weights(model: keras.Model, path: str | Path) -> None:
    """Assigns the model's variables (not the optimizer's) from the checkpoint at `path`:
    a model built as the run's, not compiled, then computes what the run's net computed when
    the checkpoint was taken. Refuses one whose model variables do not fit (ValueError)."""
    variables = model.variables
    _assign(variables, [v.path for v in variables], Path(path), whole=False)


def _assign(variables: list[Any], names: list[str], path: Path, whole: bool) -> None:
    """The checkpoint's arrays to `variables` in order: all it holds (`whole`), or only the
    model's, which come before the optimizer's."""
    with np.load(path, allow_pickle=False) as archive:
        stored = [str(name) for name in archive["names"]]
        arrays = [archive[str(i)] for i in range(len(stored))]
    if not whole:
        arrays = [a for a, name in zip(arrays, stored) if not name.startswith("optimizer/")]
    if len(arrays) != len(variables):
        raise ValueError(f"it holds {len(arrays)} variables, this model has {len(variables)}")
    for name, array, variable in zip(names, arrays, variables):
        if array.shape != tuple(variable.shape) or _kind(array.dtype) != _kind(variable.dtype):
            raise ValueError(f"{name} is {array.dtype}{list(array.shape)} there, "
                             f"{variable.dtype}{list(variable.shape)} in this model")
    for array, variable in zip(arrays, variables):
        variable.assign(array)  # in the variable's dtype: another backend's counts and seeds


def _kind(dtype: Any) -> str:
    """Floating point or integer: backends keep the iteration count and the random seeds in
    integers of their own widths and signs (TensorFlow int64, JAX int32 and uint32), and a
    run may resume on another backend."""
    return "float" if np.dtype(dtype).kind == "f" else np.dtype(dtype).kind.replace("u", "i")


def position_of(record: dict[str, Any]) -> str:
    """Where a checkpoint stands, for people: "end of epoch 2", "epoch 3, batch 50"."""
    where = (f"end of epoch {record['epoch']}" if not record["batch"]
             else f"epoch {record['epoch'] + 1}, batch {record['batch']}")
    return f"{where}, iteration {record['iterations']}"


def trained_iterations(model: keras.Model) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations.value))


def _scalar(value: Any) -> float:
    return float(np.mean(keras.ops.convert_to_numpy(value)))


class RunMonitor(keras.callbacks.Callback):
    """Stops at a non-finite loss, then (if the loss is fine) writes history.json and
    checkpoints: every epoch, and every `checkpoint_every` steps.

    `history` is the run's history so far (epochs before this process), which it extends;
    `failure` describes where the loss stopped being finite (None while it is).

    Without `checkpoint_every` its batch hook only reads the batch's loss, so it is
    `async_safe`: Keras may then run the batch hooks in a thread pool, and the next steps are
    dispatched while a step's loss is still being computed (no wait on the device each
    batch). A failure found there is the earliest non-finite batch, as in step with the
    loop; the steps already dispatched after it change nothing that is kept.
    """

    def __init__(self, run_dir: RunDir, checkpoints: Checkpoints, history: list[dict],
                 checkpoint_every: int | None,
                 entry: Callable[[int, dict[str, float]], dict[str, Any]] | None = None):
        super().__init__()
        self.run_dir, self.checkpoints, self.history = run_dir, checkpoints, history
        self.entry = entry or self.epoch_entry  # an epoch's history entry from its logs
        self.checkpoint_every = checkpoint_every
        # A checkpoint inside an epoch reads the model at its step: the hook must wait for it.
        self.async_safe = checkpoint_every is None
        self.failure: dict[str, Any] | None = None
        self._failing = threading.Lock()  # batch hooks may run in several threads at once
        self.first_batch = 0  # of the first epoch of a fit() that resumes mid-epoch
        self._epoch = 0
        # Training time of the whole run: before this process (from the checkpoint) + since.
        self.seconds_before = 0.0
        self.started = time.perf_counter()

    def train_seconds(self) -> float:
        return self.seconds_before + time.perf_counter() - self.started

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = _scalar((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            # The step's iteration, counted (the model may be steps further on by now).
            steps = self.checkpoints.steps_per_epoch
            self._fail(loss, self._epoch * steps + self.first_batch + batch + 1)
            return
        if self.checkpoint_every:
            iterations = trained_iterations(self.model)
            if iterations % self.checkpoint_every == 0 and (
                iterations % self.checkpoints.steps_per_epoch
            ):  # epoch ends are saved by on_epoch_end, after validation
                self.checkpoints.save(self.model, iterations, self.train_seconds())

    def _fail(self, loss: float, iterations: int) -> None:
        with self._failing:
            if self.failure is None or iterations < self.failure["iterations"]:
                self._record_failure(loss, iterations)
        self.model.stop_training = True

    def _record_failure(self, loss: float, iterations: int) -> None:
        epoch, batch = divmod(iterations - 1, self.checkpoints.steps_per_epoch)
        last = self.checkpoints.latest()
        kept = (
            f"the last good checkpoint ({position_of(last)}) stays in "
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

    def epoch_entry(self, epoch: int, logs: dict[str, float]) -> dict[str, Any]:
        """An image run's entry: the 1-based epoch, the logs, the epoch's learning rate and
        the dtype policy it trained in."""
        return {"epoch": epoch + 1, **logs,
                "learning_rate": _scalar(self.model.optimizer.learning_rate),
                "precision": self.model.dtype_policy.name}

    def on_epoch_end(self, epoch, logs=None):
        if self.failure is not None:
            return  # the weights are not finite: keep the last good checkpoint
        logs = {k: _scalar(v) for k, v in (logs or {}).items()}
        if not math.isfinite(logs.get("loss", 0.0)):
            self._fail(logs["loss"], trained_iterations(self.model))
            return
        entry = self.entry(epoch, logs)
        if self.first_batch:
            entry["resumed_at_batch"] = self.first_batch  # metrics cover the rest
            self.first_batch = 0
        self.history.append(entry)
        self.run_dir.write_history(self.history)
        self.checkpoints.save(self.model, trained_iterations(self.model), self.train_seconds())
