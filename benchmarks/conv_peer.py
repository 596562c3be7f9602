"""The conv highway nets' training speed against the same nets in plain PyTorch (cuDNN on a GPU).

    python -m benchmarks.conv_peer [--models highway_conv32_mnist,highway_b_cifar10]
        [--batch-size 100] [--steps 30] [--warmup 5] [--repeats 5]
        [--precision float32|mixed_bfloat16]

For each model, two implementations, each in its own fresh process, the repeats interleaved:
`highway_zoo` (the zoo's Keras net on the Keras backend of the environment: JAX on the GPU
machines) and `pytorch` (`implementations.torch_conv_highway`, the same layers and parameter
count, NCHW, `torch.backends.cudnn.benchmark` on). Both take the paper's step: Nesterov SGD
(lr 0.01, momentum 0.9), softmax cross-entropy, dropout on, one batch of random raw pixels of
the model's shape copied from the host every step (as a real epoch feeds it); `--warmup`
untimed steps (tracing, compilation, cuDNN's autotuning), then `--steps` timed ones, each
ended by reading the loss (which waits for the device). Reported: the median step's images/s
per run, the medians over repeats, and highway_zoo / pytorch per repeat (ratios from the same
repeat), then their median. `--precision mixed_bfloat16`: Keras's mixed policy and PyTorch's
bfloat16 autocast. Writes benchmarks/results/conv_peer.json (on a GPU, gpu_conv_peer.json by the
suite's --gpu).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import backends, driver

RESULTS = Path(__file__).resolve().parent / "results" / "conv_peer.json"
MODELS = ["highway_conv32_mnist", "highway_b_cifar10"]
IMPLEMENTATIONS = ("highway_zoo", "pytorch")


def _batch(name: str, batch_size: int):
    import numpy as np

    import zoo

    meta = zoo.describe(name)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255, (batch_size, *meta["input_shape"])).astype("float32")
    y = rng.integers(0, meta["architecture_args"]["classes"], batch_size)
    return x, y


def _timed_steps(step, warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def _keras_steps(name, x, y, warmup, steps, precision):
    import keras

    import zoo

    keras.mixed_precision.set_dtype_policy(precision)
    model = zoo.load(name)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
                  loss="sparse_categorical_crossentropy")
    times = _timed_steps(lambda: model.train_on_batch(x, y), warmup, steps)
    return times, keras.backend.backend(), backends.accelerator(keras.backend.backend())


def _torch_steps(name, x, y, warmup, steps, precision):
    import contextlib

    import torch

    from benchmarks.implementations import torch_conv_highway

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    net = torch_conv_highway.build(name).to(device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    images = torch.as_tensor(x).permute(0, 3, 1, 2).contiguous()
    labels = torch.as_tensor(y)
    if device == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    autocast = (torch.autocast(device, dtype=torch.bfloat16) if precision == "mixed_bfloat16"
                else contextlib.nullcontext())

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            logits = net(images.to(device, non_blocking=True))
            loss = torch.nn.functional.cross_entropy(logits.float(),
                                                     labels.to(device, non_blocking=True))
        loss.backward()
        optimizer.step()
        return loss.item()  # waits for the device

    name_of = torch.cuda.get_device_name() if device == "cuda" else None
    return _timed_steps(step, warmup, steps), f"torch {torch.__version__}", name_of


def measure(name: str, implementation: str, batch_size: int, steps: int, warmup: int,
            precision: str) -> dict:
    """Runs in a fresh process: one implementation's training steps on one model."""
    x, y = _batch(name, batch_size)
    run = _keras_steps if implementation == "highway_zoo" else _torch_steps
    times, framework, device = run(name, x, y, warmup, steps, precision)
    return {"model": name, "implementation": implementation, "framework": framework,
            "device": device, "precision": precision, "batch_size": batch_size,
            "step_s": times, "train_images_per_s": batch_size / statistics.median(times)}


def summarise(name: str, runs: dict[str, list[dict]]) -> dict:
    """Medians over repeats per implementation, and highway_zoo / pytorch from each repeat."""
    ours, theirs = runs["highway_zoo"], runs["pytorch"]
    ratios = [a["train_images_per_s"] / b["train_images_per_s"]
              for a, b in zip(ours, theirs, strict=True)]
    return {"model": name, "device": ours[0]["device"] or "CPU",
            "backend": ours[0]["framework"], "batch_size": ours[0]["batch_size"],
            "precision": ours[0]["precision"],
            "highway_zoo_images_per_s": driver.median_of(ours, "train_images_per_s"),
            "pytorch_images_per_s": driver.median_of(theirs, "train_images_per_s"),
            "ratio": statistics.median(ratios), "ratios": ratios,
            "runs": {"highway_zoo": ours, "pytorch": theirs}}


def format_table(rows: list[dict]) -> str:
    return driver.table(
        ["model", "device", "precision", "batch", "highway-zoo img/s", "PyTorch img/s",
         "ratio (median of repeats)"],
        [":---", ":---", ":---", "---:", "---:", "---:", "---:"],
        [[r["model"], f"{r['device']} ({r['backend']})", r["precision"], r["batch_size"],
          f"{r['highway_zoo_images_per_s']:,.0f}", f"{r['pytorch_images_per_s']:,.0f}",
          f"{r['ratio']:.2f}x"] for r in rows])


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.conv_peer", __doc__, RESULTS)
    p.add_argument("--models", default=",".join(MODELS),
                   type=lambda text: [m for m in text.split(",") if m],
                   help=f"comma-separated (default {','.join(MODELS)})")
    p.add_argument("--batch-size", type=int, default=100, help="the recipes' batch (100)")
    p.add_argument("--steps", type=int, default=30, help="timed training steps per run")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32")
    p.add_argument("--backend", choices=("tensorflow", "jax", "torch"),
                   default=os.environ.get("KERAS_BACKEND", "tensorflow"),
                   help="highway_zoo's Keras backend (default $KERAS_BACKEND, else tensorflow)")
    return p


def run(args: argparse.Namespace) -> int:
    from benchmarks.implementations import torch_conv_highway

    for name in args.models:  # one line for a net with no twin, before any process starts
        try:
            torch_conv_highway.build(name)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
    plan = [(name, implementation) for name in args.models for implementation in
            IMPLEMENTATIONS]
    runs = driver.interleaved(
        plan, args.repeats,
        lambda key: driver.run_child("benchmarks.conv_peer", {
            "name": key[0], "implementation": key[1], "batch_size": args.batch_size,
            "steps": args.steps, "warmup": args.warmup, "precision": args.precision},
            backend=args.backend),
        describe=lambda key, run: (f"{key[0]} {key[1]} ({run['framework']}): "
                                   f"{run['train_images_per_s']:,.0f} img/s"))
    rows = [summarise(name, {i: runs[(name, i)] for i in IMPLEMENTATIONS})
            for name in args.models]
    print()
    print(format_table(rows))
    driver.write_results(args.out, {
        "settings": {"batch_size": args.batch_size, "steps": args.steps,
                     "warmup": args.warmup, "repeats": args.repeats,
                     "precision": args.precision,
                     "optimizer": "SGD(0.01, momentum=0.9, nesterov=True)",
                     "inputs": "random raw pixels, copied from the host every step"},
        "results": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
