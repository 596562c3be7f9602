"""Input pipelines: the batches a run trains and is evaluated on.

Training batches are float32 raw pixels (the model preprocesses) and int labels; every
epoch is shuffled (and augmented) from a seed made of the run's seed and the epoch alone,
so an interrupted run that resumes sees the same batches as one never stopped.
"""

from __future__ import annotations

import tensorflow as tf

from training import augment


def _with_data_sharding(ds: tf.data.Dataset) -> tf.data.Dataset:
    # Multi-worker: every worker reads all data in the same order and keeps its share of
    # each batch (datasets with one file cannot be split by file).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def _to_float(x, y):
    return tf.cast(x, tf.float32), y


def pipeline(split: tf.data.Dataset, batch_size: int, shuffle: int = 0, seed: int = 0):
    """Batches of float32 raw pixels (the model preprocesses) and int labels."""
    if shuffle:
        split = split.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    return (
        split.batch(batch_size)
        .map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def training_batches(
    split: tf.data.Dataset,
    *,
    num_examples: int,
    batch_size: int,
    seed: int,
    epoch: int,
    augmentation: str = "none",
    skip_batches: int = 0,
) -> tf.data.Dataset:
    """The training batches of epoch `epoch` (0-based), float32 raw pixels and labels.

    The epoch is shuffled (and augmented) from a seed made of `seed` and `epoch` alone,
    so it holds the same batches whether or not the run was interrupted before it;
    `skip_batches` drops the first batches, which a checkpoint already saw.
    """
    augment_fn = augment.get(augmentation)
    epoch_seed = seed * 1_000_003 + epoch
    ds = split.shuffle(num_examples, seed=epoch_seed, reshuffle_each_iteration=False)
    if augment_fn is None:
        ds = ds.batch(batch_size).map(_to_float, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.enumerate().map(
            lambda i, xy: (augment_fn(xy[0], tf.stack([tf.constant(epoch_seed, tf.int64), i])),
                           xy[1]),
            num_parallel_calls=tf.data.AUTOTUNE,
        ).batch(batch_size)
    return _with_data_sharding(ds.skip(skip_batches).prefetch(tf.data.AUTOTUNE))


def evaluation_batches(split: tf.data.Dataset, batch_size: int = 1000) -> tf.data.Dataset:
    """The test split as it is: no shuffling, no augmentation."""
    return _with_data_sharding(pipeline(split, batch_size))
