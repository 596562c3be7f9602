"""Per-example global contrast normalisation, the CIFAR preprocessing of the highway papers."""

import numbers

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="highway_zoo")
class GlobalContrastNormalization(keras.layers.Layer):
    """Global contrast normalisation: each example rescaled to zero mean and unit variance
    (or `scale` times it).

    For every example, over all of its non-batch axes (pixels and channels together):
    `y = scale * (x - mean(x)) / sqrt(var(x) + epsilon)`.
    Raw pixel values (e.g. CIFAR's 0-255) go in; an image with mean 0 and standard deviation
    close to 1 comes out. A constant image gives zeros (no NaN), thanks to `epsilon`. The
    statistics are computed in float32 at least, also under a float16 or bfloat16 policy.

    Masking: as `keras.layers.BatchNormalization`, which takes its statistics over the
    unmasked positions only. Given a mask with one entry per position (`inputs.shape[:-1]`,
    as `Masking` and `Embedding(mask_zero=True)` make), each example's mean and variance are
    those of its unmasked positions (all their features), so padded time steps change no
    result at the unmasked ones; masked positions are normalised with the same statistics,
    for the next layer to ignore. The mask is passed on unchanged. An example with every
    position masked is normalised with mean 0 and variance 0.

    Args:
        epsilon: Positive float added to the variance. Defaults to 1e-8.
        scale: The standard deviation each example ends with (pylearn2's `scale`). Defaults
            to 1.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        Any tensor of rank 2 or more, `(batch_size, ...)`.

    Output shape:
        Same shape as the input.

    Example:

    >>> images = np.random.randint(0, 256, size=(2, 32, 32, 3)).astype("float32")
    >>> y = GlobalContrastNormalization()(images)
    >>> tuple(y.shape)
    (2, 32, 32, 3)

    Reference:
        - [Srivastava, Greff & Schmidhuber, 2015](https://arxiv.org/abs/1507.06228),
          "Training Very Deep Networks" (CIFAR set-up, after Goodfellow et al. 2013,
          "Maxout Networks").
    """

    def __init__(self, epsilon: float = 1e-8, scale: float = 1.0, **kwargs):
        if not isinstance(epsilon, numbers.Real) or isinstance(epsilon, bool) or not epsilon > 0:
            raise ValueError(
                "`epsilon` must be a positive number (it keeps constant images finite). "
                f"Received: epsilon={epsilon!r}"
            )
        if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not scale > 0:
            raise ValueError("`scale` must be a positive number (the standard deviation each "
                             f"example ends with). Received: scale={scale!r}")
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)
        self.scale = float(scale)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        dtype = self.compute_dtype
        stats_dtype = "float32" if dtype in ("float16", "bfloat16") else dtype
        x = ops.cast(inputs, stats_dtype)
        axes = tuple(range(1, len(x.shape)))
        if mask is None:
            centred = x - ops.mean(x, axis=axes, keepdims=True)
            variance = ops.mean(ops.square(centred), axis=axes, keepdims=True)
            return ops.cast(centred * (self.scale * ops.rsqrt(variance + self.epsilon)), dtype)
        if len(mask.shape) != len(x.shape) - 1:
            raise ValueError(
                "GlobalContrastNormalization takes a mask with one entry per position, one "
                "dimension less than its inputs (as BatchNormalization). Received: "
                f"mask.shape={tuple(mask.shape)}, inputs.shape={tuple(x.shape)}"
            )
        # Statistics of the unmasked positions only (as BatchNormalization's), so that padding
        # changes nothing at them; `where`, not a product, so padding holding inf or NaN cannot
        # leak in. An example with nothing unmasked gets zero statistics, not 0 / 0.
        kept = ops.broadcast_to(ops.expand_dims(ops.cast(mask, "bool"), -1), ops.shape(x))
        count = ops.maximum(ops.sum(ops.cast(kept, stats_dtype), axis=axes, keepdims=True), 1.0)
        mean = ops.sum(ops.where(kept, x, 0.0), axis=axes, keepdims=True) / count
        centred = x - mean
        variance = ops.sum(ops.where(kept, ops.square(centred), 0.0), axis=axes,
                           keepdims=True) / count
        return ops.cast(centred * (self.scale * ops.rsqrt(variance + self.epsilon)), dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "scale": self.scale}
