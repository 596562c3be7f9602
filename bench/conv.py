"""Convolutional highway nets: training and inference images/s.

    python -m bench.conv [--models highway_conv32_mnist,highway_b_cifar10] [--steps 10]
                         [--batch-size 128] [--repeats 3]

Each model runs in its own fresh process on random raw-pixel batches (speed does not depend on
the pixel values): `train_on_batch` with the paper's Nesterov SGD (the first call, which
traces, timed apart), then `predict_on_batch` at the same batch size. Reported (medians over
repeats of the median step): training and inference images/s and the first training step's
time. Writes bench/results/conv.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bench._common import run_child, write_results

RESULTS = Path(__file__).resolve().parent / "results" / "conv.json"
MODELS = ["highway_conv32_mnist", "highway_b_cifar10"]


def child(name: str, batch_size: int, steps: int) -> dict:
    import keras
    import numpy as np

    import zoo

    model = zoo.load(name)
    shape = model.input_shape[1:]
    classes = model.output_shape[-1]
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (batch_size, *shape)).astype("float32")
    y = rng.integers(0, classes, batch_size)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
                  loss="sparse_categorical_crossentropy")

    def timed(fn):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    first = timed(lambda: model.train_on_batch(x, y))
    train = statistics.median(timed(lambda: model.train_on_batch(x, y)) for _ in range(steps))
    model.predict_on_batch(x)
    infer = statistics.median(timed(lambda: model.predict_on_batch(x)) for _ in range(steps))
    return {"model": name, "params": model.count_params(), "first_train_step_s": first,
            "train_images_per_s": batch_size / train, "inference_images_per_s": batch_size / infer}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.conv", description=__doc__.splitlines()[0])
    p.add_argument("--models", type=lambda s: [m for m in s.split(",") if m], default=MODELS)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.batch_size, args.steps)))
        return 0

    runs = {m: [] for m in args.models}
    for repeat in range(args.repeats):
        for name in args.models:
            run = run_child("bench.conv", ["--child", name, "--batch-size", str(args.batch_size),
                                           "--steps", str(args.steps)])
            runs[name].append(run)
            print(f"[{repeat + 1}/{args.repeats}] {name}: train "
                  f"{run['train_images_per_s']:.0f} img/s, inference "
                  f"{run['inference_images_per_s']:.0f} img/s", flush=True)
    rows = []
    for name in args.models:
        rows.append({
            "model": name, "params": runs[name][0]["params"],
            **{key: statistics.median(r[key] for r in runs[name])
               for key in ("first_train_step_s", "train_images_per_s", "inference_images_per_s")},
            "runs": runs[name],
        })
    print(f"\n| model | params | first step (s) | train img/s | inference img/s |  "
          f"(batch {args.batch_size})")
    print("| :--- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['model']} | {r['params']:,} | {r['first_train_step_s']:.2f} | "
              f"{r['train_images_per_s']:.0f} | {r['inference_images_per_s']:.0f} |")
    write_results(args.out, {"settings": {"batch_size": args.batch_size, "steps": args.steps,
                                          "repeats": args.repeats}, "results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
