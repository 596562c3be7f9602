"""training.timeline: where a run's time goes, recorded in its run.json; the process's age; a
command's phases from the process's start (JAX, in a subprocess)."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from training import timeline
from training.data import Dataset, Examples
from training.runtime import jax_cache
from training.trainer import train

TRAIN_PHASES = ["data", "build", "compile", "training", "evaluation", "callbacks", "saving"]
COMMAND_PHASES = ["interpreter", "keras", "imports", *TRAIN_PHASES]


def _examples(n, seed):
    rng = np.random.default_rng(seed)
    return Examples(rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8),
                    rng.integers(0, 10, n).astype(np.int64))


def test_process_age_counts_from_the_process_start():
    code = "from training import timeline; print(timeline.process_age())"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    wall = time.perf_counter() - start
    # The kernel records the start in whole clock ticks, rounded down: the age may read one
    # tick (10 ms) older than the process is.
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0 < float(done.stdout) <= wall + tick
    assert 0 < timeline.process_age()  # this process: older than that


def test_the_command_lines_marks_go_to_the_first_run_of_the_process(monkeypatch):
    ages = iter([0.05, 1.25, 1.5])  # main's entry, Keras imported, train() called
    monkeypatch.setattr(timeline, "process_age", lambda: next(ages))
    timeline.mark("main")
    timeline.mark("keras")
    clock = timeline.Clock()
    recorded = clock.phases()
    phases = recorded["phases_s"]
    assert list(phases) == ["interpreter", "keras", "imports", "data", "build"]
    assert phases["interpreter"] == 0.05
    assert phases["keras"] == pytest.approx(1.2) and phases["imports"] == pytest.approx(0.25)
    assert recorded["process_s"] == pytest.approx(1.5 + recorded["train_s"], abs=1e-3)
    monkeypatch.setattr(timeline, "process_age", lambda: 9.0)
    later = timeline.Clock().phases()  # a second run in the process: no marks of its own
    assert "interpreter" not in later["phases_s"] and "process_s" not in later


def test_a_run_records_its_phases_within_its_time(tmp_path):
    data = Dataset(name="synthetic", train=_examples(256, 0), test=_examples(64, 1),
                   num_classes=10, image_shape=(28, 28, 1), num_train=256, num_test=64,
                   source="random pixels")
    start = time.perf_counter()
    train("highway_fc10_mnist", dataset=data, epochs=2, out=tmp_path / "run", depth=3,
          stacked=True, verbose=0)
    wall = time.perf_counter() - start
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["timeline"]
    phases = recorded["phases_s"]
    assert list(phases) == TRAIN_PHASES  # a library call: no phases before train()
    assert all(seconds > 0 for seconds in phases.values()), phases
    assert sum(phases.values()) == pytest.approx(recorded["train_s"], abs=1e-3)
    assert recorded["train_s"] <= wall
    assert "process_s" not in recorded


@pytest.mark.backends
def test_a_command_records_its_phases_from_the_process_start(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "KERAS_BACKEND": "jax", **jax_cache.environment(None)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "highway_zoo.cli", "train", "highway_fc10_mnist",
                    "--depth", "3", "--stacked", "--epochs", "1", "--out", str(out),
                    "--verbose", "0", "--no-gate-summaries"],
                   capture_output=True, text=True, check=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    recorded = json.loads((out / "run.json").read_text())["timeline"]
    phases = recorded["phases_s"]
    assert list(phases) == COMMAND_PHASES
    assert all(seconds > 0 for seconds in phases.values()), phases
    assert sum(phases.values()) == pytest.approx(recorded["process_s"], abs=1e-3)
    assert recorded["train_s"] < recorded["process_s"] <= wall


def _clock_with_hooks():
    """A clock after its data, and its two callbacks on a compiled model: a test calls their
    hooks in the order a `fit` might."""
    import keras

    clock = timeline.Clock()
    clock.lap("data")
    head, tail = clock.callbacks()
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    for callback in (head, tail):
        callback.set_model(model)
    return clock, head, tail


def test_a_first_step_hook_that_runs_late_in_kerass_thread_pool_counts_no_time_twice():
    # One step, then the test split: Keras may run the step's batch hook (async_safe) in its
    # thread pool after the evaluation has begun. The evaluation is then not "compile" too,
    # and "training" (what is left) is not negative.
    clock, head, tail = _clock_with_hooks()
    head.on_train_begin()
    tail.on_train_begin()
    head.on_test_begin()  # the evaluation begins before the step's hook has run
    time.sleep(0.05)
    head.on_test_end()
    tail.on_train_batch_end(0)  # the step's hook, late
    head.on_epoch_end(0)
    tail.on_epoch_end(0)
    tail.on_train_end()
    phases = clock.phases()["phases_s"]
    assert phases["evaluation"] >= 0.05
    assert phases["compile"] < 0.05 and phases["training"] >= 0, phases


def test_the_callbacks_before_the_first_step_count_once_and_not_against_training():
    # The run's callbacks at the start of training (gate summaries, history) run between
    # "build" and the first step's end: they are "callbacks", taken off "compile"'s interval.
    # Taken off "training" instead, a short epoch read negative (CI: training -0.02 s).
    clock, head, tail = _clock_with_hooks()
    head.on_train_begin()
    time.sleep(0.1)  # the run's own callbacks at the start of training
    tail.on_train_begin()
    time.sleep(0.02)  # the first step
    tail.on_train_batch_end(0)
    time.sleep(0.01)  # the other steps
    head.on_test_begin()
    time.sleep(0.02)
    head.on_test_end()
    head.on_epoch_end(0)
    tail.on_epoch_end(0)
    tail.on_train_end()
    phases = clock.phases()["phases_s"]
    assert phases["callbacks"] >= 0.1
    assert 0.02 <= phases["compile"] < 0.1, phases
    assert 0.01 <= phases["training"] < 0.1, phases
