"""The zoo: the papers' highway architectures by name.

    >>> import zoo
    >>> zoo.list_models("highway_*_cifar10")
    ['highway_a_cifar10', 'highway_b_cifar10', 'highway_c_cifar10']
    >>> model = zoo.load("highway_b_cifar10")            # random weights
    >>> model = zoo.load("highway_fc50_mnist", depth=30, transform_bias=-3.0)
    >>> model = zoo.load("highway_fc10_mnist", weights="runs/fc10")  # a trained run
    >>> model = zoo.load("highway_conv32_fashion_mnist", weights="default")  # shipped
    >>> model = zoo.load("highway_conv32_fashion_mnist", weights="default", classes=5)
    >>> model = zoo.load("highway_b_cifar10", weights="caffe_cifar_tenth.cifar10_jpeg.f32")
    >>> features = zoo.load("highway_b_cifar10", include_top=False, pooling="avg")
    >>> zoo.save(model, "my-model/"); model = zoo.load("my-model/")       # a preset

`import zoo` imports neither Keras nor TensorFlow: the registry (`list_models`, `describe`,
`RECIPES`) is pure Python, so the command line lists and describes the networks at once.
Keras comes with the first network built: `load`, `save`, `save_weights`, `verify`,
`HighwayZooModel` and the errors are imported on first use (PEP 562), as are the submodules
`zoo.loading`, `zoo.model`, `zoo.presets` and `zoo.weights`. `zoo.quantize` (Keras int8, after
loading the float weights) is `zoo.quantization`'s.

`keras.saving.load_model` reads a zoo `.keras` file once `HighwayZooModel` is registered:
after `import zoo`, it (and the layers) is registered as soon as Keras is imported, before
`import zoo` or after it (a post-import hook on `keras`, wrapt's).
"""

from __future__ import annotations

import importlib

import wrapt

# Importing the family folders registers their builders and presets (no Keras: see
# registry.py). A new family is a folder here, imported in this list.
from zoo import (  # noqa: F401
    bn_cifar_nets,
    char_lm,
    conv_nets,
    fc_nets,
    imagenet_nets,
    pretrained,
)
from zoo.recipes import RECIPES
from zoo.registry import describe, list_models

# zoo.export is the function; its module and the other formats are zoo.serving's (no Keras at
# module level).
from zoo.serving.saved_model import export

# Name -> the module that defines it, imported on first use (it imports Keras, or its
# callers will).
_LAZY = {
    "HighwayZooModel": "zoo.model",
    "UnknownWeightsError": "zoo.loading",
    "WeightsHashError": "zoo.weights",
    "WeightsMismatchError": "zoo.loading",
    "load": "zoo.loading",
    "quantize": "zoo.quantization",
    "save": "zoo.presets",
    "save_weights": "zoo.weights",
    "verify": "zoo.weights",
}
# Submodules that `import zoo` imported before the names above became lazy: `zoo.weights.X`
# after a bare `import zoo` keeps working.
_LAZY_SUBMODULES = ("loading", "model", "presets", "weights")

__all__ = [
    "HighwayZooModel",
    "RECIPES",
    "UnknownWeightsError",
    "WeightsHashError",
    "WeightsMismatchError",
    "describe",
    "export",
    "list_models",
    "load",
    "quantize",
    "save",
    "save_weights",
    "verify",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _LAZY_SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_LAZY_SUBMODULES})


def _register_classes(_keras) -> None:
    # Modules, not names: zoo.model may be the one importing Keras (see layers' hook).
    importlib.import_module("layers")
    importlib.import_module("zoo.model")


# With Keras imported the classes cost nothing more: registered now if it is, else as soon as
# it is, so that `keras.saving.load_model` reads a zoo `.keras` file in either import order.
wrapt.register_post_import_hook(_register_classes, "keras")
