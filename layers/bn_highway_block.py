"""The batch-normalised convolutional highway block."""

import math

import keras
from keras import ops

# The module, not the name: it may be half-imported (importing Keras) when this one is.
from layers import highway_conv2d
from layers._highway import _reseeded, combine, get_bias_initializer
from layers.variants import LEARNED_BRANCHES, VARIANTS

SHORTCUTS = ("auto", "projection", "zero_pad")


class _ConvBN:
    """The variables of one convolution and the batch normalisation after it."""

    __slots__ = ("strides", "kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance")

    def __init__(self, strides, kernel, bias, gamma, beta, moving_mean, moving_variance):
        self.strides = strides
        self.kernel = kernel
        self.bias = bias
        self.gamma = gamma
        self.beta = beta
        self.moving_mean = moving_mean
        self.moving_variance = moving_variance


@keras.saving.register_keras_serializable(package="highway_zoo")
class BNHighwayBlock(keras.layers.Layer):
    """Batch-normalised convolutional highway block: gated branches of Conv-BN stacks.

    `BNHighwayBlock` implements, per pixel and channel,
    `y = output_activation(H(x) * T(x) + S(x) * C(x))`, with

    - `H(x) = activation(BN(conv(... ReLU(BN(conv(x))) ...)))` (the block state): one
      convolution per entry of `kernel_sizes`, each followed by batch normalisation, with a
      ReLU between them;
    - `T(x) = sigmoid(...)` (the transform gate): a stack like H's with its own weights, so
      the gate has H's receptive field and parameter count; the beta of its last batch
      normalisation is the gate's bias b_T (`transform_bias`);
    - `C(x)` (the carry gate) set by `variant`, as in `HighwayConv2D`: `"coupled"` (default)
      `C = 1 - T`, so `y = S + T * (H - S)`; `"full"` a third stack ending in a sigmoid
      (its last beta b_C); `"c_only"` `T = 1`; `"t_only"` `C = 1`; `"residual"`
      `T = C = 1`, so `y = H + S`; `"plain"` `y = H` (no gates, no carry);
    - `S(x)` (the shortcut) the identity where the block keeps its input's shape, and
      otherwise (`strides` > 1 or `filters` other than the input's channels) a strided 1x1
      convolution followed by batch normalisation (`shortcut="auto"`); `"projection"` uses
      that convolution in every case (ResNet's first block of a stage), `"zero_pad"` takes
      every `strides`-th pixel and pads the new channels with zeros (ResNet's option A, no
      parameters).

    `strides` apply to the first convolution of every stack and to the shortcut; all
    convolutions use "same" zero padding. The last convolution of a stack has `filters`
    channels, the others `inner_filters` (default `filters`): `kernel_sizes=(3, 3)` is the
    basic block of the first author's BN CIFAR highway net (H ending in a ReLU, b_T = -6),
    `kernel_sizes=(1, 3, 1)` with `inner_filters = filters // 4` the bottleneck of Greff et
    al. 2017's ImageNet nets (`activation=None` for "Highway", `"relu"`, a third ReLU, for
    "Highway-Full"; `output_activation="relu"` after the combination, as ResNet).

    Batch normalisation uses the batch's statistics in training and updates its moving mean
    and variance (`moving = moving * momentum + batch * (1 - momentum)`), and the moving ones
    in inference, computing in float32 under mixed precision, as `keras.layers.
    BatchNormalization` does; every variable belongs to the block itself (`h1_kernel`,
    `h1_gamma`, ..., `t2_beta`, `shortcut_kernel`, ...).

    `lesioned` (default False; neither a weight nor part of the config) closes the gates,
    T := 0 and C := 1: the block returns `output_activation(S(x))`, its input bit for bit when
    the shortcut is the identity and there is no output activation (see `HighwayConv2D`).

    Args:
        filters: The number of output channels.
        kernel_sizes: One kernel size (an integer or a tuple of 2) per convolution of a
            stack, at least one. Defaults to `(3, 3)`.
        inner_filters: The number of channels of every convolution but the last of a stack.
            Defaults to None, meaning `filters`.
        strides: Integer or tuple of 2, the strides of each stack's first convolution and of
            the shortcut. Defaults to 1.
        shortcut: `"auto"` (default), `"projection"` or `"zero_pad"`: see above.
        data_format: `"channels_last"` or `"channels_first"`. Defaults to
            `keras.config.image_data_format()`.
        activation: Activation ending H. Defaults to `"relu"`.
        output_activation: Activation applied to the combination. Defaults to None.
        variant: One of `"coupled"`, `"full"`, `"c_only"`, `"t_only"`, `"residual"`,
            `"plain"` (Greff et al. 2017, Table 1a). Defaults to `"coupled"`.
        use_bias: Whether the convolutions have biases (they start at zero; the batch
            normalisation after each makes them redundant). Defaults to False.
        kernel_initializer: Initializer for H's kernels and the shortcut's (and the gates'
            when their own initializers are None), re-seeded per convolution. Defaults to
            `"glorot_uniform"`.
        transform_kernel_initializer: Initializer for T's kernels. Defaults to None,
            meaning `kernel_initializer` (re-seeded).
        transform_bias_initializer: Initializer for b_T, the beta of T's last batch
            normalisation, or a number `b` meaning `Constant(b)`. Defaults to -2.0.
        carry_kernel_initializer: Initializer for C's kernels (`"full"`, `"c_only"`).
            Defaults to None, meaning `kernel_initializer` (re-seeded).
        carry_bias_initializer: Initializer for b_C, or a number. Defaults to +2.0.
        kernel_regularizer: Regularizer applied to every kernel.
        momentum: Momentum of the moving mean and variance. Defaults to 0.99.
        epsilon: Added to the variance in batch normalisation. Defaults to 1e-3.
        activity_regularizer: Regularizer applied to the output of the layer.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Masking: not supported (`supports_masking` is False), as in Keras's
    `Conv2D` -> `BatchNormalization`: the convolutions mix neighbouring positions, and with
    `strides` the output's positions are not the input's, so no mask of the input holds for
    the output; a mask reaching the block is dropped (Keras warns that it "will destroy the
    mask"). `keras.layers.BatchNormalization` would take a mask for its statistics, but
    behind a Conv2D none reaches it: the block's batch normalisations, likewise, take their
    statistics over every position.

    Input shape:
        4-D tensor `(batch_size, rows, cols, channels)` if `data_format="channels_last"`,
        or `(batch_size, channels, rows, cols)` if `"channels_first"`; channels defined.

    Output shape:
        4-D tensor with `filters` channels and `ceil(rows / strides)`,
        `ceil(cols / strides)` positions.

    Example:

    >>> x = np.random.rand(2, 8, 8, 16)
    >>> block = BNHighwayBlock(32, strides=2, transform_bias_initializer=-6.0)
    >>> tuple(block(x).shape)
    (2, 4, 4, 32)
    >>> keras.ops.convert_to_numpy(block.transform_bias)[:3]
    array([-6., -6., -6.], dtype=float32)

    Reference:
        - [Greff, Srivastava & Schmidhuber, 2017](https://arxiv.org/abs/1612.07771),
          "Highway and Residual Networks learn Unrolled Iterative Estimation", §5.1.
        - [Srivastava, Greff & Schmidhuber, 2015](https://arxiv.org/abs/1507.06228),
          "Training Very Deep Networks".
    """

    def __init__(
        self,
        filters: int,
        kernel_sizes=(3, 3),
        inner_filters: int | None = None,
        strides: int | tuple[int, int] = 1,
        shortcut: str = "auto",
        data_format: str | None = None,
        activation="relu",
        output_activation=None,
        variant: str = "coupled",
        use_bias: bool = False,
        kernel_initializer="glorot_uniform",
        transform_kernel_initializer=None,
        transform_bias_initializer=-2.0,
        carry_kernel_initializer=None,
        carry_bias_initializer=2.0,
        kernel_regularizer=None,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        activity_regularizer=None,
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        for name, value in (("filters", filters), ("inner_filters", inner_filters)):
            if value is None and name == "inner_filters":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        if not isinstance(kernel_sizes, (tuple, list)) or not kernel_sizes:
            raise ValueError(
                "`kernel_sizes` must be a non-empty list with one kernel size per convolution "
                f"of a stack, e.g. (3, 3) or (1, 3, 1). Received: kernel_sizes={kernel_sizes!r}"
            )
        if shortcut not in SHORTCUTS:
            raise ValueError(f"`shortcut` must be one of {SHORTCUTS}. Received: "
                             f"shortcut={shortcut!r}")
        if variant not in VARIANTS:
            raise ValueError(
                f"Unknown highway variant. Expected one of {VARIANTS} "
                f"(Greff et al. 2017, Table 1a). Received: variant={variant!r}"
            )
        data_format = data_format or keras.config.image_data_format()
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(
                "`data_format` must be 'channels_last', 'channels_first' or None. "
                f"Received: data_format={data_format!r}"
            )
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"`momentum` must be in [0, 1). Received: momentum={momentum!r}")
        if not epsilon > 0.0:
            raise ValueError(f"`epsilon` must be positive. Received: epsilon={epsilon!r}")
        self.filters = filters
        self.kernel_sizes = tuple(highway_conv2d._pair(k, "kernel_sizes") for k in kernel_sizes)
        self.inner_filters = inner_filters
        self.strides = highway_conv2d._pair(strides, "strides")
        self.shortcut = shortcut
        self.data_format = data_format
        self.channel_axis = -1 if data_format == "channels_last" else 1
        self.activation = keras.activations.get(activation)
        self.output_activation = keras.activations.get(output_activation)
        self.variant = variant
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.transform_kernel_initializer = keras.initializers.get(transform_kernel_initializer)
        self.transform_bias_initializer = get_bias_initializer(transform_bias_initializer)
        self.carry_kernel_initializer = keras.initializers.get(carry_kernel_initializer)
        self.carry_bias_initializer = get_bias_initializer(carry_bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self._learned = LEARNED_BRANCHES[variant]
        self.lesioned = False
        self.input_spec = keras.layers.InputSpec(ndim=4)

    # --- weights ---------------------------------------------------------------------------

    def _shortcut_kind(self, channels):
        """"identity", "projection", "zero_pad" or None (a plain block needs none)."""
        keeps_shape = self.strides == (1, 1) and channels == self.filters
        if self.shortcut == "projection":
            return None if self.variant == "plain" else "projection"
        if keeps_shape:
            return "identity"
        if self.shortcut == "zero_pad":
            if self.filters < channels:
                raise ValueError(
                    f"BNHighwayBlock's zero_pad shortcut pads channels and cannot drop any: "
                    f"{channels} input channels, filters={self.filters}. Use "
                    "shortcut='auto' (a projection where the shape changes)."
                )
            return "zero_pad"
        return None if self.variant == "plain" else "projection"

    def _conv_bn(self, prefix, kernel_size, c_in, c_out, strides, kernel_init, beta_init):
        kernel = self.add_weight(
            name=f"{prefix}_kernel", shape=(*kernel_size, c_in, c_out),
            initializer=kernel_init, regularizer=self.kernel_regularizer,
        )
        bias = (self.add_weight(name=f"{prefix}_bias", shape=(c_out,), initializer="zeros")
                if self.use_bias else None)
        gamma = self.add_weight(name=f"{prefix}_gamma", shape=(c_out,), initializer="ones",
                                autocast=False)
        beta = self.add_weight(name=f"{prefix}_beta", shape=(c_out,), initializer=beta_init,
                               autocast=False)
        moving_mean = self.add_weight(name=f"{prefix}_moving_mean", shape=(c_out,),
                                      initializer="zeros", trainable=False, autocast=False)
        moving_variance = self.add_weight(name=f"{prefix}_moving_variance", shape=(c_out,),
                                          initializer="ones", trainable=False, autocast=False)
        return _ConvBN(strides, kernel, bias, gamma, beta, moving_mean, moving_variance)

    def build(self, input_shape):
        channels = input_shape[self.channel_axis]
        if channels is None:
            raise ValueError(
                "BNHighwayBlock needs a defined channel axis (axis "
                f"{self.channel_axis}) to create its weights. Received: "
                f"input_shape={tuple(input_shape)}"
            )
        self._shortcut_type = self._shortcut_kind(channels)
        kernels = {
            "h": self.kernel_initializer,
            "t": self.transform_kernel_initializer or self.kernel_initializer,
            "c": self.carry_kernel_initializer or self.kernel_initializer,
        }
        betas = {"h": keras.initializers.Zeros(), "t": self.transform_bias_initializer,
                 "c": self.carry_bias_initializer}
        used = []  # initializer instances seen, so that repeats are re-seeded

        def fresh(init):
            used.append(init)
            return _reseeded(init, sum(u is init for u in used) - 1)

        inner = self.inner_filters or self.filters
        last = len(self.kernel_sizes) - 1
        self._stacks = {}
        for branch in self._learned:
            stack, c_in = [], channels
            for i, kernel_size in enumerate(self.kernel_sizes):
                c_out = self.filters if i == last else inner
                stack.append(self._conv_bn(
                    f"{branch}{i + 1}", kernel_size, c_in, c_out,
                    self.strides if i == 0 else (1, 1), fresh(kernels[branch]),
                    betas[branch] if i == last else keras.initializers.Zeros(),
                ))
                c_in = c_out
            self._stacks[branch] = tuple(stack)
        self._projection = None
        if self._shortcut_type == "projection":
            self._projection = self._conv_bn(
                "shortcut", (1, 1), channels, self.filters, self.strides,
                fresh(self.kernel_initializer), keras.initializers.Zeros(),
            )
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={self.channel_axis: channels})

    # --- the computation -------------------------------------------------------------------

    def _channels_vector(self, v, rank):
        """`v` (channels,) shaped to broadcast against a tensor of `rank` dimensions."""
        return v if self.channel_axis == -1 else ops.reshape(v, (-1,) + (1,) * (rank - 2))

    def _apply(self, x, unit, training):
        z = ops.conv(x, ops.cast(unit.kernel, self.compute_dtype), strides=unit.strides,
                     padding="same", data_format=self.data_format)
        if unit.bias is not None:
            z = z + self._channels_vector(ops.cast(unit.bias, self.compute_dtype), 4)
        # Batch normalisation in float32 at least, as keras.layers.BatchNormalization.
        z = ops.cast(z, keras.backend.result_type(z.dtype, "float32"))
        if training and self.trainable:
            axes = [a for a in range(4) if a != self.channel_axis % 4]
            mean, variance = ops.moments(z, axes=axes)
            unit.moving_mean.assign(
                ops.cast(unit.moving_mean, z.dtype) * self.momentum + mean * (1 - self.momentum)
            )
            unit.moving_variance.assign(
                ops.cast(unit.moving_variance, z.dtype) * self.momentum
                + variance * (1 - self.momentum)
            )
        else:
            mean = ops.cast(unit.moving_mean, z.dtype)
            variance = ops.cast(unit.moving_variance, z.dtype)
        z = ops.batch_normalization(
            z, mean, variance, axis=self.channel_axis, offset=ops.cast(unit.beta, z.dtype),
            scale=ops.cast(unit.gamma, z.dtype), epsilon=self.epsilon,
        )
        return ops.cast(z, self.compute_dtype)

    def _stack(self, x, branch, training):
        """A stack's output before its final activation (the last batch normalisation's)."""
        stack = self._stacks[branch]
        for i, unit in enumerate(stack):
            x = self._apply(x, unit, training)
            if i < len(stack) - 1:
                x = ops.relu(x)
        return x

    def _shortcut(self, x, training):
        if self._shortcut_type == "identity":
            return x
        if self._shortcut_type == "projection":
            return self._apply(x, self._projection, training)
        if self._shortcut_type == "zero_pad":
            (sh, sw), extra = self.strides, self.filters - x.shape[self.channel_axis]
            pad = [[0, 0]] * 4
            pad[self.channel_axis % 4] = [extra // 2, extra - extra // 2]
            if self.channel_axis == -1:
                return ops.pad(x[:, ::sh, ::sw, :], pad)
            return ops.pad(x[:, :, ::sh, ::sw], pad)
        raise ValueError(
            f"BNHighwayBlock '{self.name}' has no shortcut: it is variant 'plain' (y = H(x)) "
            "and changes its input's shape, so there is no S(x) to carry the input through "
            "(as when lesioned). Keep the shape (strides 1, filters = input channels) for one."
        )

    def _branches(self, x, training):
        h = self.activation(self._stack(x, "h", training))
        t = ops.sigmoid(self._stack(x, "t", training)) if "t" in self._learned else None
        c = ops.sigmoid(self._stack(x, "c", training)) if "c" in self._learned else None
        return h, t, c

    def call(self, inputs, training=None):
        if self.lesioned:
            return self.output_activation(self._shortcut(inputs, training))
        h, t, c = self._branches(inputs, training)
        s = None if self.variant == "plain" else self._shortcut(inputs, training)
        return self.output_activation(combine(self.variant, s, h, t, c))

    # --- analysis (inference mode: the moving statistics) ----------------------------------

    def _prepare(self, x):
        x = ops.convert_to_tensor(x, dtype=self.compute_dtype)
        if not self.built:
            self.build(x.shape)
        return x

    def shortcut_output(self, x):
        """S(x), the input brought to the output's shape (inference mode)."""
        return self._shortcut(self._prepare(x), training=False)

    def block_state(self, x):
        """H(x), the candidate output, with the output's shape (inference mode)."""
        return self.activation(self._stack(self._prepare(x), "h", training=False))

    def transform_gate(self, x):
        """T(x), with the output's shape (inference mode); ones for variants without a
        transform gate (c_only, residual, plain)."""
        x = self._prepare(x)
        if "t" not in self._learned:
            return ops.ones_like(self.block_state(x))
        return ops.sigmoid(self._stack(x, "t", training=False))

    def carry_gate(self, x):
        """C(x), with the output's shape (inference mode): 1 - T(x) when coupled, ones for
        t_only and residual, zeros for plain."""
        x = self._prepare(x)
        if self.variant == "coupled":
            return 1.0 - self.transform_gate(x)
        if "c" in self._learned:
            return ops.sigmoid(self._stack(x, "c", training=False))
        ones = ops.ones_like(self.block_state(x))
        return ops.zeros_like(ones) if self.variant == "plain" else ones

    def _gate_beta(self, branch):
        if branch not in self._learned:
            return None
        if not self.built:
            raise ValueError(
                f"BNHighwayBlock '{self.name}' has no gate bias yet: call it on an input "
                "(or build it) first."
            )
        return self._stacks[branch][-1].beta

    @property
    def transform_bias(self):
        """b_T, the beta of T's last batch normalisation; None for variants without T."""
        return self._gate_beta("t")

    @property
    def carry_bias(self):
        """b_C, the beta of C's last batch normalisation; None for variants without a
        learned C."""
        return self._gate_beta("c")

    def compute_output_shape(self, input_shape):
        spatial = [1, 2] if self.channel_axis == -1 else [2, 3]
        shape = list(input_shape)
        for axis, stride in zip(spatial, self.strides):
            shape[axis] = None if shape[axis] is None else math.ceil(shape[axis] / stride)
        shape[self.channel_axis] = self.filters
        return tuple(shape)

    def get_config(self):
        serialize_init = keras.initializers.serialize
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_sizes": self.kernel_sizes,
            "inner_filters": self.inner_filters,
            "strides": self.strides,
            "shortcut": self.shortcut,
            "data_format": self.data_format,
            "activation": keras.activations.serialize(self.activation),
            "output_activation": keras.activations.serialize(self.output_activation),
            "variant": self.variant,
            "use_bias": self.use_bias,
            "kernel_initializer": serialize_init(self.kernel_initializer),
            "transform_kernel_initializer": serialize_init(self.transform_kernel_initializer),
            "transform_bias_initializer": serialize_init(self.transform_bias_initializer),
            "carry_kernel_initializer": serialize_init(self.carry_kernel_initializer),
            "carry_bias_initializer": serialize_init(self.carry_bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "activity_regularizer": keras.regularizers.serialize(self.activity_regularizer),
        }
