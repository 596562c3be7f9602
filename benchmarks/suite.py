"""`highway-zoo bench`: the benchmark suite, quick or full, each script's table printed and its
JSON written to one directory.

The quick set (the default) runs every script once, with fewer depths, repeats and steps:
about 20 minutes, estimated from its parts (not yet timed whole since the backends joined;
the previous quick set took 26 minutes with the cores shared). The full set (`--full`) is what
the README quotes: from its parts measured 2026-11-23 on the idle machine (headline
50 minutes, wide 8, conv 8 + 9, start-up about 25 estimated for three backends, serving and
pipeline a few; trial_memory 5, timed 2026-11-25; whole_process about 4, estimated: 8
processes a repeat, 3 repeats; models_table 16 minutes idle (945 s, 2026-11-28;
52 with the cores shared); quantization about 20 for the 14 shipped models, timed
2026-11-26 with the cores shared, 3 in the quick set; language_model about 6, estimated:
Small's three nets, 5 repeats of 40 steps, on two backends; conv_precision about 50,
estimated from a smoke run's step times: 6 nets x 2 precisions x 2 frameworks x 5 repeats of
23 steps); about 3.5-4 h in all, longer when shared. The GPU set (`--gpu`) is below.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from benchmarks import driver

RESULTS = Path(__file__).resolve().parent / "results"
PAGE_DIR = driver.ROOT / "docs" / "results" / "bench"  # tables and figures the site includes

# (script, its results file, arguments): the quick set measures every kind of number once,
# on fewer repeats. The conv script runs twice: the MNIST and CIFAR nets on every backend, the
# ImageNet nets (seconds a step) on TensorFlow.
SMALL_CONV = "highway_conv32_mnist,highway_b_cifar10"
IMAGENET_CONV = "resnet50_imagenet:32,highway50_imagenet:32,highway_full50_imagenet:32"
QUICK = [
    ("headline", "headline", ["--depths", "10,30", "--repeats", "1"]),
    ("start_up", "start_up", ["--depths", "10,30", "--repeats", "1", "--steps", "5"]),
    ("wide", "wide", ["--epochs", "2", "--repeats", "1"]),
    ("conv", "conv", ["--models", SMALL_CONV, "--steps", "3", "--max-seconds", "5",
                      "--repeats", "1"]),
    ("conv", "conv_imagenet", ["--models", IMAGENET_CONV, "--backends", "tensorflow",
                               "--steps", "3", "--max-seconds", "5", "--repeats", "1"]),
    ("serving", "serving", ["--random-weights", "--calls", "50", "--runs", "3"]),
    ("pipeline", "pipeline", ["--models", "highway_fc50_mnist:128", "--repeats", "1",
                              "--epochs", "1"]),
    ("trial_memory", "trial_memory", ["--depths", "10", "--trials", "8"]),
    ("whole_process", "whole_process", ["--repeats", "1"]),
    ("models_table", "models_table", ["--models", "highway_fc10_mnist,plain_fc10_mnist,"
                                      "highway_conv16_mnist,highway_a_cifar10,resnet110_cifar10,"
                                      "resnet50_imagenet,lstm_char_small_ptb", "--steps", "2",
                                      "--max-seconds", "2"]),
    ("quantization", "quantization", ["--models", "highway_fc10_mnist,highway_conv16_mnist",
                                      "--calls", "50", "--gate-images", "500"]),
    ("conv_peer", "conv_peer", ["--models", "highway_conv16_mnist", "--steps", "3",
                                "--warmup", "1", "--repeats", "1"]),
    ("language_model", "language_model", ["--steps", "5", "--repeats", "1"]),
    ("conv_precision", "conv_precision", ["--models", "highway_conv16_mnist", "--steps", "2",
                                          "--warmup", "1", "--repeats", "1",
                                          "--batch-size", "16"]),
]
FULL = [
    ("headline", "headline", []),
    ("start_up", "start_up", []),
    ("wide", "wide", []),
    ("conv", "conv", ["--models", SMALL_CONV]),
    ("conv", "conv_imagenet", ["--models", IMAGENET_CONV, "--backends", "tensorflow",
                               "--repeats", "2"]),
    ("serving", "serving", ["--random-weights"]),
    ("pipeline", "pipeline", []),
    ("trial_memory", "trial_memory", []),
    ("whole_process", "whole_process", []),
    ("models_table", "models_table", []),
    ("quantization", "quantization", []),
    ("conv_peer", "conv_peer", []),
    ("language_model", "language_model", ["--backends", "tensorflow,jax"]),
    # float32 and mixed bfloat16 against PyTorch in both (issue 72); its table and figure are
    # the site's (docs/results/bench/conv_precision.*)
    ("conv_precision", "conv_precision", ["--page", str(PAGE_DIR)]),
]
# The set for a machine with a GPU (`--gpu`), where JAX and PyTorch run and TensorFlow is not
# installed (the GPU machines this project borrows): the headline experiment at depth 30 on
# each, the 1000-layer net (2 epochs: Keras on PyTorch runs it op by op) and the ImageNet nets'
# training images/s at batch 128 against the GPU's own 3x3 convolution rate. It writes
# gpu_*.json beside the CPU results. On one H200 (2026-11-26) the three took 163 s, 147 s and
# 154 s: about 8 minutes, inside the 10 a lent GPU machine gives one command.
GPU_IMPLEMENTATIONS = "numpy,pytorch,highway_zoo_jax,highway_zoo_jax_cached,highway_zoo_torch"
GPU = [
    ("headline", "gpu_headline", ["--implementations", GPU_IMPLEMENTATIONS, "--depths", "30",
                                  "--repeats", "3", "--timeout", "300"]),
    ("headline", "gpu_headline_1000", ["--implementations", GPU_IMPLEMENTATIONS,
                                       "--depths", "1000", "--epochs", "2", "--repeats", "1",
                                       "--timeout", "300"]),
    ("conv", "gpu_conv_imagenet", ["--models", IMAGENET_CONV.replace(":32", ":128"),
                                   "--backends", "jax,torch", "--steps", "10",
                                   "--max-seconds", "10", "--repeats", "1"]),
    # NIPS 2015's conv nets against the same nets in plain PyTorch with cuDNN (issue 49): a
    # command of its own on a lent GPU, `highway-zoo bench --gpu --only conv_peer`.
    ("conv_peer", "gpu_conv_peer", ["--backend", "jax", "--repeats", "3"]),
    # Small and Large against PyTorch with cuDNN's nn.LSTM (issue 50), likewise a command of
    # its own: `highway-zoo bench --gpu --only language_model`.
    ("language_model", "gpu_language_model", ["--models", "lstm_char_small_ptb,"
                                              "lstm_char_large_ptb", "--backends", "jax",
                                              "--steps", "100"]),
]
SCRIPTS = list(dict.fromkeys(script for script, _, _ in FULL))
# How long each set takes on this 2-core machine (above; the README's Benchmarks section).
DURATION_QUICK = "about 20 minutes on this 2-core machine, estimated"
DURATION_FULL = "about 4 h on this 2-core machine"


def run(full: bool = False, out_dir: str | Path | None = None, only: list[str] | None = None,
        gpu: bool = False):
    """Runs the quick (or full, or GPU) set; results go to `out_dir` (default: benchmarks/results
    for the full and GPU sets, ./bench_results for the quick one, so a quick run never replaces
    the README's). The GPU set refuses, in one line, a machine without a GPU."""
    if full and gpu:
        raise ValueError("--full and --gpu are two sets: choose one")
    if gpu and not driver.gpu_names():
        raise ValueError("--gpu needs an NVIDIA GPU (nvidia-smi lists none here); "
                         "run the quick or --full set on a CPU")
    plan = GPU if gpu else FULL if full else QUICK
    if only:
        unknown = sorted(set(only) - set(SCRIPTS))
        if unknown:
            raise ValueError(f"unknown benchmark(s) {unknown}; choose from "
                             f"{', '.join(SCRIPTS)}")
        plan = [entry for entry in plan if entry[0] in only]
    out = Path(out_dir) if out_dir else (RESULTS if full or gpu else Path("bench_results"))
    started = time.perf_counter()
    failed = []
    for script, result, args in plan:
        print(f"\n== benchmarks.{script} {' '.join(args)}", flush=True)
        module = importlib.import_module(f"benchmarks.{script}")
        # One failed measurement costs its own script's results, not the rest of the set.
        try:
            status = module.main([*args, "--out", str(out / f"{result}.json")])
        except driver.MeasurementFailed as error:
            print(f"{result}: {error}", flush=True)
            status = 1
        if status:
            failed.append(result)
    print(f"\nbenchmarks done in {time.perf_counter() - started:.0f} s; results in {out}/"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
