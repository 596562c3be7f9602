"""Fig. 1 by the paper's protocol (`highway-zoo fig1`): training/fig1.py, end to end on a
tiny budget (depths 2 and 3, 2 trials per net, 1 epoch, 500 / 200 MNIST-sample digits)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
from places import reserved_ports, run_together

from highway_zoo import cli
from training.experiments import fig1
from training.experiments.fc import architecture

TINY = ["--depths", "2,3", "--trials", "2", "--epochs", "1", "--max-train-examples", "500",
        "--max-test-examples", "200"]


def _trial_files(out):
    return {p: p.read_bytes() for p in sorted(out.glob("*/search/trial_*/*.json"))}


@pytest.mark.slow
def test_fig1_searches_every_net_draws_both_panels_and_resumes(tmp_path, capsys):
    out = tmp_path / "fig1"
    assert cli.main(["fig1", *TINY, "--out", str(out)]) == 0
    first = capsys.readouterr().out
    assert len(re.findall(r"^trial \d+ by tuner0: COMPLETED", first, re.M)) == 8
    assert f"Wrote {out}/results.json, table.md, fig1.png and search.png" in first
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and results["settings"]["epochs"] == 1
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent, check=True).stdout.strip()
    assert results["settings"]["code"]["commit"] == head  # the code the numbers came from
    assert results["data"]["num_train"] == 500 and "sample" in results["data"]["source"]
    cells = {(c["kind"], c["depth"]): c for c in results["cells"]}
    assert sorted(cells) == [("highway", 2), ("highway", 3), ("plain", 2), ("plain", 3)]
    for (kind, depth), cell in cells.items():
        assert cell["trials"] == 2 and cell["architecture"] == f"{kind}_fc10_mnist"
        assert cell["overrides"] == {"depth": depth}
        # Only highway nets search b_T, within the paper's [-10, -1].
        for run in cell["runs"]:
            hp = run["hyperparameters"]
            assert ("transform_bias" in hp) == (kind == "highway")
            assert kind == "plain" or -10 <= hp["transform_bias"] <= -1
        # The per-epoch loss comes from each trial's history.json, which the tuner wrote.
        best = cell["best"]
        history = json.loads((out / f"{kind}_fc{depth}" / "search" / f"trial_{best['trial_id']}"
                              / "history.json").read_text())
        assert history["history"]["loss"] == best["loss_per_epoch"]
        assert best["final_loss"] == best["loss_per_epoch"][-1]
        finals = [r["final_loss"] for r in cell["runs"]]
        assert finals == sorted(finals) and best["final_loss"] == min(finals)
        assert cell["top"]["n"] == 2
        assert cell["top"]["mean"] == pytest.approx(sum(finals) / 2)
        assert cell["top"]["std"] == pytest.approx(abs(finals[0] - finals[1]) / 2)
        assert cell["seconds"] > 0
    table = (out / "table.md").read_text()
    assert "500 training / 200 test images; 1 epochs per run" in table
    assert len(re.findall(r"^\| [23] \| (plain|highway) \| 2 \|", table, re.M)) == 4
    image = matplotlib.image.imread(out / "fig1.png")
    assert image.shape[1] > 2 * image.shape[0] * 0.9  # two panels side by side
    search = matplotlib.image.imread(out / "search.png")
    assert search.shape[1] > 2 * search.shape[0] * 0.9  # a panel per depth

    # The same command again: every trial is kept, none is run again.
    kept = _trial_files(out)
    assert cli.main(["fig1", *TINY, "--out", str(out)]) == 0
    again = capsys.readouterr().out
    assert "Resuming the search" in again and not re.findall(r"^trial \d+ by", again, re.M)
    assert _trial_files(out) == kept
    assert json.loads((out / "results.json").read_text())["cells"] == results["cells"]

    # A snapshot of the study as it stands, against more trials planned than it has run:
    # the same cells as its own results, marked incomplete; the study is not touched.
    snap = tmp_path / "snapshot"
    assert cli.main(["fig1", "--out", str(out), "--snapshot", str(snap), "--trials", "3"]) == 0
    assert "8 runs finished in 4 cells" in capsys.readouterr().out
    snapped = json.loads((snap / "results.json").read_text())
    assert snapped["cells"] == results["cells"] and not snapped["complete"]
    assert snapped["settings"]["code"] == results["settings"]["code"]
    assert "8 of 12 runs finished (code " in (snap / "table.md").read_text()
    assert (snap / "fig1.png").stat().st_size > 0 and _trial_files(out) == kept
    assert (snap / "search.png").read_bytes()[:4] == b"\x89PNG"

    # More trials: the study resumes (trials are not among its settings), one more per net.
    assert cli.main(["fig1", *TINY, "--trials", "3", "--out", str(out)]) == 0
    more = capsys.readouterr().out
    assert len(re.findall(r"^trial \d+ by tuner0: COMPLETED", more, re.M)) == 4
    assert "12 of 12 runs finished." in more
    assert [c["trials"] for c in json.loads((out / "results.json").read_text())["cells"]] == [
        3, 3, 3, 3]


@pytest.mark.parametrize("argv, message", [
    (["--trials", "0"], "argument --trials: expected a positive integer. Received: '0'"),
    (["--kinds", "plain,resnet"], "argument --kinds: invalid choice: 'resnet' (choose from "
     "plain, highway)"),
    (["--depths", "10,10"], "depths must be distinct"),
    (["--depths", "1"], "depths must be integers >= 2"),
    (["--top", "0"], "argument --top: expected a positive integer"),
])
def test_bad_options_are_refused_in_one_line(argv, message, tmp_path, capsys):
    try:
        code = cli.main(["fig1", *argv, "--out", str(tmp_path / "f")])
    except SystemExit as usage_error:  # argparse's
        code = usage_error.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "f").exists()  # refused before anything was written


def test_other_settings_in_an_existing_directory_are_refused(tmp_path, capsys):
    out = tmp_path / "f"
    assert cli.main(["fig1", "--depths", "10", "--kinds", "plain", "--out", str(out),
                     "--epochs", "1", "--trials", "1", "--max-train-examples", "200",
                     "--max-test-examples", "100"]) == 0
    capsys.readouterr()
    # Other epochs: the study's settings differ (more trials would resume it).
    assert cli.main(["fig1", "--depths", "10", "--kinds", "plain", "--out", str(out),
                     "--epochs", "2", "--trials", "1", "--max-train-examples", "200",
                     "--max-test-examples", "100"]) == 2
    err = capsys.readouterr().err
    assert "holds a study with other settings (epochs differ" in err and err.count("\n") == 1
    # A cell's own search keeps its settings too.
    search = out / "plain_fc10" / "search.json"
    search.write_text(json.dumps({**json.loads(search.read_text()), "epochs": 5}))
    assert cli.main(["fig1", "--depths", "10", "--kinds", "plain", "--out", str(out),
                     "--epochs", "1", "--trials", "1", "--max-train-examples", "200",
                     "--max-test-examples", "100"]) == 2
    err = capsys.readouterr().err
    assert "holds a search with other settings" in err and err.count("\n") == 1


def _run(trial_id, final_loss, learning_rate, momentum, transform_bias=None):
    hp = {"learning_rate": learning_rate, "momentum": momentum}
    if transform_bias is not None:
        hp["transform_bias"] = transform_bias
    return {"trial_id": trial_id, "hyperparameters": hp, "final_loss": final_loss}


def test_search_points_are_every_finished_run_at_its_step_size():
    results = {"cells": [
        {"kind": "plain", "depth": 20, "diverged": 1,
         "runs": [_run("0", 0.5, 0.01, 0.9), _run("1", None, 0.1, 0.5)]},
        {"kind": "highway", "depth": 20, "diverged": 0,
         "runs": [_run("0", 0.25, 0.02, 0.0, -3.0), _run("1", 2.3, 0.003, 0.7, -1.5)]},
        {"kind": "plain", "depth": 10, "diverged": 0, "runs": [_run("0", 0.1, 0.004, 0.6)]},
    ]}
    points = fig1.search_points(results)
    assert list(points) == [10, 20]  # by depth
    # lr / (1 - momentum): 0.01 / 0.1 = 0.1; 0.003 / 0.3 = 0.01; 0.004 / 0.4 = 0.01
    assert points[20]["plain"] == [(pytest.approx(0.1), 0.5, None)]  # the diverged run left out
    assert points[20]["highway"] == [(0.02, 0.25, -3.0), (pytest.approx(0.01), 2.3, -1.5)]
    assert points[20]["diverged"] == 1 and points[10]["diverged"] == 0
    assert points[10]["plain"] == [(pytest.approx(0.01), 0.1, None)]
    assert "highway" not in points[10]


def _trial(cell_dir, trial_id, losses, status="COMPLETED"):
    trial_dir = cell_dir / "search" / f"trial_{trial_id}"
    trial_dir.mkdir(parents=True)
    (trial_dir / "trial.json").write_text(json.dumps({
        "trial_id": trial_id, "status": status,
        "hyperparameters": {"values": {"learning_rate": 0.01, "momentum": 0.5,
                                       "tuner/trials": 3}}}))
    (trial_dir / "history.json").write_text(json.dumps({
        "trial_id": trial_id, "seconds": 2.0,
        "history": {"loss": losses, "val_accuracy": [0.5] * len(losses)}}))


def test_a_cell_ranks_its_runs_and_counts_the_diverged_and_those_at_chance(tmp_path):
    cell_dir = tmp_path / "plain_fc10"
    _trial(cell_dir, "00", [2.30, 2.30, 2.31])          # stalled: a uniform guess is ln 10
    _trial(cell_dir, "01", [2.0, 1.0, 0.5])
    _trial(cell_dir, "02", [2.0, float("nan")])         # stopped by TerminateOnNaN
    _trial(cell_dir, "03", [2.0, 1.9, 2.18])            # 0.947 ln 10: learning, just
    _trial(cell_dir, "04", [2.0, 1.0, 0.1], status="RUNNING")
    cell = fig1.summarize_cell(cell_dir, "plain", 10, epochs=3, top=2)
    assert [r["trial_id"] for r in cell["runs"]] == ["01", "03", "00", "02"]
    assert (cell["trials"], cell["diverged"], cell["at_chance"], cell["unfinished"]) == (
        4, 1, 1, 1)
    assert cell["best"]["trial_id"] == "01" and cell["best"]["final_loss"] == 0.5
    assert cell["best"]["hyperparameters"] == {"learning_rate": 0.01, "momentum": 0.5}
    assert cell["top"]["final_losses"] == [0.5, 2.18] and cell["seconds"] == 8.0


def test_cells_use_the_registered_nets_or_the_depth_override():
    assert architecture("highway", 50) == ("highway_fc50_mnist", {})
    assert architecture("plain", 100) == ("plain_fc100_mnist", {})
    assert architecture("plain", 30) == ("plain_fc10_mnist", {"depth": 30})


@pytest.mark.slow
def test_a_chief_and_a_worker_search_both_cells_and_the_chief_writes_the_figure(tmp_path):
    out = tmp_path / "fig1"
    ports = reserved_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERASTUNER_")}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow",
            "KERASTUNER_ORACLE_IP": "127.0.0.1",
            "KERASTUNER_ORACLE_PORT": str(ports[0].getsockname()[1])}
    command = [sys.executable, "-m", "highway_zoo", "fig1", "--depths", "2", "--trials", "2",
               "--epochs", "1", "--max-train-examples", "500", "--max-test-examples", "200",
               "--out", str(out)]
    try:
        done = run_together(dict.fromkeys(("chief", "worker0"), command),
                            {r: {**env, "KERASTUNER_TUNER_ID": r} for r in ("chief", "worker0")},
                            tmp_path, 300, Path(__file__).parent.parent)
    finally:
        for port in ports:
            port.close()
    logs = {role: log for role, (_, log) in done.items()}
    for role, (code, log) in done.items():
        assert code == 0, f"{role}:\n{log[-3000:]}"
    # The worker trains every trial of both cells, the chief only hands them out.
    assert len(re.findall(r"^trial \d+ by worker0: COMPLETED", logs["worker0"], re.M)) == 4
    assert "Worker: every cell is done" in logs["worker0"]
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] and [(c["kind"], c["trials"]) for c in results["cells"]] == [
        ("plain", 2), ("highway", 2)]
    assert (out / "fig1.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, said", [
    (["--snapshot", "SNAP"], "--snapshot needs --out"),
    (["--snapshot", "SNAP", "--out", "EMPTY"], "holds no study.json"),
])
def test_a_snapshot_of_no_study_is_one_line(tmp_path, capsys, argv, said):
    (tmp_path / "empty").mkdir()
    argv = [str(tmp_path / "snap") if a == "SNAP" else str(tmp_path / "empty") if a == "EMPTY"
            else a for a in argv]
    assert cli.main(["fig1", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]
    assert not (tmp_path / "snap").exists()
