"""What the experiments share: the FC nets they compare, figures, and one run per process.

- `KINDS`, `INITS`, `architecture(kind, depth)`: the fully connected nets of the NIPS 2015
  optimisation study by kind ("highway" or "plain") and depth, and the two kernel
  initialisations compared.
- `format_table`: accuracy and training loss per depth, one column pair per series.
- `train_one`, `train_in_child`, `progress`, `summarise`: one net of a study trained (in this
  process or in its own, for per-run peak memory and CPU time) and the runs summarised
  over seeds.
- `claim_study_dir`, `run_jobs`: a study's output directory and its runs, resumable: run
  the same study again and its finished runs are kept (each run's result.json), an
  interrupted one resumes from its checkpoint, and only the rest are trained. The same
  command started again while the first still runs shares the work: each run is taken by
  one process (a lock per run), and each process writes the study's results when every run
  is done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

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

# What summarise() averages over seeds.
SUMMARISED = ("test_accuracy", "final_train_loss", "seconds_per_epoch", "peak_rss_mb")
_FAILED_METRICS = ("test_accuracy", "test_loss", "final_train_loss")

# A study's settings, written when its directory is claimed: a rerun resumes only these.
STUDY_FILE = "study.json"
# In each run directory of a study: the job and its result, written when the run is done.
RESULT_FILE = "result.json"
# In a study's directory: one lock file per run, held by the process that trains it.
CLAIMS_DIR = ".claims"


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


def format_table(results: Sequence[dict[str, Any]], series: Sequence[str] = KINDS) -> str:
    """One row per depth: test accuracy, then final training loss, of each series.

    A result belongs to series `r.get("series", r["kind"])`; its values are numbers,
    or `{"mean", "std"}` dicts printed as "mean ± std".
    """
    by = {(r.get("series", r["kind"]), r["depth"]): r for r in results}
    depths = sorted({r["depth"] for r in results})
    header = [f"{s} test acc" for s in series] + [f"{s} train loss" for s in series]
    lines = [
        "| depth | " + " | ".join(header) + " |",
        "| ---: |" + " ---: |" * len(header),
    ]
    for d in depths:
        cells = [
            _cell(by.get((s, d), {}).get(key))
            for key in ("test_accuracy", "final_train_loss") for s in series
        ]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- One run of a study --------------------------------------------------------------


def subset(data, max_train: int | None = None, max_test: int | None = None):
    """`data` (a `training.data.Dataset`) cut to its first examples."""
    if max_train and max_train < data.num_train:
        data = dataclasses.replace(data, train=data.train.take(max_train), num_train=max_train)
    if max_test and max_test < data.num_test:
        data = dataclasses.replace(data, test=data.test.take(max_test), num_test=max_test)
    return data


def train_one(job: dict[str, Any], data) -> dict[str, Any]:
    """Trains one net of a study in this process; returns its metrics and timings.

    `job` names the architecture, overrides, epochs, recipe, seed and run directory."""
    from training import train
    from training.callbacks import EpochClock
    from training.run_dir import FINISHED, NON_FINITE, RunDir
    from training.tf_gradient_registry import released_custom_gradients
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
        # released_custom_gradients: the study trains many nets in one process
        # (training.tf_gradient_registry).
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


def _child_main() -> None:
    """Entry point of a run's own process: reads the job from stdin, prints the result with
    the process's peak memory and CPU time."""
    from training.data import OfflineFallbackWarning, load_dataset

    job = json.loads(sys.stdin.read())
    if job.get("task") == "language_model":
        from training.experiments import lm_variants

        result = lm_variants.train_one(job)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OfflineFallbackWarning)  # the parent warned
            data = subset(load_dataset(job.get("dataset", "mnist"), job["data_dir"]),
                          job.get("max_train_examples"), job.get("max_test_examples"))
        result = train_one(job, data)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # Linux: ru_maxrss in KiB
    result["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 1)  # all threads
    print(json.dumps(result))


def train_in_child(job: dict[str, Any]) -> dict[str, Any]:
    """Runs `job` (plus "dataset", "data_dir" and optional "max_train_examples" /
    "max_test_examples") in a fresh process; its result, with "peak_rss_mb" and
    "cpu_seconds" of that process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    proc = subprocess.run(
        [sys.executable, "-c", f"from {__name__} import _child_main; _child_main()"],
        input=json.dumps(job), capture_output=True, text=True, env=env, check=False,
    )
    if proc.returncode:
        raise RuntimeError(
            f"The run in {job['run_dir']} failed (exit status {proc.returncode}):\n"
            f"{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def code_version() -> dict[str, Any]:
    """The code a study runs: the package version and, in a git checkout, its commit and
    whether files differ from it (a study resumes only on the code it started with)."""
    import importlib.metadata
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        version: dict[str, Any] = {"version": importlib.metadata.version("highway-zoo")}
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        version = {"version": None}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                  "--untracked-files=no"], check=True, capture_output=True,
                                 text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):  # an installed wheel: no checkout
        return version
    return {**version, "commit": commit, "uncommitted_changes": bool(changed)}


def claim_study_dir(path: str | os.PathLike, settings: dict[str, Any]) -> Path:
    """`path` for a study's output: new or empty (claimed, with `settings` in study.json), or
    the directory of an earlier run of the study with the same settings (resumed).

    Raises:
        FileExistsError: `path` holds other files, or a study with other settings.
    """
    from training.run_dir import claim_dir
    from zoo.files import write_text

    path = Path(path)
    settings = json.loads(json.dumps(settings))  # as it reads back
    study_file = path / STUDY_FILE
    with _parent_locked(path):
        # Two processes starting the same study at once: the second waits here and resumes
        # the study the first claimed, instead of finding it half-claimed.
        if not study_file.is_file():
            claim_dir(path)
            write_text(study_file, json.dumps(settings, indent=1) + "\n")
            return path
    before = json.loads(study_file.read_text(encoding="utf-8"))
    if before != settings:
        differ = sorted(k for k in before.keys() | settings.keys()
                        if before.get(k) != settings.get(k))
        raise FileExistsError(
            f"{path} holds a study with other settings ({', '.join(differ)} differ: see "
            f"{study_file}); run it with the same options to resume it, or pass a new --out."
        )
    print(f"Resuming the study in {path}: its finished runs are kept.", flush=True)
    return path


@contextlib.contextmanager
def _parent_locked(path: Path):
    """Holds an exclusive lock on `path`'s parent directory (created if need be): a lock on
    the directory itself, so it leaves no file behind. The kernel frees it if its holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def _run_claim(run_dir: str | os.PathLike, wait: bool):
    """Holds the lock on one run of a study (True), or yields False at once if another
    process holds it and not `wait`. The kernel frees the lock when its holder dies."""
    run_dir = Path(run_dir)
    claims = run_dir.parent / CLAIMS_DIR
    claims.mkdir(exist_ok=True)
    with open(claims / f"{run_dir.name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_mergeable(studies: Sequence[str | os.PathLike], out: str | os.PathLike,
                   differences: Callable[[dict, dict], list[str]], what: str,
                   ) -> tuple[list[dict[str, Any]], list[str], Path]:
    """The results.json of studies that may share one table (`variants --merge`): at least
    two, each trained like the first (`differences(first, other)` names what is not, and a
    recipe counts only in the fields both record: a field added to the recipes since the older
    study ran is no difference in how it trained), no variant in two of them, and `out` new
    or empty. Returns the results, their variants in the order given, and `out`."""
    if len(studies) < 2:
        raise ValueError(f"Merging needs at least two studies. Received: {list(studies)!r}")
    loaded = []
    for study in studies:
        path = Path(study) / "results.json"
        if not path.is_file():
            raise ValueError(f"{study} holds no results.json: run the study there first (a "
                             "study writes it when its runs are done).")
        loaded.append(json.loads(path.read_text()))
    first = loaded[0]
    for study, other in zip(studies[1:], loaded[1:], strict=True):
        recipe, recipe0 = other["settings"]["recipe"], first["settings"]["recipe"]
        differ = differences(first, other) + [
            f"recipe.{k}" for k in sorted(set(recipe) & set(recipe0)) if recipe[k] != recipe0[k]]
        if differ:
            raise ValueError(f"{study} was not trained like {studies[0]}: they differ in "
                             f"{', '.join(differ)}; only studies of the same {what} merge.")
    seen: dict[str, str] = {}
    for study, result in zip(studies, loaded, strict=True):
        for variant in result["settings"]["variants"]:
            if variant in seen:
                raise ValueError(f"{variant} is in both {seen[variant]} and {study}; merge "
                                 "studies of different variants.")
            seen[variant] = str(study)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; merge into a new or empty directory.")
    return loaded, list(seen), out


def run_jobs(jobs: Sequence[dict[str, Any]], data, isolate: bool,
             label: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    """Trains every job, each in its own process if `isolate` (else in this one, on `data`),
    printing a progress line per job that starts with `label(job)`; the jobs (without their
    data directory) with their results, in the order of `jobs`.

    A job whose run directory holds its result.json (a study run again) is not trained again:
    its recorded result is used. Each result.json is written as its run ends, so a study
    stopped at any point loses at most the epochs since its running job's last checkpoint.
    A job that another process is training (the same study started twice) is left to it;
    when its own jobs are done this process waits for those, and trains any whose process
    ended without a result.
    """
    runs: dict[int, dict[str, Any]] = {}
    elsewhere = []
    for i, job in enumerate(jobs, start=1):
        with _run_claim(job["run_dir"], wait=False) as claimed:
            if claimed:
                runs[i] = _run_job(i, job, data, isolate, label, len(jobs))
            else:
                elsewhere.append((i, job))
                print(f"[{i}/{len(jobs)}] {label(job)}: another process is training it",
                      flush=True)
    for i, job in elsewhere:
        print(f"[{i}/{len(jobs)}] {label(job)}: waiting for the process training it",
              flush=True)
        with _run_claim(job["run_dir"], wait=True):
            runs[i] = _run_job(i, job, data, isolate, label, len(jobs), by="by another process")
    return [runs[i] for i in sorted(runs)]


def _run_job(i: int, job: dict[str, Any], data, isolate: bool,
             label: Callable[[dict[str, Any]], str], total: int,
             by: str = "earlier") -> dict[str, Any]:
    """One job of run_jobs, its run's lock held: its recorded result, or trained now."""
    from zoo.files import write_text

    result_file = Path(job["run_dir"]) / RESULT_FILE
    if result_file.is_file():
        run = json.loads(result_file.read_text(encoding="utf-8"))
        print(f"[{i}/{total}] {label(job)}: {progress(run)} (finished {by}, kept)", flush=True)
        return run
    start = time.perf_counter()
    if isolate:
        result = train_in_child(job)
    elif job.get("task") == "language_model":
        from training.experiments import lm_variants

        result = {**lm_variants.train_one(job), "peak_rss_mb": None, "cpu_seconds": None}
    else:
        result = {**train_one(job, data), "peak_rss_mb": None, "cpu_seconds": None}
    run = {k: v for k, v in job.items() if k != "data_dir"} | result
    write_text(result_file, json.dumps(run, indent=1) + "\n")
    print(f"[{i}/{total}] {label(job)}: {progress(result)} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)
    return run


def progress(result: dict[str, Any]) -> str:
    """One run's result as a progress line."""
    if "test_perplexity" in result:
        from training.experiments.lm_variants import progress as lm_progress

        return lm_progress(result)
    parts = [f"test accuracy {result['test_accuracy']:.3f}",
             f"final training loss {result['final_train_loss']:.3f}"]
    if result["seconds_per_epoch"] is not None:
        parts.append(f"{result['seconds_per_epoch']:.2f} s/epoch")
    if result["peak_rss_mb"] is not None:
        parts.append(f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if "failed" in result:
        parts.append(f"FAILED: {result['failed']}")
    return ", ".join(parts)


def _stats(values: Sequence[float | None]) -> dict[str, Any] | None:
    if any(v is None for v in values):
        return None
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "n": len(values),
            "values": list(values)}


def summarise(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and (population) std over seeds of each series and depth."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["series"], r["depth"]), []).append(r)
    summary = []
    for (series, depth), rows in groups.items():
        curves = [r["loss_curve"] for r in rows]
        length = max(len(c) for c in curves)
        # A run stopped early (TerminateOnNaN) leaves NaN at its missing epochs.
        padded = np.array([c + [math.nan] * (length - len(c)) for c in curves])
        summary.append({
            "series": series, "kind": rows[0]["kind"], "depth": depth,
            "transform_bias": rows[0]["transform_bias"], "seeds": [r["seed"] for r in rows],
            **{key: _stats([r.get(key) for r in rows]) for key in SUMMARISED},
            "loss_curve_mean": padded.mean(axis=0).tolist(),
            "loss_curve_std": padded.std(axis=0).tolist(),
        })
    return summary
