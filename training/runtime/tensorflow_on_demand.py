"""On JAX and PyTorch, Keras imports TensorFlow only once something else has.

Keras asks whether TensorFlow is available (`tf.available`, Keras 3.15) for every value it
serialises when it saves a model (`isinstance(value, tf.TensorShape)`) and when it seeds
(`keras.utils.set_random_seed` seeds TensorFlow too), and asking imports TensorFlow
whenever it is installed: about 0.5 GB and seconds in every JAX or PyTorch run, which
checkpoints. No TensorFlow object exists before TensorFlow is imported, so after `install()`
Keras is told TensorFlow is available exactly when it has been imported (by ImageNet's
tf.data splits, an export, ...): the answers to its questions stay the same. Nothing changes
on the TensorFlow backend. How Keras is told is private to Keras:
`training.runtime.private_api.defer_tensorflow_import`.
"""

from __future__ import annotations

import keras

from training.runtime import private_api


def install() -> None:
    """Keras's TensorFlow counts as available once imported (JAX and PyTorch backends)."""
    if keras.backend.backend() != "tensorflow":
        private_api.defer_tensorflow_import()
