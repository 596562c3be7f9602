"""Every `highway-zoo` command given bad input: exactly one line on stderr, saying what was
wrong and what to do, and exit status 2. Read-only places are real (a read-only mount)."""

import warnings
from pathlib import Path

import numpy as np
import pytest
from places import read_only_dir

import zoo
from highway_zoo import cli
from training.data import SYSTEM_DATA_DIRS, OfflineFallbackWarning

FC = "highway_fc10_mnist"


def _one_line_error(capsys, argv, *expected):
    """Runs the command in this process; checks exit 2 and one stderr line with `expected`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OfflineFallbackWarning)
            code = cli.main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, err)
    assert lines[0].startswith("highway-zoo"), lines
    for text in expected:
        assert text in lines[0], (argv, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("exported")
    return zoo.export(FC, base_dir=base, random_weights=True, depth=2, warmup=False)


@pytest.fixture
def read_only(tmp_path):
    with read_only_dir(tmp_path / "read-only") as path:
        yield path


def test_usage_errors_are_one_line(capsys):
    _one_line_error(capsys, ["train", FC, "--transform-bias", "inf"],
                    "argument --transform-bias: expected a finite number. Received: 'inf'",
                    "(see `highway-zoo train --help`)")
    _one_line_error(capsys, ["train", FC, "--transform-bias", "nan"], "expected a finite number")
    _one_line_error(capsys, ["demo", "--depths", "1"], "depths must be integers >= 2")
    _one_line_error(capsys, ["train", "highway_conv16_mnist", "--dropout", "0.1,x"],
                    "argument --dropout: expected a number. Received: 'x'")
    _one_line_error(capsys, ["train", "highway_conv16_mnist", "--dropout", "0.5,1"],
                    "dropout must be a rate in [0, 1) for every dropout layer")
    for command in (["train", FC], ["nips-table", "1"]):
        _one_line_error(capsys, [*command, "--dtype", "bf16"], "argument --dtype: expected one "
                        "of float32, mixed_bfloat16, mixed_float16. Received: 'bf16'")
    _one_line_error(capsys, ["sweep", "--depths", "ten"],
                    "argument --depths: expected an integer. Received: 'ten' (a list: a,b,c)")
    _one_line_error(capsys, ["tune", FC, "--transform-bias-range", "1"],
                    "--transform-bias-range takes two numbers LOW,HIGH")
    _one_line_error(capsys, ["bias-study", "--transform-bias", "x"],
                    "argument --transform-bias: expected a number")
    _one_line_error(capsys, ["sweep", "--init", "he"], "argument --init: invalid choice: 'he'")
    _one_line_error(capsys, ["analyze", FC], "the following arguments are required: --weights")
    _one_line_error(capsys, ["nonsense"], "invalid choice: 'nonsense'")


def test_bad_names_values_and_paths_are_one_line(capsys, tmp_path):
    _one_line_error(capsys, ["list", "*nothing-matches*"], "No architecture matches")
    _one_line_error(capsys, ["describe", "highway_conv23_mnist"], "highway_conv32_mnist")
    _one_line_error(capsys, ["train", "highway_fc11_mnist"], "Unknown model")
    _one_line_error(capsys, ["train", FC, "--data-dir", str(tmp_path / "nonexistent")],
                    f"The data directory {tmp_path / 'nonexistent'} (--data-dir) does not exist")
    _one_line_error(capsys, ["train", FC, "--learning-rate", "nan", "--out", str(tmp_path / "r")],
                    "learning_rate")
    _one_line_error(capsys, ["sweep", "--kinds", "highway,deep", "--out", str(tmp_path / "s")],
                    "argument --kinds: invalid choice: 'deep' (choose from highway, plain)")
    _one_line_error(capsys, ["tensorboard", str(tmp_path)], "No TensorBoard logs")
    _one_line_error(capsys, ["tensorboard", str(tmp_path), "--port", "65536"],
                    "expected a port from 0 to 65535. Received: '65536'")
    _one_line_error(capsys, ["export", FC], "would serve an untrained network")
    _one_line_error(capsys, ["export", FC, "--random-weights", "--version",
                             "99999999999999999999", "--base-dir", str(tmp_path / "e")],
                    "TF Serving reads versions as int64")
    _one_line_error(capsys, ["export", FC, "--random-weights", "--max-batch", "0",
                             "--base-dir", str(tmp_path / "e")],
                    "argument --max-batch: expected a positive integer")
    _one_line_error(capsys, ["predict", "--model-dir", str(tmp_path), "x.npy"], "No SavedModel")
    _one_line_error(capsys, ["analyze", FC, "--weights", str(tmp_path / "none.weights.h5"),
                             "--out", str(tmp_path / "a")], "No weights file")


def test_bad_images_are_one_line(capsys, tmp_path, exported):
    nan = np.full((28, 28), 7.0, np.float32)
    nan[3, 4] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.save(tmp_path / "inf.npy", np.full((2, 28, 28, 1), np.inf, np.float32))
    np.save(tmp_path / "empty.npy", np.zeros((0, 28, 28, 1), np.float32))
    model_dir = ["predict", "--model-dir", str(exported)]
    _one_line_error(capsys, [*model_dir, str(tmp_path / "nan.npy")],
                    "holds 1 NaN or infinite value(s) (the first at index (3, 4): nan)")
    _one_line_error(capsys, [*model_dir, str(tmp_path / "inf.npy")],
                    "holds 1568 NaN or infinite value(s)")
    _one_line_error(capsys, [*model_dir, str(tmp_path / "empty.npy")],
                    "is an empty batch (0, 28, 28, 1): it holds no image")
    np.save(tmp_path / "fine.npy", np.full((28, 28), 7.0, np.float32))
    assert cli.main([*model_dir, str(tmp_path / "fine.npy")]) == 0


@pytest.mark.skipif(not Path(SYSTEM_DATA_DIRS["fashion_mnist"][0]).is_dir(),
                    reason="needs the upstream Fashion-MNIST files TFDS prepares from "
                    "(Debian dataset-fashion-mnist; make setup installs it)")
def test_a_read_only_data_dir_is_one_line(capsys, tmp_path, read_only):
    _one_line_error(capsys, ["train", "highway_fc10_fashion_mnist", "--data-dir",
                             str(read_only), "--out", str(tmp_path / "run")],
                    f"TensorFlow Datasets prepares the dataset inside {read_only}, which is "
                    "read-only here")


def test_read_only_places_are_one_line(capsys, tmp_path, read_only, exported):
    where = "Choose a location you can write to, or make it writable."
    _one_line_error(capsys, ["train", FC, "--out", str(read_only / "run")],
                    f"cannot write {read_only / 'run'}", where)
    _one_line_error(capsys, ["tune", FC, "--out", str(read_only / "tune")],
                    f"cannot write {read_only / 'tune'}", where)
    run_dir = Path(exported).parent.parent / "run"
    zoo.save(zoo.load(FC, depth=2), run_dir)
    _one_line_error(capsys, ["analyze", FC, "--weights", str(run_dir), "--examples", "8",
                             "--out", str(read_only / "analysis")],
                    f"cannot write {read_only / 'analysis'}", where)
    _one_line_error(capsys, ["export", FC, "--weights", str(run_dir),
                             "--base-dir", str(read_only / "exported")],
                    "Cannot create the export directory", "--base-dir")
    weights = run_dir / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated
    _one_line_error(capsys, ["analyze", FC, "--weights", str(run_dir), "--examples", "8",
                             "--out", str(tmp_path / "analysis")],
                    f"Weights file {weights} has sha256", "truncated")


def test_keras_falling_back_to_a_missing_tensorflow_is_one_line(tmp_path):
    """A machine with JAX and PyTorch but no TensorFlow (the GPU machines), KERAS_BACKEND
    unset: Keras falls back to TensorFlow and fails to import; the command says what to set.
    A fresh process in which `import tensorflow` fails as it does where it is not installed."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['tensorflow'] = None\n"  # ModuleNotFoundError on import
            "from highway_zoo.cli import main; sys.exit(main(['bench', '--only', 'headline']))")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["KERAS_HOME"] = str(tmp_path)  # no keras.json naming another backend
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).resolve().parent.parent, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("highway-zoo bench: error: Keras's backend is TensorFlow")
    assert "set KERAS_BACKEND=jax or torch" in lines[0]
