"""The benchmark harness (bench/): summaries, ratios and memory slope from known runs, one tiny
end-to-end headline run in fresh processes, the wide case's FLOP count, and the CLI's checks."""

import json

import pytest

from bench import headline, start_up, suite, wide
from training.cli import main as cli_main


def _run(total, epoch_s, loss=0.1, acc=0.9, mem=100.0, steps_per_epoch=10, step_s=None):
    step_s = step_s or [e / steps_per_epoch for e in epoch_s]
    return {"build_s": 0.5, "first_step_s": 1.0, "epoch_s": epoch_s, "step_s": step_s,
            "steps_per_epoch":
            steps_per_epoch, "total_s": total, "final_loss": loss, "test_accuracy": acc,
            "params": 1000, "peak_rss_mb": 500.0, "train_mem_mb": mem}


def test_summary_takes_medians_and_steady_state_after_the_first_epoch():
    runs = [_run(3.0, [2.0, 0.5, 0.5]), _run(9.0, [8.0, 1.0, 1.0]), _run(4.0, [3.0, 0.4, 0.6])]
    row = headline.summarise("numpy", 10, runs)
    assert row["total_s"] == 4.0
    assert row["to_first_step_s"] == 1.5
    # steps/s per run: 10/0.5, 10/1.0, 10/0.5 (median of the later epochs) -> median 20
    assert row["steady_steps_per_s"] == row["epoch_steps_per_s"] == pytest.approx(20.0)
    # steady steps/s come from the time per step inside the epochs, without their set-up
    row = headline.summarise("numpy", 10, [_run(3.0, [2.0, 0.5, 0.5], step_s=[1.0, 0.02, 0.03])])
    assert row["steady_steps_per_s"] == pytest.approx(1 / 0.025)
    assert row["epoch_steps_per_s"] == pytest.approx(20.0)


def test_steady_step_time_runs_from_the_first_step_end_to_the_last():
    from bench.implementations import steady_step_s

    assert steady_step_s([10.0, 10.1, 10.3], epoch_s=5.0) == pytest.approx(0.15)
    assert steady_step_s([10.0], epoch_s=0.4) == 0.4


def test_ratios_are_ours_over_theirs_at_the_same_depth():
    rows = [
        headline.summarise("highway_zoo", 30, [_run(2.0, [1.0, 0.5])]),
        headline.summarise("pytorch", 30, [_run(4.0, [1.0, 1.0])]),
        headline.summarise("pytorch", 10, [_run(1.0, [1.0, 1.0])]),  # no zoo row at 10
    ]
    (ratio,) = headline.ratios(rows)
    assert ratio["depth"] == 30 and ratio["versus"] == "pytorch"
    assert ratio["total_time"] == pytest.approx(0.5)
    assert ratio["steady_steps_per_s"] == pytest.approx(2.0)


def test_memory_slope_per_layer_per_example():
    rows = [headline.summarise("highway_zoo", d, [_run(1.0, [1.0], mem=m)])
            for d, m in [(100, 110.0), (1000, 200.0)]]
    memory = headline.memory_per_layer(rows, batch_size=128)
    # 90 MB over 900 layers and 128 examples
    assert memory["bytes_per_layer_per_example"] == pytest.approx(90 * 2**20 / 900 / 128)


def test_wide_flop_count_matches_the_layer_sizes():
    # forward: stem 784x8, 2 blocks of 8x16, head 8x10, batch 4; backward twice forward,
    # without the stem's input gradient
    forward = 2 * 4 * (784 * 8 + 2 * 8 * 16 + 8 * 10)
    assert wide.train_flops(4, 8, 2) == 3 * forward - 2 * 4 * 784 * 8


def test_tiny_headline_run_end_to_end(tmp_path):
    out = tmp_path / "headline.json"
    assert headline.main(["--depths", "2", "--implementations", "numpy,highway_zoo",
                          "--repeats", "1", "--epochs", "2", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    rows = {r["implementation"]: r for r in summary["results"]}
    assert set(rows) == {"numpy", "highway_zoo"}
    for row in rows.values():
        (run,) = row["runs"]
        assert run["steps"] == 2 * 32 and len(run["epoch_s"]) == 2  # 4,000 images, batch 128
        assert 0 < row["to_first_step_s"] <= row["total_s"]
        assert 0.0 <= row["test_accuracy"] <= 1.0 and row["train_mem_mb"] >= 0
    # both nets have the same parameters: the same experiment
    assert rows["numpy"]["params"] == rows["highway_zoo"]["params"]
    assert summary["ratios"][0]["versus"] == "numpy"


def test_per_layer_graphs_are_skipped_beyond_the_limit(tmp_path):
    out = tmp_path / "h.json"
    headline.main(["--depths", "3", "--implementations", "numpy,keras_per_layer",
                   "--max-graph-depth", "2", "--repeats", "1", "--epochs", "1",
                   "--max-steps", "1", "--out", str(out)])
    summary = json.loads(out.read_text())
    assert [r["implementation"] for r in summary["results"]] == ["numpy"]
    assert summary["skipped"][0]["implementation"] == "keras_per_layer"
    assert "max-graph-depth" in summary["skipped"][0]["reason"]


def test_bad_names_are_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as refused:
        headline.main(["--implementations", "numpy,jax"])
    assert refused.value.code == 2
    assert "unknown implementation" in capsys.readouterr().err
    with pytest.raises(ValueError, match="headline"):
        suite.run(only=["nope"])
    assert cli_main(["bench", "--only", "nope"]) == 2


def test_start_up_runs_deep_per_layer_graphs_once(tmp_path):
    out = tmp_path / "start_up.json"
    assert start_up.main(["--depths", "2,4", "--repeats", "2", "--max-graph-depth", "3",
                          "--steps", "2", "--out", str(out)]) == 0
    rows = {(r["path"], r["depth"]): r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {(p, d) for p in start_up.PATHS for d in (2, 4)}
    assert rows[("per_layer", 4)]["repeats"] == 1
    assert rows[("per_layer", 2)]["repeats"] == rows[("stack", 4)]["repeats"] == 2
    # the same net three ways: the same parameters
    assert len({rows[(p, 4)]["params"] for p in start_up.PATHS}) == 1


def test_a_failed_measurement_names_its_command_and_error():
    from bench._common import MeasurementFailed, run_child

    with pytest.raises(MeasurementFailed, match=r"bench.headline --child .* exited with status "
                       r"1: .*no-such-file.npz"):
        run_child("bench.headline", ["--child", "numpy", "2", "no-such-file.npz"])
