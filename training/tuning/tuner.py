"""The search: `search()` runs the paper's random search (`highway-zoo tune NAME`) with
KerasTuner over `training.tuning.space.SearchSpace`, resumable and distributed.

Search directory (`--out DIR`)::

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
same `--out` (on a shared filesystem, or at least on the chief, for the final report), and
set three environment variables::

    # the chief (start it first; it runs until all trials are done)
    KERASTUNER_TUNER_ID=chief KERASTUNER_ORACLE_IP=10.0.0.1 KERASTUNER_ORACLE_PORT=8000 \\
        highway-zoo tune highway_fc50_mnist --max-trials 100 --out runs/tune-fc50
    # each worker: a unique id, the chief's address
    KERASTUNER_TUNER_ID=worker0 KERASTUNER_ORACLE_IP=10.0.0.1 KERASTUNER_ORACLE_PORT=8000 \\
        highway-zoo tune highway_fc50_mnist --max-trials 100 --out runs/tune-fc50

Each trial is run by exactly one worker; workers print one line per trial they ran
(`trial 03 by worker1: ...`). The chief writes the ranked table, best_hyperparameters.json
and best_model when the last trial ends (the workers' trial checkpoints must be readable
from the chief's `--out`). Within one process, `--strategy mirrored` trains every trial
with `tf.distribute.MirroredStrategy` (KerasTuner's `distribution_strategy`; TensorFlow
backend only).

Backends: the search runs on TensorFlow, JAX and PyTorch (`KERAS_BACKEND`); its TensorBoard
HParams are written without TensorFlow (`training.summaries`).
"""


from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.run_dir import HISTORY_FILE, TENSORBOARD_DIR, default_dir
from training.tuning.space import SearchSpace

if TYPE_CHECKING:  # keras_tuner imports Keras: the CLI's flags are built without it
    from training.tuning.hypermodel import ZooHyperModel

TUNERS = ("random", "bayesian", "hyperband")
# The metrics every zoo model produces under search(): loss and accuracy, on the training
# data and ("val_") on the test split.
PRODUCED_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy")
SETTINGS_FILE = "search.json"
PROJECT_NAME = "search"
BEST_HP_FILE = "best_hyperparameters.json"
BEST_MODEL_DIR = "best_model"
# Per trial, beside KerasTuner's trial.json: every epoch's metrics and the seconds taken.
TRIAL_HISTORY_FILE = HISTORY_FILE  # as in a run directory (training.run_dir)
# Settings that may change between runs of one search directory.
_RESUMABLE = ("max_trials",)


# --- The search ---------------------------------------------------------------------


def _role() -> str:
    """"chief", "worker" or "standalone": this process's place in a KerasTuner cluster, from
    the environment variables KerasTuner's guide to distributed tuning sets out (and its own
    `has_chief_oracle` / `is_chief_oracle` read): KERASTUNER_ORACLE_IP and _PORT name the
    chief, KERASTUNER_TUNER_ID is "chief" on the chief."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return "standalone"
    missing = [v for v in ("KERASTUNER_ORACLE_PORT", "KERASTUNER_TUNER_ID")
               if v not in os.environ]
    if missing:
        raise RuntimeError(f"KERASTUNER_ORACLE_IP is set but {' and '.join(missing)} "
                           f"{'is' if len(missing) == 1 else 'are'} not: a distributed "
                           "search needs all three (KerasTuner).")
    return "chief" if "chief" in os.environ["KERASTUNER_TUNER_ID"] else "worker"


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
    from tensorboard.plugins.hparams import api as hp_api

    from training.summaries import EventWriter

    s = hypermodel.space
    hparams = [
        hp_api.HParam("learning_rate", hp_api.RealInterval(*s.learning_rate)),
        hp_api.HParam("momentum", hp_api.RealInterval(*s.momentum)),
        hp_api.HParam("lr_decay", hp_api.RealInterval(*s.lr_decay)),
        hp_api.HParam("activation", hp_api.Discrete(list(s.activations))),
    ]
    if hypermodel.highway:
        hparams.append(hp_api.HParam("transform_bias", hp_api.RealInterval(*s.transform_bias)))
    with EventWriter(tb_dir) as writer:
        writer.summary(hp_api.hparams_config_pb(hparams=hparams,
                                                metrics=[hp_api.Metric(objective)]), step=0)


def _hparams_trial(tb_dir: Path, trial_id: str, values: dict[str, Any], objective: str,
                   score: float | None) -> None:
    from tensorboard.plugins.hparams import api as hp_api

    from training.summaries import EventWriter

    with EventWriter(tb_dir / f"trial_{trial_id}") as writer:
        writer.summary(hp_api.hparams_pb(values, trial_id=trial_id), step=0)
        if score is not None:
            writer.scalar(objective, score, step=1)


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
            from training.runtime.tf_gradient_registry import released_custom_gradients
            from zoo.files import write_text

            start = time.monotonic()
            # A trial's model is discarded when it ends; without this every trial left its
            # traced graphs in memory (training.runtime.tf_gradient_registry).
            with released_custom_gradients():
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
    from zoo.files import write_text

    settings_file = out / SETTINGS_FILE
    if role == "worker":  # the chief owns the directory
        return settings_file.exists()
    if overwrite and out.exists():
        for child in (SETTINGS_FILE, PROJECT_NAME, TENSORBOARD_DIR, BEST_HP_FILE,
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
                "it and start afresh, or choose another --out."
            )
        resumes = True
    elif out.exists() and any(p for p in out.iterdir()):
        raise FileExistsError(
            f"{out} is not empty and holds no search ({SETTINGS_FILE} is missing); choose "
            "another --out, or pass --overwrite."
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


def _load_data(name: str, info: dict[str, Any], dataset: str | None,
               data_dir: str | os.PathLike | None, max_train_examples: int | None,
               max_test_examples: int | None):
    """The search's data, cut to its first examples, checked against the net's input."""
    from training.data import load_dataset

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
    return data


def _check_counts(max_trials: int, max_train_examples: int | None,
                  max_test_examples: int | None) -> None:
    if not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive integer. Received: {max_trials!r}")
    for label, value in (("max_train_examples", max_train_examples),
                         ("max_test_examples", max_test_examples)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{label} must be a positive integer. Received: {value!r}")


def _make_tuner(tuner: str, hypermodel: ZooHyperModel, out: Path, strategy_, objective: str,
                max_trials: int, epochs: int, seed: int, tb_dir: Path):
    """KerasTuner's tuner on `out`'s project, with as many trials as asked for now."""
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
    return tuner_


def _run_search(tuner_, verbose: int) -> None:
    # KerasTuner runs gc.collect() twice before every trial's build; over TensorFlow's
    # heap that cost 0.6 s a call here. Frozen objects (what exists before the search)
    # are skipped by the collector; what the trials create is still collected. A caller
    # that froze its own heap keeps it as it is (unfreeze would thaw theirs too).
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        tuner_.search(verbose=verbose)
    finally:
        if freeze:
            gc.unfreeze()


def _report(tuner_, name: str, out: Path, tb_dir: Path, hypermodel: ZooHyperModel,
            objective: str, epochs: int, batch_size: int) -> dict[str, Any]:
    """The chief's report: trials.json and .md, best_hyperparameters.json, best_model."""
    from zoo.files import write_text

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
    from training.recipes import get_recipe
    from training.runtime import distribute

    _tuner_class(tuner)  # unknown tuner: fail before loading anything
    _check_objective(objective)
    _check_counts(max_trials, max_train_examples, max_test_examples)
    space = space or SearchSpace()
    info = zoo.describe(name)
    batch_size = batch_size or get_recipe(info["recipe"])["batch_size"]
    role = _role()
    out = Path(out) if out is not None else default_dir(f"tune-{name}")
    data = _load_data(name, info, dataset, data_dir, max_train_examples, max_test_examples)
    from training.tuning.hypermodel import ZooHyperModel

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
    # One model built from the space's first values checks the fixed overrides (a depth of
    # 1, an unknown variant) before anything is written: a refused search leaves nothing.
    import keras_tuner

    hypermodel.build(keras_tuner.HyperParameters())
    resumes = _prepare_dir(out, settings, overwrite, role)
    tb_dir = out / TENSORBOARD_DIR
    if role != "worker":
        tb_dir.mkdir(parents=True, exist_ok=True)
        if not any(tb_dir.glob("events.*")):
            _hparams_config(tb_dir, hypermodel, objective)

    tuner_ = _make_tuner(tuner, hypermodel, out, strategy_, objective, max_trials, epochs,
                         seed, tb_dir)
    if resumes and role != "worker":
        oracle = tuner_.oracle
        retried = oracle.get_state()["retry_queue"]  # as oracle.json records it
        print(f"Resuming the search in {out}: {len(oracle.end_order)} trial(s) finished and "
              f"kept, {len(retried)} interrupted (run again), up to {max_trials} in all.",
              flush=True)
    print(f"Searching {name} ({tuner}, objective {objective}, {epochs} epoch(s) per trial, "
          f"data {data.num_train}/{data.num_test}, role {role}"
          f"{f', {replicas} replicas' if replicas > 1 else ''}) in {out}", flush=True)
    _run_search(tuner_, verbose)
    if role == "worker":
        print(f"{tuner_.tuner_id}: no trials left; the chief writes the results.", flush=True)
        return None
    return _report(tuner_, name, out, tb_dir, hypermodel, objective, epochs, batch_size)


# --- Several searches, one after another ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Cell:
    """One search of `search_cells`: zoo network `name` with fixed `overrides`, in `out`."""

    name: str
    out: Path
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)


def search_cells(cells: Sequence[Cell],
                 announce: Callable[[int, Cell], None] | None = None,
                 **settings: Any) -> list[dict[str, Any]] | None:
    """One `search` per cell, one after another, each with `settings` (search's keyword
    arguments but `out`) and `announce(i, cell)` called before it; each cell's best, or None
    in a worker process of a distributed search (the chief reports).

    Distributed, every process runs the same cells and each cell has its own oracle: cell i
    listens on KERASTUNER_ORACLE_PORT + i, so the chief needs ports PORT .. PORT + cells - 1.
    A worker waits for the chief to open a cell (write its search.json) before it asks it for
    trials: a worker that wrote trial files first would make the chief refuse the directory
    as someone else's.
    """
    role = _role()
    base_port = os.environ.get("KERASTUNER_ORACLE_PORT")
    bests = []
    for i, cell in enumerate(cells):
        if announce is not None:
            announce(i, cell)
        if role != "standalone":  # each cell's oracle listens on its own port
            os.environ["KERASTUNER_ORACLE_PORT"] = str(int(base_port) + i)
        if role == "worker":
            _wait_for_chief(Path(cell.out))
        try:
            bests.append(search(cell.name, out=cell.out, **settings, **cell.overrides))
        finally:
            if base_port is not None:
                os.environ["KERASTUNER_ORACLE_PORT"] = base_port
    return None if role == "worker" else bests


def _wait_for_chief(cell_dir: Path, timeout: float = 3600.0) -> None:
    """Waits until the chief has written `cell_dir`'s search.json."""
    deadline = time.monotonic() + timeout
    if not (cell_dir / SETTINGS_FILE).exists():
        print(f"Waiting for the chief to open {cell_dir} ...", flush=True)
    while not (cell_dir / SETTINGS_FILE).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the chief did not open {cell_dir} within {timeout:.0f} s; is "
                               "it running with the same --out, --depths and --kinds?")
        time.sleep(1)
