"""`highway-zoo bench`: the benchmark suite, quick (a few minutes) or full (what the README
quotes), each script's table printed and its JSON written to one directory."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

# (script, arguments): the quick set measures every kind of number once, on fewer repeats.
QUICK = [
    ("headline", ["--depths", "10,30", "--repeats", "1"]),
    ("wide", ["--epochs", "2", "--repeats", "1"]),
    ("conv", ["--steps", "3", "--repeats", "1"]),
    ("serving", ["--random-weights", "--calls", "50", "--runs", "3"]),
]
FULL = [
    ("headline", []),
    ("start_up", []),
    ("wide", []),
    ("conv", []),
    ("serving", ["--random-weights"]),
]


def run(full: bool = False, out_dir: str | Path | None = None, only: list[str] | None = None):
    """Runs the quick (or full) set; results go to `out_dir` (default: bench/results for the
    full set, ./bench_results for the quick one, so a quick run never replaces the README's)."""
    plan = FULL if full else QUICK
    if only:
        unknown = sorted(set(only) - {name for name, _ in plan})
        if unknown:
            raise ValueError(f"unknown benchmark(s) {unknown}; choose from "
                             f"{', '.join(name for name, _ in plan)}")
        plan = [(name, args) for name, args in plan if name in only]
    out = Path(out_dir) if out_dir else (RESULTS if full else Path("bench_results"))
    started = time.perf_counter()
    for name, args in plan:
        print(f"\n== bench.{name} {' '.join(args)}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        status = module.main([*args, "--out", str(out / f"{name}.json")])
        if status:
            return status
    print(f"\nbenchmarks done in {time.perf_counter() - started:.0f} s; results in {out}/")
    return 0
