"""Input pipelines: the batches a run trains and is evaluated on.

Training batches are float32 raw pixels (the model preprocesses) and int labels; every
epoch is shuffled (and augmented) from a seed made of the run's seed and the epoch alone,
so an interrupted run that resumes sees the same batches as one never stopped.

A split held in memory (`training.data.Examples`: every dataset but ImageNet) is batched with
NumPy, the same batches on every backend: a `keras.utils.PyDataset` on JAX and PyTorch (no
TensorFlow imported), wrapped in a `tf.data.Dataset` on TensorFlow (which tf.distribute
shards). A `tf.data.Dataset` split (ImageNet, or one passed in) is batched by tf.data.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np

from training.data import augment
from training.data.images import Examples

# The seed of an epoch's shuffle and augmentation, from the run's seed and the epoch alone.
_SEED_STRIDE = 1_000_003


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch `epoch` (0-based) of a run seeded with `seed`."""
    return seed * _SEED_STRIDE + epoch


class ExampleBatches(keras.utils.PyDataset):
    """Batches of `Examples` in a fixed order: float32 images and int64 labels.

    Args:
        examples: the split.
        batch_size: examples per batch (the last batch may be smaller).
        order: the examples' indices in the order they are batched (default: as they are).
        augment_fn: `f(images, seeds) -> images` (`training.data.augment.for_arrays`), or None.
        seed: the epoch's seed; image `i` of the order is augmented from `(seed, i)`.
        skip_batches: batches left out at the start (a checkpoint already saw them).
        share: (index, count): this process feeds slice `index` of `count` equal slices of
            every batch (several processes training data-parallel); each batch's size must
            divide by `count` (`training.runtime.distribute.check_even_batches`).
    """

    def __init__(self, examples: Examples, batch_size: int, order: np.ndarray | None = None,
                 augment_fn=None, seed: int = 0, skip_batches: int = 0,
                 share: tuple[int, int] = (0, 1)):
        super().__init__()
        self.share = share
        self.examples = examples
        self.batch_size = batch_size
        self.order = np.arange(len(examples)) if order is None else order
        self.augment_fn = augment_fn
        self.seed = seed
        self.skip_batches = skip_batches

    def __len__(self) -> int:
        return max(math.ceil(len(self.order) / self.batch_size) - self.skip_batches, 0)

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        start = (self.skip_batches + index) * self.batch_size
        positions = np.arange(start, min(start + self.batch_size, len(self.order)))
        index, count = self.share
        positions = np.split(positions, count)[index]  # raises if the batch does not divide
        chosen = self.order[positions]
        images = self.examples.images[chosen].astype(np.float32)
        if self.augment_fn is not None:
            images = self.augment_fn(images, [(self.seed, int(p)) for p in positions])
        return images, self.examples.labels[chosen]


def _as_tf_dataset(batches: ExampleBatches) -> Any:
    """The same batches as a `tf.data.Dataset` of known length (for tf.distribute)."""
    import tensorflow as tf

    shape = batches.examples.images.shape[1:]
    ds = tf.data.Dataset.from_generator(
        lambda: (batches[i] for i in range(len(batches))),
        output_signature=(tf.TensorSpec((None, *shape), tf.float32),
                          tf.TensorSpec((None,), tf.int64)),
    )
    ds = ds.apply(tf.data.experimental.assert_cardinality(len(batches)))
    return _with_data_sharding(ds.prefetch(tf.data.AUTOTUNE))


def _one_share_for_tf_data(share: tuple[int, int]) -> None:
    if share[1] > 1:
        raise ValueError("Several processes training data-parallel on JAX need a dataset held "
                         "in memory; a tf.data split (ImageNet) trains on one process.")


def _for_backend(batches: ExampleBatches) -> Any:
    return _as_tf_dataset(batches) if keras.backend.backend() == "tensorflow" else batches


def _with_data_sharding(ds):
    # Multi-worker: every worker reads all data in the same order and keeps its share of
    # each batch (datasets with one file cannot be split by file).
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def _to_float(x, y):
    import tensorflow as tf

    return tf.cast(x, tf.float32), y


def pipeline(split, batch_size: int, shuffle: int = 0, seed: int = 0):
    """Batches of float32 raw pixels (the model preprocesses) and int labels, of a
    `tf.data.Dataset` split."""
    import tensorflow as tf

    if shuffle:
        split = split.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    return (
        split.batch(batch_size)
        .map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def training_batches(
    split: Examples | Any,
    *,
    num_examples: int,
    batch_size: int,
    seed: int,
    epoch: int,
    augmentation: str = "none",
    skip_batches: int = 0,
    share: tuple[int, int] = (0, 1),
) -> Any:
    """The training batches of epoch `epoch` (0-based), float32 raw pixels and labels.

    The epoch is shuffled (and augmented) from a seed made of `seed` and `epoch` alone,
    so it holds the same batches whether or not the run was interrupted before it;
    `skip_batches` drops the first batches, which a checkpoint already saw.

    `Examples`: a permutation drawn by NumPy from the epoch's seed, each image augmented from
    the epoch's seed and its position in the epoch; the same batches on every backend.
    A `tf.data.Dataset`: tf.data's shuffle and augmentation, from the same seeds.
    `share`: this process's slice of every batch (`ExampleBatches`).
    """
    seed_ = epoch_seed(seed, epoch)
    if isinstance(split, Examples):
        order = np.random.default_rng(seed_).permutation(len(split))
        return _for_backend(ExampleBatches(split, batch_size, order,
                                           augment.for_arrays(augmentation), seed_,
                                           skip_batches, share))
    _one_share_for_tf_data(share)
    return _tf_training_batches(split, num_examples, batch_size, seed_, augmentation,
                                skip_batches)


def _tf_training_batches(split, num_examples, batch_size, seed, augmentation, skip_batches):
    import tensorflow as tf

    augment_fn = augment.get(augmentation)
    ds = split.shuffle(num_examples, seed=seed, reshuffle_each_iteration=False)
    if augment_fn is None:
        ds = ds.batch(batch_size).map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.enumerate().map(
            lambda i, xy: (augment_fn(xy[0], tf.stack([tf.constant(seed, tf.int64), i])),
                           xy[1]),
            num_parallel_calls=tf.data.AUTOTUNE,
        ).batch(batch_size)
    return _with_data_sharding(ds.skip(skip_batches).prefetch(tf.data.AUTOTUNE))


EVALUATION_BATCH = 1000


def evaluation_batches(split: Examples | Any, batch_size: int = EVALUATION_BATCH,
                       share: tuple[int, int] = (0, 1)) -> Any:
    """The test split as it is: no shuffling, no augmentation; `share` as for training."""
    if isinstance(split, Examples):
        return _for_backend(ExampleBatches(split, batch_size, share=share))
    _one_share_for_tf_data(share)
    return _with_data_sharding(pipeline(split, batch_size))
