"""Per-example global contrast normalisation, the CIFAR preprocessing of the highway papers."""

import numbers

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="highway_zoo")
class GlobalContrastNormalization(keras.layers.Layer):
    """Global contrast normalisation: each example rescaled to zero mean and unit variance.

    For every example, over all of its non-batch axes (pixels and channels together):
    `y = (x - mean(x)) / sqrt(var(x) + epsilon)`.
    Raw pixel values (e.g. CIFAR's 0-255) go in; an image with mean 0 and standard deviation
    close to 1 comes out. A constant image gives zeros (no NaN), thanks to `epsilon`. The
    statistics are computed in float32 at least, also under a float16 or bfloat16 policy.

    Args:
        epsilon: Positive float added to the variance. Defaults to 1e-8.
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

    def __init__(self, epsilon: float = 1e-8, **kwargs):
        if not isinstance(epsilon, numbers.Real) or isinstance(epsilon, bool) or not epsilon > 0:
            raise ValueError(
                "`epsilon` must be a positive number (it keeps constant images finite). "
                f"Received: epsilon={epsilon!r}"
            )
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def call(self, inputs):
        dtype = self.compute_dtype
        stats_dtype = "float32" if dtype in ("float16", "bfloat16") else dtype
        x = ops.cast(inputs, stats_dtype)
        axes = tuple(range(1, len(x.shape)))
        centred = x - ops.mean(x, axis=axes, keepdims=True)
        variance = ops.mean(ops.square(centred), axis=axes, keepdims=True)
        return ops.cast(centred * ops.rsqrt(variance + self.epsilon), dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
