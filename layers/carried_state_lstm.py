"""`CarriedStateLSTM`: a stateful LSTM whose states carry from batch to batch on every backend.

`keras.layers.LSTM(stateful=True)` keeps its states in variables it does not track (Keras 3.15,
`RNN._create_state_variables`). TensorFlow's graphs read and write them all the same; JAX's
train, test and predict steps are pure functions of the variables Keras tracks, so there the
states are constants of the trace: every batch starts from zeros, and `fit` and `evaluate`
silently train and measure a net that sees 35 words of context, not the text before them.

Here the states are the layer's own non-trainable weights (like BatchNormalization's moving
statistics), which every backend threads through its steps. They belong to one batch size and
are not trained: `is_carried_state` tells them from the trained weights, which is how the
language models copy a trained net between its stateful and stateless forms.
"""

from __future__ import annotations

import keras

CARRIED_PREFIX = "carried_state_"


def is_carried_state(variable) -> bool:
    """Whether `variable` is a carried LSTM state (not a trained weight)."""
    return variable.name.startswith(CARRIED_PREFIX)


@keras.saving.register_keras_serializable(package="highway_zoo")
class CarriedStateLSTM(keras.layers.LSTM):
    """`keras.layers.LSTM` with `stateful=True` that carries its states on every backend.

    Same arguments, weights and results as the stateful `keras.layers.LSTM`, plus two
    non-trainable weights `carried_state_h` and `carried_state_c` of shape (batch, units);
    `reset_state()` zeroes them.
    """

    def __init__(self, units, **kwargs):
        kwargs["stateful"] = True
        super().__init__(units, **kwargs)

    def build(self, sequences_shape, initial_state_shape=None):
        first = not self.built
        super().build(sequences_shape, initial_state_shape)
        if first:  # Keras's untracked states, replaced by tracked ones of the same shape
            self.states = [
                self.add_weight(shape=tuple(state.shape), initializer="zeros", trainable=False,
                                name=f"{CARRIED_PREFIX}{part}")
                for part, state in zip(("h", "c"), self.states)]

    def inner_loop(self, sequences, initial_state, mask, training=False):
        # The loop reads copies: on PyTorch the states are the variables' own tensors, and
        # `call` assigns the new states to them in place, which autograd refuses for a tensor
        # the loss still depends on (the unmasked LSTM path reads them directly).
        initial_state = [keras.ops.copy(state) for state in initial_state]
        return super().inner_loop(sequences, initial_state, mask, training=training)
