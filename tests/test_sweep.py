"""The depth sweep (NIPS 2015 Fig. 1): runs, mean ± std over seeds, table, plot, CLI."""

import json

import numpy as np
import pytest

from highway_zoo import cli
from training.data import OfflineFallbackWarning
from training.experiments.sweep import sweep


@pytest.mark.slow
def test_sweep_writes_runs_table_plot_and_seed_statistics(tmp_path, capsys):
    out = tmp_path / "sweep"
    with pytest.warns(OfflineFallbackWarning):
        code = cli.main([
            "sweep", "--depths", "2,3", "--seeds", "2", "--epochs", "1", "--in-process",
            "--data-dir", str(tmp_path), "--out", str(out),
        ])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.count("test accuracy") == 8  # one progress line per run
    assert "| depth | highway test acc | plain test acc | highway train loss" in printed

    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["seeds"] == [0, 1]
    assert results["settings"]["recipe"]["epochs"] == 1
    runs = results["runs"]
    assert {(r["kind"], r["depth"], r["seed"]) for r in runs} == {
        (k, d, s) for k in ("highway", "plain") for d in (2, 3) for s in (0, 1)
    }
    for r in runs:
        run_dir = out / f"{r['kind']}_depth{r['depth']}_seed{r['seed']}"
        assert r["run_dir"] == str(run_dir) and (run_dir / "history.json").exists()
        assert len(r["loss_curve"]) == 1 and r["seconds_per_epoch"] > 0
        assert r["peak_rss_mb"] is None and r["cpu_seconds"] is None  # not a run's own
        assert (r["transform_bias"] is None) == (r["kind"] == "plain")
    # Same budget for both kinds: the same recipe in every run directory.
    recipes = {json.dumps(json.loads((out / f"{k}_depth3_seed1" / "run.json").read_text())
                          ["recipe"]) for k in ("highway", "plain")}
    assert len(recipes) == 1

    assert len(results["summary"]) == 4
    for s in results["summary"]:
        mine = [r for r in runs if r["kind"] == s["kind"] and r["depth"] == s["depth"]]
        for key in ("test_accuracy", "final_train_loss"):
            values = [r[key] for r in mine]
            assert s[key]["n"] == 2
            assert s[key]["mean"] == pytest.approx(np.mean(values))
            assert s[key]["std"] == pytest.approx(np.std(values))
        curves = [r["loss_curve"] for r in mine]
        np.testing.assert_allclose(s["loss_curve_mean"], np.mean(curves, axis=0))

    table = (out / "table.md").read_text()
    assert table.count("±") == 8 and table.splitlines()[2].startswith("| 2 |")
    png = (out / "loss_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


@pytest.mark.slow
def test_isolated_runs_record_their_own_memory_and_one_series_per_bias(tmp_path):
    with pytest.warns(OfflineFallbackWarning):
        results = sweep(
            [2], ["highway"], 1, transform_bias=[-1.0, -3.0], epochs=1,
            data_dir=tmp_path, out=tmp_path / "sweep",
        )
    runs = results["runs"]
    assert [r["series"] for r in runs] == ["highway b_T=-1", "highway b_T=-3"]
    assert [r["overrides"]["transform_bias"] for r in runs] == [-1.0, -3.0]
    for r in runs:
        assert r["peak_rss_mb"] > 100  # TensorFlow alone takes hundreds of MB
        assert r["cpu_seconds"] > 0
        assert r["first_epoch_seconds"] >= r["seconds_per_epoch"] > 0
    assert (tmp_path / "sweep" / "highway_bT-3_depth2_seed0" / "metrics.json").exists()
    assert "highway b_T=-1 test acc" in (tmp_path / "sweep" / "table.md").read_text()


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": ["foo"]}, "kinds must be distinct names from highway, plain"),
    ({"kinds": ["highway", "highway"]}, "kinds must be distinct"),
    ({"seeds": 0}, "seeds must be a positive count"),
    ({"activation": "sigmoid"}, "activation must be one of tanh, relu"),
    ({"init": "he"}, "Unknown init 'he'; choose from glorot, seed"),
    ({"transform_bias": [-2, -2]}, "distinct numbers"),
    ({"epochs": 0}, "epochs must be positive"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, kwargs, message):
    out = tmp_path / "sweep"
    with pytest.raises(ValueError, match=message):
        sweep([2], **{"out": out, **kwargs})
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--kinds", "foo"], "argument --kinds: invalid choice: 'foo' (choose from highway, plain)"),
    (["--seeds", "0"], "argument --seeds: expected a positive integer"),
    (["--activation", "sigmoid"], "argument --activation: invalid choice: 'sigmoid'"),
    (["--init", "he"], "argument --init: invalid choice: 'he'"),
    (["--epochs", "0"], "argument --epochs: expected a positive integer"),
])
def test_bad_flags_are_one_line_usage_errors(tmp_path, capsys, args, message):
    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as refused:
        cli.main(["sweep", "--depths", "2", "--out", str(out), *args])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_bad_depths_are_refused_by_the_parser():
    with pytest.raises(SystemExit) as refused:
        cli.main(["sweep", "--depths", "1"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit) as refused:
        cli.main(["sweep", "--depths", "ten"])
    assert refused.value.code == 2


def test_a_diverged_run_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    import training

    def diverge(name, **kwargs):
        raise FloatingPointError("non-finite loss")  # what train raises when the loss is NaN

    monkeypatch.setattr(training, "train", diverge)
    with pytest.warns(OfflineFallbackWarning):
        results = sweep([2], ["plain"], 2, epochs=1, data_dir=tmp_path,
                        out=tmp_path / "sweep", isolate=False)
    assert [r["failed"] for r in results["runs"]] == ["non-finite loss"] * 2
    assert np.isnan(results["summary"][0]["test_accuracy"]["mean"])
    assert "FAILED: non-finite loss" in capsys.readouterr().out
    assert "nan ± nan" in (tmp_path / "sweep" / "table.md").read_text()


def test_a_run_stopped_before_its_result_is_read_from_its_run_directory(tmp_path):
    # A study stopped between a run's end and its result.json: run again, it records what the
    # run directory says instead of training (train refuses a finished or failed run).
    from training.experiments.fc import train_one
    from training.run_dir import NON_FINITE, RunDir

    run_dir = RunDir(tmp_path / "diverged")
    run_dir.path.mkdir()
    message = "the training loss is nan at epoch 2, batch 5 (iteration 25)"
    run_dir.write_run({"status": NON_FINITE, "failure": {"message": message}})
    result = train_one({"run_dir": str(run_dir.path)}, data=None)
    assert result["failed"] == message and np.isnan(result["test_accuracy"])
    assert result["seconds_per_epoch"] is None and result["loss_curve"] == []


@pytest.mark.slow
def test_the_same_study_started_twice_shares_its_runs(tmp_path):
    # This test holds two runs' locks, as a second process training them would: a study
    # command started meanwhile trains the rest, waits for those, keeps the result the
    # holder wrote, and trains the run whose holder let go without a result.
    import fcntl
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from training.experiments.study import CLAIMS_DIR, RESULT_FILE

    out = tmp_path / "sweep"
    argv = ["sweep", "--depths", "2", "--kinds", "plain", "--seeds", "3", "--epochs", "1",
            "--in-process", "--data-dir", str(tmp_path), "--out", str(out)]
    with pytest.warns(OfflineFallbackWarning):
        assert cli.main(argv) == 0
    first = {r["seed"]: r for r in json.loads((out / "results.json").read_text())["runs"]}
    for seed in (1, 2):
        shutil.rmtree(out / f"plain_depth2_seed{seed}")
    locks = {seed: open(out / CLAIMS_DIR / f"plain_depth2_seed{seed}.lock", "a")
             for seed in (1, 2)}
    for lock in locks.values():
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    study = subprocess.Popen([sys.executable, "-m", "highway_zoo", *argv], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             cwd=Path(__file__).parent.parent)
    lines = []
    for line in study.stdout:
        lines.append(line)
        if "waiting for the process training it" in line:
            break
    progress = [ln.split(": ", 1)[1].strip() for ln in lines if ln.startswith("[")]
    assert progress[0].endswith("(finished earlier, kept)"), lines
    assert progress[1:] == ["another process is training it"] * 2 + [
        "waiting for the process training it"], lines
    # The holder of seed 1 finishes it (a result only it could have written); seed 2's
    # holder ends without a result.
    planted = {**first[1], "test_accuracy": 0.123}
    (out / "plain_depth2_seed1").mkdir()
    (out / "plain_depth2_seed1" / RESULT_FILE).write_text(json.dumps(planted))
    for lock in locks.values():
        lock.close()
    rest = study.stdout.read()
    assert study.wait(240) == 0, rest[-3000:]
    assert "seed 1: test accuracy 0.123" in rest and "(finished by another process, kept)" in rest
    results = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in results["runs"]] == [0, 1, 2]
    assert results["runs"][1]["test_accuracy"] == 0.123
    # Seed 2 was trained again, by this command, to what the first study got.
    assert results["runs"][2]["loss_curve"] == first[2]["loss_curve"]
    assert json.loads((out / "plain_depth2_seed2" / RESULT_FILE).read_text())[
        "loss_curve"] == first[2]["loss_curve"]


def test_a_study_started_twice_at_once_is_claimed_once(tmp_path, monkeypatch, capsys):
    # The first process is held between creating the empty --out and writing study.json;
    # the second, started then, must wait and resume the study, not claim the same empty
    # directory (without the lock it writes study.json first, and the first is refused).
    import threading
    import time

    import zoo.files
    from training.experiments.study import STUDY_FILE, claim_study_dir

    out = tmp_path / "studies" / "variants"
    settings = {"depths": [10], "seeds": [0, 1]}
    write_text = zoo.files.write_text
    first_inside, release_first = threading.Event(), threading.Event()

    def held_write_text(path, *args, **kwargs):
        if threading.current_thread().name == "first":
            first_inside.set()
            release_first.wait(30)
        return write_text(path, *args, **kwargs)

    monkeypatch.setattr(zoo.files, "write_text", held_write_text)
    outcome = {}

    def start(name):
        try:
            outcome[name] = claim_study_dir(out, settings)
        except Exception as err:  # noqa: BLE001 - the test reports it
            outcome[name] = err

    first = threading.Thread(target=start, args=("first",), name="first")
    first.start()
    assert first_inside.wait(30)
    second = threading.Thread(target=start, args=("second",), name="second")
    second.start()
    time.sleep(0.5)  # time enough for the second to claim the empty directory, if it could
    release_first.set()
    first.join(30)
    second.join(30)
    assert outcome == {"first": out, "second": out}
    assert json.loads((out / STUDY_FILE).read_text()) == settings
    assert "Resuming the study" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [STUDY_FILE]
