"""The zoo: the papers' highway architectures by name.

    >>> import zoo
    >>> zoo.list_models("highway_*_cifar10")
    ['highway_a_cifar10', 'highway_b_cifar10', 'highway_c_cifar10', 'highway_cifar10']
    >>> model = zoo.load("highway_b_cifar10")            # random weights
    >>> model = zoo.load("highway_fc50_mnist", depth=30, transform_bias=-3.0)
    >>> model = zoo.load("highway_fc10_mnist", weights="runs/fc10")  # a trained run
    >>> model = zoo.load("highway_conv32_fashion_mnist", weights="default")  # shipped
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Importing the family modules registers their architectures.
from zoo import conv_nets, fashion_mnist, fc_nets, pretrained  # noqa: F401
from zoo.export import export
from zoo.model import HighwayZooModel
from zoo.recipes import RECIPES
from zoo.registry import describe, list_models
from zoo.weights import WeightsHashError, read_model_dir, save, save_weights, verify

__all__ = [
    "HighwayZooModel",
    "RECIPES",
    "WeightsHashError",
    "describe",
    "export",
    "list_models",
    "load",
    "save",
    "save_weights",
    "verify",
]


def load(
    name: str, weights: str | os.PathLike | None = None, **overrides: Any
) -> HighwayZooModel:
    """Builds the zoo network `name`, optionally with trained weights.

    Args:
        name: a registered name (`list_models()`), e.g. `"highway_b_cifar10"`.
        weights: None for a fresh initialisation; `"default"` for the weights
            shipped with the package (`zoo.describe(name)["pretrained"]` says how
            they were trained and what they scored); a `.weights.h5` file with a
            `.sha256` beside it; or a directory saved by this project (the run
            directory of `highway-zoo train`), whose recorded overrides are
            applied before `overrides`. The sha256 is checked before loading.
        **overrides: builder arguments the family allows, e.g. `depth`, `width`,
            `transform_bias`, `activation`, `variant`, `classes`,
            `classifier_activation` (see `describe(name)["overridable"]`).

    Returns:
        A `keras.Model` taking raw pixel values 0-255 of shape
        `describe(name)["input_shape"]`, with its metadata in `model.metadata`.
    """
    weights_path = None
    if weights == "default":
        weights_path = pretrained.fetch(name)  # get_file checks the recorded sha256
    elif weights is not None:
        path = Path(weights)
        if path.is_dir():
            weights_path, record = read_model_dir(path, expected=name)
            overrides = {**record.get("overrides", {}), **overrides}
        elif path.is_file() or str(path).endswith(".weights.h5"):
            weights_path = path
        else:
            raise FileNotFoundError(
                f"weights={weights!r} is not 'default', a '.weights.h5' file or a model "
                "directory saved by highway-zoo. Train your own with "
                "`highway-zoo train NAME --out DIR` and pass DIR."
            )
        verify(weights_path)
    model = HighwayZooModel(name, overrides)
    if weights_path is not None:
        model.load_weights(weights_path)
    return model

