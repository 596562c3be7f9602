"""Image datasets a user brings, prepared once into arrays every command reads.

`prepare_images(name, source, out)` reads what users actually have and writes a prepared
directory that `load_dataset(name, out)` (and so `train`, `fig1`, `analyze`, `tune` and the
studies, with `--data-dir out`) reads with NumPy alone, on any backend:

- the official archives: MNIST's four IDX `.gz` files; CIFAR-10's `cifar-10-python.tar.gz`
  (what torchvision reads) or `cifar-10-binary.tar.gz` (what TFDS reads): the directory
  holding them, or the archive itself;
- an image folder `split/class/file` (PNG or JPEG: the layout `tfds.folder_dataset.ImageFolder`
  and torchvision's `ImageFolder` read), with splits `train` and `test`, as a directory or a
  `.tar` / `.tar.gz` of one (under at most one top directory). A `split.csv` beside the
  split folders (`filepath,label`, as rasbt/mnist-pngs has) must agree with them.

The prepared directory holds `train.npz` and `test.npz` (`images` uint8 (n, h, w, c) with the
raw pixel values, `labels` int64 (n,)) and `images.json`, written last, which records each
source file's sha256 (a manifest hash for a folder), counts per split and class, whether the
source is the standard one (the official archives' checksums as TFDS and torchvision list
them) and whether it is lossy (any JPEG). Images are decoded by Pillow; a file that is not a
complete image of the dataset's size and mode stops the preparation (`ImageSourceError`, one
line naming the file and the fix) before anything is written.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import gzip
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from zoo.class_names import CLASS_NAMES
from zoo.files import sha256_of

RECORD_FILE = "images.json"
FORMAT = "highway-zoo prepared images"
FORMAT_VERSION = 1
SPLITS = ("train", "test")

Progress = Callable[[str], None]


class ImageSourceError(ValueError):
    """What the user brought is not the dataset asked for, or not readable: one line that
    names the file and the fix."""


@dataclasses.dataclass(frozen=True)
class ImageDataset:
    """What a dataset's images must be, and its official archives."""

    classes: tuple[str, ...]
    size: tuple[int, int]
    mode: str  # Pillow's: "L" greyscale, "RGB"
    counts: dict[str, int]  # the official split sizes
    # official file -> checksums as TFDS (sha256) and torchvision (md5) list them
    standard: dict[str, dict[str, Any]]

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3


MNIST_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
CIFAR10_PYTHON = "cifar-10-python.tar.gz"
CIFAR10_BINARY = "cifar-10-binary.tar.gz"

DATASETS: dict[str, ImageDataset] = {
    "mnist": ImageDataset(
        classes=CLASS_NAMES["mnist"], size=(28, 28), mode="L",
        counts={"train": 60000, "test": 10000},
        # tensorflow_datasets/image_classification/mnist checksums (the CVDF mirror)
        standard={
            "train-images-idx3-ubyte.gz": {"bytes": 9912422, "sha256":
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"},
            "train-labels-idx1-ubyte.gz": {"bytes": 28881, "sha256":
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"},
            "t10k-images-idx3-ubyte.gz": {"bytes": 1648877, "sha256":
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"},
            "t10k-labels-idx1-ubyte.gz": {"bytes": 4542, "sha256":
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"},
        }),
    "cifar10": ImageDataset(
        classes=CLASS_NAMES["cifar10"], size=(32, 32), mode="RGB",
        counts={"train": 50000, "test": 10000},
        standard={
            # tensorflow_datasets/image_classification/cifar10 checksums
            CIFAR10_BINARY: {"bytes": 170052171, "sha256":
                "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd"},
            # torchvision.datasets.CIFAR10.tgz_md5
            CIFAR10_PYTHON: {"md5": "c58f30108f718f92721af3b95e74349a"},
        }),
}


def spec(name: str) -> ImageDataset:
    if name not in DATASETS:
        raise ImageSourceError(f"prepare-images knows {', '.join(DATASETS)}, not {name!r}.")
    return DATASETS[name]


# --- The prepared directory ------------------------------------------------------------


def is_prepared(directory: str | os.PathLike) -> bool:
    return (Path(directory) / RECORD_FILE).is_file()


def read_record(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / RECORD_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ImageSourceError(f"{path}: not readable as JSON ({exc}); prepare the data "
                               "again with highway-zoo prepare-images.") from exc
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ImageSourceError(f"{path} is not a record of highway-zoo prepare-images.")
    if record.get("version", 0) > FORMAT_VERSION:
        raise ImageSourceError(f"{path} was written by a newer highway-zoo (format version "
                               f"{record['version']}); upgrade highway-zoo to read it.")
    return record


def read_split(directory: str | os.PathLike, split: str) -> tuple[np.ndarray, np.ndarray]:
    """A prepared split's uint8 images and int64 labels, checked against images.json."""
    directory = Path(directory)
    record = read_record(directory)
    path = directory / f"{split}.npz"
    expected = record["splits"][split]
    if not path.is_file() or sha256_of(path) != expected["sha256"]:
        raise ImageSourceError(f"{path} is missing or differs from what {RECORD_FILE} "
                               "records; prepare the data again with highway-zoo "
                               "prepare-images.")
    with np.load(path, allow_pickle=False) as arrays:
        return arrays["images"], arrays["labels"]


def describe_source(record: dict[str, Any]) -> str:
    """One line on where a prepared dataset came from, for a run's records and tables."""
    source = record["source"]
    standard = "the standard files" if source["standard"] else "NOT the standard files"
    lossy = "lossy (JPEG)" if source["lossy"] else "lossless"
    return (f"{record['name']} prepared by highway-zoo from {source['kind']} "
            f"({standard}, {lossy}; manifest sha256 {source['manifest_sha256'][:12]})")


# --- Preparing -----------------------------------------------------------------------


def prepare_images(name: str, source: str | os.PathLike, out: str | os.PathLike, *,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Reads `name` ("mnist" or "cifar10") from `source` and writes the prepared directory
    `out` (new, or empty); returns the record written as images.json."""
    data = spec(name)
    source, out = Path(source).expanduser(), Path(out).expanduser()
    _refuse_non_empty(out)
    if not source.exists():
        raise ImageSourceError(f"{source} does not exist. Pass --from the directory or archive "
                               f"holding {name} (official archives or a split/class/file "
                               "image folder).")
    reader = _reader(name, source)
    _say(progress, f"reading {name} from {source} ({reader.kind}) ...")
    splits, info = reader.read(data, progress)
    for split, (images, labels) in splits.items():
        if len(labels) == 0:
            raise ImageSourceError(f"{source}: the {split} split holds no images; both train "
                                   "and test are needed.")
        if images.shape[1:] != (*data.size, data.channels):
            raise ImageSourceError(f"{source}: {split} images are {images.shape[1:]}, expected "
                                   f"{(*data.size, data.channels)} for {name}.")
    record = {
        "format": FORMAT, "version": FORMAT_VERSION, "name": name,
        "image_shape": [*data.size, data.channels], "classes": list(data.classes),
        "source": info,
        "splits": {split: {"count": int(len(labels)),
                           "per_class": np.bincount(labels, minlength=len(data.classes)).tolist()}
                   for split, (_, labels) in splits.items()},
    }
    record["source"]["complete"] = all(record["splits"][s]["count"] == data.counts[s]
                                       for s in SPLITS)
    _write(out, splits, record)
    return record


def _say(progress: Progress | None, line: str) -> None:
    if progress is not None:
        progress(line)


def _refuse_non_empty(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ImageSourceError(f"{out} exists and is not an empty directory; choose a new "
                               "--out (nothing is overwritten).")


def _write(out: Path, splits: dict[str, tuple[np.ndarray, np.ndarray]],
           record: dict[str, Any]) -> None:
    """All files in a temporary directory beside `out`, renamed onto it at the end: a reader
    sees the whole prepared directory or none."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for split, (images, labels) in splits.items():
            np.savez(tmp / f"{split}.npz", images=images, labels=labels)
            record["splits"][split]["sha256"] = sha256_of(tmp / f"{split}.npz")
        (tmp / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o777 & ~_umask())
        if out.exists():
            out.rmdir()  # empty (checked): replaced by the finished directory
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- Sources -------------------------------------------------------------------------


class _Reader:
    kind = ""

    def read(self, data: ImageDataset, progress: Progress | None
             ) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
        raise NotImplementedError


def _reader(name: str, source: Path) -> _Reader:
    """The reader for what `source` is: official files, or an image folder (directory or tar)."""
    if name == "mnist":
        directory = source if source.is_dir() else source.parent
        if source.name in MNIST_IDX or all((directory / f).is_file() for f in MNIST_IDX):
            return _IdxReader(directory)
        found = [f for f in MNIST_IDX if (directory / f).is_file()]
        if found:
            raise ImageSourceError(f"{directory} holds {', '.join(found)} but lacks "
                                   f"{', '.join(f for f in MNIST_IDX if f not in found)}; "
                                   "all four IDX files are needed.")
    else:
        for archive, cls in ((CIFAR10_PYTHON, _CifarPythonReader),
                             (CIFAR10_BINARY, _CifarBinaryReader)):
            if source.name == archive and source.is_file():
                return cls(source)
            if source.is_dir() and (source / archive).is_file():
                return cls(source / archive)
    if source.is_dir():
        return _FolderReader(_DirectoryTree(source))
    if tarfile.is_tarfile(source):
        return _FolderReader(_TarTree(source))
    official = ", ".join(MNIST_IDX if name == "mnist" else (CIFAR10_PYTHON, CIFAR10_BINARY))
    raise ImageSourceError(f"{source} is neither a directory nor a tar archive. Pass --from "
                           f"the directory holding {official}, an official archive, or an "
                           "image folder (split/class/file) as a directory or a .tar.gz.")


def _official_files(paths: list[Path], data: ImageDataset) -> tuple[list[dict], bool]:
    files = []
    for path in paths:
        expected = data.standard.get(path.name, {})
        entry = {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path)}
        if "md5" in expected:
            entry["md5"] = _md5_of(path)
        entry["standard"] = bool(expected) and all(entry[key] == value
                                                   for key, value in expected.items())
        files.append(entry)
    return files, all(f["standard"] for f in files)


def _md5_of(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest(entries: list[tuple[str, str]]) -> str:
    """sha256 over `relative path<TAB>sha256 of its bytes` lines, sorted: the same folder,
    unpacked or in any archive, has the same manifest."""
    lines = "".join(f"{path}\t{digest}\n" for path, digest in sorted(entries))
    return hashlib.sha256(lines.encode()).hexdigest()


def _official_info(kind: str, paths: list[Path], data: ImageDataset) -> dict[str, Any]:
    files, standard = _official_files(paths, data)
    return {"kind": kind, "path": str(paths[0].parent.resolve()), "files": files,
            "manifest_sha256": _manifest([(f["file"], f["sha256"]) for f in files]),
            "standard": standard, "lossy": False, "formats": {kind: len(files)},
            "order": "the official files' order"}


class _IdxReader(_Reader):
    kind = "IDX"

    def __init__(self, directory: Path):
        self.directory = directory

    def read(self, data, progress):
        paths = [self.directory / f for f in MNIST_IDX]
        arrays = [_read_idx(path) for path in paths]
        splits = {}
        for split, (images, labels), path in zip(SPLITS, (arrays[:2], arrays[2:]),
                                                 (paths[0], paths[2]), strict=True):
            if len(images) != len(labels):
                raise ImageSourceError(f"{path}: {len(images)} images but {len(labels)} labels "
                                       "in its label file; the files are from different sets.")
            if images.shape[1:] != data.size:
                raise ImageSourceError(f"{path}: images of {images.shape[1:]}, expected "
                                       f"{data.size}.")
            if len(labels) and labels.max() >= len(data.classes):
                raise ImageSourceError(f"{path}'s labels reach {labels.max()}, expected 0-9.")
            splits[split] = (images[..., None], labels.astype(np.int64))
        return splits, _official_info(self.kind, paths, data)


_IDX_TYPES = {0x08: np.uint8}


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's format: magic 0, 0, type, rank; the dims; the values)."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise ImageSourceError(f"{path}: not a complete gzip file ({exc}); download it "
                               "again.") from exc
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_TYPES:
        raise ImageSourceError(f"{path}: not an IDX file of unsigned bytes; is it the right "
                               "file under the right name?")
    rank = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", rank, 4))
    body = np.frombuffer(raw, np.uint8, offset=4 + 4 * rank)
    if body.size != int(np.prod(dims)):
        raise ImageSourceError(f"{path}: the header announces {dims} but the file holds "
                               f"{body.size} values: truncated or corrupt; download it again.")
    return body.reshape(dims)


class _CifarPythonReader(_Reader):
    kind = "CIFAR-10 python archive"

    def __init__(self, path: Path):
        self.path = path

    def read(self, data, progress):
        members = {f"data_batch_{i}": "train" for i in range(1, 6)} | {"test_batch": "test"}
        parts: dict[str, list] = {"train": [], "test": []}
        for name, content in _tar_members(self.path, "cifar-10-batches-py/", members):
            try:
                batch = pickle.loads(content, encoding="bytes")  # noqa: S301 (the official file)
                images = np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32)
                labels = np.asarray(batch[b"labels"], np.int64)
            except Exception as exc:
                raise ImageSourceError(f"{self.path}: member {name} is not a CIFAR-10 python "
                                       f"batch ({type(exc).__name__}: {exc}).") from exc
            parts[members[name]].append((images.transpose(0, 2, 3, 1), labels))
        return _joined(parts), _official_info(self.kind, [self.path], data)


class _CifarBinaryReader(_Reader):
    kind = "CIFAR-10 binary archive"

    def __init__(self, path: Path):
        self.path = path

    def read(self, data, progress):
        members = {f"data_batch_{i}.bin": "train" for i in range(1, 6)} | {
            "test_batch.bin": "test"}
        parts: dict[str, list] = {"train": [], "test": []}
        for name, content in _tar_members(self.path, "cifar-10-batches-bin/", members):
            if not content or len(content) % 3073:
                raise ImageSourceError(f"{self.path}: member {name} has {len(content)} bytes, "
                                       "not a multiple of the 3,073-byte record: truncated.")
            records = np.frombuffer(content, np.uint8).reshape(-1, 3073)
            images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            parts[members[name]].append((images, records[:, 0].astype(np.int64)))
        return _joined(parts), _official_info(self.kind, [self.path], data)


def _tar_members(path: Path, prefix: str, members: dict[str, str]
                 ) -> Iterator[tuple[str, bytes]]:
    """The named members of an official tar.gz, in `members`' order; one line if any lacks."""
    found = {}
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = os.path.normpath(member.name)
                if member.isfile() and name.startswith(prefix) and name[len(prefix):] in members:
                    found[name[len(prefix):]] = tar.extractfile(member).read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise ImageSourceError(f"{path}: not a readable tar archive ({exc}): truncated or "
                               "corrupt; download it again.") from exc
    if missing := [m for m in members if m not in found]:
        raise ImageSourceError(f"{path} lacks {', '.join(prefix + m for m in missing)}; is it "
                               "the official archive?")
    for name in members:
        yield name, found[name]


def _joined(parts: dict[str, list]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    for split, batches in parts.items():
        for _, labels in batches:
            if len(labels) and (labels.min() < 0 or labels.max() > 9):
                raise ImageSourceError(f"the {split} batches hold labels outside 0-9.")
    return {split: (np.concatenate([b[0] for b in batches]),
                    np.concatenate([b[1] for b in batches])) for split, batches in parts.items()}


# --- Image folders -------------------------------------------------------------------

_IMAGE_SUFFIXES = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}
# Files a folder may hold besides the images (listings, licences): read by nothing but the CSV.
_IGNORED = re.compile(r"(^|/)(\.[^/]*|README[^/]*|LICEN[CS]E[^/]*|[^/]*\.(txt|md|csv|json))$",
                      re.IGNORECASE)
_DECODE_CHUNK = 1000


class _DirectoryTree:
    """An image folder on disk: relative paths, and each file's bytes."""

    def __init__(self, root: Path):
        self.root = root
        self.where = str(root)

    def files(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix()
                      for p in self.root.rglob("*") if p.is_file())

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    def sha256(self) -> str | None:
        return None


class _TarTree:
    """An image folder inside a .tar or .tar.gz, held in memory (MNIST's 70,000 PNGs are
    about 50 MB), under at most one top directory."""

    def __init__(self, archive: Path):
        self.where = str(archive)
        self.archive = archive
        try:
            with tarfile.open(archive, "r:*") as tar:
                content = {os.path.normpath(m.name): tar.extractfile(m).read()
                           for m in tar if m.isfile()}
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise ImageSourceError(f"{archive}: not a readable tar archive ({exc}): truncated "
                                   "or corrupt.") from exc
        tops = {name.split("/", 1)[0] for name in content}
        if len(tops) == 1 and not tops & set(SPLITS) and all("/" in n for n in content):
            top = tops.pop() + "/"
            content = {name[len(top):]: data for name, data in content.items()}
        self.content = content

    def files(self) -> list[str]:
        return sorted(self.content)

    def read(self, path: str) -> bytes:
        return self.content[path]

    def sha256(self) -> str | None:
        return sha256_of(self.archive)


class _FolderReader(_Reader):
    kind = "image folder"

    def __init__(self, tree: _DirectoryTree | _TarTree):
        self.tree = tree

    def read(self, data, progress):
        where = self.tree.where
        every_file = self.tree.files()
        listing = self._listing(data, every_file)
        splits, manifest, formats = {}, [], {}
        for split in SPLITS:
            paths = listing[split]
            if f"{split}.csv" in every_file:
                _check_csv(self.tree, split, paths, where)
            paths, order = _ordered(paths)
            _say(progress, f"decoding {len(paths):,} {split} images ...")
            images = np.empty((len(paths), *data.size, data.channels), np.uint8)
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
                chunks = [paths[i:i + _DECODE_CHUNK]
                          for i in range(0, len(paths), _DECODE_CHUNK)]
                done = 0
                for chunk, decoded in zip(chunks, pool.map(
                        lambda c: [self._decode(p, data) for p in c], chunks), strict=True):
                    for path, (pixels, kind, digest) in zip(chunk, decoded, strict=True):
                        images[done] = pixels
                        formats[kind] = formats.get(kind, 0) + 1
                        manifest.append((path, digest))
                        done += 1
            labels = np.asarray([data.classes.index(p.split("/")[1]) for p in paths], np.int64)
            splits[split] = (images, labels)
        info = {"kind": self.kind, "path": str(Path(where).resolve()),
                "manifest_sha256": _manifest(manifest), "standard": False,
                "lossy": "JPEG" in formats, "formats": formats,
                "order": order}
        if (archive := self.tree.sha256()) is not None:
            info["archive_sha256"] = archive
        return splits, info

    def _listing(self, data: ImageDataset, every_file: list[str]) -> dict[str, list[str]]:
        where = self.tree.where
        images: dict[str, list[str]] = {split: [] for split in SPLITS}
        classes: dict[str, set[str]] = {split: set() for split in SPLITS}
        for path in every_file:
            if _IGNORED.search(path):
                continue
            parts = path.split("/")
            suffix = os.path.splitext(path)[1].lower()
            if len(parts) != 3 or parts[0] not in SPLITS or suffix not in _IMAGE_SUFFIXES:
                raise ImageSourceError(
                    f"{where}: {path} is not an image at split/class/file (splits train and "
                    "test, PNG or JPEG); move or remove it.")
            images[parts[0]].append(path)
            classes[parts[0]].add(parts[1])
        for split in SPLITS:
            if not images[split]:
                raise ImageSourceError(f"{where}: no {split} images (expected {split}/<class>/"
                                       "<file>.png or .jpg); the folder needs both splits.")
            expected = set(data.classes)
            if extra := sorted(classes[split] - expected):
                raise ImageSourceError(
                    f"{where}/{split}: class folder(s) {', '.join(extra)} are not classes of "
                    f"this dataset ({', '.join(data.classes)}); is it another dataset?")
            if missing := sorted(expected - classes[split], key=data.classes.index):
                raise ImageSourceError(
                    f"{where}/{split}: no folder for class(es) {', '.join(missing)}; each of "
                    f"{', '.join(data.classes)} needs one.")
        return images

    def _decode(self, path: str, data: ImageDataset) -> tuple[np.ndarray, str, str]:
        from PIL import Image, UnidentifiedImageError

        content = self.tree.read(path)
        where = f"{self.tree.where}/{path}"
        try:
            with Image.open(io.BytesIO(content)) as image:
                image.load()  # a truncated file raises here
                kind, mode, size = image.format, image.mode, image.size
                pixels = np.asarray(image)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise ImageSourceError(f"{where}: not a complete image ({exc}); replace or remove "
                                   "the file.") from exc
        if kind not in ("PNG", "JPEG"):
            raise ImageSourceError(f"{where}: a {kind} image; only PNG and JPEG are read.")
        if _IMAGE_SUFFIXES[os.path.splitext(path)[1].lower()] != kind:
            raise ImageSourceError(f"{where}: its name says {os.path.splitext(path)[1]} but it "
                                   f"is a {kind} image; rename it.")
        if size != data.size[::-1] or mode != data.mode:
            raise ImageSourceError(
                f"{where}: a {size[0]}x{size[1]} {mode} image, expected {data.size[1]}x"
                f"{data.size[0]} {data.mode}; is it from another dataset? (Nothing is resized "
                "or converted: that would change the data.)")
        digest = hashlib.sha256(content).hexdigest()
        return pixels.reshape(*data.size, data.channels), kind, digest


def _ordered(paths: list[str]) -> tuple[list[str], str]:
    """The split's files in the order they are stored, and that order in words: by the number
    in each name when every name is a distinct number (MNIST's PNGs: the index in the official
    files, so their order is restored), else by class, then name (torchvision's)."""
    stems = [os.path.splitext(p.split("/")[-1])[0] for p in paths]
    if all(s.isdigit() for s in stems) and len(set(map(int, stems))) == len(stems):
        return ([p for _, p in sorted(zip(map(int, stems), paths, strict=True))],
                "by the number in each file's name")
    return sorted(paths, key=lambda p: (p.split("/")[1], p)), "by class, then file name"


def _check_csv(tree, split: str, paths: list[str], where: str) -> None:
    """A `split.csv` listing (filepath,label) beside the split folders must list the same
    files with the labels their folders give."""
    name = f"{split}.csv"
    members = set(paths)
    try:
        rows = list(csv.DictReader(io.StringIO(tree.read(name).decode("utf-8"))))
        listed = {os.path.normpath(r["filepath"]): r["label"].strip() for r in rows}
    except (UnicodeDecodeError, KeyError, AttributeError, csv.Error) as exc:
        raise ImageSourceError(f"{where}/{name}: not a filepath,label table ({exc}); fix or "
                               "remove it.") from exc
    for path, label in listed.items():
        if path not in members and os.path.normpath(f"{split}/{path}") in members:
            path = f"{split}/{path}"
        if path not in members:
            raise ImageSourceError(f"{where}/{name} lists {path}, which is not an image of the "
                                   f"{split} folder; fix or remove the table.")
        if path.split("/")[1] != label:
            raise ImageSourceError(f"{where}/{name} labels {path} {label!r}, but its folder "
                                   f"says {path.split('/')[1]!r}; which is right? Fix one.")
    if len(listed) != len(paths):
        raise ImageSourceError(f"{where}/{name} lists {len(listed):,} images but the {split} "
                               f"folder holds {len(paths):,}; fix or remove the table.")
