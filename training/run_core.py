"""The run core: what a training run is, for every task (an image classifier, a language model).

A task (`Task`) supplies its settings, its compiled model, its batches and validation data, its
callbacks, its history entry and its final metrics and files; `run()` does the rest, the same
for every task:

- the run directory (`training.run_dir.RunDir`): refused when it holds a finished, failed or
  different run; locked while the run trains; run.json records the command, versions,
  configuration, status, resumptions and the timeline (`training.timeline`);
- checkpoints (`training.checkpoints`): `.npz` archives of the model's variables (weights,
  random-seed states, carried states), the optimizer's and the iteration count, with their
  sha256, every epoch and every `checkpoint_every` steps; an interrupted run of the same
  configuration resumes from the latest, bit-identically;
- one `fit` per epoch (`initial_epoch=epoch`), with the run's callbacks around the task's:
  the timeline's clock, history.json and the checkpoint (`training.checkpoints.RunMonitor`,
  which also stops the run at a non-finite loss: `NonFiniteLossError`, status "failed:
  non-finite loss"), the caller's callbacks, and Keras's progress bar;
- the final files: the task's metrics and saved model, then metrics.json, then the
  checkpoint goes and the run is marked finished (a process killed in between finds
  metrics.json and only finishes).
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import shutil
import sys
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from training import timeline
from training.callbacks import ProgressBar
from training.checkpoints import Checkpoints, RunMonitor, position_of
from training.run_dir import FINISHED, LOCK_FILE, NON_FINITE, RUNNING, RunDir, RunWriteError
from training.runtime import backend as runtime_backend
from training.runtime import distribute
from zoo.weights import hash_path

__all__ = ["NonFiniteLossError", "RunSettings", "Task", "check_checkpoint_every", "run"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the run stopped."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a run trains and how: all a task settles before the run takes the directory."""

    config: dict[str, Any]  # architecture, overrides, recipe, seed, dataset: what a resume
    # must match (training.run_dir.run_config)
    strategy: Any  # a tf.distribute.Strategy, distribute.SingleDevice (JAX, PyTorch) or
    # distribute.JaxDataParallel
    strategy_name: str
    role: distribute.Role
    steps_per_epoch: int
    checkpoint_every: int | None = None
    verbose: int | str = "auto"
    callbacks: tuple[keras.callbacks.Callback, ...] = ()  # after the run's own

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


class Task:
    """What one kind of run trains. Subclasses set `settings` and implement `compile`,
    `batches`, `final_metrics` and `save`; the other hooks have defaults."""

    settings: RunSettings
    validation_data: Any = None  # fit's validation_data ("val_" metrics); set by `prepare`

    def compile(self) -> keras.Model:
        """The model, seeded and compiled; built before the run directory is touched."""
        raise NotImplementedError

    def record(self, model: keras.Model) -> dict[str, Any]:
        """run.json's fields about the compiled model."""
        return {"metadata": model.metadata}

    def upgrade(self, run_dir: RunDir, model: keras.Model, checkpoints: Checkpoints) -> None:
        """Turns an interrupted run's checkpoint of an earlier format into a current one."""

    def prepare(self, model: keras.Model) -> None:
        """Sets `validation_data` and readies `model` for `fit`, once per process."""

    def batches(self, epoch: int, skip: int) -> dict[str, Any]:
        """`fit`'s data for `epoch` after its first `skip` batches: {"x": ...} (a tf.data
        Dataset or a keras PyDataset) or {"x", "y", "batch_size"} (arrays, in order)."""
        raise NotImplementedError

    def callbacks(self, run_dir: RunDir, history: list[dict]) -> list[keras.callbacks.Callback]:
        """The task's callbacks, called before the run's monitor (history.json and the
        checkpoint); `history` is the run's, extended at each epoch's end."""
        return []

    # An epoch's history.json entry from its logs and its 0-based number; None: the image
    # runs' ({"epoch": epoch + 1, **logs, "learning_rate": ...}, `RunMonitor.epoch_entry`).
    history_entry: Callable[[int, dict[str, float]], dict[str, Any]] | None = None

    def final_metrics(self, model: keras.Model, history: list[dict],
                      train_seconds: float) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, model: keras.Model, run_dir: RunDir, metrics: dict[str, Any],
             run: dict[str, Any]) -> None:
        """Writes the final model files (weights, model.json, model card)."""
        raise NotImplementedError


def check_checkpoint_every(value: Any) -> int | None:
    """`value` if it is None or a positive number of steps; a ValueError if not."""
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(
            f"checkpoint_every must be a positive number of steps. Received: {value!r}")
    return value


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


def run(task: Task, base_dir: RunDir, clock: timeline.Clock, run_dir: RunDir | None = None,
        ignore: tuple[str, ...] = (LOCK_FILE,)) -> dict[str, Any]:
    """Trains `task` in `run_dir` (default `base_dir`; a worker's own under a multi-worker
    run's): from scratch, or on from an interrupted run of the same configuration there.
    Returns the final metrics with `run_dir` (`base_dir`)."""
    run_dir = run_dir or base_dir
    config = task.settings.config
    run_dir.inspect(config, ignore)  # refuse before touching anything
    # Built before the run directory is made: overrides the builder refuses (a dropout rate
    # of 1, say) leave nothing behind.
    model = task.compile()
    with run_dir.locked():
        previous = run_dir.inspect(config, ignore)
        if previous is not None:
            run_dir.remove_temporary_files()  # of the killed process; none is live (the lock)
        return _train_in(task, model, run_dir=run_dir, base_dir=base_dir, previous=previous,
                         clock=clock)


def _train_in(task: Task, model: keras.Model, *, run_dir: RunDir, base_dir: RunDir,
              previous: dict[str, Any] | None, clock: timeline.Clock) -> dict[str, Any]:
    """Trains `model` in `run_dir`, which this process has locked; `previous` is the
    run.json of the interrupted run there (None: a new run); `clock` times it."""
    settings = task.settings
    checkpoints = Checkpoints(run_dir.checkpoint_dir, settings.steps_per_epoch,
                              keep=2 if settings.role.workers > 1 else 1)
    run = _started(settings, previous)
    run_dir.write_run(run)
    if previous is not None:
        task.upgrade(run_dir, model, checkpoints)
    latest = checkpoints.latest()
    if previous is not None and latest is None and run_dir.metrics_file.is_file():
        # Killed as it was finishing: the final files are complete (metrics.json comes last).
        print(f"Finishing the interrupted run in {run_dir}: its final files are complete.",
              flush=True)
        run.setdefault("resumed", []).append({"at": _now(), "command": sys.argv,
                                              "finished_only": True})
        run["timeline"] = clock.phases()
        return _finish(run_dir, base_dir, run, checkpoints)
    start, restored, history = _resume_point(task, model, run_dir, checkpoints, latest, run,
                                             previous)
    run.update(task.record(model))
    run_dir.write_run(run)

    monitor = RunMonitor(run_dir, checkpoints, history, settings.checkpoint_every,
                         entry=task.history_entry)
    monitor.seconds_before = (restored or {}).get("train_seconds", 0.0)
    _fit(model, task, run_dir, monitor, start, clock)
    train_seconds = monitor.train_seconds()
    if monitor.failure:
        run.update(status=NON_FINITE, failure=monitor.failure, failed=_now())
        run_dir.write_run(run)
        raise NonFiniteLossError(monitor.failure["message"])
    metrics = task.final_metrics(model, history, train_seconds)
    _save(task, model, run_dir, checkpoints, metrics, run, resumed=previous is not None)
    run["timeline"] = clock.phases()
    return _finish(run_dir, base_dir, run, checkpoints)


def _started(settings: RunSettings, previous: dict[str, Any] | None) -> dict[str, Any]:
    """run.json of a run going (on): its record so far, or a new one."""
    run = previous or {
        "command": sys.argv,
        **settings.config,
        "versions": {"python": platform.python_version(), **runtime_backend.versions()},
        "started": _now(),
    }
    run.update(
        status=RUNNING,
        distribution=distribute.describe(settings.strategy, settings.strategy_name,
                                         settings.recipe["batch_size"]),
        role={"chief": settings.role.is_chief, "worker_index": settings.role.index},
        steps_per_epoch=settings.steps_per_epoch,
        checkpoint_every=settings.checkpoint_every,
    )
    return run


def _resume_point(task: Task, model: keras.Model, run_dir: RunDir, checkpoints: Checkpoints,
                  latest: dict | None, run: dict[str, Any], previous: dict[str, Any] | None
                  ) -> tuple[int, dict | None, list[dict]]:
    """(the iteration to go on from, the checkpoint restored into `model` or None, the
    history so far); notes a resumption in `run`."""
    settings = task.settings
    start = latest["iterations"] if latest else 0
    if settings.role.workers > 1:  # workers killed one checkpoint apart resume from the common one
        start = distribute.minimum_over_workers(settings.strategy, start)
    # Outside the scope: restoring reads variables eagerly.
    restored = checkpoints.restore(model, start) if start else None
    first_epoch, skip = divmod(start, settings.steps_per_epoch)
    if previous is None:
        return start, restored, []
    _say_how_it_resumes(run_dir, settings, latest, start, restored, _backend_so_far(previous))
    precision = model.dtype_policy.name
    if restored and precision != _precision_so_far(previous):
        print(f"The run trained in {_precision_so_far(previous)} so far and continues in "
              f"{precision} (each epoch's history entry names its precision).", flush=True)
    run.setdefault("resumed", []).append({
        "at": _now(), "command": sys.argv, "iterations": start,
        "epoch": first_epoch, "batch": skip, "backend": distribute.backend(),
        "precision": precision,
    })
    # One entry per finished epoch, in order: those after the checkpoint are trained again.
    # Numbered from 1 (a language model's run of before 0.3 numbered its entries from 0).
    return start, restored, [{**entry, "epoch": number} for number, entry in
                             enumerate(run_dir.read_history()[:first_epoch], start=1)]


def _save(task: Task, model: keras.Model, run_dir: RunDir, checkpoints: Checkpoints,
          metrics: dict[str, Any], run: dict[str, Any], *, resumed: bool) -> None:
    """The final files: the task's, then metrics.json (every worker's: it marks its final
    files complete), after which the checkpoint may go."""
    if resumed:  # final files of this same run, if it was killed finishing
        for leftover in (run_dir.weights_file, hash_path(run_dir.weights_file),
                         run_dir.model_file, run_dir.path / "README.md", run_dir.metrics_file):
            leftover.unlink(missing_ok=True)
    _check_space_for_final_files(run_dir, model, checkpoints)
    task.save(model, run_dir, metrics, run)
    run_dir.write_metrics(metrics)


def _backend_so_far(run: dict[str, Any]) -> str:
    """The backend the run last trained on (runs from before backends were recorded: TF)."""
    for resumed in reversed(run.get("resumed", [])):
        if "backend" in resumed:
            return resumed["backend"]
    return run.get("versions", {}).get("backend", "tensorflow")


def _precision_so_far(run: dict[str, Any]) -> str:
    """The dtype policy the run last trained in (its first: the one its overrides name)."""
    for resumed in reversed(run.get("resumed", [])):
        if "precision" in resumed:
            return resumed["precision"]
    return (run.get("overrides") or {}).get("dtype") or "float32"


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


def _fit(model: keras.Model, task: Task, run_dir: RunDir, monitor: RunMonitor, start: int,
         clock: timeline.Clock) -> None:
    """Trains from iteration `start` to the last epoch (or a non-finite loss), one `fit`
    per epoch: each epoch's data comes from the task (an image run's order from its own
    seed; a language model's in order)."""
    settings = task.settings
    first_epoch, skip = divmod(start, settings.steps_per_epoch)
    task.prepare(model)
    clock_head, clock_tail = clock.callbacks()  # around the run's own callbacks
    callbacks = [clock_head, *task.callbacks(run_dir, monitor.history), monitor, clock_tail,
                 *settings.callbacks]
    for epoch in range(first_epoch, settings.epochs):
        skip_batches = skip if epoch == first_epoch else 0
        monitor.first_batch = skip_batches
        data = task.batches(epoch, skip_batches)
        model.fit(
            **data, initial_epoch=epoch, epochs=epoch + 1,
            validation_data=task.validation_data,
            callbacks=_run_callbacks(model, callbacks, _steps(data), settings),
            shuffle=False, verbose=settings.verbose,
        )
        if monitor.failure:
            break


def _steps(data: dict[str, Any]) -> int | None:
    """The number of batches in `fit`'s data (None: unknown)."""
    x = data["x"]
    if "batch_size" in data:  # arrays
        return -(-len(x) // data["batch_size"])
    if isinstance(x, keras.utils.PyDataset):
        return len(x)
    steps = int(x.cardinality())  # a tf.data.Dataset
    return steps if steps >= 0 else None


def _run_callbacks(model: keras.Model, callbacks: list[keras.callbacks.Callback],
                   steps: int | None, settings: RunSettings) -> keras.callbacks.CallbackList:
    """The callbacks of one epoch's `fit`, as `fit` would make them (with its history and
    progress bar) but told the run's epoch count: the progress says "Epoch k/N" with the
    run's N, not k/k."""
    # Keras's defaults in its order, with a bar that lets the batch hooks run asynchronously.
    bar = [ProgressBar()] if settings.verbose != 0 else []
    return keras.callbacks.CallbackList(
        [*callbacks, keras.callbacks.History(), *bar], add_history=True, add_progbar=False,
        verbose=settings.verbose, epochs=settings.epochs, steps=steps, model=model,
    )


def _finish(run_dir: RunDir, base_dir: RunDir, run: dict[str, Any],
            checkpoints: Checkpoints) -> dict[str, Any]:
    """Removes the checkpoints of a run whose final files are complete; marks it finished."""
    metrics = run_dir.read_metrics()
    checkpoints.remove()
    run.update(status=FINISHED, finished=_now())
    if "iterations" in metrics:
        run["iterations"] = metrics["iterations"]
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
        raise RunWriteError(
            f"Not enough space in {run_dir} for the final weights: about {needed / 1e6:.2f} MB "
            f"needed, {free / 1e6:.2f} MB free; {checkpoints.what_stays()}. Free some space, "
            "then run the same command again to finish."
        )
