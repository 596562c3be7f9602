"""Datasets of the zoo, offline first: images (`training.data.images`), text (`.text`).

    >>> from training.data import load_dataset          # MNIST, Fashion-MNIST, CIFAR, ImageNet
    >>> from training.data.text import load_corpus      # Mikolov-format corpora (PTB, Shakespeare)
    >>> from training.data import prepare_images        # official archives or image folders

The names below are loaded on first use. Neither side imports TensorFlow to read a dataset
held in memory (`Examples`: all but ImageNet); ImageNet's splits are tf.data's.
Tests that replace a private helper patch it where it lives (`training.data.images._prepare`).
"""

from __future__ import annotations

import importlib

# name -> the module of this package that defines it.
_EXPORTS = {
    **dict.fromkeys(
        ("DATASETS", "SYSTEM_DATA_DIRS", "DataDirNotWritableError", "Dataset", "DatasetFileError",
         "DatasetNotFoundError", "DatasetSpec", "Examples", "OfflineFallbackWarning",
         "first_examples", "load_dataset", "representative_sample"),
        "images"),
    **dict.fromkeys(("ImageSourceError", "prepare_images"), "prepared_images"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
