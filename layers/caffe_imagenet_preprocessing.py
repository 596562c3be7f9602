"""The ImageNet preprocessing of Caffe-trained ResNets, as a layer inside the model."""

import keras


@keras.saving.register_keras_serializable(package="highway_zoo")
class CaffeImageNetPreprocessing(keras.layers.Layer):
    """`keras.applications.resnet50.preprocess_input` as a layer: RGB pixels 0-255 in, BGR
    minus the ImageNet mean of each channel out (the order of Caffe-trained ResNets).

    The input layer of the zoo's ImageNet nets (`zoo.describe(name)["preprocessing"]`), so a
    model takes raw pixels. Registered as `"highway_zoo>CaffeImageNetPreprocessing"` (it was
    defined in `zoo/heads.py` before, under the same name: older `.keras` files load).

    Masking: as `keras.layers.Normalization` and `Rescaling`, which it is one of (a fixed
    per-channel shift): each position is computed from itself alone, so an incoming mask is
    passed on unchanged and padded positions change no result at the unmasked ones.

    Args:
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape:
        `(batch_size, ..., 3)`, RGB channels last.

    Output shape:
        Same shape as the input.
    """

    MEAN_BGR = (103.939, 116.779, 123.68)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        bgr = keras.ops.flip(inputs, axis=-1)
        return bgr - keras.ops.convert_to_tensor(self.MEAN_BGR, dtype=bgr.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
