"""How long a deep fully connected highway net takes to build, trace and step.

    python bench/build_time.py [--depths 100,1000] [--batch-size 128] [--steps 20]

Each depth runs in its own process (so its peak RSS is its own) and reports:
the functional graph's build time (`zoo.load`), `compile`, the first training
step (tf.function tracing + graph optimisation + one step), the median of the
next steps, and the process's peak RSS. Prints a table and writes
bench/results/build_time.json, keeping the rows of depths not measured this time.
Synthetic MNIST-shaped data: nothing to load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench._common import memory_mb

RESULTS = Path(__file__).resolve().parent / "results" / "build_time.json"


def measure(depth: int, batch_size: int, steps: int, transform_bias: float) -> dict:
    """Runs in the child process: times one depth."""
    import keras
    import numpy as np
    import tensorflow as tf

    import zoo

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch_size, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, batch_size).astype("int64")
    keras.utils.set_random_seed(0)
    # Keras maps a functional graph recursively, one Python frame per layer at
    # least: past ~1000 layers the default limit of 1000 frames is too small.
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * depth + 1000))

    start = time.perf_counter()
    model = zoo.load("highway_fc10_mnist", depth=depth, transform_bias=transform_bias)
    build = time.perf_counter() - start

    start = time.perf_counter()
    model.compile(optimizer=keras.optimizers.Adam(5e-3, global_clipnorm=5.0),
                  loss="sparse_categorical_crossentropy")
    compile_ = time.perf_counter() - start

    start = time.perf_counter()
    first_loss = float(model.train_on_batch(x, y))
    first_step = time.perf_counter() - start

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    return {
        "depth": depth,
        "layers": len(model.layers),
        "params": model.count_params(),
        "build_s": round(build, 2),
        "compile_s": round(compile_, 3),
        "first_step_s": round(first_step, 2),
        "step_ms": round(1000 * statistics.median(times), 2),
        "steps_timed": steps,
        "first_loss": round(first_loss, 4),
        "peak_rss_mb": round(memory_mb(), 1),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }


def _depths(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=_depths, default=[100, 1000])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--transform-bias", type=float, default=-2.0)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        result = measure(args.child, args.batch_size, args.steps, args.transform_bias)
        print(json.dumps(result))
        return 0

    rows = []
    for depth in args.depths:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(depth), "--batch-size",
             str(args.batch_size), "--steps", str(args.steps),
             "--transform-bias", str(args.transform_bias)],
            capture_output=True, text=True, check=False,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        if proc.returncode:
            sys.stderr.write(proc.stderr[-4000:])
            return proc.returncode
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"depth {depth}: {rows[-1]}", flush=True)

    # Keep the rows of depths measured earlier (a depth-1000 row takes minutes).
    if RESULTS.exists():
        measured = {r["depth"] for r in rows}
        rows += [r for r in json.loads(RESULTS.read_text())["results"]
                 if r["depth"] not in measured]
    rows.sort(key=lambda r: r["depth"])
    print()
    print("| depth | Keras layers | params | build (s) | first step (s) | step (ms) "
          "| peak RSS (MB) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['depth']} | {r['layers']} | {r['params']:,} | {r['build_s']} | "
              f"{r['first_step_s']} | {r['step_ms']} | {r['peak_rss_mb']} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    summary = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
               "batch_size": args.batch_size, "results": rows}
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nWrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
