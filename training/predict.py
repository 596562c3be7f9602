"""`highway-zoo export` and `highway-zoo predict`: write a SavedModel, and check one locally.

    highway-zoo export NAME [--weights W | --run RUN_DIR | --random-weights]
                       [--base-dir exported] [--version N] [--name SERVED_NAME] [--no-warmup]
    highway-zoo predict --model-dir exported/NAME/VERSION IMAGE... [--top 3]

`predict` loads the SavedModel with `tf.saved_model.load` (no project code involved: it runs
what TF Serving would run) and prints, per image, the predicted class and the top
probabilities. Images are PNG files (decoded as stored, 0-255) or `.npy` arrays holding one
image `[height, width, channels]` (`[height, width]` for one channel) or a batch
`[n, height, width, channels]` of raw pixel values.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SIGNATURE = "serving_default"


class ImageShapeError(ValueError):
    """An image does not have the shape the model's signature expects."""


@dataclass
class Prediction:
    """One image's result: where it came from, its class and its top classes."""

    source: str
    class_id: int
    top: list[tuple[int, float]]


def load_signature(model_dir: str | Path, signature: str = SIGNATURE):
    """The loaded SavedModel, its `signature` function, input name and per-image shape."""
    import tensorflow as tf

    model_dir = Path(model_dir)
    if not (model_dir / "saved_model.pb").is_file():
        raise FileNotFoundError(
            f"No SavedModel in {model_dir} (no saved_model.pb). Pass a version directory "
            "written by `highway-zoo export`, e.g. exported/highway_fc10_mnist/1."
        )
    loaded = tf.saved_model.load(str(model_dir))
    if signature not in loaded.signatures:
        raise ValueError(
            f"{model_dir} has no signature {signature!r}; it has {sorted(loaded.signatures)}."
        )
    fn = loaded.signatures[signature]
    (input_name, spec), *more = fn.structured_input_signature[1].items()
    if more:
        raise ValueError(f"Signature {signature!r} takes {1 + len(more)} inputs; expected one.")
    return loaded, fn, input_name, tuple(spec.shape[1:])


def _describe(shape) -> str:
    return "x".join(str(d) for d in shape)


def _check_finite(path: Path, array: np.ndarray) -> None:
    """Refuses NaN and infinite pixels: the model would still answer, with a made-up class."""
    bad = ~np.isfinite(array.astype(np.float64, copy=False))
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{path} holds {int(bad.sum())} NaN or infinite value(s) (the first at index "
            f"{first}: {array[first]}); pixels must be finite raw values 0-255."
        )


def read_images(path: str | Path, image_shape: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
    """`(label, image)` pairs from a PNG or `.npy` file, each image float32 `image_shape`."""
    import tensorflow as tf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No image file at {path}.")
    expected = _describe(image_shape)
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"{path} is not a NumPy .npy array of pixel values: {err}") from None
        if not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
            raise ValueError(f"{path} holds {array.dtype} values; expected numeric pixel values.")
        shape = tuple(array.shape)
        _check_finite(path, array)
        if shape == image_shape:
            return [(str(path), array.astype(np.float32))]
        if image_shape[-1] == 1 and shape == image_shape[:-1]:
            return [(str(path), array[..., None].astype(np.float32))]
        if len(shape) == len(image_shape) + 1 and shape[1:] == image_shape:
            if not len(array):
                raise ImageShapeError(f"{path} is an empty batch {shape}: it holds no image.")
            return [(f"{path}[{i}]", image.astype(np.float32)) for i, image in enumerate(array)]
        raise ImageShapeError(
            f"{path} has shape {shape}; the model expects one image of shape {image_shape}"
            + (f" (or {image_shape[:-1]})" if image_shape[-1] == 1 else "")
            + f" or a batch (n, {', '.join(map(str, image_shape))}) of raw pixel values 0-255."
        )
    if path.suffix.lower() == ".png":
        try:
            image = tf.io.decode_png(path.read_bytes(), channels=0).numpy()
        except tf.errors.InvalidArgumentError as err:
            raise ValueError(f"{path} is not a readable PNG: {err.message}") from None
        if image.shape != image_shape:
            kind = {1: "grayscale", 3: "RGB"}.get(image_shape[-1], f"{image_shape[-1]}-channel")
            raise ImageShapeError(
                f"{path} is a {_describe(image.shape[:2])} PNG with {image.shape[2]} channel(s); "
                f"the model expects {expected} ({_describe(image_shape[:2])} pixels, {kind})."
            )
        return [(str(path), image.astype(np.float32))]
    raise ValueError(f"{path}: expected a .png or .npy file.")


def predict(
    model_dir: str | Path, paths: list[str | Path], top: int = 3, batch_size: int = 256
) -> list[Prediction]:
    """Runs the exported model's `serving_default` on the images in `paths`."""
    import tensorflow as tf

    _, fn, input_name, image_shape = load_signature(model_dir)
    images = [item for path in paths for item in read_images(path, image_shape)]
    results = []
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        batch = tf.constant(np.stack([image for _, image in chunk]))
        probabilities = fn(**{input_name: batch})["probabilities"].numpy()
        for (label, _), p in zip(chunk, probabilities):
            best = np.argsort(-p, kind="stable")[:top]
            results.append(
                Prediction(label, int(best[0]), [(int(c), float(p[c])) for c in best])
            )
    return results


# --- the command line (wired into training/cli.py) --------------------------------------------


def add_parsers(sub) -> None:
    """Adds the `export` and `predict` subcommands to `highway-zoo`'s subparsers."""
    p = sub.add_parser(
        "export", help="write a SavedModel for TF Serving into exported/NAME/VERSION",
        description="Exports a zoo network as a TensorFlow SavedModel in TF Serving's layout "
        "(BASE_DIR/NAME/VERSION), with signatures serving_default (probabilities, class_ids), "
        "logits and gates, warm-up requests and provenance, and rewrites "
        "BASE_DIR/models.config to list every model there. Versions are never overwritten.",
    )
    p.add_argument("name", help="architecture name (highway-zoo list)")
    weights = p.add_mutually_exclusive_group()
    weights.add_argument("--weights", help="a .weights.h5 file (with its .sha256), a model "
                         "directory, or 'default' for the shipped weights")
    weights.add_argument("--run", metavar="RUN_DIR", help="a run directory of highway-zoo "
                         "train (its weights and overrides)")
    weights.add_argument("--random-weights", action="store_true",
                         help="export a freshly initialised network (timing, testing)")
    p.add_argument("--base-dir", default="exported", help="model base path (default exported)")
    p.add_argument("--version", type=int, help="version number (default: the next free one)")
    p.add_argument("--served-name", dest="served_name",
                   help="the model's name in TF Serving (default: NAME)")
    p.add_argument("--no-warmup", action="store_true", help="write no warm-up requests")
    p.add_argument("--max-batch", type=int, metavar="N",
                   help="the most images one request may hold (default: zoo.export's, 1024); "
                   "a larger request fails with an error saying so")
    p.add_argument("--batching-config", action="store_true",
                   help="also write BASE_DIR/batching.config, TF Serving's batching "
                   "parameters with --max-batch (--enable_batching --batching_parameters_file)")
    p.add_argument("--format", choices=("tf_saved_model", "tflite"), default="tf_saved_model",
                   help="tf_saved_model (default) or tflite: one file BASE_DIR/NAME/VERSION.tflite "
                   "with the same signatures (run it with zoo.tflite.load)")

    p = sub.add_parser(
        "predict", help="classify images with an exported SavedModel (a local check)",
        description="Loads an exported SavedModel with tf.saved_model.load and prints, per "
        "image, the predicted class and the top probabilities. IMAGE: a PNG, or a .npy "
        "holding one image or a batch, of raw pixel values 0-255.",
    )
    p.add_argument("--model-dir", required=True,
                   help="a version directory, e.g. exported/highway_fc10_mnist/1")
    p.add_argument("images", nargs="+", metavar="IMAGE")
    p.add_argument("--top", type=int, default=3, help="how many classes to show (default 3)")


def _export(args: argparse.Namespace) -> int:
    from zoo.export import export

    weights = args.run or args.weights
    path = export(
        args.name, base_dir=args.base_dir, version=args.version, weights=weights,
        random_weights=args.random_weights, name=args.served_name, warmup=not args.no_warmup,
        batching_config=args.batching_config,
        **({} if args.max_batch is None else {"max_batch": args.max_batch}),
        format=args.format,
    )
    print(f"exported {args.name} to {path}")
    if args.format == "tf_saved_model":
        print(f"models.config: {Path(args.base_dir).resolve() / 'models.config'}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise ValueError(f"--top must be at least 1. Received: {args.top}")
    for result in predict(args.model_dir, args.images, top=args.top):
        top = ", ".join(f"{c}: {p:.3f}" for c, p in result.top)
        print(f"{result.source}: class {result.class_id}  (top-{len(result.top)}: {top})")
    return 0


def run(args: argparse.Namespace) -> int:
    """Runs `export` or `predict` (training/cli.py turns a user error into one line)."""
    command: Any = _export if args.command == "export" else _predict
    return command(args)
