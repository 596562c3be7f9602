"""Tests of `highway-zoo nips-table` (training/experiments/nips_tables.py): a tiny study on
data the test prepares, its records against the run's own history, the paper's form of the
table, and a study under way."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from test_prepared_images import mnist_arrays, write_folder

from highway_zoo import cli
from training.data import prepare_images
from training.experiments import nips_tables


@pytest.fixture(scope="module")
def tiny_mnist(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    folder = write_folder(root / "pngs", mnist_arrays(), [str(d) for d in range(10)])
    prepare_images("mnist", folder, root / "prepared")
    return root / "prepared"


def test_a_tiny_table_1_reports_best_and_mean_over_its_seeds(tiny_mnist, tmp_path, capsys):
    out = tmp_path / "study"
    assert cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_conv16_mnist", "--seeds", "2", "--epochs", "2", "--in-process",
                     "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert [(r["model"], r["seed"], r["epochs"], r["finished"]) for r in runs] == [
        ("highway_conv16_mnist", 0, 2, True), ("highway_conv16_mnist", 1, 2, True)]
    for run in runs:  # the record is the run's own history, in %
        history = json.loads((out / f"highway_conv16_mnist_seed{run['seed']}" /
                              "history.json").read_text())
        assert run["test_accuracy_curve"] == pytest.approx(
            [100 * e["val_accuracy"] for e in history])
        assert run["test_accuracy"] == run["test_accuracy_curve"][-1]
    final = np.array([r["test_accuracy"] for r in runs])
    (row,) = results["summary"]
    assert row["best"] == pytest.approx(final.max()) and row["std"] == pytest.approx(final.std())
    assert results["settings"]["data"]["num_train"] == 30  # the prepared data, not a stand-in
    table = (out / "table.md").read_text()
    assert f"{final.max():.2f} ({final.mean():.2f} ± {final.std():.2f})" in table
    assert "99.43 (99.40 ± 0.03)" in table and "| 2 | 2 |" in table
    assert (out / "accuracy.png").stat().st_size > 0


def test_a_study_with_other_dropout_and_dtype_trains_them_and_names_them(tiny_mnist, tmp_path,
                                                                          capsys):
    out = tmp_path / "study"
    assert cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_conv16_mnist", "--seeds", "1", "--epochs", "1", "--dropout", "0",
                     "--dtype", "mixed_bfloat16", "--checkpoint-every", "1", "--in-process",
                     "--out", str(out)]) == 0
    changed = {"dropout": 0.0, "dtype": "mixed_bfloat16"}
    run = json.loads((out / "highway_conv16_mnist_seed0" / "run.json").read_text())
    assert run["overrides"] == changed  # what the run trained with
    assert run["checkpoint_every"] == 1  # the study's step checkpoints, no setting of it
    assert "checkpoint_every" not in json.loads((out / "study.json").read_text())
    assert json.loads((out / "study.json").read_text())["overrides"] == changed
    assert ("| `highway_conv16_mnist` (dropout 0.0, dtype mixed_bfloat16) |"
            in (out / "table.md").read_text())
    capsys.readouterr()
    code = cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_conv16_mnist", "--dropout", "1", "--out", str(tmp_path / "bad")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "dropout" in lines[0]
    assert not (tmp_path / "bad").exists()  # refused before any folder


def record(model, seed, curve, finished=True, planned=300):
    return {"model": model, "overrides": {}, "seed": seed, "finished": finished,
            "epochs": len(curve),
            "epochs_planned": planned, "test_accuracy": curve[-1],
            "test_accuracy_curve": curve}


def test_a_study_under_way_says_how_far_each_net_trained():
    runs = [record("highway_conv16_mnist", 0, [98.0, 99.0], finished=False),
            record("highway_conv16_mnist", 1, [98.5], finished=False)]
    rows = nips_tables.summary(runs, ["highway_conv16_mnist", "highway_conv32_mnist"])
    assert [r["model"] for r in rows] == ["highway_conv16_mnist"]  # no run: no row
    text = nips_tables.paper_table(rows, "MNIST")
    assert "1/2 of 300" in text and "99.00 (98.75 ± 0.25)" in text


def test_a_run_under_way_is_not_mixed_into_the_finished_seeds():
    runs = [record("highway_conv16_mnist", 0, [99.0, 99.48]),
            record("highway_conv16_mnist", 1, [97.9] * 7, finished=False),
            record("highway_conv16_mnist", 2, [99.0, 99.2])]
    (row,) = nips_tables.summary(runs, ["highway_conv16_mnist"])
    assert row["seeds"] == [0, 2] and row["under_way"] == [7]
    assert row["mean"] == pytest.approx(99.34) and row["std"] == pytest.approx(0.14)
    text = nips_tables.paper_table([row], "MNIST")
    assert "| 2 | 300 (1 more at epoch 7) | 99.48 (99.34 ± 0.14) |" in text


def test_one_seed_shows_no_spread_and_cifar_from_jpeg_is_named_so():
    rows = nips_tables.summary([record("highway_a_cifar10", 0, [80.0, 85.5], planned=400)],
                               ["highway_a_cifar10"])
    note = nips_tables.data_note({"name": "cifar10", "source": "cifar10 prepared by highway-zoo"
                                  " from image folder (NOT the standard files, lossy (JPEG); "})
    text = nips_tables.paper_table(rows, note)
    assert note == "CIFAR-10 (JPEG copy)" and "CIFAR-10 (JPEG copy)" in text
    assert "| 85.50 |" in text and "±" not in text.split("\n")[2].split("|")[5]
    assert "| 89.18 |" in text


def test_a_recipe_other_than_the_released_solver_is_named_beside_the_net():
    paper, tenth = (dict(record("highway_b_cifar10", 0, [80.0], planned=n), recipe=r)
                    for n, r in ((400, "caffe_cifar"), (40, "caffe_cifar_tenth")))
    rows = nips_tables.summary([paper], ["highway_b_cifar10"])
    assert "| `highway_b_cifar10` |" in nips_tables.paper_table(rows, "CIFAR-10")
    rows = nips_tables.summary([dict(tenth, overrides={"dropout": 0.0})], ["highway_b_cifar10"])
    assert ("| `highway_b_cifar10` (dropout 0.0, recipe caffe_cifar_tenth) | 2,278,522 | 1 | "
            "40 | 80.00 |" in nips_tables.paper_table(rows, "CIFAR-10"))


def test_a_net_not_in_the_table_is_one_line(tiny_mnist, tmp_path, capsys):
    code = cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_a_cifar10", "--out", str(tmp_path / "o")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Table 1 has highway_conv16_mnist" in lines[0]
    assert not (tmp_path / "o").exists()


def test_a_snapshot_of_a_study_under_way(tiny_mnist, tmp_path, capsys):
    """The study interrupted after its first run: the snapshot shows that run, and says one
    of the two planned runs finished."""
    out = tmp_path / "study"
    assert cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_conv16_mnist", "--seeds", "2", "--epochs", "1", "--in-process",
                     "--out", str(out)]) == 0
    shutil.rmtree(out / "highway_conv16_mnist_seed1")
    capsys.readouterr()
    assert cli.main(["nips-table", "1", "--out", str(out), "--snapshot",
                     str(tmp_path / "page")]) == 0
    table = (tmp_path / "page" / "table.md").read_text()
    assert "1 of 2 runs finished, 1 started" in table and "| 1 | 1 |" in table
    assert json.loads((tmp_path / "page" / "results.json").read_text())["runs"][0]["seed"] == 0
    one_line = cli.main(["nips-table", "2", "--out", str(out), "--snapshot", str(tmp_path / "x")])
    assert one_line == 2 and "a study of Table 1, not 2" in capsys.readouterr().err


def test_a_run_in_its_own_process_shows_its_epochs_as_they_come(tiny_mnist, tmp_path, capfd):
    """Each run trains in a child process (the study's default): its per-epoch lines reach the
    study's output, indented, before the run's summary line, and its result its own memory."""
    out = tmp_path / "study"
    assert cli.main(["nips-table", "1", "--data-dir", str(tiny_mnist), "--models",
                     "highway_conv16_mnist", "--seeds", "1", "--epochs", "2",
                     "--out", str(out)]) == 0
    lines = capfd.readouterr().out.splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("[1/1] "))
    epochs = [i for i, line in enumerate(lines) if line.startswith("    Epoch ")]
    assert [lines[i].strip() for i in epochs] == ["Epoch 1/2", "Epoch 2/2"]
    assert epochs[-1] < summary
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["peak_rss_mb"] > 100 and run["cpu_seconds"] > 0  # the child's, not None


def test_a_run_whose_process_fails_says_why_from_its_stderr(tmp_path):
    from training.experiments.study import train_in_child

    job = {"model": "highway_conv16_mnist", "seed": 0, "data_dir": str(tmp_path / "no_data"),
           "recipe": "quick", "epochs": 1, "run_dir": str(tmp_path / "run"),
           "overrides": {}}
    with pytest.raises(RuntimeError, match=r"(?s)failed \(exit status 1\):.*no_data"):
        train_in_child(nips_tables.NipsTableStudy, job)
