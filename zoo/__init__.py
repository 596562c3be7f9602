"""The zoo: the papers' highway architectures by name.

    >>> import zoo
    >>> zoo.list_models("highway_*_cifar10")
    ['highway_a_cifar10', 'highway_b_cifar10', 'highway_c_cifar10', 'highway_cifar10']
    >>> model = zoo.load("highway_b_cifar10")            # random weights
    >>> model = zoo.load("highway_fc50_mnist", depth=30, transform_bias=-3.0)
    >>> model = zoo.load("highway_fc10_mnist", weights="runs/fc10")  # a trained run
    >>> model = zoo.load("highway_conv32_fashion_mnist", weights="default")  # shipped
    >>> model = zoo.load("highway_conv32_fashion_mnist", weights="default", classes=5)
    >>> features = zoo.load("highway_b_cifar10", include_top=False, pooling="avg")
    >>> zoo.save(model, "my-model/"); model = zoo.load("my-model/")       # a preset
"""

from __future__ import annotations

# Importing the family modules registers their architectures.
from zoo import (  # noqa: F401
    bn_cifar_nets,
    conv_nets,
    fashion_mnist,
    fc_nets,
    imagenet_nets,
    pretrained,
)
from zoo.export import export
from zoo.loading import WeightsMismatchError, load
from zoo.model import HighwayZooModel
from zoo.presets import save
from zoo.recipes import RECIPES
from zoo.registry import describe, list_models
from zoo.weights import WeightsHashError, save_weights, verify

__all__ = [
    "HighwayZooModel",
    "RECIPES",
    "WeightsHashError",
    "WeightsMismatchError",
    "describe",
    "export",
    "list_models",
    "load",
    "save",
    "save_weights",
    "verify",
]
