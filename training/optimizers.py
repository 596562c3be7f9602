"""A checked recipe (`training.recipes.get_recipe`) turned into Keras objects.

- `make_optimizer(recipe, steps_per_epoch)`: Nesterov SGD with Caffe's bias `lr_mult`
  (`CaffeSGD`) or Adam; the "multistep" schedule on iteration counts of the global batch.
- `apply_weight_decay(model, recipe)`: Caffe's weight decay as L2 regularizers attached
  to the built model's kernel variables, so weight decay stays a training concern and the
  architectures and weights files are unchanged.
"""

from __future__ import annotations

from typing import Any

import keras

from training.runtime import private_api

# Layer name of every zoo network's classifier (zoo/heads.py).
CLASSIFIER_LAYER = "logits"


def learning_rate(recipe: dict[str, Any], steps_per_epoch: int):
    """The recipe's learning rate: a constant, or Caffe's "multistep" schedule on iteration
    counts (`steps_per_epoch` steps of the global batch per epoch).

    Caffe's update number `iter` (from 0) uses the decayed rate from `iter >= stepvalue`
    on; Keras's `PiecewiseConstantDecay` switches once `step > boundary`, so each
    boundary is one less than Caffe's stepvalue (e.g. 59,999 for 60,000).
    """
    base = recipe["learning_rate"]
    boundaries = recipe.get("lr_boundaries_epochs")
    if not boundaries:
        return base
    decay = recipe["lr_decay"]
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[round(b * steps_per_epoch) - 1 for b in boundaries],
        values=[base * decay**i for i in range(len(boundaries) + 1)],
    )


def is_bias(variable) -> bool:
    """Whether a model variable is a bias (every zoo layer names its bias "bias")."""
    return variable.name.split("/")[-1].split(":")[0] == "bias"


@keras.saving.register_keras_serializable(package="highway_zoo")
class CaffeSGD(keras.optimizers.SGD):
    """SGD with momentum whose bias learning rate is `bias_lr_mult` times the base rate.

    Caffe multiplies a parameter's rate by its `lr_mult`. Under SGD with momentum (Nesterov
    or not) scaling the rate of a variable is the same as scaling its gradient, so this is
    exactly Caffe's update. Biases are the variables named "bias" (`is_bias`).

    Args:
        bias_lr_mult: the biases' learning-rate multiplier (Caffe's `lr_mult: 2`).
        **kwargs: as for `keras.optimizers.SGD`.
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, bias_lr_mult=1.0,
                 **kwargs):
        super().__init__(learning_rate=learning_rate, momentum=momentum, nesterov=nesterov,
                         **kwargs)
        if not bias_lr_mult > 0:
            raise ValueError(f"bias_lr_mult must be positive. Received: {bias_lr_mult!r}")
        self.bias_lr_mult = float(bias_lr_mult)
        self._bias_indices: set[int] = set()

    def build(self, variables):
        super().build(variables)
        self._bias_indices = {
            private_api.optimizer_variable_index(self, v) for v in variables if is_bias(v)
        }

    def update_step(self, gradient, variable, learning_rate):
        # Decided while tracing: one multiply for the biases, nothing for the rest.
        # By index, not by is_bias(variable): on TensorFlow a mirrored variable's replicas come
        # here under names of their own ("bias/replica_1").
        if (self.bias_lr_mult != 1
                and private_api.optimizer_variable_index(self, variable) in self._bias_indices):
            learning_rate = learning_rate * self.bias_lr_mult
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "bias_lr_mult": self.bias_lr_mult}


def make_optimizer(recipe: dict[str, Any], steps_per_epoch: int) -> keras.optimizers.Optimizer:
    """The recipe's optimizer, with its schedule over `steps_per_epoch` steps per epoch."""
    lr = learning_rate(recipe, steps_per_epoch)
    clip = recipe.get("global_clipnorm")
    clip = {"global_clipnorm": clip} if clip else {}
    if recipe["optimizer"] == "sgd":
        return CaffeSGD(
            lr, momentum=float(recipe["momentum"]), nesterov=recipe["nesterov"],
            bias_lr_mult=recipe.get("bias_lr_mult", 1.0), **clip,
        )
    if recipe["optimizer"] == "adam":
        return keras.optimizers.Adam(lr, **clip)
    raise ValueError(f"Unknown optimizer {recipe['optimizer']!r} in recipe {recipe['name']!r}.")


def apply_weight_decay(model: keras.Model, recipe: dict[str, Any]) -> dict[str, float]:
    """Attaches Caffe's weight decay to the kernels of a built `model`.

    Caffe adds wd·w to the gradient of every weight with `decay_mult` 1 (the kernels;
    biases have `decay_mult` 0), which is the gradient of an L2(wd / 2) penalty; the
    classifier kernel (layer "logits") has `decay_mult` = `classifier_weight_decay_mult`.
    The penalties then appear in `model.losses` and in the training loss.

    Returns:
        The L2 factor given to each kernel, by variable path (empty for wd = 0).
    """
    wd = recipe["weight_decay"]
    if not wd:
        return {}
    factors = {}
    for layer in model.layers:
        mult = recipe["classifier_weight_decay_mult"] if layer.name == CLASSIFIER_LAYER else 1.0
        for variable in layer.trainable_weights:
            if is_bias(variable) or variable.name.split("/")[-1] != "kernel":
                continue
            if variable.regularizer is not None:
                raise ValueError(
                    f"{variable.path} already has a regularizer; the recipe's weight decay "
                    "would add a second one. Build the model without regularizers."
                )
            factor = wd / 2 * mult
            if factor:
                variable.regularizer = keras.regularizers.L2(factor)
                factors[variable.path] = factor
    return factors
