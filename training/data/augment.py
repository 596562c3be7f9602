"""Training-time data augmentation: NumPy for the images held in memory, `tf.data` maps else.

The CIFAR recipe of the highway papers (HWN-README, the Caffe data layers; spec §3):
images are global-contrast-normalised, zero-padded by 8 pixels on each side, and in
training a random 32x32 crop is taken and mirrored horizontally at random; the test
images are used as they are.

Zoo models take RAW pixels and do the GCN themselves, so "zero after GCN" is, in raw
space, the image's own mean: GCN subtracts one mean over all pixels and channels
(`layers.GlobalContrastNormalization`), so the padding is that one value in every channel,
which the model's GCN maps to (about) zero. (It is exactly zero for the padded image; the
model normalises the crop, whose statistics differ slightly.) Pixel values stay in the
range [0, 255] and the images keep their shape.

The random draws are stateless, from a seed per image, so an epoch's augmentation depends
only on the run's seed, the epoch and the image's position: a resumed run sees the same
images as an uninterrupted one.

Two forms: `for_arrays(name)` augments a batch of NumPy images (the splits held in memory,
`training.data.Examples`, on every backend, without TensorFlow); `get(name)` is the
`tf.data` map of a `tf.data.Dataset` split (ImageNet's, or one passed in), drawn by
TensorFlow's stateless ops. They draw the same distributions from different generators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from training.recipes import AUGMENTATIONS

if TYPE_CHECKING:
    import tensorflow as tf

PAD = 8


def pad_with_mean(image: np.ndarray, pad: int = PAD) -> np.ndarray:
    """`image` (HWC, raw pixels) as float32, padded by `pad` pixels with its own mean."""
    image = np.asarray(image, np.float32)
    mean = image.mean()  # one value for all channels: GCN's mean, zero after GCN
    return np.pad(image, [(pad, pad), (pad, pad), (0, 0)], constant_values=mean)


def pad_crop_flip_arrays(images: np.ndarray, seeds: Sequence[tuple[int, int]],
                         pad: int = PAD) -> np.ndarray:
    """Each image padded by `pad` pixels with its mean, cropped back at a random offset and
    flipped left-right with probability 1/2, drawn from its own seed.

    Args:
        images: float32 (n, height, width, channels), raw pixel values.
        seeds: one seed per image (any `numpy.random.default_rng` seed, e.g. a pair).
        pad: pixels added on each side before cropping (the crop moves by up to `pad`).
    """
    out = np.empty_like(images, dtype=np.float32)
    height, width = images.shape[1:3]
    for i, (image, seed) in enumerate(zip(images, seeds, strict=True)):
        rng = np.random.default_rng(seed)
        top, left = rng.integers(0, 2 * pad + 1, size=2)
        crop = pad_with_mean(image, pad)[top:top + height, left:left + width]
        out[i] = crop[:, ::-1] if rng.random() < 0.5 else crop
    return out


def for_arrays(name: str) -> Callable[[np.ndarray, Sequence], np.ndarray] | None:
    """The augmentation `name` as `f(images, seeds) -> images` on a NumPy batch; None for
    "none". ImageNet's crop exists for `tf.data` splits only (`get`)."""
    _check(name)
    if name == "random_resized_crop_flip":
        raise ValueError("random_resized_crop_flip augments ImageNet's tf.data splits only; "
                         "for images held in memory use pad_crop_flip, pad4_crop_flip or none.")
    return {
        "none": None,
        "pad_crop_flip": pad_crop_flip_arrays,
        "pad4_crop_flip": lambda images, seeds: pad_crop_flip_arrays(images, seeds, pad=4),
    }[name]


def _pad_with_mean_tf(image: tf.Tensor, pad: int = PAD) -> tf.Tensor:
    import tensorflow as tf

    image = tf.cast(image, tf.float32)
    mean = tf.reduce_mean(image)
    return tf.pad(image, [[pad, pad], [pad, pad], [0, 0]], constant_values=mean)


def pad_crop_flip(image: tf.Tensor, seed: tf.Tensor, pad: int = PAD) -> tf.Tensor:
    """One image padded by `pad` pixels with its mean, randomly cropped back and flipped.

    Args:
        image: an HWC image of raw pixel values.
        seed: a shape-(2,) integer tensor; the same seed gives the same crop and flip.
        pad: pixels added on each side before cropping (the crop moves by up to `pad`).

    Returns:
        A float32 image of the input's shape.
    """
    import tensorflow as tf

    padded = _pad_with_mean_tf(image, pad)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    cropped = tf.image.stateless_random_crop(padded, tf.shape(image), seed=crop_seed)
    return tf.image.stateless_random_flip_left_right(cropped, seed=flip_seed)


def random_resized_crop_flip(image: tf.Tensor, seed: tf.Tensor,
                             area=(0.08, 1.0), aspect=(3 / 4, 4 / 3)) -> tf.Tensor:
    """The ResNet/Inception training crop: a random box of 8-100% of the image's area and
    aspect ratio 3/4-4/3, resized back to the image's size, flipped at random.

    Returns a float32 image of the input's shape (the data pipeline makes it 224x224 first).
    """
    import tensorflow as tf

    image = tf.cast(image, tf.float32)
    box_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([1, 0, 4]), seed=box_seed,
        area_range=area, aspect_ratio_range=aspect, use_image_if_no_bounding_boxes=True,
        min_object_covered=0.0, max_attempts=10)
    crop = tf.slice(image, begin, size)
    resized = tf.image.resize(crop, tf.shape(image)[:2], method="bilinear")
    return tf.image.stateless_random_flip_left_right(resized, seed=flip_seed)


def get(name: str) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None:
    """The augmentation `name` as a `tf.data` map `f(image, seed) -> image`; None for
    "none"."""
    _check(name)
    return {
        "none": None,
        "pad_crop_flip": pad_crop_flip,
        # The 2025 BN CIFAR comparison's crop: 4 pixels of padding, not the 2015 paper's 8.
        "pad4_crop_flip": lambda image, seed: pad_crop_flip(image, seed, pad=4),
        "random_resized_crop_flip": random_resized_crop_flip,
    }[name]


def _check(name: str) -> None:
    if name not in AUGMENTATIONS:
        raise ValueError(
            f"Unknown augmentation {name!r}; choose from {', '.join(AUGMENTATIONS)}."
        )
