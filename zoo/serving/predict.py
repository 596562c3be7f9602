"""`highway-zoo export` and `highway-zoo predict`: write a SavedModel, and check one locally.

    highway-zoo export NAME [--weights W | --run RUN_DIR | --random-weights]
                       [--base-dir exported] [--version N] [--name SERVED_NAME] [--no-warmup]
    highway-zoo predict --model-dir exported/NAME/VERSION IMAGE... [--top 3]

`predict` loads the SavedModel with `tf.saved_model.load` (no project code involved: it runs
what TF Serving would run) and prints, per image, the predicted class and the top
probabilities. Images are PNG files (decoded as stored, 0-255) or `.npy` arrays holding one
image `[height, width, channels]` (`[height, width]` for one channel) or a batch
`[n, height, width, channels]` of raw pixel values.

A language model's export (zoo/serving/language_model.py) takes words instead:
`predict --model-dir DIR the cat sees` prints the most probable next words after the whole sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SIGNATURE = "serving_default"
WORDS = "words"  # a language model's input (zoo.serving.language_model.INPUT_NAME)


class ImageShapeError(ValueError):
    """An image does not have the shape the model's signature expects."""


@dataclass
class Prediction:
    """One image's result: where it came from, its class and its top classes."""

    source: str
    class_id: int
    top: list[tuple[int, float]]


@dataclass
class NextWords:
    """A sentence and the most probable words to follow it."""

    context: list[str]
    top: list[tuple[str, float]]


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
    """Runs the exported model's `serving_default` on the images in `paths`; for a language
    model, `paths` are the words of one sentence (a list of one `NextWords`)."""
    import tensorflow as tf

    _, fn, input_name, image_shape = load_signature(model_dir)
    if input_name == WORDS:
        return [next_words(fn, [str(word) for word in paths], top)]
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


def next_words(fn, words: list[str], top: int) -> NextWords:
    """The words the language model's signature `fn` puts most probably after `words` (at most
    the export's top k, 5)."""
    import tensorflow as tf

    if not words:
        raise ValueError("Give the words of a sentence to continue, e.g. `the cat`.")
    try:
        out = fn(**{WORDS: tf.constant([words])})
    except tf.errors.InvalidArgumentError as error:  # the signature's checks of the spelling
        raise ValueError(_refusal(error.message)) from None
    found = out["top_words"].numpy()[0, -1][:top]
    probabilities = out["top_probabilities"].numpy()[0, -1][:top]
    return NextWords(words, [(w.decode(), float(p)) for w, p in zip(found, probabilities)])


def _refusal(message: str) -> str:
    """The exported signature's refusal (a `tf.debugging.Assert`: "assertion failed: [what:]
    [the words]" and the graph node) as one line that says how to fix it."""
    found = re.search(r"assertion failed: \[(.*?):?\] \[(.*?)\]", message, re.S)
    if found is None:
        return " ".join(message.split())
    # The assertion C-escapes its strings: quotes and backslashes back as the user wrote them.
    what, which = (re.sub(r"\\(['\"\\])", r"\1", part) for part in found.groups())
    return (f"{what}: {which}. Give the words as the model's training text spells them "
            "(Mikolov's PTB: lower case, numbers as N, rare words as <unk>).")

