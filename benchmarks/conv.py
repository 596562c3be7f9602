"""Convolutional nets: training and inference images/s, and GFLOP/s against a 3x3 convolution.

    python -m benchmarks.conv
        [--models highway_conv32_mnist,highway_b_cifar10,resnet50_imagenet:32,...]
        [--steps 10] [--max-seconds 20] [--batch-size 128] [--repeats 3]
                         [--input-size N]

`--models` takes NAME or NAME:BATCH (that model's batch size; `--batch-size` for the others).
The default is the MNIST and CIFAR highway nets at batch 128 and the three ImageNet nets
(resnet50_imagenet, highway50_imagenet, highway_full50_imagenet: 224x224x3 raw pixels, 1000
classes) at batch 32. Each model runs in its own fresh process (repeats interleaved) on random
raw-pixel batches (speed does not depend on the pixel values): `train_on_batch` with the
paper's Nesterov SGD (the first call, which traces, timed apart), then `predict_on_batch` at
the same batch size, `--steps` timed calls each (fewer, at least one, once they add up to
`--max-seconds`: an ImageNet net's training step takes seconds here). The same process then
times the machine's own 3x3 convolution rate: `tf.nn.conv2d` in a `tf.function`, a batch of
32 28x28x128 maps to 128 channels ("same" padding, 7.4 GFLOP a call; median of 10 calls after
3 warm-up calls) on TensorFlow, the same convolution in the backend's own framework elsewhere;
on a GPU, 16x that (batch 128 of 56x56x128 maps: `backends.REFERENCE_CONV_ACCELERATOR`), with
the GPU's name, its float32 settings and the peak GPU memory recorded in every run.

FLOPs, counted from the model as built: a forward pass costs, per image, the sum over every
layer with a `kernel` (Conv2D, Dense, HighwayConv2D with its fused [H | T] kernel,
HighwayDense) of 2 x the kernel's size (kh * kw * c_in * c_out for a convolution, c_in * c_out
for a Dense) x the layer's output positions (H_out * W_out; 1 for a Dense on vectors); batch
normalisation, activations, pooling, preprocessing and the gates' elementwise products are not
counted. A training step counts 3 forward passes (forward, the gradients with respect to the
inputs and to the weights). Reported (medians over repeats of the median step): training and
inference images/s, each also as GFLOP/s and as a fraction of the 3x3 convolution's GFLOP/s
measured in the same process (median of the per-run fractions), and the first training step's
time. `--input-size N` builds every model at NxN (nets that take other sizes; for quick
checks). `--backends` runs every model on each Keras backend, against that backend's own 3x3
convolution (JAX: `lax.conv_general_dilated`, jitted; PyTorch: `conv2d` on NCHW, its native
layout). Writes benchmarks/results/conv.json.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from benchmarks import backends, driver

RESULTS = Path(__file__).resolve().parent / "results" / "conv.json"
IMAGENET = ["resnet50_imagenet", "highway50_imagenet", "highway_full50_imagenet"]
MODELS = ["highway_conv32_mnist", "highway_b_cifar10", *(f"{name}:32" for name in IMAGENET)]
REFERENCE = backends.REFERENCE_CONV


def forward_flops(model) -> int:
    """FLOPs of one image's forward pass: 2 x kernel size x output positions, summed over the
    kernels of every layer (nested models included). A layer with several convolutions
    (`layers.BNHighwayBlock`: its H, T and shortcut stacks, strided only at their first conv)
    has one weight per convolution named "...kernel", each producing the layer's output size."""
    def layers(model):
        for layer in model.layers:
            yield from layers(layer) if isinstance(layer, keras.Model) else (layer,)

    import keras

    total = 0
    for layer in layers(model):
        kernels = [w for w in layer.weights if w.name.endswith("kernel")]
        if not kernels:
            continue
        positions = math.prod(layer.output.shape[1:-1])
        total += sum(2 * math.prod(k.shape) * positions for k in kernels)
    return total


def measure(name: str, batch_size: int, steps: int, input_size: int | None = None,
            max_seconds: float | None = None) -> dict:
    """Runs in a fresh process: times training and inference steps, then the 3x3 conv."""
    import keras
    import numpy as np

    import zoo

    if input_size:
        channels = zoo.describe(name)["input_shape"][-1]
        model = zoo.load(name, input_shape=(input_size, input_size, channels))
    else:
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

    def calls(fn) -> list[float]:
        """`steps` timed calls, fewer (at least one) once they add up to `max_seconds`."""
        times = []
        while len(times) < steps and (not times or not max_seconds or sum(times) < max_seconds):
            times.append(timed(fn))
        return times

    first = timed(lambda: model.train_on_batch(x, y))
    train = calls(lambda: model.train_on_batch(x, y))
    model.predict_on_batch(x)
    infer = calls(lambda: model.predict_on_batch(x))
    return {"model": name, "backend": keras.backend.backend(),
            "params": model.count_params(), "first_train_step_s": first,
            "train_images_per_s": batch_size / statistics.median(train),
            "inference_images_per_s": batch_size / statistics.median(infer),
            "train_steps": len(train), "inference_steps": len(infer),
            "batch_size": batch_size, "input_shape": list(shape),
            "forward_flops_per_image": forward_flops(model),
            "conv_gflops": backends.conv_gflops(keras.backend.backend()),
            **_device(keras.backend.backend())}


def _device(backend: str) -> dict:
    """Where a run computed: the GPU's name, its float32 settings, the reference convolution's
    shape and the peak GPU memory (nothing beyond the shape on a CPU)."""
    name = backends.accelerator(backend)
    if name is None:
        return {"reference_conv": list(backends.REFERENCE_CONV)}
    return {"device": name, "float32_precision": backends.float32_precision(backend),
            "reference_conv": list(backends.reference_conv(backend)),
            "device_peak_mb": backends.device_peak_mb(backend)}


def summarise(name: str, runs: list[dict]) -> dict:
    """Medians over repeats; GFLOP/s from images/s and the FLOP count; fractions of the 3x3
    convolution's rate per run, then their median."""
    forward = runs[0]["forward_flops_per_image"]
    flops = {"train": 3 * forward, "inference": forward}

    def gflops(run, kind):
        return run[f"{kind}_images_per_s"] * flops[kind] / 1e9

    row = {"model": name, "backend": runs[0]["backend"], "params": runs[0]["params"],
           **driver.medians(runs, ("first_train_step_s", "train_images_per_s",
                                   "inference_images_per_s")),
           "batch_size": runs[0]["batch_size"], "input_shape": runs[0]["input_shape"],
           "forward_flops_per_image": forward, "train_flops_per_image": flops["train"],
           "conv_gflops": driver.median_of(runs, "conv_gflops"),
           **{key: runs[0][key] for key in ("device", "float32_precision", "reference_conv")
              if key in runs[0]}}
    for kind in ("train", "inference"):
        row[f"{kind}_gflops"] = driver.median_of(runs, lambda r, k=kind: gflops(r, k))
        row[f"{kind}_fraction_of_conv"] = driver.median_of(
            runs, lambda r, k=kind: gflops(r, k) / r["conv_gflops"])
    row["runs"] = runs
    return row


def format_table(rows: list[dict]) -> str:
    return driver.table(
        ["model", "backend", "device", "batch", "params", "GFLOP/image (fwd)", "first step (s)",
         "train img/s", "train GFLOP/s", "inference img/s", "inference GFLOP/s", "3x3 conv GFLOP/s",
         "train / conv", "inference / conv"],
        [":---", ":---", ":---", *["---:"] * 11],
        [[r["model"], r["backend"], r.get("device", "CPU"), r["batch_size"], f"{r['params']:,}",
          f"{r['forward_flops_per_image'] / 1e9:.3g}", f"{r['first_train_step_s']:.2f}",
          f"{r['train_images_per_s']:.1f}", f"{r['train_gflops']:.1f}",
          f"{r['inference_images_per_s']:.1f}", f"{r['inference_gflops']:.1f}",
          f"{r['conv_gflops']:.0f}", f"{r['train_fraction_of_conv']:.0%}",
          f"{r['inference_fraction_of_conv']:.0%}"] for r in rows])


def _models(text: str) -> list[str]:
    """NAME or NAME:BATCH, comma-separated."""
    models = [m for m in text.split(",") if m]
    for m in models:
        name, _, batch = m.partition(":")
        if not name or (batch and not (batch.isdigit() and int(batch) > 0)):
            raise argparse.ArgumentTypeError(
                f"--models takes NAME or NAME:BATCH, comma-separated, e.g. {','.join(MODELS)}. "
                f"Received: {text!r}")
    return models


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.conv", __doc__, RESULTS)
    p.add_argument("--models", type=_models, default=MODELS,
                   help=f"NAME or NAME:BATCH, comma-separated (default: {','.join(MODELS)})")
    p.add_argument("--batch-size", type=int, default=128,
                   help="batch size of the models given without one")
    p.add_argument("--steps", type=int, default=10, help="timed training (and inference) calls")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="stop timing training (inference) once its calls add up to this many "
                   "seconds, after at least one (the ImageNet nets: seconds a call here)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--input-size", type=int, default=None,
                   help="build every model at NxN instead of its own input size")
    backends.add_option(p)
    return p


def run(args: argparse.Namespace) -> int:
    plan = []
    for m in args.models:
        name, _, batch = m.partition(":")
        plan += [(name, int(batch) if batch else args.batch_size, backend)
                 for backend in args.backends]
    runs = driver.interleaved(
        plan, args.repeats,
        lambda key: driver.run_child("benchmarks.conv", {
            "name": key[0], "batch_size": key[1], "steps": args.steps,
            "input_size": args.input_size, "max_seconds": args.max_seconds}, backend=key[2]),
        describe=lambda key, run: (
            f"{key[0]} (batch {key[1]}, {key[2]}): train {run['train_images_per_s']:.1f} "
            f"img/s, inference {run['inference_images_per_s']:.1f} img/s, 3x3 conv "
            f"{run['conv_gflops']:.0f} GFLOP/s"))
    rows = [summarise(key[0], runs[key]) for key in plan]
    print()
    print(format_table(rows))
    settings = {"batch_size": args.batch_size, "steps": args.steps,
                "max_seconds": args.max_seconds, "repeats": args.repeats,
                "reference_conv": dict(zip(("batch", "height", "width", "channels_in",
                                            "channels_out"), REFERENCE))}
    if args.input_size:
        settings["input_size"] = args.input_size
    driver.write_results(args.out, {"settings": settings, "results": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
