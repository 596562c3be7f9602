"""Presets: `zoo.save(model, dir)` writes a self-describing directory that `zoo.load(dir)` reads
with no name (keras-hub's `from_preset(local_dir)`); run directories are presets too."""

import hashlib
import json
import shutil

import numpy as np
import pytest
from test_training import separable_digits

import zoo
from training import train
from zoo import pretrained


def raw_pixels(shape, batch=4, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, *shape)).astype("float32")


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    model = zoo.load("highway_conv16_mnist", transform_bias=-3.0, variant="full")
    directory = tmp_path_factory.mktemp("presets") / "my-model"
    zoo.save(model, directory, metrics={"test_accuracy": 0.9123, "epochs": 3},
             training={"dataset": "mnist sample", "seed": 7})
    return model, directory


def test_a_preset_loads_bit_exactly_without_its_name(preset):
    model, directory = preset
    loaded = zoo.load(directory)
    assert isinstance(loaded, zoo.HighwayZooModel)
    assert loaded.architecture == "highway_conv16_mnist"
    assert loaded.overrides == {"transform_bias": -3.0, "variant": "full"}
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    x = raw_pixels((28, 28, 1))
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))
    assert zoo.load(str(directory)).architecture == "highway_conv16_mnist"  # str or Path


def test_a_preset_describes_itself(preset):
    model, directory = preset
    record = json.loads((directory / "model.json").read_text())
    assert record["architecture"] == "highway_conv16_mnist"
    assert record["metrics"] == {"test_accuracy": 0.9123, "epochs": 3}
    # The weights' own hash, computed here: both records must name these bytes.
    digest = hashlib.sha256((directory / "model.weights.h5").read_bytes()).hexdigest()
    assert record["sha256"] == digest
    assert (directory / "model.weights.h5.sha256").read_text().split()[0] == digest
    card = (directory / "README.md").read_text()
    assert "`highway_conv16_mnist` (transform_bias=-3.0, variant='full')" in card
    assert "| test accuracy | 0.9123 |" in card and "| epochs | 3 |" in card
    assert "- seed: 7" in card and record["sha256"] in card
    assert f"zoo.load({str(directory)!r})" in card
    assert f"{model.count_params():,} parameters" in card


def test_list_models_pretrained_lists_the_shipped_weights():
    shipped = zoo.list_models(pretrained=True)
    assert shipped and set(shipped) == set(pretrained.index())
    assert "highway_cifar100" not in shipped  # no CIFAR-100 has reached these machines
    assert zoo.list_models("*conv*", pretrained=True) == [
        n for n in shipped if "conv" in n]
    assert zoo.list_models("highway_fc10_*", pretrained=True) == [
        "highway_fc10_fashion_mnist", "highway_fc10_mnist"]


def test_a_run_directory_is_a_preset_with_its_measured_numbers(tmp_path):
    metrics = train("highway_fc10_mnist", dataset=separable_digits(64, 32), depth=3, width=8,
                    epochs=1, out=tmp_path / "run", verbose=0, gate_summaries=False)
    model = zoo.load(tmp_path / "run")
    assert model.overrides == {"depth": 3, "width": 8}
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"| test accuracy | {metrics['test_accuracy']:.4f} |" in card
    assert "- recipe: adam_fc" in card


def _copy(preset, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(preset[1], target)
    return target


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: (d / "model.json").unlink(), "has no model.json"),
    (lambda d: (d / "model.weights.h5").unlink(), "No weights file at"),
    (lambda d: (d / "model.weights.h5.sha256").unlink(), "No sha256 beside"),
    (lambda d: (d / "model.json").write_text("{not json"), "model.json is not valid JSON"),
    (lambda d: (d / "model.json").write_text('{"overrides": {}}'), "names no architecture"),
    (lambda d: _edit(d, architecture="highway_nonesuch"), "Unknown model 'highway_nonesuch'"),
    (lambda d: _edit(d, overrides={"width": 8}), "'stem_conv' has weights of shape"),
    (lambda d: _edit(d, sha256="0" * 64), "not the sha256 in"),
    (lambda d: _flip_a_byte(d / "model.weights.h5"), "has sha256"),
])
def test_a_missing_or_tampered_file_is_refused_in_one_line(preset, tmp_path, damage, message):
    directory = _copy(preset, tmp_path)
    damage(directory)
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        zoo.load(directory)
    assert message in str(err.value) and "\n" not in str(err.value)


def _edit(directory, **fields):
    record = json.loads((directory / "model.json").read_text())
    (directory / "model.json").write_text(json.dumps({**record, **fields}))


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_sha256_file_of_another_file_is_refused(preset, tmp_path):
    directory = _copy(preset, tmp_path)
    hash_file = directory / "model.weights.h5.sha256"
    digest = hash_file.read_text().split()[0]
    hash_file.write_text(f"{digest}  other.weights.h5\n")
    with pytest.raises(zoo.WeightsHashError, match="records the hash of 'other.weights.h5'"):
        zoo.load(directory)


def test_weights_with_a_preset_are_refused(preset):
    with pytest.raises(ValueError, match="brings its own weights"):
        zoo.load(preset[1], weights="default")


def test_cli_lists_only_architectures_with_shipped_weights(capsys):
    from highway_zoo import cli

    assert cli.main(["list", "--pretrained", "*fc10*"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == zoo.list_models("*fc10*", pretrained=True)
    assert "plain_fc10_mnist" in listed and "highway_fc10_mnist" in listed
