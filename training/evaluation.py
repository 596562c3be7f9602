"""Test-time evaluation beyond `fit`'s: the flip average.

A mirrored photograph is as likely as the photograph; averaging a classifier's probabilities
over an image and its left-right mirror is the cheapest test-time augmentation (the two
views of the ResNet and Wide-ResNet CIFAR reports). It is reported beside the single view,
never instead of it.
"""

from __future__ import annotations

import keras
import numpy as np

from training.data.images import Examples
from training.data.pipeline import EVALUATION_BATCH


def flip_averaged_probabilities(model: keras.Model, images: np.ndarray,
                                batch_size: int = EVALUATION_BATCH) -> np.ndarray:
    """The mean of `model`'s output for each image (n, height, width, channels) and for its
    left-right mirror."""
    images = np.asarray(images, np.float32)
    views = [model.predict(view, batch_size=batch_size, verbose=0)
             for view in (images, images[:, :, ::-1])]
    return (np.asarray(views[0], np.float64) + np.asarray(views[1], np.float64)) / 2


def flip_averaged_accuracy(model: keras.Model, split: Examples,
                           batch_size: int = EVALUATION_BATCH) -> float:
    """The fraction of `split` whose flip-averaged probabilities peak at the label."""
    probabilities = flip_averaged_probabilities(model, split.images, batch_size)
    return float(np.mean(probabilities.argmax(axis=-1) == split.labels))
