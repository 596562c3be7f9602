"""What a study is, and the one runner every resumable study goes through.

A study is a `Study`: its settings, its jobs, how one job runs (`run_one`), and how the runs
become a summary, a table and a figure::

    name                  its command (`highway-zoo NAME`) and default directory (runs/NAME-TIME)
    settings()            what study.json records: a rerun with the same settings resumes
    jobs(out)             one JSON-able dict per net, each with its "run_dir" under `out`
    run_one(job, data)    trains one job in this process and returns its result (a static
                          method: a child process finds it by its class's name)
    label(job)            how a job's progress line starts; progress(result) how it ends
    summary(runs)         the runs summarised over seeds (`summarise`)
    table(summary)        table.md (`format_table`)
    results(runs, summary)  results.json
    figure(results, out)  the figure, `figure_file` under `out` (and any others it lists in
                          `figure_files`)
    run_all(jobs, isolate)  every job's result: `run_jobs` unless the study's processes
                          share every job (fig1's distributed search)

`run_study(study, out, isolate)` claims the directory (`claim_study_dir`), trains the jobs
(`run_jobs`: each in its own process if `isolate`, each result kept in its run's result.json)
and writes results.json, table.md and the figure. It knows no study by name: the study is
passed in. Run the same study again and its finished runs are kept, an interrupted one resumes
from its checkpoint, and only the rest are trained. The same command started again while the
first still runs shares the work: each run is taken by one process (a lock per run), and each
process writes the study's results when every run is done.

The studies that are not resumable sets of runs use the same parts: `format_table` for every
table, `summarise` for every mean over seeds.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# A study's settings, written when its directory is claimed: a rerun resumes only these.
STUDY_FILE = "study.json"
# In each run directory of a study: the job and its result, written when the run is done.
RESULT_FILE = "result.json"
# In a study's directory: one lock file per run, held by the process that trains it.
CLAIMS_DIR = ".claims"
STD_NOTE = "population standard deviation over seeds (numpy.std, ddof=0)"


class Study:
    """One study: see the module docstring for what each part is."""

    name: str = ""
    figure_file: str = ""

    @property
    def figure_files(self) -> tuple[str, ...]:
        """Every figure `figure` writes, for the line that says what was written."""
        return (self.figure_file,)
    indent: int = 1  # of results.json
    data: Any = None  # what the jobs run in this process share (a loaded dataset)

    def settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        raise NotImplementedError

    def label(self, job: dict[str, Any]) -> str:
        raise NotImplementedError

    @staticmethod
    def run_one(job: dict[str, Any], data: Any = None) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        raise NotImplementedError

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        raise NotImplementedError

    def results(self, runs: Sequence[dict[str, Any]],
                summary: Sequence[dict[str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    def figure(self, results: dict[str, Any], out: Path) -> None:
        raise NotImplementedError

    def run_all(self, jobs: Sequence[dict[str, Any]],
                isolate: bool) -> list[dict[str, Any]] | None:
        """Every job's result: `run_jobs`, each job taken by one process. A study whose jobs
        every process shares (a distributed search) replaces it, and returns None in a
        process that only helps (a worker): the others write the results."""
        return run_jobs(jobs, self, isolate)


def run_study(study: Study, out: str | os.PathLike | None,
              isolate: bool) -> dict[str, Any] | None:
    """Trains (or resumes) every job of `study` in `out` (default runs/NAME-TIME); writes
    results.json, table.md and the figure; returns the results (None in a worker process of a
    distributed study)."""
    from training.run_dir import default_dir
    from zoo.files import write_text

    out = claim_study_dir(out or default_dir(study.name), study.settings())
    runs = study.run_all(study.jobs(out), isolate)
    if runs is None:  # a worker of a distributed study
        return None
    summary = study.summary(runs)
    table = study.table(summary)
    print()
    print(table)
    results = study.results(runs, summary)
    # A study run again rewrites its results from the kept and the new runs.
    write_text(out / "results.json", json.dumps(results, indent=study.indent) + "\n",
               overwrite=True)
    write_text(out / "table.md", table if table.endswith("\n") else table + "\n",
               overwrite=True)
    study.figure(results, out)
    *files, last = ["results.json", "table.md", *study.figure_files]
    print(f"\nWrote {out}/{', '.join(files)} and {last}")
    return results


# --- Tables and summaries ------------------------------------------------------------


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]],
                 align: Sequence[str] | None = None) -> str:
    """A Markdown table: `header`, its alignment row (`align`, default "---:" for every
    column: numbers, right-aligned) and a line per row of cells."""
    align = ["---:"] * len(header) if align is None else align
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_std(stats_: dict[str, Any] | None, mean: str = ".3f", std: str | None = None) -> str:
    """A `stats` cell, "mean ± std" (`std` formatted as `mean` unless given), or "-"."""
    if stats_ is None:
        return "-"
    return f"{stats_['mean']:{mean}} ± {stats_['std']:{std or mean}}"


def stats(values: Sequence[float | None], ddof: int = 0) -> dict[str, Any] | None:
    """Mean, standard deviation (population unless `ddof`; 0 for fewer values than `ddof` + 1),
    count and values; None if a value is missing."""
    if any(v is None for v in values):
        return None
    return {"mean": float(np.mean(values)),
            "std": float(np.std(values, ddof=ddof)) if len(values) > ddof else 0.0,
            "n": len(values), "values": list(values)}


def summarise(runs: Sequence[dict[str, Any]], by: Sequence[str], metrics: Sequence[str] = (),
              curves: Sequence[str] = (), ddof: int = 0) -> list[dict[str, Any]]:
    """The runs grouped by their values of `by` (groups in the order first seen); per group:
    those values, "runs" (the group's), `stats` of each metric (over seeds), and each curve
    as an array with a row per run (NaN after the last epoch of a run that stopped early)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(tuple(run[key] for key in by), []).append(run)
    summary = []
    for key, rows in groups.items():
        group = {**dict(zip(by, key, strict=True)), "runs": rows,
                 **{m: stats([r.get(m) for r in rows], ddof) for m in metrics}}
        for curve in curves:
            length = max(len(r[curve]) for r in rows)
            group[curve] = np.array([r[curve] + [math.nan] * (length - len(r[curve]))
                                     for r in rows], dtype=float)
        summary.append(group)
    return summary


# --- The study's directory -----------------------------------------------------------


def study_settings(study_dir: str | os.PathLike, command: str) -> dict[str, Any]:
    """The settings in `study_dir`'s study.json, the --out of a `highway-zoo COMMAND` study
    (what a snapshot of it reads).

    Raises:
        FileNotFoundError: `study_dir` holds no study.json.
    """
    study_file = Path(study_dir) / STUDY_FILE
    if not study_file.is_file():
        raise FileNotFoundError(f"{study_dir} holds no {STUDY_FILE}: pass the --out of a "
                                f"`highway-zoo {command}` study.")
    return json.loads(study_file.read_text(encoding="utf-8"))


def code_version() -> dict[str, Any]:
    """The code a study runs: the package version and, in a git checkout, its commit and
    whether files differ from it (a study resumes only on the code it started with)."""
    import importlib.metadata

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


# --- The runs ------------------------------------------------------------------------


def run_jobs(jobs: Sequence[dict[str, Any]], study: Study,
             isolate: bool) -> list[dict[str, Any]]:
    """Trains every job with `study.run_one`, each in its own process if `isolate` (else in
    this one, on `study.data`), printing a progress line per job; the jobs (without their
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
                runs[i] = _run_job(i, job, study, isolate, len(jobs))
            else:
                elsewhere.append((i, job))
                print(f"[{i}/{len(jobs)}] {study.label(job)}: another process is training it",
                      flush=True)
    for i, job in elsewhere:
        print(f"[{i}/{len(jobs)}] {study.label(job)}: waiting for the process training it",
              flush=True)
        with _run_claim(job["run_dir"], wait=True):
            runs[i] = _run_job(i, job, study, isolate, len(jobs), by="by another process")
    return [runs[i] for i in sorted(runs)]


def _run_job(i: int, job: dict[str, Any], study: Study, isolate: bool, total: int,
             by: str = "earlier") -> dict[str, Any]:
    """One job of run_jobs, its run's lock held: its recorded result, or trained now."""
    from zoo.files import write_text

    label = study.label(job)
    result_file = Path(job["run_dir"]) / RESULT_FILE
    if result_file.is_file():
        run = json.loads(result_file.read_text(encoding="utf-8"))
        print(f"[{i}/{total}] {label}: {study.progress(run)} (finished {by}, kept)", flush=True)
        return run
    start = time.perf_counter()
    if isolate:
        result = train_in_child(type(study), job)
    else:
        result = {**study.run_one(job, study.data), "peak_rss_mb": None, "cpu_seconds": None}
    run = {k: v for k, v in job.items() if k != "data_dir"} | result
    write_text(result_file, json.dumps(run, indent=1) + "\n")
    print(f"[{i}/{total}] {label}: {study.progress(result)} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)
    return run


def train_in_child(study: type[Study], job: dict[str, Any]) -> dict[str, Any]:
    """Runs `job` with `study.run_one` in a fresh process, whose output (a long run's progress)
    goes on to this process's stdout as it comes, indented; its result, with "peak_rss_mb" and
    "cpu_seconds" of that process."""
    import tempfile

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    with tempfile.TemporaryDirectory(prefix="highway-zoo-run-") as tmp:
        result_path, stderr_path = Path(tmp) / "result.json", Path(tmp) / "stderr.txt"
        request = {"study": f"{study.__module__}:{study.__qualname__}", "job": job,
                   "result": str(result_path)}
        # stderr to a file, not a pipe: read after the end, it cannot stall the child.
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-c", f"from {__name__} import _child_main; _child_main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                env=env)
            try:
                proc.stdin.write(json.dumps(request))
                proc.stdin.close()
                for line in proc.stdout:
                    sys.stdout.write(f"    {line}")
                    sys.stdout.flush()
                returncode = proc.wait()
            except BaseException:  # interrupted: the run resumes from its last checkpoint
                proc.kill()
                proc.wait()
                raise
        if returncode:
            raise RuntimeError(
                f"The run in {job['run_dir']} failed (exit status {returncode}):\n"
                f"{stderr_path.read_text(errors='replace')[-3000:]}"
            )
        return json.loads(result_path.read_text(encoding="utf-8"))


def _child_main() -> None:
    """Entry point of a run's own process: reads the study's class, the job and where its
    result goes from stdin, and writes there the result with the process's peak memory and
    CPU time."""
    request = json.loads(sys.stdin.read())
    module, _, qualname = request["study"].partition(":")
    study: Any = importlib.import_module(module)
    for part in qualname.split("."):
        study = getattr(study, part)
    result = study.run_one(request["job"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # Linux: ru_maxrss in KiB
    result["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 1)  # all threads
    Path(request["result"]).write_text(json.dumps(result), encoding="utf-8")
