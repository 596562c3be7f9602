"""The learning rate where a net stops training: Smith's range test (2017) on CIFAR-10.

    python -m benchmarks.research.lr_range highway_b_cifar10 --data-dir DIR \\
        [--low 0.005] [--high 0.5] [--steps 300] [--batch-size 128] \\
        [--dtype mixed_bfloat16] [--out FILE]

Trains the net from its initialisation with the `cosine_cifar` recipe's optimizer (SGD with
Nesterov momentum 0.9, weight decay 5e-4, label smoothing 0.1, 4-pixel crops and mirrors),
the rate growing geometrically from `--low` to `--high` over `--steps` steps, and records
the training loss at each step. The rate at which the smoothed loss is lowest, and the one
where it has climbed back above its starting value, bound the peak rate a schedule may use.
Prints JSON (and writes it to `--out`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def geometric_rates(low: float, high: float, steps: int) -> np.ndarray:
    """`steps` rates from `low` to `high`, each the same factor above the last."""
    return low * (high / low) ** (np.arange(steps) / max(steps - 1, 1))


def smoothed(losses: list[float], beta: float = 0.95) -> np.ndarray:
    """Exponential moving average with bias correction (as fastai's lr_find)."""
    out, average = [], 0.0
    for i, loss in enumerate(losses, start=1):
        average = beta * average + (1 - beta) * loss
        out.append(average / (1 - beta**i))
    return np.asarray(out)


def summary(rates: np.ndarray, losses: list[float]) -> dict:
    """The rate at the smoothed loss's minimum and the first rate after it at which the
    smoothed loss is above its first value (None if it never is)."""
    curve = smoothed(losses)
    best = int(np.argmin(curve))
    above = [i for i in range(best, len(curve)) if curve[i] > curve[0] or not np.isfinite(curve[i])]
    return {"rate_at_lowest_loss": float(rates[best]), "lowest_loss": float(curve[best]),
            "rate_where_it_diverges": float(rates[above[0]]) if above else None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("architecture")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--low", type=float, default=0.005)
    parser.add_argument("--high", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--dtype", default="mixed_bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import keras

    import zoo
    from training.data import load_dataset
    from training.data.pipeline import training_batches
    from training.optimizers import apply_weight_decay, make_loss, make_optimizer
    from training.recipes import get_recipe

    recipe = get_recipe("cosine_cifar", {"lr_schedule": "multistep", "warmup_epochs": 0},
                        batch_size=args.batch_size)
    rates = geometric_rates(args.low, args.high, args.steps)
    data = load_dataset("cifar10", args.data_dir, fallback=False)
    keras.utils.set_random_seed(args.seed)
    model = zoo.load(args.architecture, dtype=args.dtype)
    apply_weight_decay(model, recipe)
    model.compile(optimizer=make_optimizer(recipe, 1), loss=make_loss(recipe))
    batches = training_batches(data.train, num_examples=data.num_train,
                               batch_size=args.batch_size, seed=args.seed, epoch=0,
                               augmentation=recipe["augmentation"])
    losses = []
    for step, (images, labels) in enumerate(batches):
        if step == args.steps:
            break
        model.optimizer.learning_rate.assign(rates[step])
        losses.append(float(model.train_on_batch(images, labels)))
        if step % 25 == 0:
            print(f"step {step}: rate {rates[step]:.4f}, loss {losses[-1]:.3f}", flush=True)
        if not np.isfinite(losses[-1]):
            break
    result = {"architecture": args.architecture, "dtype": args.dtype, "seed": args.seed,
              "batch_size": args.batch_size, "rates": [float(r) for r in rates[:len(losses)]],
              "losses": losses, **summary(rates[:len(losses)], losses)}
    text = json.dumps(result, indent=1) + "\n"
    print(json.dumps({k: v for k, v in result.items() if k not in ("rates", "losses")}))
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
