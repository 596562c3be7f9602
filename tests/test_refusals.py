"""A refused command leaves nothing behind: every check runs before a run directory, a search
or study folder or an export version is made (issue 27). Each command runs in an empty
working directory (where the default output directories go) with a value that passes the
parser and is refused later; the directory must still be empty."""

import warnings
from pathlib import Path

import pytest

from highway_zoo import cli
from training.data import OfflineFallbackWarning

FC = "highway_fc10_mnist"
CONV = "highway_conv16_mnist"


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


def refused(capsys, argv, expected):
    """Runs argv; asserts exit status 2, one line naming `expected`, nothing written."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OfflineFallbackWarning)
            code = cli.main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, lines)
    assert expected in lines[0], (argv, lines[0])
    left = sorted(str(p.relative_to(Path.cwd())) for p in Path.cwd().rglob("*"))
    assert left == [], (argv, left)


@pytest.mark.parametrize("argv, expected", [
    # The model's overrides are checked as it is built: before the run directory (it was
    # written first, leaving runs/<name>-<time>/run.json "running").
    (["train", CONV, "--dropout", "0.5,1"], "dropout must be a rate in [0, 1)"),
    (["train", CONV, "--dropout", "0.5,1", "--out", "run"], "dropout must be a rate"),
    (["train", FC, "--depth", "1"], "depth counts the first plain layer"),
    (["train", FC, "--learning-rate", "nan"], "learning_rate"),
    (["train", FC, "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["train", FC, "--recipe", "fast"], "use 'paper', 'quick' or one of"),
])
def test_a_refused_train_leaves_nothing(cwd, capsys, argv, expected):
    refused(capsys, argv, expected)


@pytest.mark.parametrize("argv, expected", [
    (["tune", FC, "--depth", "1", "--max-trials", "1", "--out", "search"],
     "depth counts the first plain layer"),
    (["tune", FC, "--variant", "bogus", "--max-trials", "1", "--out", "search"], "bogus"),
    (["tune", FC, "--data-dir", "missing", "--out", "search"], "(--data-dir) does not exist"),
    (["tune", FC, "--data-dir", "missing"], "(--data-dir) does not exist"),
])
def test_a_refused_tune_leaves_nothing(cwd, capsys, argv, expected):
    refused(capsys, argv, expected)


@pytest.mark.parametrize("argv, expected", [
    (["sweep", "--depths", "2", "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["sweep", "--depths", "2,2", "--out", "study"], "depths must be distinct"),
    (["bias-study", "--depths", "2", "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["variants", "--depths", "2", "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["variants", "--depths", "2", "--learning-rate", "0"], "learning_rate"),
    (["fig1", "--depths", "2", "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["fig1", "--depths", "2,2", "--out", "study"], "depths must be distinct"),
    (["demo", "--depths", "2", "--data-dir", "missing"], "(--data-dir) does not exist"),
    (["demo", "--depths", "2", "--epochs", "1", "--init", "seed", "--transform-bias", "1",
      "--data-dir", "missing", "--out", "study"], "(--data-dir) does not exist"),
])
def test_a_refused_study_leaves_nothing(cwd, capsys, argv, expected):
    refused(capsys, argv, expected)


@pytest.mark.parametrize("argv, expected", [
    (["export", FC], "would serve an untrained network"),
    (["export", FC, "--weights", "missing"], "missing"),
    (["export", CONV, "--random-weights", "--version", str(2**63)], "version"),
    (["export", FC, "--weights", "default", "--served-name", "a/b"], "served"),
])
def test_a_refused_export_leaves_nothing(cwd, capsys, argv, expected):
    refused(capsys, argv, expected)
