"""A zoo network as one TFLite (LiteRT) flatbuffer with the SavedModel export's signatures.

    >>> import zoo
    >>> path = zoo.export("highway_fc10_mnist", weights="default", format="tflite")
    >>> path                                       # exported/highway_fc10_mnist/1.tflite
    >>> model = zoo.serving.tflite.load(path)
    >>> model(pixels)["probabilities"]             # serving_default; pixels (batch, 28, 28, 1)
    >>> model(pixels, signature="gates")           # {"highway_1": (batch,), ...}

The file holds the signatures `zoo.export` gives a SavedModel (`serving_default`, `logits`,
`gates`; see zoo/serving/saved_model.py), converted from that SavedModel with TFLite's builtin
ops only, in float32 (no quantisation), so their outputs equal the SavedModel's to float32
round-off.

`zoo.export(..., format="tflite", quantize="int8", representative=images)` writes a
full-integer file instead, `<version>.int8.tflite` (numbered apart): int8 builtin ops only,
calibrated on `images` (a few hundred of the model's training images), uint8 input (the raw
pixel bytes, scale 1, zero point 0) and uint8 outputs, which `TFLiteModel` dequantizes, so
both kinds of file are called alike (docs/guide/quantization.md).

TFLite drops the SavedModel's input shape check (`tf.ensure_shape`): a raw interpreter fed the
wrong shape fails deep inside a kernel, or computes garbage. `load` returns a `TFLiteModel`,
whose call checks the input against the signature's shape first and says what it expected.

Files are numbered like SavedModel versions, `<base_dir>/<name>/<version>.tflite` (TF Serving
serves only the numeric directories beside them and ignores these files), independently of
the SavedModel versions; each is written to a hidden temporary file and linked into place, so
a reader never sees half a file and an existing file is never overwritten.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

SUFFIX = ".tflite"
# A full-integer file is numbered apart from the float ones: <version>.int8.tflite.
INT8_SUFFIX = ".int8.tflite"
QUANTIZE = (None, "int8")
# Calibration: images per representative batch (the min/max TFLite records are the same for
# any batching; fewer interpreter calls).
CALIBRATION_BATCH = 32


def representative_images(model, images) -> np.ndarray:
    """`images` checked as a calibration sample for `model`: float32 `(n, *input_shape)`, raw
    pixel values 0-255; one clear line when they are missing or of the wrong shape."""
    from zoo.serving.signatures import input_shape_of

    shape = input_shape_of(model)
    if images is None:
        raise ValueError(
            "A full-integer (int8) TFLite file is calibrated on a representative sample of the "
            f"model's dataset: pass representative=images, a few hundred training images of "
            f"shape (n, {', '.join(map(str, shape))}), raw pixel values 0-255 "
            "(`highway-zoo export NAME --format tflite --quantize int8` reads them from the "
            "model's dataset).")
    x = np.asarray(images)
    if not np.issubdtype(x.dtype, np.number) or x.ndim != len(shape) + 1 \
            or tuple(x.shape[1:]) != shape or len(x) < 1:
        raise ValueError(
            f"representative= takes images of shape (n, {', '.join(map(str, shape))}), n >= 1, "
            f"raw pixel values 0-255; received an array of shape {x.shape} ({x.dtype}).")
    return x.astype(np.float32)


def convert(model, quantize: str | None = None, representative=None) -> bytes:
    """The TFLite flatbuffer of `model` with every signature of its SavedModel export.

    `quantize="int8"`: full-integer post-training quantization (`Optimize.DEFAULT`, int8
    builtin ops only), calibrated on `representative` (raw-pixel images, every signature fed
    each batch); the input is uint8 with scale 1 and zero point 0, i.e. the raw pixel bytes as
    the dataset stores them, and the float outputs are uint8 (`TFLiteModel` dequantizes them)."""
    import tensorflow as tf

    from zoo.quantization import quantized_layers
    from zoo.serving.signatures import INPUT_NAME, build_archive, write_archive

    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}. Received: quantize={quantize!r}")
    if quantize and quantized_layers(model):
        raise ValueError("quantize='int8' converts a float model (TFLite calibrates and "
                         "quantizes it itself); this one is quantized already (zoo.quantize).")
    images = representative_images(model, representative) if quantize else None
    archive, signatures = build_archive(model)
    with tempfile.TemporaryDirectory(prefix="highway-zoo-tflite-") as saved_model:
        write_archive(archive, Path(saved_model))
        converter = tf.lite.TFLiteConverter.from_saved_model(
            saved_model, signature_keys=signatures
        )
        if quantize == "int8":
            def calibration():
                for start in range(0, len(images), CALIBRATION_BATCH):
                    batch = images[start:start + CALIBRATION_BATCH]
                    for key in signatures:  # each signature is its own subgraph to calibrate
                        yield key, {INPUT_NAME: batch}

            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = calibration
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            # uint8 in: 0-255 pixels are exact at scale 1, zero point 0 (the calibrated range).
            converter.inference_input_type = tf.uint8
            converter.inference_output_type = tf.uint8
        return converter.convert()


def versions(model_dir: str | os.PathLike) -> list[int]:
    """The numbers of the `<version>.tflite` files in `model_dir`, sorted."""
    from zoo.serving.signatures import numbered_files

    return numbered_files(model_dir, SUFFIX)


def export(model, model_dir: Path, version: int | None, name: str,
           quantize: str | None = None, representative=None) -> Path:
    """Writes `model` as `model_dir/<version>.tflite` (`<version>.int8.tflite` with
    `quantize="int8"`; the next free number if None); called by `zoo.export(...,
    format="tflite")`, which checks the arguments."""
    from zoo.serving.signatures import write_numbered_file

    if quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {QUANTIZE}. Received: quantize={quantize!r}")
    if quantize:  # refused before anything is written
        representative = representative_images(model, representative)
    suffix, kind = (INT8_SUFFIX, "int8 TFLite") if quantize else (SUFFIX, "TFLite")
    return write_numbered_file(model_dir, version, name, suffix, kind,
                               lambda: convert(model, quantize, representative))


def _interpreter(path: str):
    """LiteRT's interpreter (`ai_edge_litert`, a dependency): TensorFlow's own copy,
    `tf.lite.Interpreter`, is deprecated in its favour."""
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path)


class TFLiteModel:
    """A `.tflite` file written by `zoo.export(..., format="tflite")`, callable per signature.

    `model(pixels, signature="serving_default")` checks that `pixels` is a numeric array of
    shape `(batch, *input_shape)` (`input_shape` is the model's per-image shape) and returns the
    signature's outputs as NumPy arrays, by name. One interpreter runs every call: use one
    `TFLiteModel` per thread.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(
                f"No TFLite file at {self.path}. Pass a file written by "
                "`zoo.export(..., format='tflite')`, e.g. exported/highway_fc10_mnist/1.tflite."
            )
        try:
            self._interpreter = _interpreter(str(self.path))
        except ValueError as err:
            raise ValueError(f"{self.path} is not a readable TFLite model: {err}") from None
        self.signatures = sorted(self._interpreter.get_signature_list())
        self._runners: dict[str, Any] = {}
        self._inputs: dict[str, tuple[str, tuple[int, ...]]] = {}
        self._input_details: dict[str, dict] = {}
        for key in self.signatures:
            runner = self._interpreter.get_signature_runner(key)
            (input_name, details), *more = runner.get_input_details().items()
            if more:
                raise ValueError(f"{self.path}: signature {key!r} takes more than one input.")
            self._runners[key] = runner
            self._inputs[key] = (input_name, tuple(int(d) for d in details["shape_signature"]))
            self._input_details[key] = details
        # A full-integer file (quantize="int8") takes and gives (u)int8: quantized here.
        self.quantized = any(np.dtype(d["dtype"]).kind in "iu"
                             for d in self._input_details.values())
        shapes = {shape[1:] for _, shape in self._inputs.values()}
        self.input_shape = shapes.pop() if len(shapes) == 1 else None

    def __call__(self, pixels, signature: str = "serving_default") -> dict[str, np.ndarray]:
        if signature not in self._runners:
            raise ValueError(
                f"{self.path} has no signature {signature!r}; it has {self.signatures}."
            )
        input_name, shape = self._inputs[signature]
        x = np.asarray(pixels)
        if not (np.issubdtype(x.dtype, np.number) and not np.iscomplexobj(x)):
            raise ValueError(
                f"{self.path} ({signature}) takes real pixel values; received an array of "
                f"{x.dtype}."
            )
        expected = "(batch, " + ", ".join(map(str, shape[1:])) + ")"
        if x.ndim != len(shape) or tuple(x.shape[1:]) != shape[1:] or x.shape[0] < 1:
            hint = " Add a batch axis for one image: pixels[None]." if (
                tuple(x.shape) == shape[1:]) else ""
            raise ValueError(
                f"{self.path} ({signature}) takes pixels of shape {expected}, raw pixel values "
                f"0-255; received an array of shape {tuple(x.shape)}.{hint}"
            )
        details = self._input_details[signature]
        dtype = np.dtype(details["dtype"])
        if dtype.kind in "iu":  # the file's own scale and zero point (raw pixels: 1 and 0)
            scale, zero_point = details["quantization"]
            info = np.iinfo(dtype)
            x = np.clip(np.round(np.asarray(x, np.float64) / scale + zero_point),
                        info.min, info.max).astype(dtype)
        else:
            x = x.astype(np.float32, copy=False)
        runner = self._runners[signature]
        outputs = runner(**{input_name: x})
        out_details = runner.get_output_details()
        for key, value in outputs.items():
            scale, zero_point = out_details[key]["quantization"]
            if value.dtype.kind in "iu" and value.dtype.itemsize == 1 and scale:
                outputs[key] = ((value.astype(np.float32) - zero_point) * scale).astype(
                    np.float32)
        return outputs


def load(path: str | os.PathLike) -> TFLiteModel:
    """The `.tflite` file at `path` as a `TFLiteModel` that checks its input shapes."""
    return TFLiteModel(path)
