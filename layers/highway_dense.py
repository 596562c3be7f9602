"""The fully connected highway layer."""

import keras
from keras import ops

from layers._highway import HighwayBase


@keras.saving.register_keras_serializable(package="highway_zoo")
class HighwayDense(HighwayBase):
    """Fully connected highway layer: a gated mix of a dense transform and its input.

    `HighwayDense` implements, on the last axis,
    `y = H(x) * T(x) + x * C(x)`, with
    `H(x) = activation(x @ W_H + b_H)` (the block state),
    `T(x) = sigmoid(x @ W_T + b_T)` (the transform gate) and
    `C(x)` (the carry gate) set by `variant`:

    - `"coupled"` (default, the 2015 paper): `C = 1 - T`, so `y = x + T * (H - x)`.
    - `"full"`: `C(x) = sigmoid(x @ W_C + b_C)`, a gate with its own weights.
    - `"c_only"`: `T = 1`, so `y = H(x) + x * C(x)`.
    - `"t_only"`: `C = 1`, so `y = H(x) * T(x) + x`.
    - `"residual"`: `T = C = 1`, so `y = H(x) + x`.
    - `"plain"`: `T = 1, C = 0`, so `y = H(x)`: no gates, no carry (Greff's Plain).

    The gated skips learn H alone in `kernel` and `bias` (`n = 1`), plus weights of their own
    (after `kernel` and `bias`; neither regularized nor constrained), with `d` the width:

    - `"rezero"`: `y = x + alpha * H(x)`, one scalar `alpha` (weight `alpha`) started at 0, so a
      fresh layer is exactly the identity. ReZero (Bachlechner et al. 2020); SkipInit (De &
      Smith 2020) is the same form. `d*d + d + 1` parameters.
    - `"layerscale"`: `y = x + lambda * H(x)`, `lambda` one value per channel (weight
      `layer_scale`, shape `(d,)`) started at `layerscale_init`, so a fresh layer is within
      `lambda * |H(x)|` of the identity. LayerScale (CaiT, Touvron et al. 2021): 0.1 for nets up
      to depth 18, 1e-5 up to 24, 1e-6 deeper. `d*d + 2*d` parameters.
    - `"gru_gate"`: GTrXL's gate around `y = H(x)` (Parisotto et al. 2019; the weights
      laid out as in RLlib's `GRUGate`): `r = sigmoid(y @ W_r + x @ U_r)`,
      `z = sigmoid(y @ W_z + x @ U_z - b_g)`, `g = tanh(y @ W_g + (r * x) @ U_g)`,
      `out = (1 - z) * x + z * g`. `W = [W_r | W_z | W_g]` is the weight `gate_kernel`
      `(d, 3d)`, `U = [U_r | U_z | U_g]` the weight `gate_recurrent_kernel` `(d, 3d)`, both
      drawn by `kernel_initializer` per `(d, d)` slice (own random streams); `b_g` the weight
      `gate_bias` `(d,)` started at `gru_gate_bias` (> 0: z starts near sigmoid(-b_g), so a
      fresh layer is near the identity, the closer the larger b_g). `7*d*d + 2*d` parameters.
    - `"laurel_rw"`: `y = alpha * H(x) + beta * x`, scalars `alpha`, `beta` (weights `alpha`,
      `beta`) started at 1, so a fresh layer is the residual layer it replaces in situ.
      LAuReL-RW (Menghani et al., ICML 2025). `d*d + d + 2` parameters.
    - `"laurel_lr"`: `y = H(x) + x + (x @ A) @ B`, `A` `(d, r)` (weight `laurel_a`, by
      `kernel_initializer`) and `B` `(r, d)` (weight `laurel_b`), `r = laurel_rank`. B starts
      at 0 (LoRA's convention, chosen here so that a fresh layer is the residual layer;
      keras-hub's Gemma 3n block, built to load trained weights, leaves both at `Dense`'s
      glorot_uniform and also normalises `B·A·x` with an RMSNorm, not done here). LAuReL-LR.
      `d*d + d + 2*r*d` parameters.

    For `"gru_gate"`, `transform_gate` is GTrXL's update gate `z` (`out = z * g + (1 - z) * x`
    weighs the transform path as `T` does in `y = T * H + (1 - T) * x`) and `carry_gate` is
    `1 - z`; `transform_bias` is z's bias, `-b_g`. The gate analyses (`zoo.analysis`) read z
    as T. The other gated skips scale every example alike: `transform_gate` and `carry_gate`
    are refused for them (no T, no C; `layers.variants.no_routing`).

    The output has the width of the input. The learned branches are fused into one `kernel` of
    shape `(d, n * d)` and one `bias` of shape `(n * d,)`, side by side in the order
    `[H | T | C]` (only the branches the variant learns; `n` of them), so a call is one matmul.
    Each slice is initialised by its own initializer on the shape `(d, d)` of a single branch.
    Negative `b_T` biases the layer towards carrying its input at the start of training.

    Args:
        activation: Activation of the block state H. Defaults to `"relu"`.
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
        laurel_rank: `"laurel_lr"` only: the rank `r` of `B·A`, at most `d`. Defaults to None,
            meaning `max(1, d // 8)`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Masking: as `keras.layers.Dense`. Every position is computed from itself alone, so an
    incoming mask (after `Embedding(mask_zero=True)` or `Masking`, say) is passed on unchanged
    to the next layer, and padded time steps change no result at the unmasked ones. The
    outputs at masked positions are computed all the same, for the next layer to ignore.

    Input shape:
        N-D tensor with shape `(batch_size, ..., d)`, `d` defined.

    Output shape:
        Same shape as the input.

    Example:

    >>> x = np.random.rand(4, 16)
    >>> layer = HighwayDense(transform_bias_initializer=-2.0)
    >>> tuple(layer(x).shape)
    (4, 16)
    >>> tuple(layer.kernel.shape)
    (16, 32)

    Reference:
        - [Srivastava, Greff & Schmidhuber, 2015](https://arxiv.org/abs/1507.06228),
          "Training Very Deep Networks".
        - [Greff, Srivastava & Schmidhuber, 2017](https://arxiv.org/abs/1612.07771),
          "Highway and Residual Networks learn Unrolled Iterative Estimation".
        - [Bachlechner et al., 2020](https://arxiv.org/abs/2003.04887), "ReZero is All You
          Need"; [De & Smith, 2020](https://arxiv.org/abs/2002.10444), SkipInit.
        - [Touvron et al., 2021](https://arxiv.org/abs/2103.17239), "Going deeper with Image
          Transformers" (CaiT, LayerScale).
        - [Parisotto et al., 2019](https://arxiv.org/abs/1910.06764), "Stabilizing
          Transformers for Reinforcement Learning" (GTrXL).
        - [Menghani, Kumar & Kumar, 2025](https://arxiv.org/abs/2411.07501), "LAuReL: Learned
          Augmented Residual Layer".
    """

    def __init__(
        self,
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
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        # Each position is computed from itself alone, so a padding mask stays valid: pass it on.
        self.supports_masking = True

    # quantize("int8"): an int8 x int8 matmul of the inputs quantized per row, as Dense's.
    _int8_inputs = True

    def _branch_kernel_shape(self, channels):
        return (channels, channels)

    def _linear(self, x, kernel):
        return ops.matmul(x, kernel)
