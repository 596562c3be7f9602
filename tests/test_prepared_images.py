"""Tests of `highway-zoo prepare-images` (training/data/prepared_images.py) on small archives and
folders the tests write in each format users bring, never the real data: what is read equals
what was written, what is recorded is right, and every bad input is one line, exit 2,
nothing written."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

import data_files
import numpy as np
import pytest
from PIL import Image

from highway_zoo import cli
from training.data import DatasetFileError, load_dataset, prepare_images
from training.data import prepared_images as prep

CIFAR = prep.DATASETS["cifar10"].classes
PER_CLASS = {"train": 3, "test": 2}


def mnist_arrays(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in PER_CLASS.items():
        labels = rng.permutation(np.repeat(np.arange(10), n))
        out[split] = (rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8), labels)
    return out


def write_idx_files(directory: Path, arrays) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split, stem in (("train", "train"), ("test", "t10k")):
        images, labels = arrays[split]
        data_files.write_idx(directory / f"{stem}-images-idx3-ubyte.gz", images)
        data_files.write_idx(directory / f"{stem}-labels-idx1-ubyte.gz", labels)
    return directory


def write_folder(root: Path, arrays, classes, suffix: str = ".png", csv: bool = False) -> Path:
    """split/class/<index>.<suffix>, the index numbering the split as MNIST's PNGs do."""
    for split, (images, labels) in arrays.items():
        offset = 0 if split == "train" else 1000
        rows = ["filepath,label"]
        for index, (image, label) in enumerate(zip(images, labels, strict=True)):
            path = root / split / classes[label] / f"{offset + index}{suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image.squeeze()).save(path, quality=75 if suffix == ".jpg" else None)
            rows.append(f"{split}/{classes[label]}/{path.name},{classes[label]}")
        if csv:
            (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return root


def cifar_arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in PER_CLASS.items():
        labels = rng.permutation(np.repeat(np.arange(10), n))
        out[split] = (rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8), labels)
    return out


def cifar_python_archive(path: Path, arrays) -> Path:
    members = {}
    images, labels = arrays["train"]
    batches = np.array_split(np.arange(len(labels)), 5)
    for i, index in enumerate(batches, 1):
        members[f"cifar-10-batches-py/data_batch_{i}"] = pickle.dumps(
            {b"data": images[index].transpose(0, 3, 1, 2).reshape(len(index), -1),
             b"labels": labels[index].tolist()})
    images, labels = arrays["test"]
    members["cifar-10-batches-py/test_batch"] = pickle.dumps(
        {b"data": images.transpose(0, 3, 1, 2).reshape(len(labels), -1),
         b"labels": labels.tolist()})
    data_files.write_tar_gz(path, members)
    return path


def one_line_error(capsys, argv, *expected) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, lines)
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def refused(capsys, tmp_path, dataset, source, *expected) -> str:
    """The CLI refuses `source` in one line and writes nothing at --out or beside it."""
    out = tmp_path / "out"
    line = one_line_error(capsys, ["prepare-images", dataset, "--from", str(source),
                                   "--out", str(out)], *expected)
    assert not out.exists() and not list(tmp_path.glob(".out.*"))
    return line


# --- Each source format -------------------------------------------------------------------


def test_mnist_from_the_official_idx_files(tmp_path):
    arrays = mnist_arrays()
    source = write_idx_files(tmp_path / "idx", arrays)
    record = prepare_images("mnist", source, tmp_path / "prepared")
    for split, (images, labels) in arrays.items():
        read_images, read_labels = prep.read_split(tmp_path / "prepared", split)
        np.testing.assert_array_equal(read_images, images[..., None])
        np.testing.assert_array_equal(read_labels, labels)
        assert record["splits"][split]["per_class"] == [PER_CLASS[split]] * 10
    source_record = record["source"]
    assert source_record["kind"] == "IDX" and not source_record["lossy"]
    assert [f["file"] for f in source_record["files"]] == list(prep.MNIST_IDX)
    digest = hashlib.sha256((source / prep.MNIST_IDX[0]).read_bytes()).hexdigest()
    assert source_record["files"][0]["sha256"] == digest
    # the test's files are not the official ones, and too few
    assert not source_record["standard"] and not source_record["complete"]


def test_a_standard_archive_is_recognised_and_a_changed_byte_is_not(tmp_path, monkeypatch):
    """The checksum table set to the test's own files: standard; one byte changed: not."""
    arrays = mnist_arrays()
    source = write_idx_files(tmp_path / "idx", arrays)
    table = {f: {"bytes": (source / f).stat().st_size,
                 "sha256": hashlib.sha256((source / f).read_bytes()).hexdigest()}
             for f in prep.MNIST_IDX}
    monkeypatch.setitem(prep.DATASETS, "mnist", prep.dataclasses.replace(
        prep.DATASETS["mnist"], standard=table))
    assert prepare_images("mnist", source, tmp_path / "a")["source"]["standard"]

    labels = arrays["test"][1].copy()
    labels[0] = (labels[0] + 1) % 10  # same size, one byte of the content differs
    data_files.write_idx(source / "t10k-labels-idx1-ubyte.gz", labels)
    record = prepare_images("mnist", source, tmp_path / "b")
    assert not record["source"]["standard"]
    assert [f["standard"] for f in record["source"]["files"]] == [True, True, True, False]


def test_cifar10_from_the_python_and_the_binary_archives(tmp_path, monkeypatch):
    arrays = cifar_arrays()
    python = cifar_python_archive(tmp_path / prep.CIFAR10_PYTHON, arrays)
    md5 = hashlib.md5(python.read_bytes()).hexdigest()
    monkeypatch.setitem(prep.DATASETS["cifar10"].standard, prep.CIFAR10_PYTHON, {"md5": md5})
    record = prepare_images("cifar10", tmp_path, tmp_path / "from_python")  # the directory
    assert record["source"]["kind"] == "CIFAR-10 python archive"
    assert record["source"]["standard"] and record["source"]["files"][0]["md5"] == md5
    for split, (images, labels) in arrays.items():
        got = prep.read_split(tmp_path / "from_python", split)
        np.testing.assert_array_equal(got[0], images)
        np.testing.assert_array_equal(got[1], labels)

    members, truth = data_files.cifar_members("cifar10", per_file=4)
    binary = tmp_path / "bin" / prep.CIFAR10_BINARY
    binary.parent.mkdir()
    data_files.write_tar_gz(binary, members)
    record = prepare_images("cifar10", binary, tmp_path / "from_binary")  # the archive
    assert record["source"]["kind"] == "CIFAR-10 binary archive"
    assert not record["source"]["standard"]
    for split, (labels, images) in truth.items():
        got = prep.read_split(tmp_path / "from_binary", split)
        np.testing.assert_array_equal(got[0], images)
        np.testing.assert_array_equal(got[1], labels)


def test_a_png_folder_directory_and_tar_give_the_same_lossless_data(tmp_path):
    arrays = mnist_arrays()
    folder = write_folder(tmp_path / "mnist-pngs", arrays, [str(d) for d in range(10)], csv=True)
    record = prepare_images("mnist", folder, tmp_path / "from_dir")
    for split, (images, labels) in arrays.items():  # the files' numbers give the order back
        got = prep.read_split(tmp_path / "from_dir", split)
        np.testing.assert_array_equal(got[0], images[..., None])
        np.testing.assert_array_equal(got[1], labels)
    assert record["source"]["formats"] == {"PNG": 50} and not record["source"]["lossy"]
    assert record["source"]["order"] == "by the number in each file's name"

    archive = tmp_path / "mnist-pngs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="mnist-pngs")  # under one top directory, as the real archive
    from_tar = prepare_images("mnist", archive, tmp_path / "from_tar")
    assert from_tar["source"]["manifest_sha256"] == record["source"]["manifest_sha256"]
    assert from_tar["source"]["archive_sha256"] == hashlib.sha256(
        archive.read_bytes()).hexdigest()
    for split in arrays:
        for a, b in zip(prep.read_split(tmp_path / "from_dir", split),
                        prep.read_split(tmp_path / "from_tar", split), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_jpeg_folder_is_flagged_lossy(tmp_path, capsys):
    arrays = cifar_arrays()
    folder = write_folder(tmp_path / "cifar", arrays, CIFAR, suffix=".jpg")
    assert cli.main(["prepare-images", "cifar10", "--from", str(folder),
                     "--out", str(tmp_path / "out")]) == 0
    assert "lossy (JPEG)" in capsys.readouterr().out
    record = prep.read_record(tmp_path / "out")
    assert record["source"]["lossy"] and record["source"]["formats"] == {"JPEG": 50}
    images, labels = prep.read_split(tmp_path / "out", "train")
    np.testing.assert_array_equal(labels, arrays["train"][1])
    # decoded JPEGs: close to the pixels written, not equal
    error = np.abs(images.astype(int) - arrays["train"][0]).mean()
    assert 0 < error < 80


def test_load_dataset_reads_the_prepared_directory_without_tensorflow(tmp_path):
    prepare_images("mnist", write_idx_files(tmp_path / "idx", mnist_arrays()),
                   tmp_path / "prepared")
    code = ("import sys; from training.data import load_dataset\n"
            f"d = load_dataset('mnist', {str(tmp_path)!r} + '/prepared')\n"
            "assert 'tensorflow' not in sys.modules, 'TensorFlow imported'\n"
            "print(d.num_train, d.num_test, d.train.images.shape, d.source)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("30 20 (30, 28, 28, 1) mnist prepared by highway-zoo from IDX")
    assert "NOT the standard files, lossless" in proc.stdout


def test_a_prepared_directory_of_another_dataset_or_changed_arrays_is_refused(tmp_path):
    prepare_images("mnist", write_idx_files(tmp_path / "idx", mnist_arrays()),
                   tmp_path / "data" / "mnist")
    with pytest.raises(DatasetFileError, match="holds mnist .* not cifar10"):
        load_dataset("cifar10", tmp_path / "data" / "mnist")
    assert load_dataset("mnist", tmp_path / "data").num_train == 30  # data_dir/<name>/
    with open(tmp_path / "data" / "mnist" / "test.npz", "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x01")
    with pytest.raises(prep.ImageSourceError, match="differs from what images.json records"):
        load_dataset("mnist", tmp_path / "data")


# --- Bad input: one line naming the file and the fix, exit 2, nothing written -------------


@pytest.fixture
def png_folder(tmp_path) -> Path:
    return write_folder(tmp_path / "pngs", mnist_arrays(), [str(d) for d in range(10)], csv=True)


def test_a_truncated_image(png_folder, tmp_path, capsys):
    victim = png_folder / "test" / "3" / next((png_folder / "test" / "3").iterdir()).name
    victim.write_bytes(victim.read_bytes()[:60])
    refused(capsys, tmp_path, "mnist", png_folder, str(victim), "not a complete image",
            "replace or remove")


def test_a_corrupt_image(png_folder, tmp_path, capsys):
    victim = next((png_folder / "train" / "0").iterdir())
    victim.write_bytes(b"not a png at all" * 10)
    refused(capsys, tmp_path, "mnist", png_folder, str(victim), "not a complete image")


@pytest.mark.parametrize("size, mode, said", [((32, 32), "L", "32x32 L"),
                                              ((28, 28), "RGB", "28x28 RGB")])
def test_an_image_of_another_size_or_mode(png_folder, tmp_path, capsys, size, mode, said):
    victim = next((png_folder / "train" / "7").iterdir())
    Image.new(mode, size).save(victim)
    refused(capsys, tmp_path, "mnist", png_folder, str(victim), said, "expected 28x28 L")


def test_a_missing_class_folder(png_folder, tmp_path, capsys):
    for path in (png_folder / "test" / "4").iterdir():
        path.unlink()
    (png_folder / "test" / "4").rmdir()
    (png_folder / "test.csv").unlink()
    refused(capsys, tmp_path, "mnist", png_folder, "pngs/test", "no folder for class(es) 4")


def test_an_extra_class_folder(png_folder, tmp_path, capsys):
    (png_folder / "train" / "10").mkdir()
    Image.new("L", (28, 28)).save(png_folder / "train" / "10" / "99.png")
    refused(capsys, tmp_path, "mnist", png_folder, "class folder(s) 10",
            "not classes of this dataset")


def test_an_empty_split(png_folder, tmp_path, capsys):
    for path in (png_folder / "test").rglob("*.png"):
        path.unlink()
    refused(capsys, tmp_path, "mnist", png_folder, "no test images", "needs both splits")


def test_a_labels_file_that_disagrees_with_the_folders(png_folder, tmp_path, capsys):
    table = (png_folder / "train.csv").read_text().splitlines()
    path, label = table[5].split(",")
    table[5] = f"{path},{(int(label) + 1) % 10}"
    (png_folder / "train.csv").write_text("\n".join(table) + "\n")
    refused(capsys, tmp_path, "mnist", png_folder, "train.csv labels", path, "its folder says")


def test_a_labels_file_listing_another_set_of_files(png_folder, tmp_path, capsys):
    (png_folder / "test.csv").write_text(
        (png_folder / "test.csv").read_text() + "test/0/99999.png,0\n")
    refused(capsys, tmp_path, "mnist", png_folder, "test.csv lists test/0/99999.png")


def test_a_folder_of_another_dataset(png_folder, tmp_path, capsys):
    refused(capsys, tmp_path, "cifar10", png_folder, "class folder(s) 0, 1",
            "is it another dataset?")


def test_a_folder_mixing_datasets(png_folder, tmp_path, capsys):
    """A CIFAR-10 image among MNIST's digits."""
    victim = next((png_folder / "train" / "2").iterdir())
    Image.fromarray(cifar_arrays()["train"][0][0]).save(victim)
    refused(capsys, tmp_path, "mnist", png_folder, str(victim), "32x32 RGB",
            "from another dataset")


def test_a_file_outside_the_layout(png_folder, tmp_path, capsys):
    (png_folder / "train" / "stray.png").write_bytes(b"")
    refused(capsys, tmp_path, "mnist", png_folder, "train/stray.png", "split/class/file")


def test_official_files_that_are_truncated_or_incomplete(tmp_path, capsys):
    source = write_idx_files(tmp_path / "idx", mnist_arrays())
    raw = gzip.decompress((source / "train-images-idx3-ubyte.gz").read_bytes())
    (source / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw[:-100]))
    refused(capsys, tmp_path, "mnist", source, "train-images-idx3-ubyte.gz",
            "truncated or corrupt")
    (source / "t10k-labels-idx1-ubyte.gz").unlink()
    refused(capsys, tmp_path, "mnist", source, "lacks t10k-labels-idx1-ubyte.gz")

    archive = tmp_path / "c" / prep.CIFAR10_PYTHON
    archive.parent.mkdir()
    cifar_python_archive(archive, cifar_arrays())
    archive.write_bytes(archive.read_bytes()[:2000])
    refused(capsys, tmp_path, "cifar10", archive, str(archive), "not a readable tar archive")


def test_an_existing_output_is_never_overwritten(png_folder, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    one_line_error(capsys, ["prepare-images", "mnist", "--from", str(png_folder),
                            "--out", str(out)], "not an empty directory")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_a_source_that_is_not_there(tmp_path, capsys):
    refused(capsys, tmp_path, "mnist", tmp_path / "nowhere", "does not exist")


def test_images_json_records_what_a_reader_needs(png_folder, tmp_path):
    prepare_images("mnist", png_folder, tmp_path / "p")
    record = json.loads((tmp_path / "p" / "images.json").read_text())
    assert record["image_shape"] == [28, 28, 1] and record["classes"][3] == "3"
    assert {split: stats["count"] for split, stats in record["splits"].items()} == {
        "train": 30, "test": 20}
    lines = sorted(f"{p.relative_to(png_folder).as_posix()}\t"
                   f"{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                   for p in png_folder.rglob("*.png"))
    assert record["source"]["manifest_sha256"] == hashlib.sha256(
        "".join(lines).encode()).hexdigest()
    with np.load(io.BytesIO((tmp_path / "p" / "train.npz").read_bytes())) as arrays:
        assert arrays["images"].dtype == np.uint8 and arrays["labels"].dtype == np.int64
