"""A checked recipe (`training.recipes.get_recipe`) turned into Keras objects.

- `make_optimizer(recipe, steps_per_epoch)`: Nesterov SGD with Caffe's bias `lr_mult`
  (`CaffeSGD`, which also keeps the weights' moving average when the recipe asks) or Adam;
  the "multistep" schedule, or a warm-up and a cosine decay, on iteration counts of the
  global batch.
- `make_loss(recipe)`: the cross-entropy of integer labels, label-smoothed when asked.
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
    if recipe.get("lr_schedule", "multistep") == "cosine":
        return _warmup_cosine(base, recipe, steps_per_epoch)
    boundaries = recipe.get("lr_boundaries_epochs")
    if not boundaries:
        return base
    decay = recipe["lr_decay"]
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[round(b * steps_per_epoch) - 1 for b in boundaries],
        values=[base * decay**i for i in range(len(boundaries) + 1)],
    )


def _warmup_cosine(base: float, recipe: dict[str, Any], steps_per_epoch: int):
    """Linear from 0 to `base` over the warm-up's W steps, then `base` times
    (1 + cos(pi * (step - W) / (T - W))) / 2, reaching 0 at the run's last step T."""
    total = recipe["epochs"] * steps_per_epoch
    warmup = round(recipe["warmup_epochs"] * steps_per_epoch)
    if not warmup:
        return keras.optimizers.schedules.CosineDecay(base, decay_steps=total, alpha=0.0)
    return keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=total - warmup, alpha=0.0, warmup_target=base, warmup_steps=warmup)


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

    def finalize_variable_values(self, var_list):
        """Leaves the weights as they are: Keras calls this at the end of every `fit`, and a
        run calls `fit` once per epoch, so with `use_ema` the average would replace the
        weights every epoch. The run puts the average in once, at its end
        (`put_average_in`)."""

    def put_average_in(self, var_list):
        """Replaces `var_list`'s values by their moving average (with `use_ema`; else
        nothing): the end of a run."""
        super().finalize_variable_values(var_list)

    def get_config(self):
        return {**super().get_config(), "bias_lr_mult": self.bias_lr_mult}


def make_optimizer(recipe: dict[str, Any], steps_per_epoch: int) -> keras.optimizers.Optimizer:
    """The recipe's optimizer, with its schedule over `steps_per_epoch` steps per epoch."""
    lr = learning_rate(recipe, steps_per_epoch)
    clip = recipe.get("global_clipnorm")
    clip = {"global_clipnorm": clip} if clip else {}
    if recipe["optimizer"] == "sgd":
        ema = recipe.get("ema_momentum")
        ema = {"use_ema": True, "ema_momentum": float(ema)} if ema is not None else {}
        return CaffeSGD(
            lr, momentum=float(recipe["momentum"]), nesterov=recipe["nesterov"],
            bias_lr_mult=recipe.get("bias_lr_mult", 1.0), **clip, **ema,
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


@keras.saving.register_keras_serializable(package="highway_zoo")
class SmoothedSparseCrossentropy(keras.losses.Loss):
    """Cross-entropy of integer labels against probabilities, the target smoothed: 1 - s on
    the label plus s/K on each of the K classes (Szegedy et al. 2016, §7), as
    `keras.losses.CategoricalCrossentropy(label_smoothing=s)` on one-hot labels.

    Args:
        label_smoothing: s in [0, 1).
    """

    def __init__(self, label_smoothing: float = 0.0, name: str = "smoothed_crossentropy",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        labels = keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "int32")
        one_hot = keras.ops.one_hot(labels, keras.ops.shape(y_pred)[-1], dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(
            one_hot, y_pred, label_smoothing=self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def make_loss(recipe: dict[str, Any]) -> keras.losses.Loss:
    """The recipe's training loss on integer labels and predicted probabilities."""
    smoothing = recipe.get("label_smoothing", 0.0)
    if smoothing:
        return SmoothedSparseCrossentropy(smoothing)
    return keras.losses.SparseCategoricalCrossentropy()
