"""`highway-zoo export` and `highway-zoo predict`: write a SavedModel, and check one locally.

    highway-zoo export NAME [--weights W | --run RUN_DIR | --random-weights]
                       [--base-dir exported] [--version N] [--name SERVED_NAME] [--no-warmup]
    highway-zoo predict --model-dir exported/NAME/VERSION IMAGE... [--top 3] [--resize]

`predict` loads the SavedModel with `tf.saved_model.load` (no project code involved: it runs
what TF Serving would run) and prints, per image, the predicted class and the top
probabilities, by name where the export records its classes' names (`classify`'s labels).
Images are pictures (JPEG, PNG, GIF, BMP or WebP, read by their content with
`tf.io.decode_image`, 0-255 as stored; alpha dropped, grey made RGB or RGB grey as the model
takes it) or `.npy` arrays holding one image `[height, width, channels]` (`[height, width]`
for one channel) or a batch `[n, height, width, channels]` of raw pixel values. A picture of
another size is refused unless `resize=True` (`--resize`): bilinear with antialiasing
(`tf.image.resize`), to the model's height and width, the aspect ratio not kept.

A language model's export (zoo/serving/language_model.py) takes words instead:
`predict --model-dir DIR the cat sees` prints the most probable next words after the whole sentence.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.class_names import label as class_label

SIGNATURE = "serving_default"
WORDS = "words"  # a language model's input (zoo.serving.language_model.INPUT_NAME)
# The export's provenance, which records its class names (zoo.serving.saved_model).
RECORD = Path("assets.extra") / "highway_zoo.json"
# How a picture of another size is resized when asked (keras.utils.load_img stretches too).
RESIZE = "bilinear with antialiasing, as tf.image.resize does; the aspect ratio not kept"
# The start of each format decode_image reads, and the bytes a whole file ends with (a
# truncated file lacks them). JPEG: the EOI marker; PNG: the IEND chunk and its CRC.
_FORMATS = {b"\xff\xd8\xff": ("JPEG", b"\xff\xd9"),
            b"\x89PNG\r\n\x1a\n": ("PNG", b"IEND\xaeB`\x82"),
            b"GIF8": ("GIF", b";"), b"BM": ("BMP", None), b"RIFF": ("WebP", None)}
PICTURES = "JPEG, PNG, GIF, BMP or WebP"


class ImageShapeError(ValueError):
    """An image does not have the shape the model's signature expects."""


@dataclass
class Prediction:
    """One image's result: where it came from, its class and its top classes (ids and
    probabilities), and the names of the model's classes (None: the export names none)."""

    source: str
    class_id: int
    top: list[tuple[int, float]]
    class_names: list[str] | None = None

    @property
    def class_name(self) -> str:
        """The predicted class's name, or its id as a string where the classes have none."""
        return class_label(self.class_id, self.class_names)


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


def _check_finite(path: Path, array: np.ndarray) -> None:
    """Refuses NaN and infinite pixels: the model would still answer, with a made-up class."""
    bad = ~np.isfinite(array.astype(np.float64, copy=False))
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{path} holds {int(bad.sum())} NaN or infinite value(s) (the first at index "
            f"{first}: {array[first]}); pixels must be finite raw values 0-255."
        )


def read_images(path: str | Path, image_shape: tuple[int, ...],
                resize: bool = False) -> list[tuple[str, np.ndarray]]:
    """`(label, image)` pairs from a picture or `.npy` file, each image float32 `image_shape`;
    a picture of another size is resized (`RESIZE`) with `resize`, else refused."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No image file at {path}.")
    if path.suffix.lower() == ".npy":
        return _read_npy(path, image_shape)
    try:
        data = path.read_bytes()
    except OSError as err:  # not the CLI's "cannot write" of an EACCES
        raise OSError(f"Cannot read {path}: {err.strerror or err}.") from None
    image = _channels(path, decode_picture(path, data), image_shape[-1])
    return [(str(path), _sized(path, image, image_shape, resize).astype(np.float32))]


def _read_npy(path: Path, image_shape: tuple[int, ...]) -> list[tuple[str, np.ndarray]]:
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


def decode_picture(path: Path, data: bytes) -> np.ndarray:
    """The picture in `data` as uint8 (height, width, channels), decoded by its content
    (`tf.io.decode_image`; a GIF's first frame). What is wrong with a file TensorFlow cannot
    decode is said in one line that names it, without TensorFlow's op text."""
    import tensorflow as tf

    if not data:
        raise ValueError(f"{path} is empty (0 bytes), not a picture.")
    kind, end = next((found for magic, found in _FORMATS.items() if data.startswith(magic)),
                     (None, None))
    try:
        with _native_stderr_quiet():
            return tf.io.decode_image(data, channels=0, expand_animations=False).numpy()
    except tf.errors.InvalidArgumentError as err:
        if kind is None or "Unknown image file format" in err.message:
            raise ValueError(f"{path} is not a picture: expected a {PICTURES} file, or a .npy "
                             "array of raw pixel values.") from None
        if end is not None and not data.rstrip(b"\0").endswith(end):
            raise ValueError(f"{path} is a truncated {kind} file ({len(data):,} bytes, its "
                             "end missing): it was cut short, e.g. by an interrupted download "
                             "or copy; get the whole file again.") from None
        raise ValueError(f"{path} is a damaged {kind} file: its image data cannot be "
                         "decoded.") from None


@contextlib.contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """libjpeg writes its complaints ("Premature end of JPEG file") straight to file
    descriptor 2, past TensorFlow's log levels; the error raised says what is wrong."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _channels(path: Path, image: np.ndarray, channels: int) -> np.ndarray:
    """`image` with the model's channels, as keras.utils.load_img (Pillow's convert) makes
    them: alpha dropped, grey repeated to RGB, RGB to grey by ITU-R 601-2 luma."""
    if image.shape[-1] in (2, 4):
        image = image[..., :-1]
    if image.shape[-1] == channels:
        return image
    if channels == 3:
        return np.repeat(image, 3, axis=-1)
    if channels == 1:
        return np.round(image.astype(np.float32) @ np.float32([0.299, 0.587, 0.114]))[..., None]
    raise ImageShapeError(f"{path}: the model takes {channels}-channel images; a picture "
                          "gives 1 (grey) or 3 (RGB). Pass a .npy array of its shape instead.")


def _sized(path: Path, image: np.ndarray, image_shape: tuple[int, ...],
           resize: bool) -> np.ndarray:
    """`image` at the model's height and width: resized if asked, else refused."""
    import tensorflow as tf

    (height, width), (want_height, want_width) = image.shape[:2], image_shape[:2]
    if (height, width) == (want_height, want_width):
        return image
    if not resize:
        raise ImageShapeError(
            f"{path} is {width}x{height} pixels; the model takes {want_width}x{want_height} "
            f"(width x height). Pass --resize (resize=True) to resize it ({RESIZE}), or give "
            f"a {want_width}x{want_height} picture.")
    resized = tf.image.resize(image, (want_height, want_width), method="bilinear",
                              antialias=True).numpy()
    return np.clip(np.round(resized), 0, 255)  # stored pixel values, as a resized file's


def class_names_of(model_dir: str | Path, classes: int) -> list[str] | None:
    """The names of the export's `classes` classes, as its provenance records them (the
    labels of its classify signature); None for an export that names none (ids then)."""
    try:
        record = json.loads((Path(model_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = record.get("class_names") if isinstance(record, dict) else None
    if not isinstance(names, list) or len(names) != classes \
            or not all(isinstance(n, str) for n in names):
        return None
    return names


def predict(
    model_dir: str | Path, paths: list[str | Path], top: int = 3, batch_size: int = 256,
    resize: bool = False,
) -> list[Prediction]:
    """Runs the exported model's `serving_default` on the images in `paths` (pictures of
    another size resized with `resize`); for a language model, `paths` are the words of one
    sentence (a list of one `NextWords`)."""
    import tensorflow as tf

    _, fn, input_name, image_shape = load_signature(model_dir)
    if input_name == WORDS:
        return [next_words(fn, [str(word) for word in paths], top)]
    images = [item for path in paths for item in read_images(path, image_shape, resize)]
    names = class_names_of(model_dir, int(fn.structured_outputs["probabilities"].shape[-1]))
    results = []
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        batch = tf.constant(np.stack([image for _, image in chunk]))
        probabilities = fn(**{input_name: batch})["probabilities"].numpy()
        for (label, _), p in zip(chunk, probabilities):
            best = np.argsort(-p, kind="stable")[:top]
            results.append(
                Prediction(label, int(best[0]), [(int(c), float(p[c])) for c in best], names)
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

