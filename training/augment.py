"""Training-time data augmentation, as `tf.data` maps.

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
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

AUGMENTATIONS = ("none", "pad_crop_flip")
PAD = 8


def pad_with_mean(image: tf.Tensor, pad: int = PAD) -> tf.Tensor:
    """`image` (HWC, raw pixels) as float32, padded by `pad` pixels with its own mean."""
    image = tf.cast(image, tf.float32)
    mean = tf.reduce_mean(image)  # one value for all channels: GCN's mean, zero after GCN
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
    padded = pad_with_mean(image, pad)
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    cropped = tf.image.stateless_random_crop(padded, tf.shape(image), seed=crop_seed)
    return tf.image.stateless_random_flip_left_right(cropped, seed=flip_seed)


def get(name: str) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor] | None:
    """The augmentation `name` as `f(image, seed) -> image`; None for "none"."""
    if name not in AUGMENTATIONS:
        raise ValueError(
            f"Unknown augmentation {name!r}; choose from {', '.join(AUGMENTATIONS)}."
        )
    return None if name == "none" else pad_crop_flip
