"""Memory of a long search in one process: what each KerasTuner trial leaves behind.

    python -m benchmarks.trial_memory [--depths 10,50] [--trials 20] [--repeats 1]

A `highway-zoo tune` search (`training.tuning.search`: random search of the paper's space,
SGD + momentum) of `--trials` trials of the zoo's FC highway net at each depth, 1 epoch each on
the MNIST sample, run in a fresh process (a) as the project runs it, with
`training.runtime.tf_gradient_registry.released_custom_gradients()` around every trial, and (b)
without it, as TensorFlow 2.21 and Keras leave it (tensorflow/tensorflow#97697: every traced
train step stays in memory). The child records its resident memory (VmRSS, after a
`gc.collect()`) at the end of every trial; the table gives the RSS after the first and the
last trial, the growth per trial (least-squares slope over trials 2..N, the first trial's
one-time imports and traces left out) and the peak. Writes benchmarks/results/trial_memory.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import tempfile
from pathlib import Path

from benchmarks import driver

RESULTS = Path(__file__).resolve().parent / "results" / "trial_memory.json"
MODES = ("released", "kept")  # with the project's workaround; without it


def measure(mode: str, depth: int, trials: int) -> dict:
    """Runs in the child process."""
    import numpy as np

    from training.runtime import tf_gradient_registry
    from training.tuning import search

    released = tf_gradient_registry.released_custom_gradients
    after_trial: list[float] = []

    @contextlib.contextmanager
    def recorded():
        # The tuner enters this around every trial (it looks the name up at each trial).
        with released() if mode == "released" else contextlib.nullcontext():
            yield
        gc.collect()
        after_trial.append(driver.memory_mb("VmRSS"))

    tf_gradient_registry.released_custom_gradients = recorded
    with tempfile.TemporaryDirectory() as out:
        search("highway_fc10_mnist", out=Path(out) / "search", epochs=1, max_trials=trials,
               depth=depth)
    x = np.arange(1, len(after_trial))
    slope = float(np.polyfit(x, after_trial[1:], 1)[0]) if len(x) > 1 else float("nan")
    return {"mode": mode, "depth": depth, "trials": len(after_trial),
            "rss_after_trial_mb": [round(v, 1) for v in after_trial],
            "rss_first_mb": after_trial[0], "rss_last_mb": after_trial[-1],
            "mb_per_trial": slope, "peak_rss_mb": driver.memory_mb()}


def _ints(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d.strip()]


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.trial_memory", __doc__, RESULTS)
    p.add_argument("--depths", type=_ints, default=[10, 50])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    return p


def run(args: argparse.Namespace) -> int:
    configs = [(mode, depth) for depth in args.depths for mode in MODES]
    runs_by = driver.interleaved(
        configs, args.repeats,
        lambda key: driver.run_child("benchmarks.trial_memory", {
            "mode": key[0], "depth": key[1], "trials": args.trials}),
        describe=lambda key, run: f"{key[0]} depth {key[1]}: {run['mb_per_trial']:.1f} MB "
                                  f"a trial, {run['rss_last_mb']:.0f} MB after the last")
    rows = [{"mode": mode, "depth": depth, "trials": runs[0]["trials"], "repeats": len(runs),
             **driver.medians(runs, ("rss_first_mb", "rss_last_mb", "mb_per_trial",
                                     "peak_rss_mb"), 1),
             "rss_after_trial_mb": runs[0]["rss_after_trial_mb"]}
            for (mode, depth), runs in runs_by.items()]
    print()
    print(driver.table(
        ["depth", "trials", "per-trial graphs", "RSS after trial 1 (MB)",
         "RSS after last (MB)", "growth per trial (MB)", "peak RSS (MB)"],
        ["---:", "---:", ":---", *["---:"] * 4],
        [[r["depth"], r["trials"], r["mode"], f"{r['rss_first_mb']:.0f}",
          f"{r['rss_last_mb']:.0f}", f"{r['mb_per_trial']:.1f}", f"{r['peak_rss_mb']:.0f}"]
         for r in rows]))
    driver.write_results(args.out, {"epochs_per_trial": 1, "data": "MNIST sample",
                                    "results": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
