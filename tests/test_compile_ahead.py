"""`training.compile_ahead.CompileAhead` on JAX, in a child process with KERAS_BACKEND=jax (the
suite runs on TensorFlow) and no compilation cache: two models with the same initial weights
fit the same batches (an epoch ending in a smaller batch, a test split ending in one), one with
the callback and one without. With it, the later shapes are compiled on its thread and never
again on the main thread; the weights and the logs are those of the fit without it, bit for bit.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np

from training import compile_ahead

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, threading, warnings
warnings.simplefilter("ignore")
import jax, keras, numpy as np
import zoo
from training.compile_ahead import CompileAhead, applies
from training.data.images import Examples
from training.pipeline import ExampleBatches

compiles = []  # (function, thread) of each XLA compilation
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: compiles.append((kw.get("fun_name"),
                                                  threading.current_thread().name))
    if event == "/jax/core/compile/backend_compile_duration" else None)

rng = np.random.default_rng(0)
def examples(n):
    return Examples(rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8),
                    rng.integers(0, 10, n).astype(np.int64))
train, test = examples(100), examples(70)
epoch = ExampleBatches(train, 32, order=rng.permutation(100))  # 32, 32, 32, 4
test_batches = ExampleBatches(test, 50)  # 50, 20

def fit(model, callbacks):
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(epoch, epochs=2, validation_data=test_batches, callbacks=callbacks,
                        shuffle=False, verbose=0)
    return history.history, [np.asarray(w) for w in model.weights]

with_it = zoo.load("highway_fc10_mnist", depth=3)
without = zoo.load("highway_fc10_mnist", depth=3)
without.set_weights(with_it.get_weights())
ahead = CompileAhead.for_data(epoch, epoch, test_batches)
shapes = {"train": [[list(np.shape(p)) for p in b] for b in ahead.train_batches],
          "test": [[list(np.shape(p)) for p in b] for b in ahead.test_batches]}
history, weights = fit(with_it, [ahead])
ahead.thread.join()
steps = [c for c in compiles if c[0] in ("jit(train_step)", "jit(test_step)")]
history_without, weights_without = fit(without, [])
json.dump({
    "applies": applies(with_it), "shapes": shapes, "steps": steps,
    "same_history": history == history_without,
    "same_weights": all(np.array_equal(a, b) for a, b in zip(weights, weights_without,
                                                              strict=True)),
}, open(sys.argv[1], "w"))
"""


def test_later_shapes_compile_on_its_thread_and_results_do_not_change(tmp_path):
    out = tmp_path / "record.json"
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_COMPILATION_CACHE_DIR": "",
           "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(HERE.parent)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["applies"]
    # The epoch's last batch of 4 (its first, of 32, is the first step's); both test shapes.
    assert record["shapes"] == {"train": [[[4, 28, 28, 1], [4]]],
                                "test": [[[50, 28, 28, 1], [50]], [[20, 28, 28, 1], [20]]]}
    steps = sorted(map(tuple, record["steps"]))
    assert steps == [("jit(test_step)", "compile-ahead"), ("jit(test_step)", "compile-ahead"),
                     ("jit(train_step)", "MainThread"), ("jit(train_step)", "compile-ahead")]
    assert record["same_weights"] and record["same_history"]


def test_one_per_shape_keeps_the_first_batch_of_each_shape_but_the_one_left_out():
    full, other, last = ((np.zeros((8, 3)), np.zeros(8)), (np.ones((8, 3)), np.ones(8)),
                         (np.zeros((2, 3)), np.zeros(2)))
    assert compile_ahead.one_per_shape([full, other, last]) == [full, last]
    assert compile_ahead.one_per_shape([full, last], but=other) == [last]
    assert compile_ahead.one_per_shape([full, full], but=last) == [full]


def test_it_does_nothing_on_tensorflow():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    assert keras.backend.backend() == "tensorflow" and not compile_ahead.applies(model)


def test_for_data_takes_the_ends_of_each_split_and_leaves_out_empty_ones():
    from training.data.images import Examples
    from training.pipeline import ExampleBatches

    def batches(n, size):
        return ExampleBatches(Examples(np.zeros((n, 2, 2, 1), np.uint8), np.zeros(n, np.int64)),
                              size)

    ahead = compile_ahead.CompileAhead.for_data(batches(10, 4), batches(10, 4), batches(6, 3))
    assert [b[0].shape[0] for b in ahead.train_batches] == [2]  # 4, 4, 2: the first is done
    assert [b[0].shape[0] for b in ahead.test_batches] == [3]  # 3, 3: one shape
    resumed_at_the_last = ExampleBatches(batches(10, 4).examples, 4, skip_batches=2)  # 2
    ahead = compile_ahead.CompileAhead.for_data(resumed_at_the_last, batches(10, 4),
                                                batches(0, 3))
    assert [b[0].shape[0] for b in ahead.train_batches] == [4]
    assert ahead.test_batches == []
