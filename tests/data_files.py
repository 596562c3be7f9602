"""Writes cheap files in the upstream formats of MNIST (IDX .gz) and CIFAR (binary tar.gz)."""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
from pathlib import Path

import numpy as np

MNIST_COUNTS = {"train": 60000, "t10k": 10000}


def mnist_images_for(labels: np.ndarray) -> np.ndarray:
    """Mostly-zero 28x28 images with a label-dependent square (value 20 * label + 30)."""
    images = np.zeros((len(labels), 28, 28), np.uint8)
    images[:, 10:18, 10:18] = (labels.astype(np.uint8) * 20 + 30)[:, None, None]
    return images


def write_idx(path: Path, array: np.ndarray, magic: int | None = None) -> None:
    """An IDX file, gzip-compressed: images (n, rows, cols) or labels (n,)."""
    if magic is None:
        magic = 2051 if array.ndim == 3 else 2049
    header = struct.pack(f">{array.ndim + 1}I", magic, *array.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_mnist_files(directory: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """The four upstream MNIST files with the full counts; returns the labels per split."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = {}
    for split, n in MNIST_COUNTS.items():
        labels[split] = rng.integers(0, 10, n).astype(np.uint8)
        write_idx(directory / f"{split}-images-idx3-ubyte.gz", mnist_images_for(labels[split]))
        write_idx(directory / f"{split}-labels-idx1-ubyte.gz", labels[split])
    return labels


def cifar_records(
    rng: np.random.Generator, n: int, label_classes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, bytes]:
    """`n` random records: labels (n, len(label_classes)), HWC images, and their CIFAR bytes."""
    labels = np.stack([rng.integers(0, c, n) for c in label_classes], axis=1).astype(np.uint8)
    images = rng.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8)
    chw = images.transpose(0, 3, 1, 2).reshape(n, -1)  # CIFAR stores all red, green, blue
    return labels, images, np.concatenate([labels, chw], axis=1).tobytes()


def write_tar_gz(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))


def cifar_members(
    dataset: str, per_file: int = 24, seed: int = 0
) -> tuple[dict[str, bytes], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Members of a small `cifar10` / `cifar100` binary archive, and (labels, images) per split.

    Labels are (n,) for CIFAR-10 and the fine labels for CIFAR-100.
    """
    rng = np.random.default_rng(seed)
    if dataset == "cifar10":
        prefix, label_classes = "cifar-10-batches-bin/", (10,)
        splits = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
        names = {"batches.meta.txt": 10}
    else:
        prefix, label_classes = "cifar-100-binary/", (20, 100)
        splits = {"train": ["train.bin"], "test": ["test.bin"]}
        names = {"coarse_label_names.txt": 20, "fine_label_names.txt": 100}
    members = {
        prefix + f: "".join(f"class_{i}\n" for i in range(n)).encode() for f, n in names.items()
    }
    truth = {}
    for split, files in splits.items():
        labels, images = [], []
        for f in files:
            lab, img, content = cifar_records(rng, per_file, label_classes)
            members[prefix + f] = content
            labels.append(lab[:, -1])
            images.append(img)
        truth[split] = (np.concatenate(labels), np.concatenate(images))
    return members, truth


def write_imagenet_archives(directory: Path, synsets=("n01440764", "n01443537"),
                            per_class: int = 2, validation: int = 2, seed: int = 0) -> None:
    """ILSVRC2012_img_train.tar (one tar of JPEGs per synset, as upstream) and
    ILSVRC2012_img_val.tar (ILSVRC2012_val_<n>.JPEG) with small random images of odd sizes."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)

    def jpeg(height: int, width: int) -> bytes:
        image = rng.integers(0, 256, (height, width, 3)).astype(np.uint8)
        return tf.io.encode_jpeg(image).numpy()

    def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    directory.mkdir(parents=True, exist_ok=True)
    with tarfile.open(directory / "ILSVRC2012_img_train.tar", "w") as train:
        for synset in synsets:
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as images:
                for i in range(per_class):
                    add(images, f"{synset}_{i}.JPEG", jpeg(40 + 7 * i, 30))
            add(train, f"{synset}.tar", inner.getvalue())
    with tarfile.open(directory / "ILSVRC2012_img_val.tar", "w") as val:
        for i in range(1, validation + 1):
            add(val, f"ILSVRC2012_val_{i:08d}.JPEG", jpeg(30, 50))
