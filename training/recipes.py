"""Turns a recipe of `zoo.RECIPES` into a Keras optimizer."""

from __future__ import annotations

from typing import Any

import keras

from zoo import RECIPES

# Recipe fields a caller may override (the CLI's --epochs, --batch-size, ...).
OVERRIDABLE = ("epochs", "batch_size", "learning_rate")


def get_recipe(name: str, **overrides: Any) -> dict[str, Any]:
    """A copy of recipe `name` with the non-None `overrides` applied."""
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}.")
    recipe = dict(RECIPES[name], name=name)
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise ValueError(
                f"Recipe field {key!r} cannot be overridden; choose from {OVERRIDABLE}."
            )
        if value is not None:
            if value <= 0:
                raise ValueError(f"{key} must be positive. Received: {key}={value!r}")
            recipe[key] = value
    return recipe


def learning_rate(recipe: dict[str, Any], steps_per_epoch: int):
    """The recipe's learning rate: a constant, or Caffe's "multistep" schedule."""
    base = recipe["learning_rate"]
    boundaries = recipe.get("lr_boundaries_epochs")
    if not boundaries:
        return base
    decay = recipe["lr_decay"]
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[b * steps_per_epoch for b in boundaries],
        values=[base * decay**i for i in range(len(boundaries) + 1)],
    )


def make_optimizer(recipe: dict[str, Any], steps_per_epoch: int) -> keras.optimizers.Optimizer:
    lr = learning_rate(recipe, steps_per_epoch)
    clip = {"global_clipnorm": recipe["global_clipnorm"]} if "global_clipnorm" in recipe else {}
    if recipe["optimizer"] == "sgd":
        return keras.optimizers.SGD(
            lr, momentum=recipe["momentum"], nesterov=recipe["nesterov"], **clip
        )
    if recipe["optimizer"] == "adam":
        return keras.optimizers.Adam(lr, **clip)
    raise ValueError(f"Unknown optimizer {recipe['optimizer']!r} in recipe {recipe['name']!r}.")
