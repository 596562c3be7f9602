"""Files the last release (0.2.0) wrote still load and predict what they did then (issue 51).

tests/data/release_0_2_0/ holds a preset saved by `zoo.save`, the same weights saved from the
stacked form, a run directory written by `training.train` (what `highway-zoo train --out`
runs) and a SavedModel written by `zoo.export`, all by release 0.2.0's own code (commit
9804afd; make_files.py there wrote them, README.md says how), with that release's predictions
on a fixed batch of raw-pixel images. Here today's code reads them.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import zoo
from zoo.serving import predict as serving_predict

DATA = Path(__file__).parent / "data" / "release_0_2_0"
EXPECTED = json.loads((DATA / "expected.json").read_text())
NAME = "highway_fc10_mnist"
# Same architecture, same weights, same batch: only float round-off may differ (another CPU's
# kernels: an AMD EPYC moved a logit of 0.038 by 1.5e-6, round-off of its row's sums of size
# 3); a weight not loaded, or loaded into the wrong layer, moves them by more than 1e-2.
TIGHT = {"rtol": 1e-5, "atol": 1e-5}


def inputs() -> np.ndarray:
    return np.load(DATA / "inputs.npy").astype("float32")


def recorded(name: str) -> np.ndarray:
    return np.load(DATA / f"{name}_predictions.npy")


def check_model(model, record: dict) -> None:
    assert isinstance(model, zoo.HighwayZooModel)
    assert type(model).__name__ == record["class"]
    assert model.architecture == record["architecture"] == NAME
    assert model.overrides == record["overrides"]
    assert model.count_params() == record["params"]
    assert [layer.name for layer in model.layers] == record["layers"]
    assert [type(layer).__name__ for layer in model.layers] == record["layer_classes"]


def test_the_files_are_the_releases():
    written = EXPECTED["written_by"]
    assert written["highway_zoo"] == "0.2.0"
    assert written["commit"].startswith("9804afd")
    assert inputs().shape == (8, 28, 28, 1)


@pytest.mark.parametrize("directory", ["preset", "preset_stacked"])
def test_a_release_preset_loads_by_its_directory_alone(directory):
    model = zoo.load(DATA / directory)
    check_model(model, EXPECTED[directory])
    np.testing.assert_allclose(model.predict(inputs(), verbose=0), recorded(directory), **TIGHT)


def test_the_recorded_predictions_are_not_a_fresh_initialisation():
    # Guards the fixture itself: the preset's weights are not what zoo.load builds afresh.
    fresh = zoo.load(NAME, **EXPECTED["preset"]["overrides"])
    assert np.abs(fresh.predict(inputs(), verbose=0) - recorded("preset")).max() > 1e-2


def test_a_release_preset_loads_into_either_form():
    # 0.2.0 promised that presets saved from either form load into both (README, "One model,
    # two forms"); the two forms sum in another order, hence 1e-4.
    x = inputs()
    stacked = zoo.load(DATA / "preset", stacked=True)
    assert stacked.overrides == {**EXPECTED["preset"]["overrides"], "stacked": True}
    assert stacked.count_params() == EXPECTED["preset"]["params"]
    np.testing.assert_allclose(stacked.predict(x, verbose=0), recorded("preset"),
                               rtol=1e-4, atol=1e-6)
    per_layer = zoo.load(DATA / "preset_stacked", stacked=False)
    assert "highway_1" in [layer.name for layer in per_layer.layers]
    np.testing.assert_allclose(per_layer.predict(x, verbose=0), recorded("preset_stacked"),
                               rtol=1e-4, atol=1e-6)


def test_a_release_preset_fine_tunes_with_its_body_weights():
    source = zoo.load(DATA / "preset")
    with pytest.warns(UserWarning, match="freshly initialised"):
        model = zoo.load(DATA / "preset", classes=3)
    assert model.get_layer("logits").kernel.shape == (8, 3)
    for layer in ("stem_dense", "highway_1", "highway_2"):
        for a, b in zip(source.get_layer(layer).get_weights(),
                        model.get_layer(layer).get_weights()):
            np.testing.assert_array_equal(a, b)


def test_a_release_run_directory_loads_as_a_preset_and_as_weights():
    x = inputs()
    model = zoo.load(DATA / "run")
    check_model(model, EXPECTED["run"])
    np.testing.assert_allclose(model.predict(x, verbose=0), recorded("run"), **TIGHT)
    # The 0.2.0 README's form: zoo.load(NAME, weights=RUN_DIR).
    by_name = zoo.load(NAME, weights=DATA / "run")
    check_model(by_name, EXPECTED["run"])
    np.testing.assert_allclose(by_name.predict(x, verbose=0), recorded("run"), **TIGHT)
    run = json.loads((DATA / "run" / "run.json").read_text())
    assert run["status"] == "finished" and run["overrides"] == EXPECTED["run"]["overrides"]
    metrics = json.loads((DATA / "run" / "metrics.json").read_text())
    assert metrics["test_accuracy"] == EXPECTED["run"]["test_accuracy"]
    assert len(json.loads((DATA / "run" / "history.json").read_text())) == 1


def test_a_release_run_directory_exports_again(tmp_path):
    # A user's old run, exported by today's code: the same probabilities.
    version = zoo.export(NAME, weights=DATA / "run", base_dir=tmp_path, version=1)
    served = tf.saved_model.load(str(version))
    out = served.signatures["serving_default"](pixels=tf.constant(inputs()))
    np.testing.assert_allclose(out["probabilities"].numpy(), recorded("run"), **TIGHT)


def export_dir() -> Path:
    path = DATA / EXPECTED["export"]["path"]
    assert path.parts[-2:] == (NAME, "1")  # TF Serving's <name>/<version>
    return path


def test_a_release_export_serves_every_signature_as_it_did():
    served = tf.saved_model.load(str(export_dir()))
    signatures = EXPECTED["export"]["signatures"]
    assert sorted(served.signatures) == sorted(signatures)
    pixels = tf.constant(inputs())
    for signature, keys in signatures.items():
        out = served.signatures[signature](pixels=pixels)
        assert sorted(out) == keys
        for key in keys:
            want = np.load(DATA / f"export_{signature}_{key}_predictions.npy")
            got = out[key].numpy()
            assert got.dtype == want.dtype and got.shape == want.shape
            if want.dtype.kind == "i":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, **TIGHT)
    # The export holds the preset's weights: its probabilities are the preset's.
    np.testing.assert_allclose(
        np.load(DATA / "export_serving_default_probabilities_predictions.npy"),
        recorded("preset"), **TIGHT)


def test_a_release_export_is_read_by_todays_predict(tmp_path):
    _, fn, input_name, image_shape = serving_predict.load_signature(export_dir())
    assert input_name == "pixels" and image_shape == (28, 28, 1)
    batch = tmp_path / "batch.npy"
    np.save(batch, inputs())
    results = serving_predict.predict(export_dir(), [batch], top=3)
    want = recorded("export_serving_default_probabilities")
    assert [r.class_id for r in results] == list(
        np.load(DATA / "export_serving_default_class_ids_predictions.npy"))
    for result, p in zip(results, want):
        classes = [c for c, _ in result.top]
        assert classes == list(np.argsort(-p, kind="stable")[:3])
        np.testing.assert_allclose([q for _, q in result.top], p[classes], **TIGHT)


def test_a_release_export_still_refuses_a_wrong_shape():
    served = tf.saved_model.load(str(export_dir()))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError)):
        served.signatures["serving_default"](pixels=tf.zeros((2, 28, 28), tf.float32))


def test_a_copied_release_preset_still_loads(tmp_path):
    # Users move preset directories; nothing in a 0.2.0 preset ties it to where it was written.
    target = tmp_path / "moved"
    shutil.copytree(DATA / "preset", target)
    np.testing.assert_allclose(zoo.load(target).predict(inputs(), verbose=0),
                               recorded("preset"), **TIGHT)
