"""Datasets of the zoo, offline first: images (`training.data.images`), text (`.text`).

    >>> from training.data import load_dataset          # MNIST, Fashion-MNIST, CIFAR, ImageNet
    >>> from training.data.text import load_corpus      # Mikolov-format corpora (PTB, Shakespeare)

The names below are loaded on first use, so that `training.data.text` (NumPy only) imports
without TensorFlow; the image side imports TensorFlow when one of its names is first asked for.
Tests that replace a private helper patch it where it lives (`training.data.images._prepare`).
"""

from __future__ import annotations

import importlib

# name -> the module of this package that defines it.
_EXPORTS = {
    **dict.fromkeys(
        ("DATASETS", "SYSTEM_DATA_DIRS", "DataDirNotWritableError", "Dataset", "DatasetFileError",
         "DatasetNotFoundError", "DatasetSpec", "OfflineFallbackWarning", "load_dataset"),
        "images"),
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
