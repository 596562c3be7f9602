"""The character-aware token embedder of Kim et al. (2016): characters -> CNN -> highway."""

import keras
from keras import ops

# The module, not the name: it may be half-imported (importing Keras) when this one is.
from layers import highway_dense
from layers.variants import ALL_VARIANTS, unknown_variant

# Activations that never decrease: for these max(f(z)) = f(max(z)), so the layer pools the
# convolution's pre-activations and applies f to one value per filter instead of to every
# window (Kim's tanh over (words, windows, filters) is most of the CNN's element-wise work).
_MONOTONE = ("tanh", "relu", "sigmoid", "linear", None)


@keras.saving.register_keras_serializable(package="highway_zoo")
class CharCNNEmbedder(keras.layers.Layer):
    """Embeds each token from its characters: a character CNN, then highway layers.

    The token embedder of Kim, Jernite, Sontag & Rush (2016), "Character-Aware Neural Language
    Models", used by ELMo (bilm-tf), BiDAF and AllenNLP's `TokenCharactersEncoder`. Per token:

    1. each character id is embedded (`char_embedding_dim` values); padding characters
       (id `padding_id`, 0) embed to zero vectors whatever the embedding table holds;
    2. one 1-D convolution per width in `kernel_sizes`, with `filters[i]` feature maps, over the
       token's characters, `conv_activation` (tanh), then max over positions ("max over time");
    3. the pooled features, `sum(filters)` of them, through `highway_layers` `HighwayDense`
       layers (ReLU block state, b_T = -2: Kim et al.'s `HighwayMLP.lua`).

    Padding characters never win the max: a window is a candidate only if it lies inside the
    token (positions `0 .. n - k` for a token of `n` characters and a width `k`); a token
    shorter than the width has one candidate, its first window, which reads the token followed
    by zero vectors. Kim et al.'s Torch code pooled over every window, the padding's included
    (its padding vector is zero too, but a window of zeros still yields tanh(bias), which can be
    the max); here a token's embedding does not depend on how much padding follows it.
    `pool_padding=True` pools as Kim et al.'s code does, over every window of the padded token.

    A token whose characters are all padding is a padding token: the layer's output mask
    (`compute_mask`) is False there, so an `LSTM` after it skips it, as after
    `Embedding(mask_zero=True)`. The layer's own output at such a token is a finite vector that
    nothing downstream should read. `mask_padding=False` computes no mask, for a net that reads
    a contiguous stream (no token is padding): there an LSTM gets no mask, which on a GPU lets
    Keras's JAX backend run it through cuDNN (`jax.experimental.rnn`), as it does only unmasked.

    Gate conventions of the weights people load (all the same function, the sign and the gate
    differ; convert b by these rules when porting):

    - Kim et al. (lstm-char-cnn) and bilm-tf (ELMo): y = T·H + (1 - T)·x with T the transform
      gate, b_T = -2 (start carrying): this layer's `variant="coupled"`,
      `transform_bias_initializer=-2.0`.
    - AllenNLP's and fairseq's `Highway`: y = g·x + (1 - g)·f(x) with g a CARRY gate whose
      bias starts at +1 (start carrying): g = 1 - T, so b_T = -b_g = -1 here.
    - Tacotron's CBHG: y = T·H + (1 - T)·x with b_T = -1.
    - Keras 1's `Highway` layer (`keras.layers.core.Highway`, removed in Keras 2): its gate
      weights are named `W_carry` / `b_carry`, but the gate multiplies the transform,
      `y = T·activation(x·W + b) + (1 - T)·x` with `T = sigmoid(x·W_carry + b_carry)`, and
      `b_carry` starts at `transform_bias` (default -2 in the 1.x code read): load its
      `W_carry` / `b_carry` as W_T / b_T despite the names. Its H defaults to linear.

    Args:
        char_vocab_size: number of character ids, padding included (id 0).
        char_embedding_dim: size of a character's embedding. Defaults to 15 (Kim et al.).
        filters: feature maps per convolution width. Defaults to LSTM-Char-Large's
            `(50, 100, 150, 200, 200, 200, 200)`.
        kernel_sizes: convolution widths, one per entry of `filters`. Defaults to `1..7`.
        conv_activation: applied to the convolutions before pooling. Defaults to `"tanh"`.
        highway_layers: number of `HighwayDense` layers after the CNN (0: none). Defaults to 2.
        highway_variant: a `layers.VARIANTS` name (Greff et al. 2017's Table 1a) or a gated
            skip (`layers.variants.GATED_SKIPS`: `"rezero"`, `"layerscale"`, `"gru_gate"`,
            `"laurel_rw"`, `"laurel_lr"`; see `HighwayDense`). Defaults to `"coupled"`.
        highway_activation: the highway layers' block state H. Defaults to `"relu"`.
        transform_bias_initializer: b_T of the highway layers (a number or an initializer).
            Defaults to -2.0.
        carry_bias_initializer: b_C of the `"full"` and `"c_only"` variants. Defaults to 2.0.
        embeddings_initializer: of the character table. Defaults to `"uniform"`.
        kernel_initializer: of the convolutions and the highway layers' kernels. Defaults to
            `"glorot_uniform"`.
        bias_initializer: of the convolutions and the highway layers' b_H. Defaults to `"zeros"`.
        padding_id: the character id of padding. Defaults to 0.
        mask_padding: whether the output mask marks padding tokens (`compute_mask`); `False`
            passes the incoming mask on unchanged (None if none). Defaults to `True`.
        pool_padding: whether the max also runs over the windows that reach into the
            padding (Kim et al.'s Torch code), so that a token's embedding depends on
            `max_word_length`. Defaults to `False` (the windows inside the token only).
        layerscale_init, gru_gate_bias, laurel_rank: the gated skips' arguments, passed to
            the highway layers (as in `HighwayDense`; each read by its variant only).
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        Integer tensor `(batch_size, ..., max_word_length)` of character ids, usually
        `(batch_size, words, max_word_length)`; each token's characters first, padding after.
        `max_word_length` must be at least `max(kernel_sizes)`.

    Output shape:
        `(batch_size, ..., sum(filters))`.

    Example:

    >>> chars = np.array([[[1, 5, 6, 2, 0], [1, 7, 2, 0, 0], [0, 0, 0, 0, 0]]])
    >>> embedder = CharCNNEmbedder(char_vocab_size=8, filters=(4, 6), kernel_sizes=(1, 2))
    >>> tuple(embedder(chars).shape)
    (1, 3, 10)
    >>> keras.ops.convert_to_numpy(embedder.compute_mask(chars)).tolist()
    [[True, True, False]]

    Reference:
        - [Kim, Jernite, Sontag & Rush, 2016](https://arxiv.org/abs/1508.06615),
          "Character-Aware Neural Language Models"; code: github.com/yoonkim/lstm-char-cnn.
    """

    def __init__(
        self,
        char_vocab_size: int,
        char_embedding_dim: int = 15,
        filters=(50, 100, 150, 200, 200, 200, 200),
        kernel_sizes=(1, 2, 3, 4, 5, 6, 7),
        conv_activation="tanh",
        highway_layers: int = 2,
        highway_variant: str = "coupled",
        highway_activation="relu",
        transform_bias_initializer=-2.0,
        carry_bias_initializer=2.0,
        embeddings_initializer="uniform",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        padding_id: int = 0,
        mask_padding: bool = True,
        pool_padding: bool = False,
        layerscale_init=1e-5,
        gru_gate_bias=2.0,
        laurel_rank=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        filters, kernel_sizes = tuple(filters), tuple(kernel_sizes)
        if len(filters) != len(kernel_sizes) or not filters:
            raise ValueError(
                "filters and kernel_sizes must be non-empty and of the same length (one "
                f"number of feature maps per width). Received: filters={filters}, "
                f"kernel_sizes={kernel_sizes}"
            )
        if highway_variant not in ALL_VARIANTS:
            raise ValueError(unknown_variant(highway_variant, "highway_variant"))
        self.char_vocab_size = int(char_vocab_size)
        self.char_embedding_dim = int(char_embedding_dim)
        self.filters = tuple(int(f) for f in filters)
        self.kernel_sizes = tuple(int(k) for k in kernel_sizes)
        self.conv_activation = keras.activations.get(conv_activation)
        self._conv_activation_name = conv_activation
        self.highway_layers = int(highway_layers)
        self.highway_variant = highway_variant
        self.highway_activation = highway_activation
        self.transform_bias_initializer = transform_bias_initializer
        self.carry_bias_initializer = carry_bias_initializer
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.padding_id = int(padding_id)
        self.mask_padding = bool(mask_padding)
        self.pool_padding = bool(pool_padding)
        self.supports_masking = True

        self.embedding = keras.layers.Embedding(
            self.char_vocab_size, self.char_embedding_dim,
            embeddings_initializer=self.embeddings_initializer, name="char_embedding",
            dtype=self.dtype_policy,  # sub-layers compute as the embedder does (mixed precision)
        )
        self.convolutions = [
            keras.layers.Conv1D(
                f, k, kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer, name=f"conv_width{k}",
                dtype=self.dtype_policy,
            )
            for f, k in zip(self.filters, self.kernel_sizes)
        ]
        self.highways = [
            highway_dense.HighwayDense(
                activation=highway_activation, variant=highway_variant,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer,
                transform_bias_initializer=transform_bias_initializer,
                carry_bias_initializer=carry_bias_initializer,
                layerscale_init=layerscale_init, gru_gate_bias=gru_gate_bias,
                laurel_rank=laurel_rank, name=f"highway_{i}", dtype=self.dtype_policy,
            )
            for i in range(1, self.highway_layers + 1)
        ]

    @property
    def output_dim(self) -> int:
        return sum(self.filters)

    def build(self, input_shape):
        length = input_shape[-1]
        if length is not None and length < max(self.kernel_sizes):
            raise ValueError(
                f"max_word_length ({length}, the input's last axis) must be at least the "
                f"widest convolution ({max(self.kernel_sizes)})."
            )
        self.embedding.build((None, length))
        for conv in self.convolutions:
            conv.build((None, length, self.char_embedding_dim))
        for highway in self.highways:
            highway.build((None, self.output_dim))

    def _pool(self, conv, embedded, lengths, width):
        """Max over the windows inside each token of one convolution's outputs (over every
        window of the padded token with `pool_padding`)."""
        z = conv(embedded)  # (tokens, length - width + 1, filters)
        if not self.pool_padding:
            last = ops.maximum(lengths - width, 0)  # last candidate window of each token
            positions = ops.arange(ops.shape(z)[1], dtype="int32")
            candidate = ops.expand_dims(positions, 0) <= ops.expand_dims(last, 1)
            z = ops.where(ops.expand_dims(candidate, -1), z, ops.cast(float("-inf"), z.dtype))
        if self._conv_activation_name in _MONOTONE:
            return self.conv_activation(ops.max(z, axis=1))
        return ops.max(ops.where(ops.isfinite(z), self.conv_activation(z),
                                 ops.cast(float("-inf"), z.dtype)), axis=1)

    def call(self, inputs):
        inputs = ops.cast(inputs, "int32")
        leading = ops.shape(inputs)[:-1]
        length = ops.shape(inputs)[-1]
        chars = ops.reshape(inputs, (-1, length))  # (tokens, length)
        is_char = ops.not_equal(chars, self.padding_id)
        lengths = ops.sum(ops.cast(is_char, "int32"), axis=-1)
        embedded = self.embedding(chars) * ops.expand_dims(
            ops.cast(is_char, self.compute_dtype), -1)
        pooled = [self._pool(conv, embedded, lengths, k)
                  for conv, k in zip(self.convolutions, self.kernel_sizes)]
        x = ops.concatenate(pooled, axis=-1) if len(pooled) > 1 else pooled[0]
        for highway in self.highways:
            x = highway(x)
        return ops.reshape(x, (*leading, self.output_dim))

    def compute_mask(self, inputs, mask=None):
        if not self.mask_padding:
            return mask
        token = ops.any(ops.not_equal(inputs, self.padding_id), axis=-1)
        return token if mask is None else ops.logical_and(token, mask)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update({
            "char_vocab_size": self.char_vocab_size,
            "char_embedding_dim": self.char_embedding_dim,
            "filters": list(self.filters),
            "kernel_sizes": list(self.kernel_sizes),
            "conv_activation": self._conv_activation_name
            if isinstance(self._conv_activation_name, (str, type(None)))
            else keras.activations.serialize(self.conv_activation),
            "highway_layers": self.highway_layers,
            "highway_variant": self.highway_variant,
            "highway_activation": self.highway_activation,
            "transform_bias_initializer": _serialize_bias(self.transform_bias_initializer),
            "carry_bias_initializer": _serialize_bias(self.carry_bias_initializer),
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "padding_id": self.padding_id,
            "mask_padding": self.mask_padding,
            "pool_padding": self.pool_padding,
        })
        if self.highways:  # the gated skip's own argument, as the highway layers keep it
            config.update(self.highways[0]._skip_config())
        return config


def _serialize_bias(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return keras.initializers.serialize(keras.initializers.get(value))
