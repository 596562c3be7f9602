"""Whole processes: `highway-zoo train` on each Keras backend against the NumPy script.

    python -m benchmarks.whole_process [--depth 30] [--epochs 12] [--repeats 3]
        [--backends tensorflow,jax,torch] [--out benchmarks/results/whole_process.json]

What a user waits for, start-up included: `highway-zoo train highway_fc10_mnist --depth D
--stacked --epochs E` (the headline's network and recipe on the MNIST sample; a new run
directory each time) against the NumPy peer's whole process
(`python -m benchmarks.implementations.numpy_script --depth D --epochs E`: the same
network, data and recipe, hand-written in NumPy). Every process is fresh and timed by the wall
clock from before it starts to its exit (`driver.timed_process`); each repeat runs, in this
order, `python -c pass` (the interpreter), `python -c "import keras"` on each backend (Keras's
own import, with its backend's framework; the process then ends without the interpreter's
teardown, as `highway-zoo` does), the NumPy script, and the command on
each backend; on JAX twice: with JAX's compilation cache warm (as `highway-zoo` keeps it, in a
directory filled by one unmeasured one-epoch run first: a user's second run) and with an empty
cache directory (a user's first run). Repeats are interleaved.

Reported, medians over repeats: each process's wall time; each command's time over the NumPy
script's of the same repeat; and what the command costs beyond Keras's own import, over the
NumPy script's time, two ways: its time minus the "keras" phase it recorded itself (Keras's
import in the same run: the start-up goal of issue 29 is this at most 1x on the fastest
backend, and at most 2x for JAX's first run), and its time minus the `import keras` process's
of the same repeat (a cross-check, noisier: two processes' variation). The breakdown: the
phases each run's run.json records (`training.timeline`: interpreter, Keras's import, the
other imports, data, build, compile (the first step), training, evaluation, the run's
callbacks, the final files) and "exit" (the wall clock after the last record: run.json, the
printed metrics, the interpreter's exit), from the repeat with the median wall time; the
NumPy script's own phases the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import backends, driver
from training.runtime import jax_cache

RESULTS = Path(__file__).resolve().parent / "results" / "whole_process.json"
PHASES = ("interpreter", "keras", "imports", "data", "build", "compile", "training",
          "evaluation", "callbacks", "saving", "exit")
NUMPY_SCRIPT = "benchmarks.implementations.numpy_script"


def train_command(depth: int, epochs: int, out: str) -> list[str]:
    """`highway-zoo train` as a user types it (but as `python -m`, into run directory `out`)."""
    return [sys.executable, "-m", "highway_zoo.cli", "train", "highway_fc10_mnist",
            "--depth", str(depth), "--stacked", "--epochs", str(epochs), "--out", out]


def plan(backends_: list[str]) -> list[tuple[str, str]]:
    """(what, backend) in the order a repeat runs them; "" where no backend applies."""
    keys = [("python", ""), *(("import_keras", b) for b in backends_), ("numpy", "")]
    for b in backends_:
        keys += [("train", b)] + ([("train_cold", b)] if b == "jax" else [])
    return keys


def label(key: tuple[str, str]) -> str:
    what, backend = key
    return {"python": "python -c pass", "numpy": "NumPy script",
            "import_keras": f"import keras ({backend})",
            "train": f"highway-zoo train ({backend}{', cache warm' if backend == 'jax' else ''})",
            "train_cold": f"highway-zoo train ({backend}, first run: cache empty)"}[what]


def measure(what: str, backend: str = "", depth: int = 30, epochs: int = 12,
            directory: str = ".", cache: str | None = None,
            timeout: float | None = None) -> dict:
    """One process of the plan, started and timed from here: "python", "import_keras",
    "numpy" or "train" (on `backend`; JAX's compilation cache in `cache`, its run directory
    a new one in `directory`). Its wall time; for the NumPy script and the command, the
    phases they record ("timeline"), the test accuracy, the final loss and the parameters."""
    if what == "train":
        out = tempfile.mkdtemp(prefix="run-", dir=directory)
        env = {"KERAS_BACKEND": backend, **jax_cache.environment(cache)}
        wall, _ = driver.timed_process(train_command(depth, epochs, out), env, timeout)
        run = json.loads(Path(out, "run.json").read_text())
        metrics = json.loads(Path(out, "metrics.json").read_text())
        return {"wall_s": wall, "timeline": run.get("timeline", {}),
                "test_accuracy": metrics["test_accuracy"],
                "final_loss": metrics["final_train_loss"], "params": run["metadata"]["params"]}
    if what == "numpy":
        wall, out = driver.timed_process(
            [sys.executable, "-m", NUMPY_SCRIPT, "--depth", str(depth), "--epochs",
             str(epochs)], timeout=timeout)
        record = json.loads(out.strip().splitlines()[-1])
        timeline = {k: record.pop(k) for k in ("phases_s", "process_s") if k in record}
        return {"wall_s": wall, "timeline": timeline, **record}
    if what not in ("python", "import_keras"):
        raise ValueError(f"unknown process {what!r}; choose from python, import_keras, "
                         "numpy, train")
    # No teardown after the import: a `highway-zoo` process ends without it (cli.run).
    wall, _ = driver.timed_process(
        [sys.executable, "-c", "pass" if what == "python" else "import os, keras; os._exit(0)"],
        {"KERAS_BACKEND": backend} if backend else None, timeout)
    return {"wall_s": wall}


def breakdown(run: dict) -> dict[str, float]:
    """A run's phases (run.json's timeline) and its exit: the wall time after its last
    record. Phases it did not record are left out."""
    timeline = run.get("timeline", {})
    phases = dict(timeline.get("phases_s", {}))
    if "process_s" in timeline:
        phases["exit"] = run["wall_s"] - timeline["process_s"]
    return phases


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall time (the lower of the two middle ones)."""
    ordered = sorted(runs, key=lambda run: run["wall_s"])
    return ordered[(len(ordered) - 1) // 2]


def summarise(runs: dict[tuple[str, str], list[dict]]) -> list[dict]:
    """A row per key: median wall time; for the commands and the NumPy script, the
    ratios of the same repeat (per-repeat ratios, their median), and the median run's
    breakdown."""
    numpy = [run["wall_s"] for run in runs.get(("numpy", ""), [])]
    rows = []
    for (what, backend), key_runs in runs.items():
        walls = [run["wall_s"] for run in key_runs]
        row = {"process": what, "backend": backend, "label": label((what, backend)),
               "repeats": len(walls), "wall_s": statistics.median(walls)}
        if what in ("train", "train_cold", "numpy"):
            middle = median_run(key_runs)
            row.update(params=key_runs[0]["params"],
                       **driver.medians(key_runs, ("test_accuracy", "final_loss")),
                       breakdown=breakdown(middle), breakdown_wall_s=middle["wall_s"])
        if what in ("train", "train_cold") and numpy:
            keras_walls = [run["wall_s"] for run in runs.get(("import_keras", backend), [])]
            row["vs_numpy"] = statistics.median(w / n for w, n in zip(walls, numpy))
            if keras_walls:
                beyond = [w - k for w, k in zip(walls, keras_walls)]
                row["beyond_keras_s"] = statistics.median(beyond)
                row["beyond_keras_vs_numpy"] = statistics.median(
                    b / n for b, n in zip(beyond, numpy))
            imports = [run["timeline"].get("phases_s", {}).get("keras") for run in key_runs]
            if None not in imports:  # Keras's import as the run itself recorded it
                beyond = [w - k for w, k in zip(walls, imports)]
                ratios = [b / n for b, n in zip(beyond, numpy)]
                row["beyond_keras_in_run_s"] = statistics.median(beyond)
                row["beyond_keras_in_run_vs_numpy"] = statistics.median(ratios)
                # The repeats' spread: mostly the NumPy script's own (its BLAS on both cores).
                row["beyond_keras_in_run_vs_numpy_range"] = [min(ratios), max(ratios)]
        rows.append(row)
    return rows


def goals(rows: list[dict]) -> dict:
    """Issue 29's start-up goals from the rows: on the fastest backend (the shortest command
    with a warm cache), beyond Keras's import (as the run recorded it) at most 1x the NumPy
    script; JAX's first run at most 2x."""
    key = "beyond_keras_in_run_vs_numpy"
    by = {(r["process"], r["backend"]): r for r in rows}
    warm = [r for r in rows if r["process"] == "train" and key in r]
    out = {}
    if warm:
        fastest = min(warm, key=lambda r: r["wall_s"])
        out["fastest_backend"] = fastest["backend"]
        out["fastest_beyond_keras_vs_numpy"] = fastest[key]
        out["fastest_range"] = fastest[f"{key}_range"]
        out["fastest_met"] = fastest[key] <= 1.0
    cold = by.get(("train_cold", "jax"))
    if cold is not None and key in cold:
        out["jax_first_run_beyond_keras_vs_numpy"] = cold[key]
        out["jax_first_run_range"] = cold[f"{key}_range"]
        out["jax_first_run_met"] = cold[key] <= 2.0
    return out


def format_tables(rows: list[dict], goal: dict) -> str:
    def ratio(row, key):
        return f"{row[key]:.2f}x" if key in row else ""

    def seconds(row, key):
        return f"{row[key]:.2f}" if key in row else ""

    def spread(low_high):
        return f"repeats {low_high[0]:.2f}-{low_high[1]:.2f}x"

    lines = [driver.table(
        ["process", "wall (s)", "vs NumPy", "beyond its Keras import (s)", "beyond / NumPy",
         "beyond `import keras` (s)", "beyond / NumPy", "test acc"],
        [":---", *["---:"] * 7],
        [[r["label"], f"{r['wall_s']:.2f}", ratio(r, "vs_numpy"),
          seconds(r, "beyond_keras_in_run_s"), ratio(r, "beyond_keras_in_run_vs_numpy"),
          seconds(r, "beyond_keras_s"), ratio(r, "beyond_keras_vs_numpy"),
          f"{r['test_accuracy']:.3f}" if "test_accuracy" in r else ""] for r in rows])]
    broken = [r for r in rows if "breakdown" in r]
    if broken:
        lines += ["", "Where the time goes (s; the run with the median wall time):", "",
                  driver.table(
                      ["process", *PHASES, "wall"], [":---", *["---:"] * (len(PHASES) + 1)],
                      [[r["label"], *(f"{r['breakdown'][p]:.2f}" if p in r["breakdown"]
                                      else "" for p in PHASES),
                        f"{r['breakdown_wall_s']:.2f}"] for r in broken])]
    if "fastest_backend" in goal:
        lines += ["", f"Goal, fastest backend ({goal['fastest_backend']}): beyond its Keras "
                  f"import {goal['fastest_beyond_keras_vs_numpy']:.2f}x the NumPy script "
                  f"({spread(goal['fastest_range'])}; at most 1x: "
                  f"{'met' if goal['fastest_met'] else 'not met'})"]
    if "jax_first_run_met" in goal:
        lines += [f"Goal, JAX's first run: {goal['jax_first_run_beyond_keras_vs_numpy']:.2f}x "
                  f"({spread(goal['jax_first_run_range'])}; at most 2x: "
                  f"{'met' if goal['jax_first_run_met'] else 'not met'})"]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.whole_process", __doc__, RESULTS)
    p.add_argument("--depth", type=int, default=30,
                   help="layers in all, the stem counted (highway-zoo train --depth)")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900, help="seconds per process")
    backends.add_option(p)
    return p


def run(args: argparse.Namespace) -> int:
    keys = plan(args.backends)
    with tempfile.TemporaryDirectory(prefix="whole_process-") as tmp:
        warm = os.path.join(tmp, "jax-cache")
        options = {"depth": args.depth, "epochs": args.epochs, "directory": tmp,
                   "timeout": args.timeout}

        def measure_key(key):
            what, backend = key
            if what == "train_cold":  # an empty cache directory of its own
                return measure("train", backend, cache=tempfile.mkdtemp(dir=tmp), **options)
            return measure(what, backend, cache=warm, **options)

        if "jax" in args.backends:
            print("filling JAX's compilation cache: one epoch, unmeasured", flush=True)
            measure("train", "jax", cache=warm, **{**options, "epochs": 1})
        runs = driver.interleaved(keys, args.repeats, measure_key,
                                  describe=lambda key, run: f"{label(key)}: {run['wall_s']:.2f} s")
    rows = summarise(runs)
    goal = goals(rows)
    print()
    print(format_tables(rows, goal))
    summary = {
        "command": " ".join(["highway-zoo", *train_command(args.depth, args.epochs, "DIR")[3:]]),
        "numpy_script": f"python -m {NUMPY_SCRIPT} --depth {args.depth} --epochs {args.epochs}",
        "settings": {"depth": args.depth, "epochs": args.epochs, "repeats": args.repeats,
                     "backends": args.backends},
        "results": [{**row, "runs": runs[(row["process"], row["backend"])]} for row in rows],
        "goals": goal,
    }
    driver.write_results(args.out, summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
