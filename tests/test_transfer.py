"""The transfer experiment (`highway-zoo transfer`) on a tiny budget."""

import json

import keras
import numpy as np
import pytest

import zoo
from highway_zoo import cli
from training.experiments import transfer


def test_the_pretrained_body_is_the_shipped_one_and_the_probe_trains_only_the_head():
    shipped = zoo.load(transfer.SOURCE, weights="default")
    for method in ("fine-tune", "linear probe"):
        model = transfer.build(method, seed=0)
        body = model.layers[0]
        stem = keras.ops.convert_to_numpy(body.get_layer("stem_conv").kernel)
        np.testing.assert_array_equal(stem, shipped.get_layer("stem_conv").get_weights()[0])
        head = model.get_layer("predictions")
        expected = head.count_params() if method == "linear probe" else model.count_params()
        assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == expected
    scratch = transfer.build("scratch", seed=0).layers[0].get_layer("stem_conv").kernel
    assert not np.array_equal(keras.ops.convert_to_numpy(scratch),
                              shipped.get_layer("stem_conv").get_weights()[0])


@pytest.mark.slow
def test_a_tiny_run_writes_its_table_json_and_figure(tmp_path, capsys):
    command = ["transfer", "--sizes", "40", "--seeds", "2", "--steps", "1", "--out",
               str(tmp_path)]
    with pytest.warns(UserWarning):  # the offline MNIST sample says it is a sample
        assert cli.main(command) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["num_test"] == 1000
    assert sorted((r["method"], r["seed"]) for r in result["runs"]) == sorted(
        (m, s) for m in transfer.METHODS for s in (0, 1))
    for r in result["runs"]:
        # 40 digits in batches of 50: one step per epoch, so one epoch for one step.
        assert r["size"] == 40 and r["epochs"] == 1 and r["steps"] == 1
        correct = r["test_accuracy"] * 1000  # a count of the 1,000 test digits
        assert abs(correct - round(correct)) < 1e-3 and 0 <= correct <= 1000
    assert [(r["size"], r["method"], r["seeds"]) for r in result["summary"]] == [
        (40, m, 2) for m in transfer.METHODS]
    with open(tmp_path / "transfer.png", "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    assert "| 40 |" in capsys.readouterr().out
    # Run again, it keeps its six runs and writes the same results.
    with pytest.warns(UserWarning):
        assert cli.main(command) == 0
    assert capsys.readouterr().out.count("(finished earlier, kept)") == 6
    assert json.loads((tmp_path / "results.json").read_text()) == result


def test_sizes_beyond_the_data_are_refused_before_anything_is_written(tmp_path, capsys):
    with pytest.warns(UserWarning):
        assert cli.main(["transfer", "--sizes", "40,5000", "--out", str(tmp_path / "t")]) == 2
    assert "--sizes 5000 exceeds the 4000 training images" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


# Two seeds at one size, one at another: mean, sample std (n - 1), a single seed's std 0.
HAND_RUNS = [
    {"size": 100, "method": "scratch", "test_accuracy": 0.5},
    {"size": 100, "method": "scratch", "test_accuracy": 0.7},
    {"size": 1000, "method": "scratch", "test_accuracy": 0.9},
]


def test_summary_table_and_figure_against_hand_values(tmp_path, monkeypatch):
    summary = transfer.transfer_summary(HAND_RUNS)
    assert [(r["size"], r["method"], r["seeds"]) for r in summary] == [
        (100, "scratch", 2), (1000, "scratch", 1)]
    assert summary[0]["mean"] == pytest.approx(0.6)
    assert summary[0]["std"] == pytest.approx(0.1 * np.sqrt(2))  # sqrt((0.1² + 0.1²) / 1)
    assert summary[1]["mean"] == pytest.approx(0.9) and summary[1]["std"] == 0.0
    full = [*summary, *({**r, "method": m} for r in summary for m in transfer.METHODS
                        if m != "scratch")]
    assert "| 100 | 0.600 ± 0.141 |" in transfer.transfer_table(full)

    import matplotlib.axes

    drawn = {}
    original = matplotlib.axes.Axes.errorbar

    def errorbar(self, x, y, yerr=None, **kwargs):
        drawn[kwargs["label"]] = (list(x), list(y), list(yerr))
        return original(self, x, y, yerr=yerr, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", errorbar)
    transfer.plot(summary, tmp_path / "transfer.png")
    x, y, yerr = drawn["scratch"]
    assert x == [100, 1000]
    np.testing.assert_allclose(y, [0.6, 0.9])
    np.testing.assert_allclose(yerr, [0.1 * np.sqrt(2), 0.0])
