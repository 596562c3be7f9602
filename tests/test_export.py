"""`zoo.export` and `highway-zoo export`: layout, versions, signatures, provenance, errors."""

import importlib
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from places import read_only_dir, small_disk
from tensorflow_serving.apis import prediction_log_pb2
from tensorflow_serving.config import model_server_config_pb2

import zoo
from highway_zoo.cli import main
from layers.highway_stack import unstack_weights
from zoo.files import sha256_of
from zoo.serving.signatures import variables_sha256
from zoo.weights import WEIGHTS_FILE

# `zoo.export` is the function (zoo/__init__.py re-exports it); this is the module.
export_module = importlib.import_module("zoo.serving.saved_model")
versions = export_module.versions
FC = "highway_fc10_mnist"
CONV = "highway_conv16_mnist"
BIN = Path(sys.executable).parent


def small_models() -> dict[str, keras.Model]:
    """A 3-layer highway MLP and the MNIST highway conv net, random weights, seeded."""
    keras.utils.set_random_seed(0)
    return {FC: zoo.load(FC, depth=3), CONV: zoo.load(CONV)}


def pixels(n: int = 5, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (n, 28, 28, 1)).astype(np.float32)


def keras_reference(model: keras.Model, x: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """What every signature should return, computed with the Keras model and its layers."""
    probabilities = np.asarray(model(x, training=False))
    logits = np.asarray(keras.Model(model.input, model.get_layer("logits").output)(x))
    gated = export_module.highway_layers(model)
    layer_inputs = keras.Model(model.input, [layer.input for layer in gated])(x)
    gates = {}
    for layer, layer_input in zip(gated, layer_inputs):
        t = np.asarray(layer.transform_gate(layer_input))
        gates[layer.name] = t.reshape(len(x), -1).mean(axis=1)
    # classify: every class by falling probability (ties: the lower id first), named.
    labels = np.array(model.metadata["class_names"] or range(probabilities.shape[-1]), "S")
    order = np.argsort(-probabilities, axis=-1, kind="stable")
    return {
        "serving_default": {
            "probabilities": probabilities,
            "class_ids": probabilities.argmax(axis=-1).astype(np.int64),
        },
        "logits": {"logits": logits},
        "gates": gates,
        "classify": {"classes": labels[order],
                     "scores": np.take_along_axis(probabilities, order, axis=-1)},
    }


def assert_outputs_match(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if value.dtype.kind == "S":  # TensorFlow's strings come as an object array of bytes
            np.testing.assert_array_equal(np.asarray(got[key]).astype(value.dtype), value,
                                          err_msg=key)
        elif value.dtype == np.int64:
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        else:
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.fixture(scope="module")
def models():
    return small_models()


@pytest.fixture(scope="module")
def exported(models, tmp_path_factory):
    """Both small models exported once into one base directory."""
    base = tmp_path_factory.mktemp("exported")
    return base, {name: zoo.export(model, base_dir=base) for name, model in models.items()}


def no_temp_dirs(model_dir: Path) -> bool:
    return not [p for p in model_dir.iterdir() if p.name.startswith(export_module.TMP_PREFIX)]


def test_layout_versions_and_refusal_to_overwrite(models, tmp_path):
    base = tmp_path / "missing" / "exported"  # a missing base directory is created
    model = models[FC]
    first = zoo.export(model, base_dir=base)
    assert first == base / FC / "1"
    assert zoo.export(model, base_dir=base) == base / FC / "2"
    assert zoo.export(model, base_dir=base, version=7, warmup=False) == base / FC / "7"
    assert zoo.export(model, base_dir=base) == base / FC / "8"  # the next free number
    with pytest.raises(FileExistsError, match="never overwritten.*next free one \\(9\\)"):
        zoo.export(model, base_dir=base, version=2)
    assert versions(base / FC) == [1, 2, 7, 8]
    assert no_temp_dirs(base / FC)
    assert (first / "saved_model.pb").is_file() and (first / "variables").is_dir()
    assert (first / "assets.extra" / "tf_serving_warmup_requests").is_file()
    assert not (base / FC / "7" / "assets.extra" / "tf_serving_warmup_requests").exists()
    # Readable by a server running as another user, as a plain mkdir would make it.
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o777 & ~_umask()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            zoo.export(model, base_dir=base, version=bad)
    with pytest.raises(ValueError, match="served model name"):
        zoo.export(model, base_dir=base, name="../elsewhere")


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_a_failed_export_leaves_no_version_and_no_temp_dir(models, tmp_path, monkeypatch):
    written = []
    write_archive = export_module._write_archive

    def crash_after_writing(archive, directory):
        write_archive(archive, directory)
        written.append(sorted(p.name for p in directory.iterdir()))
        raise RuntimeError("simulated crash in the middle of an export")

    monkeypatch.setattr(export_module, "_write_archive", crash_after_writing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        zoo.export(models[FC], base_dir=tmp_path)
    assert "saved_model.pb" in written[0]  # it did get half way
    assert versions(tmp_path / FC) == [] and no_temp_dirs(tmp_path / FC)
    assert not (tmp_path / "models.config").exists()
    monkeypatch.undo()
    assert zoo.export(models[FC], base_dir=tmp_path) == tmp_path / FC / "1"
    assert no_temp_dirs(tmp_path / FC)


def test_signatures_have_named_inputs_and_outputs(models, exported):
    _, paths = exported
    for name, path in paths.items():
        loaded = tf.saved_model.load(str(path))
        assert sorted(loaded.signatures) == ["classify", "gates", "logits", "serving_default"]
        gate_names = [layer.name for layer in export_module.highway_layers(models[name])]
        expected_outputs = {
            "serving_default": {"probabilities": tf.float32, "class_ids": tf.int64},
            "logits": {"logits": tf.float32},
            "gates": {layer: tf.float32 for layer in gate_names},
            "classify": {"classes": tf.string, "scores": tf.float32},
        }
        for signature, outputs in expected_outputs.items():
            fn = loaded.signatures[signature]
            (inputs,) = [fn.structured_input_signature[1]]
            assert list(inputs) == ["pixels"]
            assert inputs["pixels"].shape.as_list() == [None, 28, 28, 1]
            assert inputs["pixels"].dtype == tf.float32
            assert {k: v.dtype for k, v in fn.structured_outputs.items()} == outputs
            assert all(v.shape[0] is None for v in fn.structured_outputs.values())
    assert len(gate_names) == 8  # conv16: 2 + 3 + 3 highway layers, each its own output


@pytest.mark.parametrize("name", [FC, CONV])
def test_every_signature_matches_the_keras_model(models, exported, name):
    _, paths = exported
    loaded = tf.saved_model.load(str(paths[name]))
    x = pixels(5)
    expected = keras_reference(models[name], x)
    for signature, outputs in expected.items():
        got = loaded.signatures[signature](pixels=tf.constant(x))
        assert_outputs_match({k: v.numpy() for k, v in got.items()}, outputs)
    # The batch dimension is free: one image and a batch of 3 give the same rows.
    one = loaded.signatures["serving_default"](pixels=tf.constant(x[:1]))["probabilities"]
    np.testing.assert_allclose(one.numpy(), expected["serving_default"]["probabilities"][:1],
                               rtol=1e-5, atol=1e-6)


FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf

    cases = np.load(sys.argv[1], allow_pickle=False)
    for path in sys.argv[2:]:
        name = path.split("/")[-2]
        loaded = tf.saved_model.load(path)
        x = cases[f"{name}/pixels"]
        for signature, fn in loaded.signatures.items():
            for key, value in fn(pixels=tf.constant(x)).items():
                expected = cases[f"{name}/{signature}/{key}"]
                if value.dtype == tf.string:  # classify's class names
                    np.testing.assert_array_equal(value.numpy().astype(expected.dtype), expected)
                    continue
                assert value.dtype.as_numpy_dtype == expected.dtype, (signature, key)
                np.testing.assert_allclose(value.numpy(), expected, rtol=1e-5, atol=1e-6)
        # A wrong-rank image must fail the call, not abort the process (oneDNN's conv CHECK).
        try:
            loaded.signatures["serving_default"](pixels=tf.zeros([2, 28, 28]))
            raise AssertionError("a wrong-rank input was accepted")
        except tf.errors.InvalidArgumentError as err:
            assert "[?,28,28,1]" in err.message, err.message
        print(name, "ok")
    imported = sorted(m for m in ("zoo", "layers", "training") if m in sys.modules)
    assert not imported, f"the SavedModel pulled in project modules: {imported}"
    print("no project imports")
    """
)


def test_loads_and_matches_in_a_fresh_process_without_project_code(models, exported, tmp_path):
    _, paths = exported
    cases = {}
    for name, model in models.items():
        x = pixels(4, seed=1)
        cases[f"{name}/pixels"] = x
        for signature, outputs in keras_reference(model, x).items():
            for key, value in outputs.items():
                cases[f"{name}/{signature}/{key}"] = value
    np.savez(tmp_path / "cases.npz", **cases)
    script = tmp_path / "serve_check.py"
    script.write_text(FRESH_PROCESS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "cases.npz"), *map(str, paths.values())],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{FC} ok" in result.stdout and f"{CONV} ok" in result.stdout
    assert "no project imports" in result.stdout


def test_saved_model_cli_show_and_run(models, exported, tmp_path):
    _, paths = exported
    path = str(paths[CONV])
    show = subprocess.run(
        [str(BIN / "saved_model_cli"), "show", "--dir", path, "--all"],
        capture_output=True, text=True, timeout=120,
    )
    assert show.returncode == 0, show.stderr[-2000:]
    for text in ("signature_def['serving_default']", "signature_def['gates']",
                 "signature_def['logits']", "inputs['pixels']", "outputs['class_ids']",
                 "outputs['probabilities']", "outputs['stage3_highway3']", "DT_INT64"):
        assert text in show.stdout, text
    assert "args_0" not in show.stdout and "output_0" not in show.stdout

    x = pixels(3, seed=2)
    np.save(tmp_path / "x.npy", x)
    run = subprocess.run(
        [str(BIN / "saved_model_cli"), "run", "--dir", path, "--tag_set", "serve",
         "--signature_def", "serving_default", "--inputs", f"pixels={tmp_path / 'x.npy'}",
         "--outdir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    expected = keras_reference(models[CONV], x)["serving_default"]
    got = {key: np.load(tmp_path / "out" / f"{key}.npy") for key in expected}
    assert_outputs_match(got, expected)


def _parse_config(path: Path):
    config = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(path.read_text(), config)
    return {c.name: c for c in config.model_config_list.config}


def test_models_config_lists_every_exported_model(models, exported):
    base, _ = exported
    entries = _parse_config(base / "models.config")
    assert sorted(entries) == [CONV, FC]
    for name, entry in entries.items():
        assert entry.base_path == str((base / name).resolve())
        assert Path(entry.base_path).is_absolute()
        assert entry.model_platform == "tensorflow"
    docker = _parse_config(base / "models.docker.config")
    assert {n: e.base_path for n, e in docker.items()} == {n: f"/models/{n}" for n in entries}


def test_models_config_keeps_hand_edits_and_refuses_a_broken_file(models, tmp_path):
    zoo.export(models[FC], base_dir=tmp_path)
    config_path = tmp_path / "models.config"
    text = config_path.read_text().replace(
        'model_platform: "tensorflow"',
        'model_platform: "tensorflow"\n    model_version_policy { all {} }',
    )
    config_path.write_text(text)
    zoo.export(models[CONV], base_dir=tmp_path, name="digits_conv")
    entries = _parse_config(config_path)
    assert sorted(entries) == ["digits_conv", FC]
    assert entries[FC].model_version_policy.HasField("all")  # the hand edit survived

    config_path.write_text("model_config_list { config { name: ")
    with pytest.raises(ValueError, match="not a valid ModelServerConfig"):
        zoo.export(models[FC], base_dir=tmp_path)
    assert versions(tmp_path / FC) == [1]  # refused before writing anything


def test_warmup_requests_parse_and_run(exported):
    _, paths = exported
    path = paths[CONV]
    loaded = tf.saved_model.load(str(path))
    records = list(tf.data.TFRecordDataset(str(path / "assets.extra" /
                                               "tf_serving_warmup_requests")))
    assert len(records) == 4
    seen = []
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        assert request.model_spec.name == CONV
        seen.append(request.model_spec.signature_name)
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        assert list(inputs) == ["pixels"] and inputs["pixels"].shape == (1, 28, 28, 1)
        outputs = loaded.signatures[request.model_spec.signature_name](**inputs)
        assert all(v.shape[0] == 1 for v in outputs.values())
    assert sorted(seen) == ["classify", "gates", "logits", "serving_default"]


def test_provenance_is_recorded(models, exported, tmp_path):
    _, paths = exported
    record = json.loads((paths[FC] / "assets.extra" / "highway_zoo.json").read_text())
    assert record["architecture"] == FC and record["overrides"] == {"depth": 3}
    assert record["variables_sha256"] == variables_sha256(models[FC])
    assert record["input"]["name"] == "pixels" and record["input"]["shape"] == [None, 28, 28, 1]
    assert sorted(record["signatures"]["gates"]) == ["highway_1", "highway_2"]
    assert record["class_names"] == [str(d) for d in range(10)]  # MNIST's, what classify says

    # By name with a run directory (what --weights RUN_DIR does): the weights' sha256 is recorded.
    run_dir = tmp_path / "run"
    zoo.save(models[FC], run_dir)
    path = zoo.export(FC, base_dir=tmp_path / "exported", weights=run_dir)
    record = json.loads((path / "assets.extra" / "highway_zoo.json").read_text())
    assert record["weights"]["sha256"] == sha256_of(run_dir / WEIGHTS_FILE)
    assert record["overrides"] == {"depth": 3}
    assert record["variables_sha256"] == variables_sha256(models[FC])


def stacked_pair(depth: int = 5) -> tuple[keras.Model, keras.Model]:
    """A stacked FC net (one HighwayStack) with gate biases that differ by layer, and the
    per-layer net with the same weights."""
    keras.utils.set_random_seed(1)
    stacked = zoo.load(FC, depth=depth, stacked=True)
    stack = stacked.get_layer("highway_stack")
    bias = keras.ops.convert_to_numpy(stack.bias)
    bias[:, 50:] -= np.linspace(0.0, 2.0, depth - 1)[:, None]
    stack.bias.assign(bias)
    per_layer = zoo.load(FC, depth=depth)
    for name in ("stem_dense", "logits"):
        per_layer.get_layer(name).set_weights(stacked.get_layer(name).get_weights())
    for i, (kernel, b) in enumerate(unstack_weights(stack), start=1):
        per_layer.get_layer(f"highway_{i}").set_weights([kernel, b])
    return stacked, per_layer


def test_a_stacked_net_exports_the_per_layer_nets_gates(tmp_path):
    stacked, per_layer = stacked_pair(depth=5)
    layers = ["highway_1", "highway_2", "highway_3", "highway_4"]
    assert [layer.name for layer in export_module.highway_layers(stacked)] == layers
    paths = {name: zoo.export(model, base_dir=tmp_path, name=f"{FC}_{name}")
             for name, model in (("stacked", stacked), ("per_layer", per_layer))}
    x = pixels(6, seed=3)
    expected = keras_reference(per_layer, x)
    loaded = tf.saved_model.load(str(paths["stacked"]))
    assert sorted(loaded.signatures) == ["classify", "gates", "logits", "serving_default"]
    gates = loaded.signatures["gates"]
    assert sorted(gates.structured_outputs) == layers
    assert all(v.dtype == tf.float32 and v.shape.as_list() == [None]
               for v in gates.structured_outputs.values())
    for signature, outputs in expected.items():
        got = loaded.signatures[signature](pixels=tf.constant(x))
        assert_outputs_match({k: v.numpy() for k, v in got.items()}, outputs)
    means = [expected["gates"][name].mean() for name in layers]
    assert np.all(np.diff(means) < 0)  # the biases fall by layer: a mix-up would show
    # The per-layer export gives the same named outputs, and the same values.
    twin = tf.saved_model.load(str(paths["per_layer"])).signatures["gates"]
    theirs = {k: v.numpy() for k, v in twin(pixels=tf.constant(x)).items()}
    assert_outputs_match({k: v.numpy() for k, v in gates(pixels=tf.constant(x)).items()},
                         theirs)
    record = json.loads((paths["stacked"] / "assets.extra" / "highway_zoo.json").read_text())
    assert sorted(record["signatures"]["gates"]) == layers
    assert record["overrides"] == {"depth": 5, "stacked": True}


@pytest.mark.parametrize("stacked", [False, True], ids=["per_layer", "stacked"])
def test_a_mixed_precision_net_exports_the_float32_signatures(tmp_path, stacked):
    """`dtype="mixed_bfloat16"`: every output is the dtype the signatures promise (the gates
    came out bfloat16), and the mean T lies in (0, 1)."""
    path = zoo.export(FC, base_dir=tmp_path, random_weights=True, depth=4, stacked=stacked,
                      dtype="mixed_bfloat16", warmup=False)
    loaded = tf.saved_model.load(str(path))
    for name, signature in loaded.signatures.items():
        for output, spec in signature.structured_outputs.items():
            expected = {"class_ids": tf.int64, "classes": tf.string}.get(output, tf.float32)
            assert spec.dtype == expected, (name, output, spec.dtype)
    gates = loaded.signatures["gates"](pixels=tf.constant(pixels(6, seed=3)))
    assert sorted(gates) == ["highway_1", "highway_2", "highway_3"]
    assert all(np.all((v.numpy() > 0) & (v.numpy() < 1)) for v in gates.values())


def test_tflite_and_onnx_take_a_mixed_precision_preset_as_float32_when_asked(tmp_path, capsys):
    """A preset trained in mixed_bfloat16 exports as it is to a SavedModel; TFLite (no bfloat16
    kernels) and ONNX (a file onnxruntime cannot load) are refused in one line before anything
    is written, and `--dtype float32` converts the same float32 weights."""
    from zoo.serving import tflite

    keras.utils.set_random_seed(0)
    preset = tmp_path / "preset"
    zoo.save(zoo.load(FC, depth=3, dtype="mixed_bfloat16"), preset)
    base = tmp_path / "exported"
    for format in ("tflite", "onnx"):
        assert main(["export", str(preset), "--format", format, "--base-dir", str(base)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--format {format} converts float32 nets" in err[0], err
        assert "computes in mixed_bfloat16" in err[0] and "--dtype float32" in err[0]
    assert not base.exists()
    assert main(["export", str(preset), "--format", "tflite", "--dtype", "float32",
                 "--base-dir", str(base)]) == 0
    converted = tflite.load(base / FC / "1.tflite")
    x = pixels(4, seed=1)
    expected = zoo.load(str(preset), dtype="float32").predict(x, verbose=0)
    np.testing.assert_allclose(converted(x)["probabilities"], expected, atol=1e-5)


def test_a_name_without_weights_asks_for_random_weights(tmp_path, capsys):
    base = tmp_path / "exported"
    with pytest.raises(ValueError, match="random_weights=True"):
        zoo.export(FC, base_dir=base)
    with pytest.raises(ValueError, match="not both"):
        zoo.export(FC, base_dir=base, weights=tmp_path, random_weights=True)
    assert main(["export", FC, "--base-dir", str(base)]) == 2
    assert "--random-weights" in capsys.readouterr().err
    assert not base.exists()  # refused before anything was written


def test_cli_export(tmp_path, capsys):
    base = tmp_path / "exported"
    assert main(["export", "plain_fc10_mnist", "--random-weights", "--base-dir", str(base)]) == 0
    assert f"{base / 'plain_fc10_mnist' / '1'}" in capsys.readouterr().out
    loaded = tf.saved_model.load(str(base / "plain_fc10_mnist" / "1"))
    # No gates in a plain net.
    assert sorted(loaded.signatures) == ["classify", "logits", "serving_default"]
    assert main(["export", "plain_fc10_mnist", "--random-weights", "--base-dir", str(base),
                 "--version", "1"]) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert sorted(_parse_config(base / "models.config")) == ["plain_fc10_mnist"]


def test_unwritable_base_dir_gives_a_clear_error(models, tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    # A file where the base directory should be, or above it: refused whoever runs the test.
    with pytest.raises(NotADirectoryError, match="is a file, not a directory"):
        zoo.export(models[FC], base_dir=a_file)
    with pytest.raises(PermissionError, match="Cannot create the export directory"):
        zoo.export(models[FC], base_dir=a_file / "exported")
    # A read-only directory (a read-only mount: chmod does not stop root, who runs CI).
    with read_only_dir(tmp_path / "read-only") as read_only:
        with pytest.raises(PermissionError, match="permission denied"):
            zoo.export(models[FC], base_dir=read_only)


def test_wrong_shape_or_dtype_is_a_tf_error(exported):
    _, paths = exported
    fn = tf.saved_model.load(str(paths[FC])).signatures["serving_default"]
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"\[\?,28,28,1\]"):
        fn(pixels=tf.zeros([2, 28, 28, 3]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=r"\[\?,28,28,1\]"):
        fn(pixels=tf.zeros([2, 784]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError, TypeError), match="float"):
        fn(pixels=tf.zeros([2, 28, 28, 1], tf.int32))


def test_a_request_above_the_max_batch_fails_with_a_clear_error(models, exported, tmp_path):
    _, paths = exported
    record = json.loads((paths[FC] / "assets.extra" / "highway_zoo.json").read_text())
    assert record["max_batch"] == export_module.DEFAULT_MAX_BATCH == 1024
    path = zoo.export(models[FC], base_dir=tmp_path, max_batch=4, batching_config=True,
                      warmup=False)
    loaded = tf.saved_model.load(str(path))
    for signature in ("serving_default", "logits", "gates", "classify"):
        fn = loaded.signatures[signature]
        assert len(fn(pixels=tf.constant(pixels(4)))) >= 1  # up to the max: answered
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="A request may hold at most 4 images"):
            fn(pixels=tf.constant(pixels(5)))
    batching = (tmp_path / "batching.config").read_text()
    assert "max_batch_size { value: 4 }" in batching
    assert f"--batching_parameters_file={(tmp_path / 'batching.config').resolve()}" in batching
    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        zoo.export(models[FC], base_dir=tmp_path, max_batch=0)


def test_versions_beyond_int64_are_refused(models, tmp_path):
    with pytest.raises(ValueError, match="TF Serving reads versions as int64"):
        zoo.export(models[FC], base_dir=tmp_path, version=2**63)
    assert zoo.export(models[FC], base_dir=tmp_path, version=2**63 - 1, warmup=False).name == (
        str(2**63 - 1))


def test_an_export_racing_another_for_a_version_takes_the_next(models, tmp_path, monkeypatch):
    refuse_existing = export_module._refuse_existing
    raced = []

    def another_export_renames_first(target, name):
        refuse_existing(target, name)
        if not raced:  # between this check and our rename, another export takes the number
            raced.append(target)
            other = target.parent / ".other-export"
            other.mkdir()
            (other / "saved_model.pb").write_bytes(b"the other export")
            os.rename(other, target)

    monkeypatch.setattr(export_module, "_refuse_existing", another_export_renames_first)
    path = zoo.export(models[FC], base_dir=tmp_path, warmup=False)
    assert raced == [tmp_path / FC / "1"] and path == tmp_path / FC / "2"
    assert (tmp_path / FC / "1" / "saved_model.pb").read_bytes() == b"the other export"


def test_a_killed_exports_temporary_directory_is_removed_by_the_next(models, tmp_path):
    base = tmp_path / "exported"
    killed = subprocess.Popen([str(BIN / "highway-zoo"), "export", FC, "--random-weights",
                               "--base-dir", str(base)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,  # its temporary files: in tmp_path
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    deadline = time.monotonic() + 120
    while not list((base / FC).glob(".tmp-*")) and killed.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    killed.kill()
    killed.wait()
    left = list((base / FC).glob(".tmp-*"))
    assert len(left) == 1, "the export ended before it could be killed"
    another_machine = base / FC / f"{export_module.TMP_PREFIX}{FC}+elsewhere+1+abcd1234"
    another_machine.mkdir()  # on a shared disk: its process cannot be checked from here
    zoo.export(models[FC], base_dir=base, warmup=False)
    assert not left[0].exists() and another_machine.is_dir()


def test_a_full_disk_fails_the_export_in_one_line_and_leaves_nothing(tmp_path, capsys):
    with small_disk(tmp_path / "disk") as disk:
        (disk / "filler").write_bytes(bytes(1_900_000))
        base = disk / "exported"
        assert main(["export", FC, "--random-weights", "--base-dir", str(base)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"highway-zoo export: error: No space left on the device to write {FC} "
                       f"under {base / FC}; nothing was exported (its temporary directory is "
                       "removed). Free some space and export again."]
        assert list((base / FC).iterdir()) == [] and not (base / "models.config").exists()
