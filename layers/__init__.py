"""Highway layers for Keras 3: dense and convolutional highway layers, a batch-normalised
highway block, the character-aware token embedder, and the input preprocessing layers of the
zoo's networks.

`import layers` imports neither Keras nor TensorFlow: `VARIANTS`, `GATED_SKIPS` and
`ALL_VARIANTS` (see `layers.variants`) are pure Python, and the layer classes are imported on
first use (PEP 562), so the command line reads the variant names at once. Once Keras is
imported, before `import layers` or after it, the classes are imported too, which registers
them for `keras.saving.load_model` (a post-import hook on `keras`, wrapt's).
"""

from __future__ import annotations

import importlib

import wrapt

from layers.variants import ALL_VARIANTS, GATED_SKIPS, VARIANTS

# Class -> the module that defines it (each imports Keras).
_LAZY = {
    "BNHighwayBlock": "layers.bn_highway_block",
    "CaffeImageNetPreprocessing": "layers.caffe_imagenet_preprocessing",
    "CharCNNEmbedder": "layers.char_cnn_embedder",
    "GlobalContrastNormalization": "layers.global_contrast_normalization",
    "HighwayConv2D": "layers.highway_conv2d",
    "HighwayDense": "layers.highway_dense",
    "HighwayStack": "layers.highway_stack",
}

__all__ = ["VARIANTS", "GATED_SKIPS", "ALL_VARIANTS", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Keras first: its import registers every class (the hook below) while none of their
    # modules is half-imported.
    importlib.import_module("keras")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def _register_classes(_keras) -> None:
    # Modules, not names: the class module that imported Keras is half-imported now and
    # registers its class when it ends (its siblings import it as a module for this reason).
    for module in dict.fromkeys(_LAZY.values()):
        importlib.import_module(module)


# Now if Keras is imported, else as soon as it is: the import order does not matter.
wrapt.register_post_import_hook(_register_classes, "keras")
