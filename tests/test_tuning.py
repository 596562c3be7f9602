"""The hyperparameter search (`highway-zoo tune`) and the bias study: training/tuning.py."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import keras_tuner
import numpy as np
import pytest
from places import reserved_ports, run_together

import zoo
from highway_zoo import cli
from training.tuning import SearchSpace, ZooHyperModel, search

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
for _var in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
    ENV.pop(_var, None)
TIMEOUT = 240
NAME = "highway_fc10_mnist"
# A tiny search: 3 layers, 1 epoch, 500 training / 200 test digits.
TINY = ["--depth", "3", "--epochs", "1", "--max-train-examples", "500",
        "--max-test-examples", "200"]


def _tune(*args: str, env: dict | None = None, cwd: Path | None = None):
    command = [sys.executable, "-m", "highway_zoo", "tune", NAME, *TINY, *args]
    return subprocess.run(command, env=env or ENV, capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd or Path(__file__).parent.parent)


def _trial_ids(search_dir: Path) -> list[str]:
    return sorted(p.name.removeprefix("trial_") for p in (search_dir / "search").glob("trial_*"))


def _space(name: str, space: SearchSpace | None = None) -> dict:
    hp = keras_tuner.HyperParameters()
    ZooHyperModel(name, space).declare(hp)
    return {p.name: p for p in hp.space}


def test_search_space_is_the_papers():
    space = _space(NAME)
    bias = space["transform_bias"]
    assert (bias.min_value, bias.max_value, bias.sampling) == (-10.0, -1.0, "linear")
    assert list(space["activation"].values) == ["relu", "tanh"]
    lr = space["learning_rate"]
    assert (lr.min_value, lr.max_value, lr.sampling) == (1e-4, 1e-1, "log")
    assert (space["momentum"].min_value, space["momentum"].max_value) == (0.0, 0.99)
    assert (space["lr_decay"].min_value, space["lr_decay"].max_value) == (0.8, 1.0)
    assert "transform_bias" not in _space("plain_fc10_mnist")  # plain nets have no gates
    assert "transform_bias" in _space("highway_conv16_mnist")
    assert "transform_bias" in _space("highway_cifar10")


def test_space_narrows_and_builds_the_zoo_architecture():
    space = _space(NAME, SearchSpace(transform_bias=(-6, -1), activations=("tanh",),
                                     learning_rate=(1e-3, 1e-2)))
    assert (space["transform_bias"].min_value, space["transform_bias"].max_value) == (-6, -1)
    assert list(space["activation"].values) == ["tanh"]
    hp = keras_tuner.HyperParameters()
    model = ZooHyperModel(NAME, SearchSpace(transform_bias=(-6, -5)), depth=3).build(hp)
    assert model.architecture == NAME and model.overrides["depth"] == 3
    bias = model.get_layer("highway_1").transform_bias
    assert -6 <= float(bias.numpy()[0]) <= -5
    assert type(model.optimizer).__name__ == "SGD"


@pytest.mark.parametrize("kwargs, message", [
    ({"transform_bias": (-1, -10)}, "lower bound must be below the upper bound"),
    ({"learning_rate": (0.1, 0.1)}, "lower bound must be below the upper bound"),
    ({"learning_rate": (0, 0.1)}, "must be > 0"),
    ({"momentum": (0, 1.5)}, r"within \[0, 1\)"),
    ({"activations": ("relu", "gelu")}, "distinct names from relu, tanh"),
    ({"activations": ()}, "distinct names from relu, tanh"),
])
def test_bad_space_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SearchSpace(**kwargs)


@pytest.mark.parametrize("argv, message", [
    (["--tuner", "grid"], "argument --tuner: invalid choice: 'grid' (choose from 'random', "
     "'bayesian', 'hyperband')"),
    (["--transform-bias-range=-1,-10"], "lower bound must be below the upper bound"),
    (["--transform-bias-range", "-1", "-10", "-3"], "takes two numbers LOW,HIGH"),
    (["--objective", "val_f1"], "argument --objective: invalid choice: 'val_f1' (choose from "
     "'loss', 'accuracy', 'val_loss', 'val_accuracy')"),
])
def test_bad_cli_input_gives_clear_errors(argv, message, capsys, tmp_path):
    try:
        code = cli.main(["tune", NAME, "--out", str(tmp_path / "s"), *argv])
    except SystemExit as usage_error:  # argparse's
        code = usage_error.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_empty_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as refused:
        cli.main(["tune", NAME, "--transform-bias-range", ""])
    assert refused.value.code == 2
    assert "argument --transform-bias-range: expected at least one value" in \
        capsys.readouterr().err


def test_search_writes_best_resumes_and_refuses_other_settings(tmp_path, capsys):
    # In this process (the command's own main): three searches without three TensorFlow
    # start-ups. A killed search's resume, in fresh processes, is the next test.
    def tune(*args):
        code = cli.main(["tune", NAME, *TINY, *args])
        return code, capsys.readouterr().out

    out = tmp_path / "search"
    code, first = tune("--max-trials", "2", "--out", str(out))
    assert code == 0
    assert re.findall(r"^trial (\d+) by tuner0: COMPLETED", first, re.M) == ["0", "1"]
    assert "| rank | trial | b_T |" in first
    ids = _trial_ids(out)
    assert ids == ["0", "1"]
    started = {i: json.loads((out / "search" / f"trial_{i}" / "trial.json").read_text())
               for i in ids}

    best = json.loads((out / "best_hyperparameters.json").read_text())
    assert best["architecture"] == NAME and best["trial_id"] in ids
    assert -10 <= best["hyperparameters"]["transform_bias"] <= -1
    model = zoo.load(NAME, weights=str(out / "best_model"))
    assert model.overrides["depth"] == 3
    # best_model is a preset: it loads without the name, and its card shows the best trial.
    assert zoo.load(out / "best_model").overrides == model.overrides
    card = (out / "best_model" / "README.md").read_text()
    assert f"- trial: {best['trial_id']}" in card
    assert f"| test accuracy (tuner objective) | {best['objective']['value']:.4f} |" in card
    assert model.overrides["transform_bias"] == best["hyperparameters"]["transform_bias"]
    assert model.overrides["activation"] == best["hyperparameters"]["activation"]
    assert cli.main(["export", NAME, "--weights", str(out / "best_model"),
                     "--base-dir", str(tmp_path / "exported"), "--no-warmup"]) == 0
    assert list((tmp_path / "exported").rglob("saved_model.pb"))

    # The same command with one more trial: the two finished trials are kept.
    code, second = tune("--max-trials", "3", "--out", str(out))
    assert code == 0
    assert "Resuming the search" in second and "2 trial(s) finished and kept, 0 interrupted" \
        in second
    assert re.findall(r"^trial (\d+) by", second, re.M) == ["2"]
    assert _trial_ids(out) == ["0", "1", "2"]
    for i, record in started.items():
        kept = json.loads((out / "search" / f"trial_{i}" / "trial.json").read_text())
        assert kept["hyperparameters"]["values"] == record["hyperparameters"]["values"]
        assert kept["score"] == record["score"]
    assert len(json.loads((out / "trials.json").read_text())) == 3

    # TensorBoard HParams: the space once, each trial's values and objective.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    for i in ("0", "1", "2"):
        acc = EventAccumulator(str(out / "tensorboard" / f"trial_{i}"))
        acc.Reload()
        assert "val_accuracy" in acc.Tags()["tensors"]
        content = acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        assert {"transform_bias", "learning_rate", "activation"} <= set(
            data.session_start_info.hparams)
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert "_hparams_/experiment" in acc.Tags()["tensors"]

    # Other settings in the same directory: refused, saying what differs.
    with pytest.raises(FileExistsError, match="epochs: recorded 1, now 2"):
        search(NAME, out=out, epochs=2, max_trials=3, depth=3, max_train_examples=500,
               max_test_examples=200)
    code, _ = tune("--max-trials", "1", "--out", str(out), "--overwrite")
    assert code == 0
    assert _trial_ids(out) == ["0"]


def test_a_killed_search_resumes_keeping_finished_trials(tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "highway_zoo", "tune", NAME, "--depth", "3", "--epochs",
               "3", "--max-train-examples", "1000", "--max-test-examples", "200",
               "--max-trials", "3", "--out", str(out)]
    log_file = tmp_path / "first.log"
    with open(log_file, "w") as log:
        proc = subprocess.Popen(command, env={**ENV, "TMPDIR": str(tmp_path)}, stdout=log,
                                stderr=subprocess.STDOUT, cwd=Path(__file__).parent.parent)
        deadline = time.monotonic() + TIMEOUT
        while "trial 0 by" not in log_file.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log_file.read_text()[-3000:]
            time.sleep(0.2)
        proc.kill()
        proc.wait()
    first = json.loads((out / "search" / "trial_0" / "trial.json").read_text())
    again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT,
                           cwd=Path(__file__).parent.parent)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resuming the search" in again.stdout
    rerun = re.findall(r"^trial (\d+) by", again.stdout, re.M)
    assert "0" not in rerun and rerun[-1] == "2"
    kept = json.loads((out / "search" / "trial_0" / "trial.json").read_text())
    assert kept["hyperparameters"]["values"] == first["hyperparameters"]["values"]
    assert kept["score"] == first["score"]
    assert _trial_ids(out) == ["0", "1", "2"]


def test_a_process_reads_its_role_from_kerastuners_variables(monkeypatch):
    from training.tuning.tuner import _role

    for var in ("KERASTUNER_TUNER_ID", "KERASTUNER_ORACLE_IP", "KERASTUNER_ORACLE_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert _role() == "standalone"
    monkeypatch.setenv("KERASTUNER_ORACLE_IP", "127.0.0.1")
    with pytest.raises(RuntimeError, match="^KERASTUNER_ORACLE_IP is set but "
                       "KERASTUNER_ORACLE_PORT and KERASTUNER_TUNER_ID are not"):
        _role()
    monkeypatch.setenv("KERASTUNER_ORACLE_PORT", "8000")
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "chief")
    assert _role() == "chief"
    monkeypatch.setenv("KERASTUNER_TUNER_ID", "tuner1")
    assert _role() == "worker"


@pytest.mark.slow
def test_chief_and_two_workers_share_the_trials(tmp_path):
    out = tmp_path / "distributed"
    (reserved,) = reserved_ports(1)
    port = str(reserved.getsockname()[1])
    roles = ("chief", "worker0", "worker1")
    command = [sys.executable, "-m", "highway_zoo", "tune", NAME, *TINY, "--max-trials", "4",
               "--out", str(out)]
    try:
        # The chief writes search.json before the workers read it: a head start.
        done = run_together(
            dict.fromkeys(roles, command),
            {r: {**ENV, "KERASTUNER_TUNER_ID": r, "KERASTUNER_ORACLE_IP": "127.0.0.1",
                 "KERASTUNER_ORACLE_PORT": port} for r in roles},
            tmp_path, TIMEOUT, Path(__file__).parent.parent, head_start=2)
    finally:
        reserved.close()
    logs = {role: log for role, (_, log) in done.items()}
    for role, (code, log) in done.items():
        assert code == 0, f"{role}:\n{log[-3000:]}"
    ran = {t: re.findall(r"^trial (\d+) by " + t + ":", logs[t], re.M)
           for t in ("worker0", "worker1")}
    assert all(ran.values()), ran  # both workers ran trials
    every = ran["worker0"] + ran["worker1"]
    assert sorted(every) == ["0", "1", "2", "3"]  # each trial once
    oracle = json.loads((out / "search" / "oracle.json").read_text())
    assert sorted(oracle["end_order"]) == ["0", "1", "2", "3"]
    assert (out / "best_hyperparameters.json").exists()
    zoo.load(NAME, weights=str(out / "best_model"))


def test_mirrored_strategy_on_two_cpu_devices(tmp_path):
    out = tmp_path / "mirrored"
    proc = _tune("--max-trials", "1", "--out", str(out), "--strategy", "mirrored",
                 "--cpu-devices", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 replicas" in proc.stdout
    assert re.findall(r"^trial 0 by tuner0: COMPLETED", proc.stdout, re.M)
    zoo.load(NAME, weights=str(out / "best_model"))


def test_bias_study_plots_loss_against_bias(tmp_path, monkeypatch):
    import matplotlib.axes

    from training.experiments.bias_study import bias_table, plot_bias_study

    # Losses that differ by depth and bias; a plain net's row, which neither shows.
    summary = [{"kind": "highway", "depth": d, "transform_bias": b,
                "final_train_loss": {"mean": 0.1 * -b + d / 1000, "std": d / 10000},
                "test_accuracy": {"mean": 0.9 - d / 1000, "std": 0.0}}
               for d in (100, 50) for b in (-4.0, -1.0)]
    summary.append({"kind": "plain", "depth": 50, "transform_bias": None,
                    "final_train_loss": {"mean": 2.3, "std": 0.0},
                    "test_accuracy": {"mean": 0.1, "std": 0.0}})
    results = {"summary": summary, "data": {"num_train": 4000},
               "settings": {"activation": "tanh", "recipe": {"name": "adam_fc", "epochs": 12}}}
    table = bias_table(results).splitlines()
    assert table[2:] == ["| -1 | 0.150 | 0.850 | 0.200 | 0.800 |",
                         "| -4 | 0.450 | 0.850 | 0.500 | 0.800 |"]
    drawn = {}
    original = matplotlib.axes.Axes.errorbar

    def errorbar(self, x, y, yerr=None, **kwargs):
        drawn[kwargs["label"]] = (list(x), list(y), list(yerr))
        return original(self, x, y, yerr=yerr, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", errorbar)
    plot_bias_study(results, tmp_path / "bias.png")
    assert sorted(drawn) == ["depth 100", "depth 50"]
    for label, y, yerr in (("depth 50", [0.45, 0.15], 0.005), ("depth 100", [0.5, 0.2], 0.01)):
        assert drawn[label][0] == [-4.0, -1.0]  # b_T in order
        np.testing.assert_allclose(drawn[label][1:], [y, [yerr, yerr]])
    assert (tmp_path / "bias.png").read_bytes()[:4] == b"\x89PNG"
