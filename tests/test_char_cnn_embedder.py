"""CharCNNEmbedder (Kim et al. 2016's token embedder) against a NumPy reference."""

import keras
import numpy as np
import pytest

from layers import VARIANTS, CharCNNEmbedder

VOCAB = 9
FILTERS = (3, 4, 5)
WIDTHS = (1, 2, 4)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def numpy_embedder(layer, chars, conv_activation=np.tanh, pool_padding=False):
    """The layer's function written out with loops: embedding, padding zeroed, each width's
    windows inside the token only (the first window for a token shorter than the width;
    with `pool_padding`, every window of the padded token, as Kim et al.'s code),
    the convolution's activation (tanh), max, then highway layers y = H·T + x·(1 - T)
    (coupled) or the variant's formula."""
    table = keras.ops.convert_to_numpy(layer.embedding.embeddings)
    flat = chars.reshape(-1, chars.shape[-1])
    out = []
    for token in flat:
        n = int(np.sum(token != 0))
        emb = table[token] * (token != 0)[:, None]
        pooled = []
        for conv, k in zip(layer.convolutions, layer.kernel_sizes):
            kernel, bias = (keras.ops.convert_to_numpy(w) for w in conv.weights)
            last = len(token) - k if pool_padding else max(n - k, 0)
            windows = range(0, last + 1)
            values = [conv_activation(np.einsum("kc,kcf->f", emb[p:p + k], kernel) + bias)
                      for p in windows]
            pooled.append(np.max(values, axis=0))
        x = np.concatenate(pooled)
        for highway in layer.highways:
            kernel, bias = (keras.ops.convert_to_numpy(w) for w in highway.weights)
            d = x.shape[-1]
            z = x @ kernel + bias
            h = np.maximum(z[:d], 0.0)
            if highway.variant == "coupled":
                t = _sigmoid(z[d:2 * d])
                x = h * t + x * (1 - t)
            elif highway.variant == "residual":
                x = h + x
            elif highway.variant == "plain":
                x = h
            elif highway.variant == "t_only":
                x = h * _sigmoid(z[d:2 * d]) + x
            elif highway.variant == "c_only":
                x = h + x * _sigmoid(z[d:2 * d])
            else:  # full
                x = h * _sigmoid(z[d:2 * d]) + x * _sigmoid(z[2 * d:3 * d])
        out.append(x)
    return np.array(out).reshape(*chars.shape[:-1], -1)


def _chars():
    # Tokens of 6, 3, 2 and 1 characters (shorter than the widest width, 4), a padding token.
    return np.array([
        [[1, 3, 4, 5, 6, 2, 0, 0], [1, 7, 2, 0, 0, 0, 0, 0], [1, 2, 0, 0, 0, 0, 0, 0]],
        [[8, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [1, 6, 6, 6, 6, 6, 6, 2]],
    ], dtype="int32")


def _layer(**kwargs):
    kwargs.setdefault("highway_layers", 2)
    layer = CharCNNEmbedder(VOCAB, char_embedding_dim=5, filters=FILTERS, kernel_sizes=WIDTHS,
                            embeddings_initializer=keras.initializers.RandomNormal(seed=1),
                            kernel_initializer=keras.initializers.GlorotUniform(seed=2),
                            bias_initializer=keras.initializers.RandomNormal(seed=3),
                            **kwargs)
    layer.build((None, None, 8))
    return layer


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_numpy_reference(variant):
    layer = _layer(highway_variant=variant)
    chars = _chars()
    got = keras.ops.convert_to_numpy(layer(chars))
    assert got.shape == (2, 3, sum(FILTERS))
    np.testing.assert_allclose(got, numpy_embedder(layer, chars), rtol=1e-5, atol=1e-5)


def test_an_activation_that_can_decrease_is_applied_to_every_window_before_the_max():
    """SiLU decreases below z = -1.28: with the convolutions' biases at -3 the max of SiLU over
    the windows is SiLU of the smallest z, not of the largest (what pooling first would give)."""
    layer = _layer(highway_layers=0, conv_activation="silu")
    for conv in layer.convolutions:
        kernel, bias = conv.get_weights()
        conv.set_weights([kernel, np.full_like(bias, -3.0)])
    chars = _chars()
    got = keras.ops.convert_to_numpy(layer(chars))
    silu = lambda z: z / (1.0 + np.exp(-z))  # noqa: E731
    np.testing.assert_allclose(got, numpy_embedder(layer, chars, silu), rtol=1e-5, atol=1e-6)
    pooled_first = numpy_embedder(layer, chars, lambda z: z)
    assert np.abs(got[0, 0] - silu(pooled_first[0, 0])).max() > 1e-3


def test_padding_never_wins_the_max():
    """With a large convolution bias, a window of padding (zero vectors) would give tanh(bias)
    and win every max; the layer's output must not depend on the padding after a token."""
    layer = _layer(highway_layers=0)
    table = keras.ops.convert_to_numpy(layer.embedding.embeddings)
    layer.embedding.embeddings.assign(np.abs(table) + 0.1)  # every character pulls z down
    for conv in layer.convolutions:
        kernel, bias = conv.get_weights()
        conv.set_weights([-np.abs(kernel), np.full_like(bias, 2.0)])
    short = np.array([[[1, 4, 2, 0, 0, 0, 0, 0]]], dtype="int32")
    y = keras.ops.convert_to_numpy(layer(short))
    # Pooling over every window (Kim's Torch code) would reach tanh(2) from the padding.
    assert np.all(y < np.tanh(2.0) - 1e-3)
    np.testing.assert_allclose(y, numpy_embedder(layer, short), rtol=1e-5, atol=1e-6)
    # The same token with less padding (a shorter max_word_length) embeds the same.
    y4 = keras.ops.convert_to_numpy(layer(short[..., :4]))
    np.testing.assert_allclose(y4, y, rtol=1e-6, atol=1e-6)


def test_mask_marks_padding_tokens_and_lstm_ignores_them():
    chars = _chars()
    layer = _layer()
    mask = keras.ops.convert_to_numpy(layer.compute_mask(chars))
    np.testing.assert_array_equal(mask, [[True, True, True], [True, False, True]])

    inputs = keras.Input((None, 8), dtype="int32")
    x = _layer()(inputs)
    outputs = keras.layers.LSTM(4, return_sequences=False)(x)
    model = keras.Model(inputs, outputs)
    # A sequence and the same sequence with padding tokens between and after: same state.
    tokens = chars[0]
    padded = np.stack([tokens[0], np.zeros(8, "int32"), tokens[1], tokens[2],
                       np.zeros(8, "int32")])[None]
    a = keras.ops.convert_to_numpy(model(tokens[None]))
    b = keras.ops.convert_to_numpy(model(padded))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_pool_padding_takes_the_max_over_every_window_as_kims_code():
    chars = _chars()
    layer = _layer(pool_padding=True)
    y = keras.ops.convert_to_numpy(layer(chars))
    np.testing.assert_allclose(y, numpy_embedder(layer, chars, pool_padding=True),
                               rtol=1e-5, atol=1e-6)
    # Unlike the default, the embedding depends on how much padding follows a token, and
    # the config keeps the choice.
    inside = keras.ops.convert_to_numpy(_layer()(chars))
    assert np.abs(y - inside).max() > 1e-3
    assert CharCNNEmbedder.from_config(layer.get_config()).pool_padding is True


def test_mask_padding_false_computes_no_mask_and_passes_the_incoming_one_on():
    chars = _chars()
    layer = _layer(mask_padding=False)
    assert layer.compute_mask(chars) is None
    incoming = np.array([[True, False, True], [False, True, True]])
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(layer.compute_mask(chars, incoming)), incoming)
    assert CharCNNEmbedder.from_config(layer.get_config()).mask_padding is False
    # The embedding itself does not depend on the mask (same seeded weights).
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(_layer()(chars)),
                                  keras.ops.convert_to_numpy(layer(chars)))


def test_config_round_trip_and_keras_file(tmp_path):
    layer = _layer(highway_variant="full", transform_bias_initializer=-1.0)
    config = layer.get_config()
    clone = CharCNNEmbedder.from_config(config)
    assert clone.get_config() == config
    inputs = keras.Input((None, 8), dtype="int32")
    model = keras.Model(inputs, layer(inputs))
    path = tmp_path / "embedder.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(_chars())),
                               keras.ops.convert_to_numpy(model(_chars())), rtol=1e-6)


def test_defaults_are_kims_large_and_bias_minus_two():
    layer = CharCNNEmbedder(51)
    layer.build((None, 21))
    assert layer.output_dim == 1100
    bias = keras.ops.convert_to_numpy(layer.highways[0].bias)
    np.testing.assert_array_equal(bias[1100:], -2.0)  # b_T
    assert layer.highways[0].activation.__name__ == "relu"
    # Kim's parameter count: 51·15 + Σ(w·15·f + f) + 2·2·(1100² + 1100).
    convs = sum(w * 15 * f + f for w, f in zip(range(1, 8), (50, 100, 150, 200, 200, 200, 200)))
    assert layer.count_params() == 51 * 15 + convs + 2 * 2 * (1100**2 + 1100)


@pytest.mark.parametrize("kwargs, message", [
    (dict(filters=(2, 3), kernel_sizes=(1,)), "same length"),
    (dict(highway_variant="gated"), "highway_variant"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CharCNNEmbedder(VOCAB, **kwargs)


def test_words_shorter_than_widest_filter_refused():
    layer = CharCNNEmbedder(VOCAB, filters=(2, 2), kernel_sizes=(1, 5))
    with pytest.raises(ValueError, match="at least the widest convolution"):
        layer.build((None, None, 4))
