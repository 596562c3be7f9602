"""Transfer learning, measured: a body pretrained on Fashion-MNIST, fine-tuned on MNIST.

    highway-zoo transfer [--sizes 100,1000,4000] [--seeds 3] [--steps 240] [--out DIR]

(or `python -m training.experiments.transfer` with the same options).

For each training-set size (the first N digits of the MNIST sample's training split, shuffled
once) and seed, the same network is trained three ways with the same optimiser and the same
budget of optimiser steps (as many epochs of the N digits as it takes, batch 50):

- ``scratch``: `zoo.load(target, include_top=False)`, freshly initialised, plus a new head;
- ``fine-tune``: the body of `source`'s shipped weights (`weights="default"`,
  `include_top=False`) plus the same new head, every weight trained;
- ``linear probe``: that pretrained body frozen, only the new head trained.

The head is what the zoo's MNIST conv nets have on top (Flatten, a Dense softmax), started
afresh. Test accuracy on the sample's 1,000 test digits is reported as mean ± std over seeds,
with a table, `transfer.json` and `transfer.png`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.experiments.study import format_table, mean_std, summarise

SOURCE = "highway_conv32_fashion_mnist"
TARGET = "highway_conv32_mnist"
METHODS = ("scratch", "fine-tune", "linear probe")


def build(method: str, seed: int, source: str = SOURCE, target: str = TARGET):
    """The network for `method`: a zoo body (pretrained or not) and a fresh head."""
    import keras

    import zoo

    keras.utils.set_random_seed(seed)
    if method == "scratch":
        body = zoo.load(target, include_top=False)
    else:
        body = zoo.load(source, weights="default", include_top=False)
        body.trainable = method != "linear probe"
    classes = zoo.describe(target)["classes"]
    model = keras.Sequential([
        body,
        keras.layers.Flatten(name="flatten"),
        keras.layers.Dense(classes, activation="softmax", name="predictions"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def run(sizes=(100, 1000, 4000), seeds=3, steps=240, batch_size=50, data_dir=None,
        source=SOURCE, target=TARGET, progress=print) -> dict[str, Any]:
    """Trains every (size, method, seed) and returns the results (see the module docstring)."""
    from training.data import first_examples, load_dataset

    data = load_dataset("mnist", data_dir)
    x_train, y_train = first_examples(data.train)
    x_test, y_test = first_examples(data.test)
    order = np.random.default_rng(0).permutation(len(x_train))  # one order for every size
    x_train, y_train = x_train[order], y_train[order]
    runs = []
    for size in sizes:
        if size > len(x_train):
            raise ValueError(
                f"--sizes {size} exceeds the {len(x_train)} training images of {data.source}."
            )
        steps_per_epoch = -(-size // batch_size)
        epochs = max(1, round(steps / steps_per_epoch))
        for method in METHODS:
            for seed in range(seeds):
                model = build(method, seed, source, target)
                started = time.perf_counter()
                model.fit(x_train[:size], y_train[:size], batch_size=batch_size,
                          epochs=epochs, verbose=0, shuffle=True)
                seconds = time.perf_counter() - started
                loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
                runs.append({"size": size, "method": method, "seed": seed, "epochs": epochs,
                             "steps": epochs * steps_per_epoch,
                             "test_accuracy": float(accuracy), "test_loss": float(loss),
                             "train_seconds": round(seconds, 2)})
                progress(f"N={size:5d} {method:12s} seed {seed}: test accuracy "
                         f"{accuracy:.4f} ({seconds:.1f} s)")
    return {
        "source": f"{source} weights='default' (trained on Fashion-MNIST)",
        "target": f"{target} architecture, include_top=False + Flatten + Dense softmax",
        "data": data.source,
        "num_test": len(x_test),
        "recipe": {"optimizer": "adam", "learning_rate": 1e-3, "batch_size": batch_size,
                   "steps": steps},
        "runs": runs,
        "summary": transfer_summary(runs),
    }


def transfer_summary(runs) -> list[dict[str, Any]]:
    """Mean and (sample) standard deviation of the test accuracy per (size, method)."""
    groups = {(g["size"], g["method"]): g["test_accuracy"]
              for g in summarise(runs, ("size", "method"), ("test_accuracy",), ddof=1)}
    return [{"size": size, "method": method, "seeds": s["n"], "mean": s["mean"],
             "std": s["std"]}
            for size in sorted({r["size"] for r in runs}) for method in METHODS
            if (s := groups.get((size, method)))]


def transfer_table(summary) -> str:
    by = {(r["size"], r["method"]): r for r in summary}
    return format_table(
        ["training digits", *METHODS],
        [[f"{size:,}", *(mean_std(by[size, m]) for m in METHODS)]
         for size in sorted({r["size"] for r in summary})])


def plot(summary, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from zoo.files import atomic_path

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for method in METHODS:
        rows = [r for r in summary if r["method"] == method]
        ax.errorbar([r["size"] for r in rows], [r["mean"] for r in rows],
                    yerr=[r["std"] for r in rows], marker="o", capsize=3, label=method)
    ax.set_xscale("log")
    ax.set_xlabel("MNIST training digits")
    ax.set_ylabel("test accuracy")
    ax.set_title("Fashion-MNIST body -> MNIST (same steps)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def add_arguments(parser) -> None:
    """The options of `highway-zoo transfer` (and `python -m training.experiments.transfer`)."""
    parser.add_argument("--sizes", default="100,1000,4000",
                        help="comma-separated training-set sizes (default 100,1000,4000)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per cell (default 3)")
    parser.add_argument("--steps", type=int, default=240,
                        help="optimiser steps per run, the same for every size (default 240)")
    parser.add_argument("--data-dir", help="where MNIST's files are (default: the sample)")
    parser.add_argument("--out", default="runs/transfer",
                        help="directory for transfer.json and transfer.png")


def run_from_args(args) -> None:
    """Runs the experiment the parsed options ask for; writes transfer.json and .png.

    Raises:
        ValueError: sizes that are not positive integers, or seeds or steps below 1.
    """
    from zoo.files import write_text

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sizes takes comma-separated integers. Received: {args.sizes!r}") \
            from None
    if not sizes or min(sizes) < 1 or args.seeds < 1 or args.steps < 1:
        raise ValueError("--sizes, --seeds and --steps must be positive")
    out = Path(args.out)
    result = run(sizes, args.seeds, args.steps, data_dir=args.data_dir)
    write_text(out / "transfer.json", json.dumps(result, indent=2) + "\n", overwrite=True)
    plot(result["summary"], out / "transfer.png")
    print(transfer_table(result["summary"]))
    print(f"wrote {out / 'transfer.json'} and {out / 'transfer.png'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        run_from_args(args)
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
