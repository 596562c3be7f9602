"""Latency and throughput of exported SavedModels, called as TF Serving would call them.

    python -m benchmarks.serving --random-weights
        [--models highway_b_cifar10,highway_fc50_mnist] [--calls 200] [--batch-size 256] [--runs 7]
    python -m benchmarks.serving --base-dir exported  # the latest versions exported there

Each model is exported (`zoo.export`, into a temporary base directory unless `--base-dir`
names one holding exports already) and then measured in its own fresh process that imports
TensorFlow only, never this project: `tf.saved_model.load`, then `signatures["serving_default"]`
on random raw-pixel batches. Reported: load time, the first call (cold), latency at batch 1
(median and p99 over `--calls` calls after 20 warm-up calls) and throughput at
`--batch-size` (images/s, median over `--runs` timed calls after 2 warm-up calls). Prints a
table and writes benchmarks/results/serving.json. Random weights time the same as trained ones.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import driver

RESULTS = Path(__file__).resolve().parent / "results" / "serving.json"
MODELS = ["highway_b_cifar10", "highway_fc50_mnist"]


def measure(model_dir: str, calls: int, batch_size: int, runs: int) -> dict:
    """Runs in the child process (TensorFlow only): times one SavedModel."""
    import numpy as np
    import tensorflow as tf

    start = time.perf_counter()
    loaded = tf.saved_model.load(model_dir)
    load_s = time.perf_counter() - start
    fn = loaded.signatures["serving_default"]
    spec = fn.structured_input_signature[1]["pixels"]
    shape = tuple(spec.shape[1:])
    rng = np.random.default_rng(0)

    def batch(n):
        return tf.constant(rng.uniform(0, 255, (n, *shape)).astype(np.float32))

    def timed(x):
        start = time.perf_counter()
        out = fn(pixels=x)
        out["class_ids"].numpy()
        return time.perf_counter() - start

    first_call = timed(batch(1))
    one = [batch(1) for _ in range(16)]
    for i in range(20):
        timed(one[i % len(one)])
    latencies = sorted(timed(one[i % len(one)]) for i in range(calls))
    big = batch(batch_size)
    for _ in range(2):
        timed(big)
    throughputs = [batch_size / timed(big) for _ in range(runs)]
    assert "zoo" not in sys.modules and "layers" not in sys.modules
    return {
        "input_shape": list(shape),
        "load_s": round(load_s, 2),
        "first_call_ms": round(1000 * first_call, 1),
        "latency_b1_median_ms": round(1000 * statistics.median(latencies), 2),
        "latency_b1_p99_ms": round(1000 * latencies[min(calls - 1, int(0.99 * calls))], 2),
        "throughput_images_per_s": round(statistics.median(throughputs), 1),
        "throughput_runs": [round(t, 1) for t in throughputs],
        "tensorflow": tf.__version__,
    }


def _latest(base: Path, name: str) -> Path:
    from zoo.serving.saved_model import versions

    have = versions(base / name)
    if not have:
        raise SystemExit(f"No export of {name} under {base}; run `highway-zoo export {name} ...` "
                         "first, or pass --random-weights.")
    return base / name / str(have[-1])


def _export_random(base: Path, name: str) -> Path:
    import zoo

    return zoo.export(name, base_dir=base, random_weights=True, warmup=False)


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.serving", __doc__, RESULTS)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--random-weights", action="store_true",
                   help="export freshly initialised models into a temporary directory")
    p.add_argument("--base-dir", help="measure the latest versions already exported here")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--runs", type=int, default=7)
    return p


def run(args: argparse.Namespace) -> int:
    if args.random_weights == bool(args.base_dir):
        parser().error("pass --random-weights (export fresh models) or --base-dir (existing "
                       "exports), one of the two")

    names = [n for n in args.models.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        if args.random_weights:
            dirs = {name: _export_random(Path(tmp), name) for name in names}
        else:
            dirs = {name: _latest(Path(args.base_dir), name) for name in names}
        load_before = os.getloadavg()[0]

        def one(name: str) -> dict:
            # In the temporary directory, away from this project's packages.
            result = driver.run_child("benchmarks.serving", {
                "model_dir": str(dirs[name]), "calls": args.calls,
                "batch_size": args.batch_size, "runs": args.runs}, cwd=tmp)
            record = json.loads((dirs[name] / "assets.extra" / "highway_zoo.json").read_text())
            return {"model": name, "params": record["metadata"].get("params"),
                    "weights": "random" if args.random_weights else str(dirs[name]), **result}

        runs = driver.interleaved(names, 1, one, describe=lambda name, row: f"{name}: {row}")
        rows = [runs[name][0] for name in names]
        load_after = os.getloadavg()[0]

    print()
    print(driver.table(
        ["model", "params", "input", "load (s)", "first call (ms)", "batch 1 median (ms)",
         "batch 1 p99 (ms)", f"batch {args.batch_size} (images/s)"],
        ["---", "---:", "---", *["---:"] * 5],
        [[f"`{r['model']}`", f"{r['params']:,}", "x".join(map(str, r["input_shape"])),
          r["load_s"], r["first_call_ms"], r["latency_b1_median_ms"], r["latency_b1_p99_ms"],
          f"{r['throughput_images_per_s']:,.0f}"] for r in rows]))
    summary = {
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
        "calls": args.calls, "batch_size": args.batch_size, "runs": args.runs,
        "signature": "serving_default", "results": rows,
    }
    driver.write_results(args.out, summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
