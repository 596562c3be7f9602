"""The one driver every benchmark script uses.

A script is a module `benchmarks.X` with a `measure(**spec) -> dict` that runs one
measurement and a `main(argv)` that parses the script's options with `parser(...)` and hands
them to `main(...)` below. The driver gives it:

- `run_child(module, spec)`: `python -m module --child '<spec as JSON>'` in a fresh process,
  which calls the module's `measure(**spec)` and prints its result as the last stdout line
  (JSON); a failing child raises `MeasurementFailed` naming the command and its last error line;
- `timed_process(command, env)`: a command as it is, in a fresh process: its wall clock
  from before the start to the exit, and its output (whole processes, start-up included);
- `interleaved(plan, repeats, measure)`: every measurement of a plan, repeat after repeat
  (a noisy spell on a shared machine hits every configuration alike), with a progress line each;
- `median_of` / `medians`: medians over repeats;
- `table(header, align, rows)`: a markdown table;
- `write_results(path, summary)`: the JSON, with the machine and the date, written atomically;
- `memory_mb()`: the process's peak (or current) RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path

from training.runtime import jax_cache

ROOT = Path(__file__).resolve().parent.parent


class MeasurementFailed(RuntimeError):
    """A measurement's own process failed; the message says which, and its last error line."""


# -- one measurement in a fresh process ----------------------------------------------------


def child_command(module: str, spec: dict) -> list[str]:
    """The command that runs `module`'s `measure(**spec)` in a fresh process."""
    return [sys.executable, "-m", module, "--child", json.dumps(spec)]


def run_child(module: str, spec: dict, timeout: float | None = None,
              cwd: str | Path | None = None, backend: str = "tensorflow",
              env: dict[str, str] | None = None) -> dict:
    """`measure(**spec)` of `module`, run in a fresh process (`python -m module --child SPEC`,
    in `cwd`, default the repository root, with KERAS_BACKEND=`backend` and `env` added to the
    environment); its result, the last stdout line parsed as JSON. A measurement compiles
    afresh on JAX, whatever cache this process was given (`highway-zoo bench` has one), unless
    `env` names a cache (`training.runtime.jax_cache.environment`).

    Raises `MeasurementFailed` in one line (the command, its exit status and its last line on
    stderr) when the process fails, and when it runs past `timeout` seconds."""
    command = child_command(module, spec)
    prefix = "" if backend == "tensorflow" else f"KERAS_BACKEND={backend} "
    shown = f"`{prefix}python -m {module} --child {shlex.quote(command[-1])}`"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": backend,
           **jax_cache.environment(None), **(env or {})}
    # `benchmarks` is the repository's, not installed: the child finds it from any `cwd`.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = _completed(command, shown, env, cwd, timeout)
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise MeasurementFailed(f"{shown} printed no JSON result on its last line: "
                                f"{lines[-1] if lines else 'no output'!r}") from None


def timed_process(command: Sequence[str], env: dict[str, str] | None = None,
                  timeout: float | None = None, cwd: str | Path | None = None
                  ) -> tuple[float, str]:
    """Runs `command` as it is, in a fresh process (in `cwd`, default the repository root,
    with `env` added to this process's environment): its wall-clock seconds, from before the
    process is started to its exit, and its stdout. Failing, or running past `timeout`
    seconds, raises `MeasurementFailed` in one line, as `run_child` does."""
    shown = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    shown = f"`{shown + ' ' if shown else ''}{shlex.join(command)}`"
    start = time.perf_counter()
    proc = _completed(list(command), shown, {**os.environ, **(env or {})}, cwd, timeout)
    return time.perf_counter() - start, proc.stdout


def _completed(command: list[str], shown: str, env: dict[str, str],
               cwd: str | Path | None, timeout: float | None) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env,
                              cwd=ROOT if cwd is None else cwd, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MeasurementFailed(f"{shown} ran past its limit of {timeout:g} s") from None
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise MeasurementFailed(
            f"{shown} exited with status {proc.returncode}: "
            f"{lines[-1] if lines else 'no error output'} (run it by hand for the traceback)")
    return proc


def serve_child(measure: Callable[..., dict], spec: str) -> int:
    """The child's side: `measure(**spec)`, printed as one JSON line."""
    print(json.dumps(measure(**json.loads(spec))), flush=True)
    return 0


# -- a script's command line -----------------------------------------------------------------


def parser(module: str, doc: str, out: Path | None = None) -> argparse.ArgumentParser:
    """`module`'s parser: its docstring's first line as the description, the hidden `--child`
    option, and `--out` (where the JSON goes; default `out`) when `out` is given."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    if out is not None:
        p.add_argument("--out", type=Path, default=out,
                       help=f"where the JSON goes (default {out.relative_to(ROOT)})")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(p: argparse.ArgumentParser, argv: list[str] | None, measure: Callable[..., dict],
         run: Callable[[argparse.Namespace], int]) -> int:
    """Parses `argv`; in a child (`--child SPEC`) runs `measure(**SPEC)`, else `run(args)`."""
    args = p.parse_args(argv)
    if args.child is not None:
        return serve_child(measure, args.child)
    return run(args)


# -- repeats, medians, tables ------------------------------------------------------------------


def interleaved(plan: Sequence[Hashable], repeats: int, measure: Callable[[Hashable], dict],
                describe: Callable[[Hashable, dict], str] = lambda key, run: str(key),
                skip: Callable[[Hashable, int], bool] = lambda key, repeat: False,
                ) -> dict[Hashable, list[dict]]:
    """`measure(key)` for every key of `plan`, `repeats` times, the repeats interleaved (all
    keys once, then all again); a key for which `skip(key, repeat)` is true is not measured
    again in that repeat. Prints `[done/total] describe(key, run) (N s elapsed)` after each.
    Returns each key's runs, in order."""
    runs: dict[Hashable, list[dict]] = {key: [] for key in plan}
    todo = [(repeat, key) for repeat in range(repeats) for key in plan if not skip(key, repeat)]
    started = time.perf_counter()
    for done, (_, key) in enumerate(todo, start=1):
        run = measure(key)
        runs[key].append(run)
        print(f"[{done}/{len(todo)}] {describe(key, run)} "
              f"({time.perf_counter() - started:.0f} s elapsed)", flush=True)
    return runs


def median_of(runs: Iterable[dict], value: str | Callable[[dict], float]) -> float:
    """The median over `runs` of `run[value]` (a key) or `value(run)` (a function)."""
    get = value if callable(value) else (lambda run: run[value])
    return statistics.median(get(run) for run in runs)


def medians(runs: Sequence[dict], keys: Iterable[str], digits: int | None = None) -> dict:
    """{key: the median of run[key] over `runs`}, rounded to `digits` when given."""
    out = {key: median_of(runs, key) for key in keys}
    return out if digits is None else {key: round(v, digits) for key, v in out.items()}


def table(header: Sequence[str], align: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A markdown table: `header` cells, one alignment marker per column (":---", "---:",
    "---") and the rows' cells, already formatted; an empty cell stays empty."""
    def line(cells):
        return "|" + "".join(f" {c} |" if c != "" else " |" for c in cells)

    return "\n".join([line(header), line(align), *(line(map(str, row)) for row in rows)])


# -- results -----------------------------------------------------------------------------------


def memory_mb(field: str = "VmHWM") -> float:
    """A /proc/self/status memory figure (Linux), MB: VmHWM (peak RSS, the default) or VmRSS.

    Not `getrusage`'s ru_maxrss: Linux carries it across exec, so a child started from a
    process holding TensorFlow would report that process's peak; VmHWM starts afresh."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def machine() -> str:
    """The CPU, its cores, Python, and the GPUs (`nvidia-smi`'s names) where there are any."""
    text = (f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}")
    gpus = gpu_names()
    return f"{text}, {', '.join(gpus)}" if gpus else text


def gpu_names() -> list[str]:
    """The NVIDIA GPUs `nvidia-smi` lists (no framework imported); [] where there is none."""
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()] if (
        proc.returncode == 0) else []


def write_results(path: Path, summary: dict) -> None:
    """Writes `summary` (plus machine and date) as JSON via a temporary file and a rename."""
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **summary}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"\nWrote {path}")
