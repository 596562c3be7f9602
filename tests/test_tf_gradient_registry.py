"""training.runtime.tf_gradient_registry: the graphs of models trained one after another in a
process (a search's trials, a study's in-process runs) are freed (tensorflow/tensorflow#97697)."""

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import func_graph
from test_training import separable_digits

import zoo
from training.experiments.variants import variants_study
from training.runtime.tf_gradient_registry import released_custom_gradients
from training.tuning import search

TRAIN_STEP = "one_step_on_data"  # the graph Keras's TensorFlow trainer traces per step


def _graphs() -> weakref.WeakSet:
    gc.collect()
    return weakref.WeakSet(o for o in gc.get_objects() if isinstance(o, func_graph.FuncGraph))


def _train_steps_created_since(before: weakref.WeakSet) -> list[str]:
    """Names of the train-step graphs alive now that were not alive at `before`."""
    keras.backend.clear_session()
    return [g.name for g in _graphs() if g not in before and g.name.startswith(TRAIN_STEP)]


def _fit_one_model() -> None:
    model = zoo.load("highway_fc10_mnist", depth=3)
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.random.default_rng(0).random((64, 28, 28, 1), dtype=np.float32)
    model.fit(x, np.arange(64) % 10, batch_size=32, epochs=1, verbose=0)


@pytest.mark.slow
def test_the_block_frees_a_trained_models_graphs_that_tensorflow_keeps():
    before = _graphs()
    _fit_one_model()
    kept = _train_steps_created_since(before)
    # The leak itself (TensorFlow 2.21, pinned): when this fails, TensorFlow has fixed it
    # and training.runtime.tf_gradient_registry can go.
    assert kept, f"TensorFlow {tf.__version__} no longer keeps trained models' graphs"

    before = _graphs()
    with released_custom_gradients():
        _fit_one_model()
    assert _train_steps_created_since(before) == []


def test_the_block_leaves_entries_registered_before_it():
    @tf.custom_gradient
    def scaled(x):
        return 2 * x, lambda dy: 2 * dy

    def gradient_of_scaled(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = scaled(x)
        return tape.gradient(y, x)

    outside = tf.function(gradient_of_scaled)
    assert float(outside(tf.constant(1.0))) == 2.0  # registers an entry
    with released_custom_gradients():
        inside = tf.function(gradient_of_scaled)
        assert float(inside(tf.constant(3.0))) == 2.0
    # A new trace of the function traced before the block still finds its gradient, and so
    # does a new trace of the one traced inside (it registers a new entry).
    assert float(outside(tf.constant([1.0, 2.0]))[1]) == 2.0
    assert float(inside(tf.constant([1.0, 2.0]))[0]) == 2.0


@pytest.mark.slow
def test_a_search_and_an_in_process_study_free_their_trials_graphs(tmp_path):
    before = _graphs()
    search("highway_fc10_mnist", out=tmp_path / "search", epochs=1, max_trials=3, depth=3,
           max_train_examples=300, max_test_examples=100)
    assert _train_steps_created_since(before) == []

    before = _graphs()
    variants_study(["coupled", "plain"], [3], 1, modes=["equal"],
                   dataset=separable_digits(n_train=128, n_test=50), epochs=1,
                   out=tmp_path / "variants", isolate=False)
    assert _train_steps_created_since(before) == []
