"""Character-aware language models (Kim, Jernite, Sontag & Rush 2016), the testbed of Greff et
al. 2017's Table 1a: each word read from its characters (`layers.CharCNNEmbedder`: character
CNN + highway layers), a 2-layer LSTM over the words, a softmax over the word vocabulary.

Layout (yoonkim/lstm-char-cnn, model/LSTMTDNN.lua, read 2026-11-25), per time step:

    chars (max_word_length ids) -> embedder: embedding 15, convolutions of widths 1..7 (Large)
    or 1..6 (Small), tanh, max over the word -> highway layers (ReLU H, b_T = -2)
    -> LSTM 1 -> dropout -> LSTM 2 -> dropout -> Dense(vocabulary) logits

Every weight starts uniform in ±`init_scale` (0.05; `params:uniform(-0.05, 0.05)` in main.lua),
b_T excepted (Kim's HighwayMLP adds the constant -2 on top of a uniform bias: here b_T = -2).

The highway variant is a constructor argument, so Greff et al.'s six Table 1a models are each
one override: `zoo.load("lstm_char_large_ptb", variant="t_only")`, and Residual with four
layers as the paper did: `variant="residual", highway_layers=4`.
"""

from __future__ import annotations

from zoo.heads import classifier, feature_info
from zoo.registry import register_family

CHAR_LM_OVERRIDES = (
    "input_shape", "char_vocab_size", "variant", "highway_layers", "transform_bias",
    "dropout", "lstm_units", "stateful", "batch_size", "classes", "classifier_activation",
    "pool_padding",
)


def _uniform(scale: float) -> dict:
    # A config, not an instance: every layer gets its own, so no two weights start equal.
    return {"class_name": "RandomUniform", "config": {"minval": -scale, "maxval": scale}}


def _check_shape(input_shape):
    shape = tuple(input_shape) if isinstance(input_shape, (list, tuple)) else None
    if not (shape and len(shape) == 2 and (shape[0] is None or shape[0] >= 1)
            and isinstance(shape[1], int) and shape[1] >= 1):
        raise ValueError(
            "input_shape must be (steps, max_word_length): steps a positive integer or None, "
            "max_word_length a positive integer (character ids per word, start and end "
            f"markers included). Received: input_shape={input_shape!r}"
        )
    return shape


def _features(args):
    info = feature_info("embedder", (args["input_shape"][0], sum(args["filters"])),
                        poolable=False)
    # Per word, not per example: feature_info's wording is the image families'.
    info["description"] = (
        "include_top=False returns the output of layer 'embedder' (character CNN and highway "
        f"layers): one vector of {sum(args['filters'])} features per word, shape "
        f"(batch, steps, {sum(args['filters'])}).")
    return info


@register_family("char_lm", CHAR_LM_OVERRIDES, features=_features)
def char_lm(
    *, input_shape, classes, char_vocab_size, char_embedding_dim, filters, kernel_sizes,
    highway_layers, variant, transform_bias, lstm_units, lstm_layers, dropout, init_scale,
    stateful=False, batch_size=None, classifier_activation=None, include_top=True,
    pooling=None, pool_padding=False,
):
    """`stateful=True` (with a fixed `batch_size`) carries the LSTM states from one batch to
    the next, as Kim et al. train and evaluate on contiguous BPTT batches; the default
    (stateless, any batch) is for serving and for reading a text from its start.

    The output is the next word's logits (`classifier_activation=None`, keras-hub's causal
    LMs' convention) or probabilities (`"softmax"`); `include_top=False` returns the
    embedder's features (batch, steps, sum(filters)), the part of the net other models reuse.
    `pool_padding=True` takes the character CNN's max over every window of the padded word, as
    Kim et al.'s Torch code does (`layers.CharCNNEmbedder`).
    """
    import keras

    from layers import CharCNNEmbedder
    from layers.carried_state_lstm import CarriedStateLSTM

    steps, max_word_length = _check_shape(input_shape)
    if pooling is not None:
        raise ValueError(f"pooling={pooling!r} does not apply to a language model: its "
                         "features are per word; leave pooling=None.")
    if stateful and not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError("stateful=True carries states per batch row and needs a fixed "
                         f"batch_size (a positive integer). Received: batch_size={batch_size!r}")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout!r}")
    from layers.variants import require_transform_bias

    require_transform_bias(variant, transform_bias, "-2.0 (Kim's)")
    inputs = keras.Input(shape=(steps, max_word_length), batch_size=batch_size, dtype="int32",
                         name="chars")
    x = CharCNNEmbedder(
        char_vocab_size, char_embedding_dim=char_embedding_dim, filters=filters,
        kernel_sizes=kernel_sizes, highway_layers=highway_layers, highway_variant=variant,
        transform_bias_initializer=transform_bias,
        embeddings_initializer=_uniform(init_scale), kernel_initializer=_uniform(init_scale),
        bias_initializer=_uniform(init_scale), name="embedder",
        # A stateful net reads a contiguous stream, where no word is padding: with no mask the
        # LSTMs run through cuDNN on a GPU under JAX (Keras skips cuDNN when a mask is given).
        mask_padding=not stateful, pool_padding=pool_padding,
    )(inputs)
    if not include_top:
        return inputs, x
    for i in range(1, lstm_layers + 1):
        if i > 1:  # Kim: dropout on each LSTM's input but the first's, and before the softmax
            x = keras.layers.Dropout(dropout, name=f"dropout_{i - 1}")(x)
        # Stateful: states carried on every backend (keras.layers.LSTM's are not on JAX).
        lstm = CarriedStateLSTM if stateful else keras.layers.LSTM
        x = lstm(
            lstm_units, return_sequences=True, unit_forget_bias=False,
            kernel_initializer=_uniform(init_scale),
            recurrent_initializer=_uniform(init_scale), bias_initializer=_uniform(init_scale),
            name=f"lstm_{i}",
        )(x)
    x = keras.layers.Dropout(dropout, name=f"dropout_{lstm_layers}")(x)
    return inputs, classifier(x, classes, classifier_activation,
                              kernel_initializer=_uniform(init_scale))


def trained_weights(model) -> list:
    """A language model's trained weights as arrays, without the states a stateful form
    carries (`layers.carried_state_lstm`): what moves between its stateful and stateless
    forms, in the order of the stateless form's `get_weights()`."""
    import keras

    from layers.carried_state_lstm import is_carried_state

    return [keras.ops.convert_to_numpy(w) for w in model.weights if not is_carried_state(w)]


def set_trained_weights(model, arrays) -> None:
    """Sets what `trained_weights` gives (of the same net, stateful or not) on `model`."""
    from layers.carried_state_lstm import is_carried_state

    variables = [w for w in model.weights if not is_carried_state(w)]
    if len(variables) != len(arrays):
        raise ValueError(f"{model.name} has {len(variables)} trained weights; received "
                         f"{len(arrays)}: not the same net.")
    for variable, array in zip(variables, arrays):
        variable.assign(array)


def parameter_count(*, char_vocab_size, char_embedding_dim, filters, kernel_sizes,
                    highway_layers, variant, lstm_units, lstm_layers, classes, **_) -> int:
    """The model's parameters by formula: embedding, convolutions, highway, LSTMs, softmax."""
    from layers.variants import parameter_count as highway_parameters

    d = sum(filters)
    convs = sum(k * char_embedding_dim * f + f for f, k in zip(filters, kernel_sizes))
    highway = highway_layers * highway_parameters(variant, d)
    lstms = sum(4 * lstm_units * ((d if i == 0 else lstm_units) + lstm_units + 1)
                for i in range(lstm_layers))
    return (char_vocab_size * char_embedding_dim + convs + highway + lstms
            + lstm_units * classes + classes)
