"""The headline experiment, this project against what a user would write instead.

    python -m benchmarks.headline [--depths 10,30,100,1000] [--repeats 3] [--epochs 12]
                             [--implementations numpy,pytorch,keras_two_dense,...]
                             [--width 50 --batch-size 128] [--out benchmarks/results/headline.json]

784 -> 50 tanh, N coupled highway blocks of width 50 (b_T = -2), softmax 10; Adam 5e-3,
global-norm clip 5, batch 128, 12 epochs on 4,000 MNIST training images, tested on 1,000
(the offline sample, or the first 4,000 / 1,000 of full MNIST when that is installed). Every
(implementation, depth, repeat) runs in its own fresh process on the same data, the repeats
interleaved so that a noisy spell on this shared machine hits all implementations alike.

Reported per implementation and depth (medians over repeats): time to first step (model
construction + the first optimiser step, which includes tracing for Keras), steady-state steps/s
(inside the epochs after the first: from the end of an epoch's first step to the end of its
last, without the epoch's set-up; `epoch_steps_per_s` has it in), total training time
(construction + every epoch; no evaluation), final training loss and test accuracy (so that
speed is never bought with a different result), peak RSS of the process and the training
memory above the RSS before the model was built, and the ratios of highway-zoo's numbers to
each alternative's, from the same run. highway-zoo has a row per Keras backend: TensorFlow,
JAX (cold: every process compiles afresh; and `highway_zoo_jax_cached`: JAX's persistent
compilation cache, which `highway-zoo` turns on, warmed by one unmeasured run, as on a user's
second run) and PyTorch. Per-layer Keras graphs are not run beyond `--max-graph-depth`
(tracing a 1000-layer one takes minutes; see benchmarks/results/start_up.json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks import backends, driver
from benchmarks.implementations import IMPLEMENTATIONS, OURS, PER_LAYER_GRAPHS, available
from training.runtime import jax_cache

RESULTS = Path(__file__).resolve().parent / "results" / "headline.json"


def load_data(n_train: int = 4000, n_test: int = 1000) -> tuple[dict, str]:
    """MNIST as float32 (N, 784) in [0, 1] and int64 labels, and where it came from."""
    import warnings

    from training.data import OfflineFallbackWarning, first_examples, load_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OfflineFallbackWarning)
        dataset = load_dataset("mnist")

    def arrays(split, n):
        images, labels = first_examples(split, n)
        return images.reshape(len(images), -1) / 255.0, labels

    x_train, y_train = arrays(dataset.train, n_train)
    x_test, y_test = arrays(dataset.test, n_test)
    data = {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}
    return data, dataset.source


def read_data(data_file: str) -> dict:
    """The arrays `load_data` gave the parent, from the .npz it wrote for its children."""
    import numpy as np

    with np.load(data_file) as f:
        return {key: f[key] for key in f.files}


def measure(name: str, depth: int, data_file: str, options: dict) -> dict:
    """Runs in a fresh process: trains once, adds memory figures."""
    from benchmarks.implementations import train

    data = read_data(data_file)
    # Import the framework before the baseline, so that its own footprint is not counted.
    # Keras imports TensorFlow on every backend when it is installed (set_random_seed seeds
    # it too; ~600 MB): imported here, it is not counted as JAX's or PyTorch's training memory.
    keras_modules = ("keras", "zoo", *(("tensorflow",) if backends.installed("tensorflow")
                                       else ()))
    for module in {"numpy": (), "pytorch": ("torch",)}.get(name, keras_modules):
        __import__(module)
    __import__(IMPLEMENTATIONS[name].module)
    baseline = driver.memory_mb("VmRSS")
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    cached = len(os.listdir(cache)) if cache and os.path.isdir(cache) else 0
    result = train(name, data, depth=depth, **options)
    result["compilation_cache_entries_at_start"] = cached
    framework = IMPLEMENTATIONS[name].framework
    device = None if framework == "numpy" else backends.accelerator(framework)
    if device:  # a GPU run
        result.update(device=device,
                      float32_precision=backends.float32_precision(framework),
                      device_peak_mb=backends.device_peak_mb(framework))
    peak = driver.memory_mb("VmHWM")
    return {**result, "peak_rss_mb": peak, "baseline_rss_mb": baseline,
            "train_mem_mb": max(peak - baseline, 0.0)}


def steady_steps_per_s(run: dict) -> float:
    """A run's steps/s inside the epochs after the first (tracing is in the first)."""
    return 1.0 / statistics.median(run["step_s"][1:] or run["step_s"])


def epoch_steps_per_s(run: dict) -> float:
    """The same with each epoch's set-up included."""
    return run["steps_per_epoch"] / statistics.median(run["epoch_s"][1:] or run["epoch_s"])


def summarise(name: str, depth: int, runs: list[dict]) -> dict:
    """Medians over repeats of the per-run figures."""
    return {
        "implementation": name,
        "depth": depth,
        "repeats": len(runs),
        "params": runs[0]["params"],
        **({"device": runs[0]["device"], "float32_precision": runs[0]["float32_precision"]}
           if "device" in runs[0] else {}),
        "to_first_step_s": driver.median_of(runs, lambda r: r["build_s"] + r["first_step_s"]),
        "steady_steps_per_s": driver.median_of(runs, steady_steps_per_s),
        "epoch_steps_per_s": driver.median_of(runs, epoch_steps_per_s),
        **driver.medians(runs, ("total_s", "final_loss", "test_accuracy", "peak_rss_mb",
                                "train_mem_mb")),
        "runs": runs,
    }


def ratios(rows: list[dict]) -> list[dict]:
    """highway-zoo (each backend's row) against each alternative at each depth, from medians
    of the same run: total time and time to first step as ours / theirs (< 1 is faster),
    steps/s as ours / theirs (> 1 is faster)."""
    by = {(r["implementation"], r["depth"]): r for r in rows}
    out = []
    for (name, depth), theirs in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        for ours_name in OURS:
            ours = by.get((ours_name, depth))
            if name in OURS or ours is None:
                continue
            out.append(_ratio(depth, ours_name, name, ours, theirs))
    return out


def _ratio(depth: int, ours_name: str, name: str, ours: dict, theirs: dict) -> dict:
    return {"depth": depth, "ours": ours_name, "versus": name,
            "total_time": ours["total_s"] / theirs["total_s"],
            "to_first_step": ours["to_first_step_s"] / theirs["to_first_step_s"],
            "steady_steps_per_s": ours["steady_steps_per_s"] / theirs["steady_steps_per_s"],
            "epoch_steps_per_s": ours["epoch_steps_per_s"] / theirs["epoch_steps_per_s"]}


def memory_per_layer(rows: list[dict], batch_size: int) -> dict[str, dict]:
    """Training memory added per highway layer per example, for each of highway-zoo's rows
    run at two depths or more: the slope of training memory between its two deepest runs."""
    out = {}
    for name in OURS:
        ours = sorted((r for r in rows if r["implementation"] == name),
                      key=lambda r: r["depth"])
        if len(ours) < 2:
            continue
        lo, hi = ours[-2], ours[-1]
        slope_mb = (hi["train_mem_mb"] - lo["train_mem_mb"]) / (hi["depth"] - lo["depth"])
        out[name] = {
            "from_depth": lo["depth"], "to_depth": hi["depth"],
            "bytes_per_layer_per_example": slope_mb * 2**20 / batch_size,
            "train_mem_mb": {lo["depth"]: lo["train_mem_mb"], hi["depth"]: hi["train_mem_mb"]}}
    return out


def format_tables(summary: dict) -> str:
    rows = [[r["depth"], r["implementation"], r.get("device", "CPU"),
             f"{r['to_first_step_s']:.2f}",
             f"{r['steady_steps_per_s']:.0f}", f"{r['epoch_steps_per_s']:.0f}",
             f"{r['total_s']:.2f}", f"{r['final_loss']:.3f}", f"{r['test_accuracy']:.3f}",
             f"{r['train_mem_mb']:.0f}"] for r in summary["results"]]
    rows += [[s["depth"], s["implementation"], "", f"not run: {s['reason']}", *[""] * 6]
             for s in summary["skipped"]]
    lines = [driver.table(
        ["depth", "implementation", "device", "to first step (s)", "steps/s", "steps/s per epoch",
         "total (s)", "final loss", "test acc", "train mem (MB)"],
        ["---:", ":---", ":---", *["---:"] * 7], rows)]
    if summary["ratios"]:
        lines += ["", driver.table(
            ["depth", "highway-zoo", "vs", "total time (ours/theirs)",
             "to first step (ours/theirs)", "steps/s (ours/theirs)", "per epoch"],
            ["---:", ":---", ":---", *["---:"] * 4],
            [[q["depth"], q["ours"], q["versus"], f"{q['total_time']:.2f}",
              f"{q['to_first_step']:.2f}", f"{q['steady_steps_per_s']:.2f}",
              f"{q['epoch_steps_per_s']:.2f}"] for q in summary["ratios"]])]
    for name, memory in (summary.get("memory_per_layer") or {}).items():
        lines += ["", f"{name} training memory: {memory['bytes_per_layer_per_example']:.0f} "
                  f"bytes per layer per example (slope from depth {memory['from_depth']} to "
                  f"{memory['to_depth']})"]
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _names(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [n for n in names if n not in IMPLEMENTATIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown implementation(s) {unknown}; choose from {', '.join(IMPLEMENTATIONS)}")
    return names


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.headline", __doc__, RESULTS)
    p.add_argument("--depths", type=_ints, default=[10, 30, 100, 1000])
    p.add_argument("--implementations", type=_names, default=list(IMPLEMENTATIONS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--width", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop every run after this many steps (wide or quick runs)")
    p.add_argument("--max-graph-depth", type=int, default=100,
                   help="deepest net run with a per-layer Keras graph")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    return p


def run(args: argparse.Namespace) -> int:
    options = {"width": args.width, "epochs": args.epochs, "batch_size": args.batch_size,
               "max_steps": args.max_steps}
    skipped, plan = [], []
    for depth in args.depths:
        for name in args.implementations:
            if not available(name):
                skipped.append({"implementation": name, "depth": depth,
                                "reason": "not installed (pip install -e '.[bench]')"})
            elif name in PER_LAYER_GRAPHS and depth > args.max_graph_depth:
                skipped.append({"implementation": name, "depth": depth,
                                "reason": f"per-layer graph deeper than --max-graph-depth "
                                          f"{args.max_graph_depth}"})
            else:
                plan.append((name, depth))

    data, source = load_data()
    with tempfile.TemporaryDirectory() as tmp:
        data_file = os.path.join(tmp, "data.npz")
        import numpy as np

        np.savez(data_file, **data)
        cache = jax_cache.environment(os.path.join(tmp, "jax-cache"))

        def measure_in_child(key, options=options):
            implementation = IMPLEMENTATIONS[key[0]]
            return driver.run_child("benchmarks.headline", {
                "name": key[0], "depth": key[1], "data_file": data_file, "options": options,
            }, args.timeout, backend=implementation.keras_backend,
                env=cache if implementation.compilation_cache else None)

        for key in plan:  # a user's first run (one epoch: every shape), fills the cache
            if IMPLEMENTATIONS[key[0]].compilation_cache:
                print(f"filling JAX's compilation cache: {key[0]} depth {key[1]}", flush=True)
                measure_in_child(key, {**options, "epochs": 1})
        runs = driver.interleaved(
            plan, args.repeats, measure_in_child,
            describe=lambda key, run: (
                f"{key[0]} depth {key[1]}: total {run['total_s']:.2f} s, loss "
                f"{run['final_loss']:.3f}, acc {run['test_accuracy']:.3f}"))

    rows = [summarise(name, depth, runs[(name, depth)]) for name, depth in plan]
    summary = {
        "data": f"{len(data['x_train'])} train / {len(data['x_test'])} test images from {source}",
        "settings": {**options, "learning_rate": 5e-3, "clipnorm": 5.0, "transform_bias": -2.0,
                     "repeats": args.repeats},
        "implementations": {n: IMPLEMENTATIONS[n].description for n in args.implementations},
        "results": rows,
        "skipped": skipped,
        "ratios": ratios(rows),
        "memory_per_layer": memory_per_layer(rows, args.batch_size),
    }
    print()
    print(format_tables(summary))
    driver.write_results(args.out, summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
