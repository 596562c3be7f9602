"""A run directory, as one object: its layout, its lock, its records and its status.

    run.json                  command, versions, seed, recipe, data source, model metadata,
                              distribution (strategy, replicas, global batch), status
    history.json              per-epoch metrics ("val_" = the test split), rewritten each epoch
    checkpoint/               the latest checkpoint while the run is going
                              (`training.checkpoints`); removed when the run finishes
    tensorboard/              the transform gates' summaries (`training.callbacks`)
    gates.json                the gates' statistics per epoch (`zoo.analysis.evolution`)
    model.json                architecture, overrides, metadata, weights sha256
    model.weights.h5(.sha256) final weights and their hash
    metrics.json              final test loss and accuracy
    workers/<i>/              multi-worker runs: worker i's own run directory
    .lock                     held by the process that trains in the directory

A run's status (in run.json) is "running" (going, or interrupted), "finished" or
"failed: <why>". Every file is written to a temporary `.<name>.<random>` beside it and
renamed into place (`zoo.files.atomic_path`); `RunDir.remove_temporary_files` removes
what a killed writer left.

Directories that are not one run (a sweep's, a search's) take their default name from the
same `default_dir` and are claimed by `claim_dir`. Importing this module imports neither
TensorFlow nor Keras.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.recipes import FIELD_DEFAULTS, FIELD_NAMES
from zoo.files import write_text
from zoo.weights import MODEL_FILE, WEIGHTS_FILE, hash_path

RUNS_ROOT = Path("runs")
RUN_FILE = "run.json"
HISTORY_FILE = "history.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_DIR = "checkpoint"
WORKERS_DIR = "workers"
TENSORBOARD_DIR = "tensorboard"
LOCK_FILE = ".lock"

RUNNING = "running"
FINISHED = "finished"
NON_FINITE = "failed: non-finite loss"


class RunDirError(FileExistsError):
    """A run directory that this run may neither resume nor write."""


class RunWriteError(OSError):
    """A run's file could not be written (disk full, read-only); what was kept is named."""


def timestamp() -> str:
    """Now, as the default directories name it: YYYYmmdd-HHMMSS."""
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def default_dir(name: str) -> Path:
    """The default output directory of anything named `name`: runs/<name>-<YYYYmmdd-HHMMSS>."""
    return RUNS_ROOT / f"{name}-{timestamp()}"


def claim_dir(path: str | os.PathLike) -> Path:
    """Creates `path` for new output; refuses one that already holds files."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(
            f"Run directory {path} already exists and is not empty; refusing to "
            "overwrite a previous run. Pass a new --out, or move the old run away."
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def _gates_file_name() -> str:
    from zoo.analysis.evolution import GATES_FILE  # zoo.analysis imports Keras: not at import

    return GATES_FILE


def _is_temporary(path: Path) -> bool:
    """A temporary file of an atomic write that a killed process left behind."""
    # Files a run writes through a temporary `.<name>.<random>` beside them (atomic_path).
    run_files = (RUN_FILE, HISTORY_FILE, METRICS_FILE, MODEL_FILE, WEIGHTS_FILE,
                 hash_path(WEIGHTS_FILE).name, _gates_file_name())
    return path.is_file() and any(path.name.startswith(f".{name}.") for name in run_files)


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


# The override naming the Keras dtype policy: a run may resume in another one (the faster on
# the machine at hand: bfloat16 is 1.66x float32 on one CPU here, 0.6x on another), which
# its resumptions and each epoch's history entry record.
PRECISION_OVERRIDE = "dtype"


def run_config(record: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to resume: the recipe's settings, not its description."""
    recipe = record.get("recipe") or {}
    overrides = record.get("overrides")
    if overrides is not None:  # the dtype policy may change between sessions, as the backend
        overrides = {k: v for k, v in overrides.items() if k != PRECISION_OVERRIDE}
    return {
        "architecture": record.get("architecture"),
        "overrides": overrides,
        # A field a run's record lacks (recorded before the field existed) had its default.
        "recipe": {k: recipe.get(k, FIELD_DEFAULTS.get(k)) for k in ("name", *FIELD_NAMES)},
        "seed": record.get("seed"),
        "dataset": record.get("dataset"),
    }


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _write_json(path: Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2, default=str) + "\n", overwrite=True)


class RunDir:
    """One run directory: where its files are, who may write it, what it holds.

    >>> run_dir = RunDir.default("highway_fc10_mnist")  # runs/highway_fc10_mnist-<stamp>
    >>> run_dir.history_file                             # .../history.json
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @classmethod
    def default(cls, name: str) -> RunDir:
        """runs/<name>-<YYYYmmdd-HHMMSS>."""
        return cls(default_dir(name))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __truediv__(self, name: str | os.PathLike) -> Path:
        return self.path / name

    # --- Layout ---

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def history_file(self) -> Path:
        return self.path / HISTORY_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def gates_file(self) -> Path:
        return self.path / _gates_file_name()

    @property
    def model_file(self) -> Path:
        return self.path / MODEL_FILE

    @property
    def weights_file(self) -> Path:
        return self.path / WEIGHTS_FILE

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK_FILE

    def worker(self, index: int) -> RunDir:
        """Worker `index`'s own run directory in a multi-worker run: workers/<index>/."""
        return RunDir(self.path / WORKERS_DIR / str(index))

    # --- Records ---

    def read_run(self) -> dict[str, Any]:
        """run.json (FileNotFoundError if there is none)."""
        return _read_json(self.run_file)

    def write_run(self, run: dict[str, Any]) -> None:
        _write_json(self.run_file, run)

    @property
    def status(self) -> str | None:
        """run.json's status: "running", "finished", "failed: ..."; None without run.json."""
        try:
            return self.read_run().get("status")
        except FileNotFoundError:
            return None

    def read_history(self) -> list[dict[str, Any]]:
        """history.json's per-epoch entries; [] before the first epoch ends."""
        try:
            return _read_json(self.history_file)
        except FileNotFoundError:
            return []

    def write_history(self, history: list[dict[str, Any]]) -> None:
        _write_json(self.history_file, history)

    def read_metrics(self) -> dict[str, Any]:
        """metrics.json (FileNotFoundError while the run is not finished)."""
        return _read_json(self.metrics_file)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        """Writes metrics.json, which must not exist yet (it marks the final files complete)."""
        write_text(self.metrics_file, json.dumps(metrics, indent=2) + "\n")

    # --- Claim, inspect, lock ---

    def claim(self) -> RunDir:
        """Creates the directory for a new run; refuses one that already holds files."""
        claim_dir(self.path)
        return self

    def inspect(
        self, config: dict[str, Any], ignore: tuple[str, ...] = (LOCK_FILE,)
    ) -> dict[str, Any] | None:
        """The run.json record of an interrupted run here that this `config` resumes;
        None for a new or empty directory (files named in `ignore` and temporary files
        do not count).

        Raises:
            RunDirError: the directory holds a finished or failed run, a run of another
                configuration, or files that are not a run; the message says which.
        """
        run_dir = self.path
        if not run_dir.exists():
            return None
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir} exists and is not a directory; choose another --out.")
        if not [p for p in run_dir.iterdir() if p.name not in ignore and not _is_temporary(p)]:
            return None
        run_file = self.run_file
        try:
            record = self.read_run()
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
        if status == FINISHED:
            raise RunDirError(
                f"Run directory {run_dir} holds a run that already finished (results in "
                f"{self.metrics_file}); refusing to redo or overwrite it. Choose a new --out."
            )
        if status != RUNNING:
            raise RunDirError(
                f"Run directory {run_dir} holds a run with status {status!r}, which cannot be "
                f"resumed; refusing to overwrite it (its last good checkpoint, if any, is in "
                f"{self.checkpoint_dir}). Choose a new --out."
            )
        differences = _config_differences(run_config(record), run_config(config))
        if differences:
            raise RunDirError(
                f"Run directory {run_dir} holds an interrupted run of another configuration; "
                "refusing to resume or overwrite it. Differences:\n  " + "\n  ".join(differences)
                + "\nRepeat the recorded configuration to resume it (its command: "
                f"{' '.join(record.get('command') or [])}), or choose a new --out."
            )
        return record

    @contextlib.contextmanager
    def locked(self) -> Iterator[RunDir]:
        """Holds an exclusive lock on the directory (released by the kernel if the process
        dies); creates the directory.

        Raises:
            RunDirError: another process holds the lock.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.lock_file, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunDirError(
                    f"Run directory {self.path} is in use by another training process (it "
                    f"holds {self.lock_file}); wait for it to end or choose another --out."
                ) from None
            try:
                yield self
            finally:
                self.lock_file.unlink(missing_ok=True)

    def remove_temporary_files(self) -> list[Path]:
        """Removes what killed writers left here and in the checkpoint directory (call it
        holding the run's lock: no live writer then); returns what was removed."""
        run_dir, checkpoint_dir = self.path, self.checkpoint_dir
        left = [p for p in run_dir.iterdir() if _is_temporary(p)] if run_dir.is_dir() else []
        if checkpoint_dir.is_dir():
            left += [p for p in checkpoint_dir.iterdir() if p.name.startswith(".") and p.is_file()]
        for path in left:
            path.unlink(missing_ok=True)
        return left
