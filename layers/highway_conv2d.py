"""The convolutional highway layer."""

import keras
from keras import ops

from layers._highway import HighwayBase

_KEEP_SIZE = (
    "A highway layer adds its input to its output (y = H(x) * T(x) + x * C(x)), so it must keep "
    "the input's spatial size: H and T use stride 1 and 'same' zero padding. To downsample, put a "
    "plain Conv2D with strides, or a pooling layer, between highway layers."
)


def _pair(value, name):
    if isinstance(value, int):
        pair = (value, value)
    else:
        pair = tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(
            f"`{name}` must be a positive integer or a tuple of 2 positive integers. "
            f"Received: {name}={value!r}"
        )
    return pair


@keras.saving.register_keras_serializable(package="highway_zoo")
class HighwayConv2D(HighwayBase):
    """2-D convolutional highway layer: a gated mix of a convolution and its input.

    `HighwayConv2D` implements, per pixel and channel,
    `y = H(x) * T(x) + x * C(x)`, with
    `H(x) = activation(conv(x, W_H) + b_H)` (the block state),
    `T(x) = sigmoid(conv(x, W_T) + b_T)` (the transform gate) and
    `C(x)` (the carry gate) set by `variant`:

    - `"coupled"` (default, the 2015 paper): `C = 1 - T`, so `y = x + T * (H - x)`.
    - `"full"`: `C(x) = sigmoid(conv(x, W_C) + b_C)`, a gate with its own weights.
    - `"c_only"`: `T = 1`, so `y = H(x) + x * C(x)`.
    - `"t_only"`: `C = 1`, so `y = H(x) * T(x) + x`.
    - `"residual"`: `T = C = 1`, so `y = H(x) + x`.
    - `"plain"`: `T = 1, C = 0`, so `y = H(x)`: no gates, no carry (Greff's Plain).

    All convolutions share `kernel_size`, use stride 1 and "same" zero padding, and have as many
    filters as the input has channels `c`, so the output has the input's shape. The learned
    branches are fused into one `kernel` of shape `(kh, kw, c, n * c)` and one `bias` of shape
    `(n * c,)`, side by side in the order `[H | T | C]` (only the branches the variant learns; `n`
    of them), so a call is one convolution. Each slice is initialised by its own initializer on
    the shape `(kh, kw, c, c)` of a single branch. A layer with kernel k has `2 * (k*k*c*c + c)`
    parameters when coupled.

    The gated skips (`"rezero"`, `"layerscale"`, `"gru_gate"`, `"laurel_rw"`, `"laurel_lr"`)
    are `HighwayDense`'s, per pixel, with H the convolution: ReZero's `alpha` is one scalar,
    LayerScale's `lambda` one value per channel; GTrXL's W and U maps are "same" convolutions
    of this layer's `kernel_size` (weights `gate_kernel`, `gate_recurrent_kernel`, each
    `(kh, kw, c, 3c)`), so `7*kh*kw*c*c + 2*c` parameters; LAuReL-LR's `A` `(c, r)` and `B`
    `(r, c)` are per-pixel maps over the channels (1x1 convolutions, as the skip they augment
    is per pixel), `kh*kw*c*c + c + 2*r*c` parameters. See `HighwayDense` for the formulas,
    initial values and references.

    Args:
        kernel_size: Integer or tuple of 2 integers, the height and width of the
            convolution window shared by H and the gates.
        filters: Optional. The number of output channels, which must equal the number
            of input channels; None (default) takes it from the input.
        strides: Must be 1 (accepted for the Conv2D vocabulary).
        padding: Must be `"same"` (accepted for the Conv2D vocabulary).
        data_format: `"channels_last"` or `"channels_first"`. Defaults to
            `keras.config.image_data_format()`.
        activation: Activation of the block state H. Defaults to `"relu"`, as in
            all of the paper's convolutional highway nets.
        variant: One of `"coupled"`, `"full"`, `"c_only"`, `"t_only"`, `"residual"`,
            `"plain"` (Greff et al. 2017, Table 1a), or a gated skip: `"rezero"`,
            `"layerscale"`, `"gru_gate"`, `"laurel_rw"`, `"laurel_lr"`. Defaults to
            `"coupled"`.
        kernel_initializer: Initializer for W_H (and for W_T, W_C when their own
            initializers are None). Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer for b_H. Defaults to `"zeros"`.
        transform_kernel_initializer: Initializer for W_T. Defaults to None, meaning
            `kernel_initializer` (re-seeded, so W_T does not start equal to W_H), as in
            the authors' Caffe layer.
        transform_bias_initializer: Initializer for b_T, or a number `b` meaning
            `Constant(b)`. Defaults to -2.0; the paper suggests -1, -2, -3 for
            depths of about 10, 20, 30.
        carry_kernel_initializer: Initializer for W_C (`"full"` only). Defaults to None,
            meaning `kernel_initializer` (re-seeded).
        carry_bias_initializer: Initializer for b_C (`"full"` and `"c_only"`), or a number.
            Defaults to +2.0, so that with the default b_T = -2 a fresh `"full"` layer
            starts like a coupled one: C = sigmoid(2) = 1 - sigmoid(-2) at zero input.
        kernel_regularizer: Regularizer applied to the fused `kernel`.
        bias_regularizer: Regularizer applied to the fused `bias`.
        activity_regularizer: Regularizer applied to the output of the layer.
        kernel_constraint: Constraint applied to the fused `kernel`.
        bias_constraint: Constraint applied to the fused `bias`.
        layerscale_init: `"layerscale"` only: the initial value of every `lambda`. Defaults to
            1e-5.
        gru_gate_bias: `"gru_gate"` only: the initial `b_g`. Defaults to 2.0 (RLlib's GTrXL
            default).
        laurel_rank: `"laurel_lr"` only: the rank `r` of `B·A`, at most `c`. Defaults to None,
            meaning `max(1, c // 8)`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Masking: not supported, as `keras.layers.Conv2D` does not support it
    (`supports_masking` is False). A convolution mixes each position with its neighbours, so
    padding would change the results at the unmasked positions beside it: a mask reaching
    the layer is dropped (Keras warns that it "will destroy the mask"), as with Conv2D.

    Input shape:
        4-D tensor `(batch_size, rows, cols, channels)` if `data_format="channels_last"`,
        or `(batch_size, channels, rows, cols)` if `"channels_first"`; channels defined.

    Output shape:
        Same shape as the input.

    Example:

    >>> x = np.random.rand(2, 8, 8, 16)
    >>> layer = HighwayConv2D(3, transform_bias_initializer=-1.0)
    >>> tuple(layer(x).shape)
    (2, 8, 8, 16)
    >>> tuple(layer.kernel.shape)
    (3, 3, 16, 32)

    Reference:
        - [Srivastava, Greff & Schmidhuber, 2015](https://arxiv.org/abs/1507.06228),
          "Training Very Deep Networks".
        - [Greff, Srivastava & Schmidhuber, 2017](https://arxiv.org/abs/1612.07771),
          "Highway and Residual Networks learn Unrolled Iterative Estimation".
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        filters: int | None = None,
        strides: int | tuple[int, int] = 1,
        padding: str = "same",
        data_format: str | None = None,
        activation="relu",
        variant: str = "coupled",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        transform_kernel_initializer=None,
        transform_bias_initializer=-2.0,
        carry_kernel_initializer=None,
        carry_bias_initializer=2.0,
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        layerscale_init=1e-5,
        gru_gate_bias=2.0,
        laurel_rank=None,
        **kwargs,
    ):
        kernel_size = _pair(kernel_size, "kernel_size")
        if filters is not None and not (isinstance(filters, int) and filters > 0):
            raise ValueError(
                "`filters` must be None or a positive integer equal to the number of input "
                f"channels. Received: filters={filters!r}"
            )
        if _pair(strides, "strides") != (1, 1):
            raise ValueError(
                f"HighwayConv2D only supports strides=1. {_KEEP_SIZE} Received: strides={strides!r}"
            )
        if not isinstance(padding, str) or padding.lower() != "same":
            raise ValueError(
                f"HighwayConv2D only supports padding='same'. {_KEEP_SIZE} "
                f"Received: padding={padding!r}"
            )
        data_format = data_format or keras.config.image_data_format()
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(
                "`data_format` must be 'channels_last', 'channels_first' or None. "
                f"Received: data_format={data_format!r}"
            )
        super().__init__(
            activation=activation,
            variant=variant,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            transform_kernel_initializer=transform_kernel_initializer,
            transform_bias_initializer=transform_bias_initializer,
            carry_kernel_initializer=carry_kernel_initializer,
            carry_bias_initializer=carry_bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            layerscale_init=layerscale_init,
            gru_gate_bias=gru_gate_bias,
            laurel_rank=laurel_rank,
            **kwargs,
        )
        self.kernel_size = kernel_size
        self.filters = filters
        self.strides = (1, 1)
        self.padding = "same"
        self.data_format = data_format
        self.channel_axis = -1 if data_format == "channels_last" else 1
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        channels = input_shape[self.channel_axis]
        if self.filters is not None and channels is not None and channels != self.filters:
            raise ValueError(
                f"HighwayConv2D got filters={self.filters} but its input has {channels} channels. "
                "A highway layer keeps the width of its input (it adds x to its output), so "
                "filters must equal the number of input channels, or be left as None. To change "
                "the number of channels, use a plain Conv2D before the highway layer. "
                f"Received: filters={self.filters}, input_shape={tuple(input_shape)}"
            )
        super().build(input_shape)

    def _branch_kernel_shape(self, channels):
        return (*self.kernel_size, channels, channels)

    def _linear(self, x, kernel):
        return ops.conv(x, kernel, strides=1, padding="same", data_format=self.data_format)

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_size": self.kernel_size,
            "filters": self.filters,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
        }
