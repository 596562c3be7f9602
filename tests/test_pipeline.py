"""The input pipeline of the splits held in memory (`training.data.Examples`): NumPy batches,
the same on every backend, with the semantics of the tf.data pipeline they replace (each epoch
a permutation of the split drawn from the run's seed and the epoch; `skip_batches` resumes
inside it; the test split as it is; CIFAR's pad-crop-flip per image, from its own seed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from training.data import Examples, augment
from training.data.pipeline import ExampleBatches, evaluation_batches, training_batches


def _examples(n=50, shape=(6, 5, 3), seed=0) -> Examples:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
    images[:, 0, 0, 0] = np.arange(n)  # each image says which one it is
    return Examples(images, np.arange(n, dtype=np.int64))


def _collect(batches):
    """Every batch's (images, labels), as NumPy, from a tf.data.Dataset or a PyDataset."""
    if isinstance(batches, ExampleBatches):
        return [batches[i] for i in range(len(batches))]
    return [(x.numpy(), y.numpy()) for x, y in batches]


def _labels(batches) -> np.ndarray:
    return np.concatenate([y for _, y in _collect(batches)])


EPOCH = dict(num_examples=50, batch_size=8, seed=3, epoch=0)


def test_an_epoch_is_a_permutation_drawn_from_the_seed_and_the_epoch_alone():
    split = _examples()
    order = _labels(training_batches(split, **EPOCH))
    assert sorted(order) == list(range(50)) and list(order) != list(range(50))
    np.testing.assert_array_equal(order, np.random.default_rng(3 * 1_000_003).permutation(50))
    np.testing.assert_array_equal(_labels(training_batches(split, **EPOCH)), order)
    other_epoch = _labels(training_batches(split, **{**EPOCH, "epoch": 1}))
    other_seed = _labels(training_batches(split, **{**EPOCH, "seed": 4}))
    assert sorted(other_epoch) == list(range(50))
    assert list(other_epoch) != list(order) and list(other_seed) != list(order)


def test_batches_hold_float32_pixels_and_their_own_labels():
    split = _examples()
    batches = _collect(training_batches(split, **EPOCH))
    assert [len(y) for _, y in batches] == [8] * 6 + [2]  # the last batch is smaller
    for x, y in batches:
        assert x.dtype == np.float32 and y.dtype == np.int64
        np.testing.assert_array_equal(x, split.images[y].astype(np.float32))


def test_a_resumed_epoch_skips_exactly_the_batches_already_seen():
    split = _examples()
    whole = _collect(training_batches(split, **EPOCH))
    for skip in (1, 3, 6, 7):
        rest = _collect(training_batches(split, **EPOCH, skip_batches=skip))
        assert len(rest) == len(whole) - skip
        for (x, y), (x_ref, y_ref) in zip(rest, whole[skip:], strict=True):
            np.testing.assert_array_equal(y, y_ref)
            np.testing.assert_array_equal(x, x_ref)


def test_the_test_split_is_batched_as_it_is():
    split = _examples(23)
    batches = _collect(evaluation_batches(split, batch_size=10))
    assert [len(y) for _, y in batches] == [10, 10, 3]
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]),
                                  split.images.astype(np.float32))


def test_tensorflow_gets_the_batches_numpy_makes():
    """On TensorFlow the same batches come as a tf.data.Dataset of known length."""
    import tensorflow as tf

    split = _examples()
    ds = training_batches(split, augmentation="pad_crop_flip", **EPOCH, skip_batches=2)
    assert isinstance(ds, tf.data.Dataset) and int(ds.cardinality()) == 5
    reference = ExampleBatches(split, 8, np.random.default_rng(3 * 1_000_003).permutation(50),
                               augment.for_arrays("pad_crop_flip"), 3 * 1_000_003, 2)
    for (x, y), (x_ref, y_ref) in zip(_collect(ds), _collect(reference), strict=True):
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(x, x_ref)


# Prints the labels and a checksum of the augmented pixels of one epoch, on KERAS_BACKEND.
EPOCH_ON_BACKEND = """
import json, sys
import numpy as np
import keras
from training.data import Examples
from training.data.pipeline import training_batches
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (50, 6, 5, 3), dtype=np.uint8)
batches = training_batches(Examples(images, np.arange(50)), num_examples=50, batch_size=8,
                           seed=3, epoch=0, augmentation="pad_crop_flip")
pairs = [batches[i] for i in range(len(batches))]
print(json.dumps({"backend": keras.backend.backend(), "type": type(batches).__name__,
                  "labels": np.concatenate([y for _, y in pairs]).tolist(),
                  "pixels": float(sum(float((x * np.arange(x.size).reshape(x.shape)).sum())
                                      for x, _ in pairs)),
                  "tensorflow": "tensorflow" in sys.modules}))
"""


@pytest.mark.backends
def test_jax_gets_the_same_batches_without_tensorflow():
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    done = subprocess.run([sys.executable, "-c", EPOCH_ON_BACKEND], env=env, check=True,
                          capture_output=True, text=True, timeout=300)
    on_jax = json.loads(done.stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(0)
    split = Examples(rng.integers(0, 256, (50, 6, 5, 3), dtype=np.uint8), np.arange(50))
    here = _collect(training_batches(split, augmentation="pad_crop_flip", **EPOCH))
    pixels = sum(float((x * np.arange(x.size).reshape(x.shape)).sum()) for x, _ in here)
    assert on_jax == {"backend": "jax", "type": "ExampleBatches",
                      "labels": np.concatenate([y for _, y in here]).tolist(),
                      "pixels": pixels, "tensorflow": False}


# --- CIFAR's augmentation, in NumPy --------------------------------------------------


def _crops_of(original: np.ndarray, pad: int) -> dict[bytes, tuple[int, int, bool]]:
    """Every crop the augmentation may give of `original`: pixels -> (top, left, flipped)."""
    h, w = original.shape[:2]
    mean = original.astype(np.float32).mean()
    padded = np.full((h + 2 * pad, w + 2 * pad, original.shape[2]), mean, np.float32)
    padded[pad:pad + h, pad:pad + w] = original
    crops = {}
    for top in range(2 * pad + 1):
        for left in range(2 * pad + 1):
            crop = padded[top:top + h, left:left + w]
            crops.setdefault(crop.tobytes(), (top, left, False))
            crops.setdefault(crop[:, ::-1].tobytes(), (top, left, True))
    return crops


@pytest.mark.parametrize("name, pad", [("pad_crop_flip", 8), ("pad4_crop_flip", 4)])
def test_pad_crop_flip_gives_a_crop_of_the_mean_padded_image_flipped_at_random(name, pad):
    rng = np.random.default_rng(1)
    image = rng.integers(0, 256, (10, 12, 3)).astype(np.float32)
    draws = 400
    out = augment.for_arrays(name)(np.repeat(image[None], draws, 0),
                                   [(7, i) for i in range(draws)])
    assert out.shape == (draws, 10, 12, 3) and out.dtype == np.float32
    crops = _crops_of(image, pad)
    found = [crops[x.tobytes()] for x in out]  # KeyError: not a crop of the padded image
    tops = {top for top, _, _ in found}
    lefts = {left for _, left, _ in found}
    flipped = sum(f for _, _, f in found)
    assert tops == lefts == set(range(2 * pad + 1))  # every offset drawn
    assert 150 < flipped < 250  # half flipped: 200 +- 2.5 standard deviations
    # The same seed, the same image; another seed, almost surely another.
    again = augment.for_arrays(name)(image[None], [(7, 3)])
    np.testing.assert_array_equal(again[0], out[3])


def test_the_padding_is_the_images_own_mean():
    image = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    padded = augment.pad_with_mean(image, pad=2)
    assert padded.shape == (6, 7, 2)
    np.testing.assert_array_equal(padded[2:4, 2:5], image)
    assert set(np.unique(padded[:2])) == {image.mean()}


def test_imagenets_crop_is_refused_for_images_held_in_memory_in_one_line():
    with pytest.raises(ValueError) as err:
        training_batches(_examples(), augmentation="random_resized_crop_flip", **EPOCH)
    assert "tf.data" in str(err.value) and "pad_crop_flip" in str(err.value)
    assert "\n" not in str(err.value)
