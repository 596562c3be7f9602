"""`zoo.export(..., format="onnx")` (zoo/serving/onnx.py): onnxruntime runs the file and its
outputs equal Keras's, for a model of every family, the stacked form and the language model.

Tolerance: float32 round-off, as in tests/test_tflite.py: rtol 1e-5 and atol 1e-6 times the
array's largest magnitude (at least 1). onnxruntime's kernels (MLAS) sum the same products as
TensorFlow's (oneDNN, Eigen) in another order, which moves each result by a few float32 ulps
(1.2e-7 relative) per layer; 1e-5 leaves room for that over the deepest net here, and a wrong
weight, gate or layer order would be off by far more."""

import json
import os
import subprocess
import sys

# onnxruntime 1.32 on Linux writes telemetry files when it is imported ($TMPDIR/.ses,
# ~/.cache/Microsoft/DeveloperTools/) unless this is set: the suite leaves no files behind.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

import keras  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime  # noqa: E402
import pytest  # noqa: E402
from places import small_disk
from test_export import keras_reference, stacked_pair
from zoo_cases import one_per_family

import zoo
import zoo.serving.onnx
from highway_zoo.cli import main
from zoo.char_lm import END_CHAR, EOS, PAD_CHAR, START_CHAR, UNK
from zoo.serving.signatures import highway_layers, variables_sha256

# Every family converted by tf2onnx and run by onnxruntime: about a minute on 2 cores, so
# `make test` leaves it to `make test-slow` (CI runs both).
pytestmark = pytest.mark.slow

FC = "highway_fc10_mnist"
LM = "lstm_char_small_ptb"
MODELS = one_per_family()
IDS = [name + ("-stacked" if overrides.get("stacked") else "") for name, overrides in MODELS]


def _close(actual, desired, what):
    desired = np.asarray(desired)
    assert actual.dtype == desired.dtype and actual.shape == desired.shape, what
    np.testing.assert_allclose(actual, desired, rtol=1e-5,
                               atol=1e-6 * max(1.0, np.abs(desired).max()), err_msg=what)


def _pixels(shape, n=4, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, *shape)).astype(np.float32)


def _run(path, inputs, outputs=None) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = outputs or [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


@pytest.mark.parametrize("name, overrides", MODELS, ids=IDS)
def test_every_family_runs_in_onnxruntime_as_in_keras(name, overrides, tmp_path):
    keras.utils.set_random_seed(0)
    model = zoo.load(name, **overrides)
    path = zoo.export(model, base_dir=tmp_path, format="onnx")
    assert path == tmp_path / name / "1.onnx"
    onnx.checker.check_model(str(path), full_check=True)  # with shape inference
    x = _pixels(model.input_shape[1:])
    got = _run(path, {"pixels": x})
    _close(got["probabilities"], model.predict(x, verbose=0), "probabilities")
    logits = keras.Model(model.input, model.get_layer("logits").output).predict(x, verbose=0)
    _close(got["logits"], logits, "logits")
    np.testing.assert_array_equal(got["class_ids"], got["probabilities"].argmax(axis=-1))
    assert got["class_ids"].dtype == np.int64
    gated = [layer.name for layer in highway_layers(model)]
    assert sorted(got) == sorted(["probabilities", "class_ids", "logits", *gated])
    if gated and not overrides.get("stacked"):  # the stack's: test_a_stacked_net_...
        for layer, value in keras_reference(model, x)["gates"].items():
            _close(got[layer], value, layer)
    # The batch is free: one image gives the batch's first row.
    one = _run(path, {"pixels": x[:1]}, ["probabilities"])["probabilities"]
    _close(one, got["probabilities"][:1], "batch of one")


# Depth 5: 4 layers, no deeper than the stack's `unroll`, written out with no loop; depth 10:
# 9 layers, a tf.while_loop over chunks of 4 and one written out (layers/_stack_loop.py).
@pytest.mark.parametrize("depth", [5, 10])
def test_a_stacked_net_gives_the_per_layer_nets_outputs_and_gates(depth, tmp_path):
    stacked, per_layer = stacked_pair(depth=depth)
    path = zoo.export(stacked, base_dir=tmp_path, format="onnx")
    x = _pixels((28, 28, 1), n=6, seed=3)
    got = _run(path, {"pixels": x})
    expected = keras_reference(per_layer, x)  # the per-layer Keras net with the same weights
    layers = [f"highway_{i}" for i in range(1, depth)]
    assert sorted(got) == sorted(["probabilities", "class_ids", "logits", *layers])
    for key, value in {**expected["serving_default"], **expected["logits"],
                       **expected["gates"]}.items():
        if key == "class_ids":
            np.testing.assert_array_equal(got[key], value)
        else:
            _close(got[key], value, key)
    means = [got[layer].mean() for layer in layers]
    assert np.all(np.diff(means) < 0)  # the biases fall by layer: a mix-up of names would show


def test_the_file_names_its_axes_and_records_its_provenance(tmp_path):
    keras.utils.set_random_seed(0)
    model = zoo.load(FC, depth=3)
    path = zoo.export(model, base_dir=tmp_path, format="onnx")
    proto = onnx.load(str(path))
    assert {o.domain: o.version for o in proto.opset_import}[""] == zoo.serving.onnx.OPSET
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (pixels,) = session.get_inputs()
    assert (pixels.name, pixels.type, pixels.shape) == ("pixels", "tensor(float)",
                                                        ["batch", 28, 28, 1])
    shapes = {o.name: o.shape for o in session.get_outputs()}
    assert shapes == {"probabilities": ["batch", 10], "class_ids": ["batch"],
                      "logits": ["batch", 10], "highway_1": ["batch"], "highway_2": ["batch"]}
    record = json.loads(session.get_modelmeta().custom_metadata_map["highway_zoo"])
    assert record["architecture"] == FC and record["overrides"] == {"depth": 3}
    assert record["weights"] == {"source": "model object", "sha256": None}
    assert record["variables_sha256"] == variables_sha256(model)
    assert record["input"]["shape"] == [None, 28, 28, 1]
    assert sorted(record["outputs"]) == sorted(shapes)
    assert record["versions"]["opset"] == zoo.serving.onnx.OPSET
    # The file declares its input, so onnxruntime refuses a wrong one by itself, in one error.
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument,
                       match="Invalid rank for input: pixels Got: 3 Expected: 4"):
        session.run(None, {"pixels": np.zeros((28, 28, 1), np.float32)})


def _language_model():
    """A small character-aware LM with random weights and a vocabulary of the reader's form
    (padding, start and end characters first; <unk> and <eos> among the words)."""
    keras.utils.set_random_seed(0)
    chars = [PAD_CHAR, START_CHAR, END_CHAR, "|", "+", *"abcdefg"]
    words = [UNK, EOS, *(f"w{i}" for i in range(10))]
    model = zoo.load(LM, lstm_units=8, classes=len(words), char_vocab_size=len(chars))
    model.vocabulary = {"words": words, "chars": chars}
    return model


def test_a_language_model_takes_character_ids_and_carries_its_vocabulary(tmp_path):
    model = _language_model()
    path = zoo.export(model, base_dir=tmp_path, format="onnx")
    onnx.checker.check_model(str(path), full_check=True)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (chars,) = session.get_inputs()
    assert (chars.name, chars.type, chars.shape) == ("chars", "tensor(int32)",
                                                     ["batch", "time", 21])
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta[zoo.serving.onnx.VOCABULARY_KEY]) == model.vocabulary
    assert json.loads(meta["highway_zoo"])["input"]["name"] == "chars"
    logits = keras.Model(model.input, model.get_layer("logits").output)
    rng = np.random.default_rng(0)
    for time in (7, 2):  # the time axis is free, as the batch is
        ids = rng.integers(0, len(model.vocabulary["chars"]), (3, time, 21)).astype(np.int32)
        got = _run(path, {"chars": ids})
        assert sorted(got) == ["logits", "probabilities"]
        expected = logits.predict(ids, verbose=0)
        _close(got["logits"], expected, f"logits, time {time}")
        _close(got["probabilities"], keras.ops.convert_to_numpy(
            keras.ops.softmax(expected, axis=-1)), f"probabilities, time {time}")


def test_a_language_model_without_vocabulary_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="no vocabulary"):
        zoo.export(LM, base_dir=tmp_path, random_weights=True, format="onnx", lstm_units=8)
    assert main(["export", LM, "--random-weights", "--base-dir", str(tmp_path),
                 "--format", "onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no vocabulary" in err[0] and "--weights RUN_DIR" in err[0]
    assert not (tmp_path / LM).exists()


def test_cli_numbers_files_never_overwrites_and_the_file_needs_no_tensorflow(tmp_path, capsys):
    base = tmp_path / "exported"
    args = ["export", FC, "--random-weights", "--base-dir", str(base), "--format", "onnx"]
    assert main(args) == 0
    first = base / FC / "1.onnx"
    assert capsys.readouterr().out.strip() == f"exported {FC} to {first}"
    content = first.read_bytes()
    assert main([*args, "--version", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exported ONNX files are never overwritten" in err[0], err
    assert first.read_bytes() == content
    assert zoo.export(FC, random_weights=True, base_dir=base, format="onnx", depth=3) == (
        base / FC / "2.onnx")
    assert zoo.serving.onnx.versions(base / FC) == [1, 2]
    # Nothing else: no temporary file, no SavedModel version, no models.config.
    assert sorted(p.name for p in (base / FC).iterdir()) == ["1.onnx", "2.onnx"]
    assert sorted(p.name for p in base.iterdir()) == [FC]
    # onnxruntime alone runs it: no TensorFlow, no project code in the process.
    script = (
        "import sys, numpy as np, onnxruntime\n"
        "s = onnxruntime.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "p, = s.run(['probabilities'], {'pixels': np.zeros((2, 28, 28, 1), np.float32)})\n"
        "assert p.shape == (2, 10) and np.allclose(p.sum(axis=1), 1), p\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'zoo') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", script, str(first)], check=True, cwd=tmp_path)


def test_without_the_extra_the_export_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # what an install without it imports
    with pytest.raises(ValueError, match=r"needs tf2onnx, which is not installed: pip install "):
        zoo.export(FC, random_weights=True, base_dir=tmp_path, format="onnx")
    assert main(["export", FC, "--random-weights", "--base-dir", str(tmp_path),
                 "--format", "onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and 'highway-zoo[onnx]' in err[0]
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_fails_in_one_line_and_leaves_no_file(tmp_path, capsys):
    with small_disk(tmp_path / "disk") as disk:
        (disk / "filler").write_bytes(bytes(1_900_000))  # the FC net's file is ~350 KB
        base = disk / "exported"
        assert main(["export", FC, "--random-weights", "--base-dir", str(base),
                     "--format", "onnx"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["highway-zoo export: error: no space left on the device writing "
                       f"{base / FC}. Free some space and run the command again."]
        assert list((base / FC).iterdir()) == []  # no half-written file, no temporary one
