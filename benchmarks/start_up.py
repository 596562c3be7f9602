"""Start-up of a deep FC highway net: per-layer HighwayDense graph vs HighwayStack.

    python -m benchmarks.start_up [--depths 10,30,100,1000] [--repeats 3]
        [--max-graph-depth 100]

The net is the zoo's FC highway net (784 -> 50 tanh stem, depth - 1 highway layers of width 50,
b_T = -2, softmax 10; Adam 5e-3, global-norm clip 5, batch 128), built (a) per layer, as
`zoo.load("highway_fc10_mnist", depth=D)` does, (b) with the depth - 1 highway layers in one
`HighwayStack` and (c) the same stack with autodiff through its loop instead of its hand-written
backward pass (`hand_written_backward = False`; the stack before that optimisation). Each
(path, depth, repeat) runs in a fresh process (repeats interleaved) and reports the model build
time, the first training step (tf.function tracing + graph optimisation + one step), their sum
(time to first step), the median of the next steps and peak RSS. The table shows medians over
repeats; per-layer graphs deeper than `--max-graph-depth` run once on TensorFlow (tracing a
1000-layer one takes minutes) and not at all on the other backends. `--backends` runs every
path on each Keras backend (TensorFlow, JAX, PyTorch; "first step" is tracing and compiling on
JAX, eager on PyTorch; on JAX, `stack_autodiff` is autodiff through the same `lax.scan`).
Writes benchmarks/results/start_up.json. Synthetic MNIST-shaped data.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import backends, driver

RESULTS = Path(__file__).resolve().parent / "results" / "start_up.json"
# per-layer HighwayDense graph; HighwayStack (hand-written backward); HighwayStack with
# autodiff through the loop (hand_written_backward=False, what the stack did before).
PATHS = ("per_layer", "stack", "stack_autodiff")


def _stacked_model(depth: int, hand_written_backward: bool = True):
    import keras

    from layers.highway_stack import HighwayStack
    from zoo.heads import classifier, image_input

    inputs, x = image_input((28, 28, 1), "scale")
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(50, activation="tanh", name="stem_dense")(x)
    stack = HighwayStack(depth - 1, activation="tanh", transform_bias_initializer=-2.0,
                         name="highway_stack")
    stack.hand_written_backward = hand_written_backward
    x = stack(x)
    return keras.Model(inputs, classifier(x, 10, "softmax"))


def measure(path: str, depth: int, steps: int) -> dict:
    """Runs in the child process."""
    import keras
    import numpy as np

    import zoo

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (128, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, 128).astype("int64")
    keras.utils.set_random_seed(0)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * depth + 1000))

    start = time.perf_counter()
    if path.startswith("stack"):
        model = _stacked_model(depth, hand_written_backward=path == "stack")
    else:
        model = zoo.load("highway_fc10_mnist", depth=depth)
    model.compile(optimizer=keras.optimizers.Adam(5e-3, global_clipnorm=5.0),
                  loss="sparse_categorical_crossentropy")
    build = time.perf_counter() - start

    start = time.perf_counter()
    model.train_on_batch(x, y)
    first_step = time.perf_counter() - start

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    step = statistics.median(times)
    return {
        "backend": keras.backend.backend(), "path": path, "depth": depth,
        "params": model.count_params(),
        "build_s": build, "first_step_s": first_step, "to_first_step_s": build + first_step,
        "step_ms": 1000 * step, "steps_per_s": 1.0 / step,
        "peak_rss_mb": driver.memory_mb(),
    }


def _ints(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d.strip()]


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.start_up", __doc__, RESULTS)
    p.add_argument("--depths", type=_ints, default=[10, 30, 100, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-graph-depth", type=int, default=100,
                   help="per-layer graphs deeper than this run once, not --repeats times")
    p.add_argument("--steps", type=int, default=20)
    backends.add_option(p)
    return p


def plan(depths: list[int], backends: list[str], max_graph_depth: int
         ) -> tuple[list[tuple[str, str, int]], Callable[[tuple, int], bool]]:
    """The (backend, path, depth) configurations, and which to skip in a repeat: per-layer
    graphs deeper than `max_graph_depth` run in the first repeat only, on TensorFlow only."""
    configs = [(b, p, d) for d in depths for b in backends for p in PATHS
               if not (p == "per_layer" and d > max_graph_depth and b != "tensorflow")]

    def skip(key, repeat):
        return repeat > 0 and key[1] == "per_layer" and key[2] > max_graph_depth
    return configs, skip


def run(args: argparse.Namespace) -> int:
    configs, skip = plan(args.depths, args.backends, args.max_graph_depth)
    runs_by = driver.interleaved(
        configs, args.repeats,
        lambda key: driver.run_child("benchmarks.start_up", {"path": key[1], "depth": key[2],
                                                        "steps": args.steps}, backend=key[0]),
        describe=lambda key, run: f"{key[0]} {key[1]} depth {key[2]}: {run}", skip=skip)
    rows = []
    for (_, path, depth), runs in runs_by.items():
        # the backend the child ran on, as Keras in it reported
        rows.append({"backend": runs[0]["backend"], "path": path, "depth": depth,
                     "params": runs[0]["params"], "repeats": len(runs),
                     **driver.medians(runs, ("build_s", "first_step_s", "to_first_step_s",
                                             "step_ms", "steps_per_s", "peak_rss_mb"), 3)})

    rows.sort(key=lambda r: (r["depth"], args.backends.index(r["backend"]), r["path"]))

    print()
    print(driver.table(
        ["depth", "backend", "path", "params", "build (s)", "first step (s)",
         "to first step (s)", "step (ms)", "steps/s", "peak RSS (MB)"],
        ["---:", ":---", ":---", *["---:"] * 7],
        [[r["depth"], r["backend"], r["path"], f"{r['params']:,}", f"{r['build_s']:.2f}",
          f"{r['first_step_s']:.2f}", f"{r['to_first_step_s']:.2f}", f"{r['step_ms']:.1f}",
          f"{r['steps_per_s']:.1f}", f"{r['peak_rss_mb']:.0f}"] for r in rows]))
    summary = {"batch_size": 128, "results": rows, "ratios": ratios(rows)}
    driver.write_results(args.out, summary)
    return 0


def ratios(rows: list[dict]) -> dict[str, dict]:
    """Per backend: the stack's start-up at its deepest depth over its shallowest (first
    step, and build + first step), and at each depth the stack's steps/s over the other
    paths'. Printed as it goes."""
    by = {(r["backend"], r["path"], r["depth"]): r for r in rows}
    out = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        found = {}
        depths = sorted(d for b, p, d in by if b == backend and p == "stack")
        if len(depths) > 1:
            lo, hi = by[(backend, "stack", depths[0])], by[(backend, "stack", depths[-1])]
            found["stack_first_step_ratio"] = round(hi["first_step_s"] / lo["first_step_s"], 2)
            found["stack_to_first_step_ratio"] = round(
                hi["to_first_step_s"] / lo["to_first_step_s"], 2)
            print(f"\n{backend}: stack depth {depths[-1]} vs {depths[0]}: first step "
                  f"{found['stack_first_step_ratio']}x, build + first step "
                  f"{found['stack_to_first_step_ratio']}x")
        for d in depths:
            for other in ("per_layer", "stack_autodiff"):
                if (backend, other, d) in by:
                    ratio = (by[(backend, "stack", d)]["steps_per_s"]
                             / by[(backend, other, d)]["steps_per_s"])
                    found[f"steps_per_s_stack_vs_{other}_depth{d}"] = round(ratio, 2)
                    print(f"{backend} depth {d}: stack steps/s = {ratio:.2f}x {other}")
        out[backend] = found
    return out


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
