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


def convert(model) -> bytes:
    """The TFLite flatbuffer of `model` with every signature of its SavedModel export."""
    import tensorflow as tf

    from zoo.serving.signatures import build_archive, write_archive

    archive, signatures = build_archive(model)
    with tempfile.TemporaryDirectory(prefix="highway-zoo-tflite-") as saved_model:
        write_archive(archive, Path(saved_model))
        converter = tf.lite.TFLiteConverter.from_saved_model(
            saved_model, signature_keys=signatures
        )
        return converter.convert()


def versions(model_dir: str | os.PathLike) -> list[int]:
    """The numbers of the `<version>.tflite` files in `model_dir`, sorted."""
    from zoo.serving.signatures import numbered_files

    return numbered_files(model_dir, SUFFIX)


def export(model, model_dir: Path, version: int | None, name: str) -> Path:
    """Writes `model` as `model_dir/<version>.tflite` (the next free number if None); called by
    `zoo.export(..., format="tflite")`, which checks the arguments."""
    from zoo.serving.signatures import write_numbered_file

    return write_numbered_file(model_dir, version, name, SUFFIX, "TFLite", lambda: convert(model))


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
        for key in self.signatures:
            runner = self._interpreter.get_signature_runner(key)
            (input_name, details), *more = runner.get_input_details().items()
            if more:
                raise ValueError(f"{self.path}: signature {key!r} takes more than one input.")
            self._runners[key] = runner
            self._inputs[key] = (input_name, tuple(int(d) for d in details["shape_signature"]))
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
        return self._runners[signature](**{input_name: x.astype(np.float32, copy=False)})


def load(path: str | os.PathLike) -> TFLiteModel:
    """The `.tflite` file at `path` as a `TFLiteModel` that checks its input shapes."""
    return TFLiteModel(path)
