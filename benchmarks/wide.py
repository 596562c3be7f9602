"""The wide case: compute-bound training, as a fraction of the same machine's matmul speed.

    python -m benchmarks.wide [--width 1024 --depth 10 --batch-size 512] [--epochs 4]
        [--repeats 3]

The headline network at width 1024 (784 -> 1024 tanh, 10 coupled highway blocks of 1024,
softmax 10), batch 512, trained on the 4,000 MNIST images for `--epochs` epochs by each
implementation in its own process. Each process also times, in its own framework, a matmul of
the highway layer's size, (batch, width) @ (width, 2 * width). Reported (medians over repeats):
steady-state steps/s, the matmul FLOPs a training step does (forward 2*B*(784w + 2w^2*depth
+ 10w), backward twice that less the unneeded input gradient of the stem), the achieved GFLOP/s,
the matmul's GFLOP/s and their ratio. Writes benchmarks/results/wide.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchmarks import backends, driver
from benchmarks.headline import _names, epoch_steps_per_s, load_data, read_data
from benchmarks.implementations import IMPLEMENTATIONS, available

RESULTS = Path(__file__).resolve().parent / "results" / "wide.json"
DEFAULT = ["numpy", "pytorch", "keras_per_layer", "highway_zoo", "highway_zoo_jax",
           "highway_zoo_torch"]


def train_flops(batch: int, width: int, depth: int, inputs: int = 784, classes: int = 10) -> int:
    """Matmul FLOPs of one training step (forward, backward; not the stem's input gradient)."""
    forward = 2 * batch * (inputs * width + depth * width * 2 * width + width * classes)
    return 3 * forward - 2 * batch * inputs * width


def measure(name: str, data_file: str, options: dict) -> dict:
    """Runs in a fresh process: trains once, then times the matmul in the same framework."""
    from benchmarks.implementations import train

    result = train(name, read_data(data_file), **options)
    result["matmul_gflops"] = backends.matmul_gflops(
        IMPLEMENTATIONS[name].framework, options["batch_size"], options["width"])
    return result


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.wide", __doc__, RESULTS)
    p.add_argument("--implementations", type=_names, default=DEFAULT)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    return p


def run(args: argparse.Namespace) -> int:
    names = [n for n in args.implementations if available(n)]
    options = {"depth": args.depth, "width": args.width, "batch_size": args.batch_size,
               "epochs": args.epochs}
    flops = train_flops(args.batch_size, args.width, args.depth)
    data, source = load_data()
    with tempfile.TemporaryDirectory() as tmp:
        import numpy as np

        data_file = os.path.join(tmp, "data.npz")
        np.savez(data_file, **data)
        runs = driver.interleaved(
            names, args.repeats,
            lambda name: driver.run_child(
                "benchmarks.wide",
                {"name": name, "data_file": data_file, "options": options},
                backend=IMPLEMENTATIONS[name].keras_backend),
            describe=lambda name, run: (
                f"{name}: epochs {', '.join(f'{s:.2f}' for s in run['epoch_s'])} s, matmul "
                f"{run['matmul_gflops']:.0f} GFLOP/s"))

    rows = []
    for name in names:
        # Whole epochs here: a step is ~0.5 s, so an epoch's set-up is ~1% of it.
        steps = driver.median_of(runs[name], epoch_steps_per_s)
        rows.append({
            "implementation": name, "steady_steps_per_s": steps,
            "gflops": steps * flops / 1e9,
            "matmul_gflops": driver.median_of(runs[name], "matmul_gflops"),
            "fraction_of_matmul": driver.median_of(
                runs[name], lambda r: epoch_steps_per_s(r) * flops / 1e9 / r["matmul_gflops"]),
            "final_loss": driver.median_of(runs[name], "final_loss"),
            "runs": runs[name],
        })
    print(f"\nwidth {args.width}, depth {args.depth}, batch {args.batch_size}: "
          f"{flops / 1e9:.1f} GFLOP per training step")
    print(driver.table(
        ["implementation", "steps/s", "GFLOP/s", "matmul GFLOP/s", "fraction of matmul"],
        [":---", "---:", "---:", "---:", "---:"],
        [[r["implementation"], f"{r['steady_steps_per_s']:.2f}", f"{r['gflops']:.0f}",
          f"{r['matmul_gflops']:.0f}", f"{r['fraction_of_matmul']:.0%}"] for r in rows]))
    summary = {
        "data": source,
        "settings": {**options, "repeats": args.repeats}, "train_flops_per_step": flops,
        "results": rows,
    }
    driver.write_results(args.out, summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
