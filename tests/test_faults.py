"""Faults, for real: a run SIGKILLed at every phase boundary, Ctrl-C, a full disk, damaged
checkpoints. Whatever happens, the resumed run ends as if never stopped, and nothing is left."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from places import small_disk
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_training import separable_digits

import zoo
from highway_zoo import cli
from training.trainer import RunDirError, train

HERE = Path(__file__).parent
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow",
       "PYTHONPATH": str(HERE.parent)}
TIMEOUT = 240
# 4,000 offline MNIST digits at batch 200: 20 steps an epoch, a step checkpoint every 7.
TRAIN = ["train", "highway_fc10_mnist", "--depth", "3", "--epochs", "3", "--batch-size", "200",
         "--checkpoint-every", "7", "--verbose", "0"]
# Each kill, in this order, lands on the state the one before left.
BOUNDARIES = [
    ("start-up", None),                 # nothing trained: restarts from epoch 1
    ("mid-epoch:10", 7),                # resumes from the step checkpoint at 7
    ("after-step-checkpoint", 14),
    ("after-gate-summaries", 14),       # epoch 1's summaries written, its checkpoint not
    ("after-epoch-checkpoint:1", 20),
    ("after-epoch-checkpoint:3", 60),   # all epochs trained
    ("during-final-save", 60),
    ("finishing", None),                # final files complete, checkpoint removed
]


def _read(path):
    return json.loads(Path(path).read_text())


def _files(directory):
    return sorted(str(p.relative_to(directory)) for p in Path(directory).rglob("*")
                  if p.is_file() and "tensorboard" not in p.parts)


def _weights(run_dir):
    return [np.asarray(w) for w in zoo.load("highway_fc10_mnist", depth=3,
                                             weights=run_dir).weights]


def _killed_and_resumed(train, boundaries, tmp_path) -> dict[str, str]:
    """`train` run once undisturbed (in tmp_path/reference) and, beside it, in tmp_path/run:
    SIGKILLed at each boundary in turn (each checked to leave the run resumable from the
    iteration given), then run to its end. The killed processes' output by boundary."""
    reference = subprocess.Popen(
        [sys.executable, "-m", "highway_zoo", *train, "--out", str(tmp_path / "reference")],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_dir = tmp_path / "run"
    command = [*train, "--out", str(run_dir)]
    pointer = run_dir / "checkpoint" / "checkpoint.json"
    outputs = {}
    for boundary, resumes_from in boundaries:
        # A SIGKILLed process cannot remove its temporary files (Keras's saving makes a
        # directory there): they go to the test's own directory, not the suite's.
        killed = subprocess.run(
            [sys.executable, str(HERE / "fault_injection.py"), boundary, "--", *command],
            env={**ENV, "TMPDIR": str(tmp_path)}, capture_output=True, text=True,
            timeout=TIMEOUT)
        assert killed.returncode == -signal.SIGKILL, (boundary, killed.stderr[-2000:])
        assert _read(run_dir / "run.json")["status"] == "running", boundary
        if resumes_from is not None:
            assert _read(pointer)["iterations"] == resumes_from, boundary
        outputs[boundary] = killed.stdout
    resumed = subprocess.run([sys.executable, "-m", "highway_zoo", *command], env=ENV,
                             capture_output=True, text=True, timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert reference.wait(TIMEOUT) == 0, reference.stderr.read()[-3000:]
    return outputs


@pytest.mark.slow
def test_a_run_killed_at_every_phase_boundary_ends_as_one_never_stopped(tmp_path):
    outputs = _killed_and_resumed(TRAIN, BOUNDARIES, tmp_path)
    # Resumed after the last epoch's checkpoint:
    assert ("(end of epoch 3, iteration 60): all 3 epochs are trained; writing the final "
            "files.") in outputs["during-final-save"]
    run_dir = tmp_path / "run"
    run = _read(run_dir / "run.json")
    assert run["status"] == "finished" and len(run["resumed"]) == len(BOUNDARIES)
    for got, want in zip(_weights(run_dir), _weights(tmp_path / "reference"), strict=True):
        np.testing.assert_array_equal(got, want)  # bit for bit
    history, expected = _read(run_dir / "history.json"), _read(tmp_path / "reference" /
                                                                "history.json")
    assert [e["epoch"] for e in history] == [1, 2, 3]
    assert [e["val_loss"] for e in history] == [e["val_loss"] for e in expected]
    gates = _read(run_dir / "gates.json")
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2, 3]
    assert gates["epochs"] == _read(tmp_path / "reference" / "gates.json")["epochs"]
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert {e.step for e in events.Tensors("gates/fig2")} == {3}
    assert {e.step for e in events.Tensors("mean_transform_gate/highway_1")} == {0, 1, 2, 3}
    # Nothing left over: no checkpoint, no temporary file, no lock.
    files = _files(run_dir)
    assert files == _files(tmp_path / "reference")
    assert not [f for f in files if f.startswith((".", "checkpoint"))], files
    assert {"gates.json", "history.json", "metrics.json", "model.weights.h5"} <= set(files)
    # The training time adds up over the processes (not just the last one's).
    assert _read(run_dir / "metrics.json")["train_seconds"] > 0.5 * _read(
        tmp_path / "reference" / "metrics.json")["train_seconds"]


# A language model on the tests' tiny text: 1,500 tokens in batches of 5 rows x 10 steps, 29
# steps an epoch, a step checkpoint every 7.
TRAIN_LM = ["train", "lstm_char_small_ptb", "--recipe", "quick", "--epochs", "3",
            "--batch-size", "5", "--bptt-steps", "10", "--max-train-tokens", "1500",
            "--checkpoint-every", "7", "--verbose", "0"]
LM_BOUNDARIES = [
    ("start-up", None),
    ("mid-epoch:10", 7),                # from a step checkpoint: the LSTM states carried there
    ("after-step-checkpoint", 14),
    ("after-epoch-checkpoint:1", 29),
    ("mid-epoch:40", 35),               # in epoch 2, after the plateau rule's first epoch
    ("after-epoch-checkpoint:3", 87),
    ("during-final-save", 87),
    ("finishing", None),
]


@pytest.mark.slow
def test_a_language_model_killed_at_every_phase_boundary_ends_as_one_never_stopped(tmp_path):
    from test_char_lm import write_corpus

    corpus = write_corpus(tmp_path / "corpus")
    _killed_and_resumed([*TRAIN_LM, "--corpus", str(corpus)], LM_BOUNDARIES, tmp_path)
    run_dir = tmp_path / "run"
    run = _read(run_dir / "run.json")
    assert run["status"] == "finished" and len(run["resumed"]) == len(LM_BOUNDARIES)
    assert run["task"] == "language_model" and "phases_s" in run["timeline"]
    weights = [zoo.load(str(d)).get_weights() for d in (run_dir, tmp_path / "reference")]
    for got, want in zip(*weights, strict=True):
        np.testing.assert_array_equal(got, want)  # bit for bit
    history, expected = _read(run_dir / "history.json"), _read(tmp_path / "reference" /
                                                                "history.json")
    assert [e["epoch"] for e in history] == [1, 2, 3]  # from 1, as image runs
    for key in ("val_loss", "val_perplexity", "learning_rate"):
        assert [e[key] for e in history] == [e[key] for e in expected], key
    assert [e.get("resumed_at_batch") for e in history] == [14, 6, None]  # 35 = 29 + 6
    metrics = _read(run_dir / "metrics.json")
    assert metrics["test_perplexity"] == _read(tmp_path / "reference" /
                                               "metrics.json")["test_perplexity"]
    files = _files(run_dir)
    assert files == _files(tmp_path / "reference")
    assert not [f for f in files if f.startswith((".", "checkpoint"))], files
    # The gates of every epoch, the untrained net's included, as the run never stopped.
    gates = _read(run_dir / "gates.json")
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2, 3]
    assert gates == _read(tmp_path / "reference" / "gates.json")


def test_ctrl_c_stops_a_run_in_one_line_and_the_same_command_resumes_it(tmp_path):
    run_dir = tmp_path / "run"
    # Enough epochs that the run is still going when the first step checkpoint appears and
    # the signal is sent, however fast the machine (with 1 epoch it could finish first).
    # A child inherits an ignored SIGINT (pytest-xdist's workers ignore it), and Python then
    # installs no KeyboardInterrupt handler: the child installs the one a terminal gives it
    # before it runs the command (not a preexec_fn: that forks this process, which may hold
    # JAX's threads, and runs Python in the fork).
    command = [sys.executable, "-c", "import runpy, signal; signal.signal(signal.SIGINT, "
               "signal.default_int_handler); runpy.run_module('highway_zoo', "
               "run_name='__main__', alter_sys=True)",
               *TRAIN, "--epochs", "20", "--out", str(run_dir)]
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    pointer = run_dir / "checkpoint" / "checkpoint.json"
    deadline = time.monotonic() + TIMEOUT
    while not pointer.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 128 + signal.SIGINT
    last = err.strip().splitlines()[-1]
    assert last == ("highway-zoo train: interrupted; run the same command again to resume "
                    "(the run resumes from its last checkpoint).")
    assert "Traceback" not in err
    assert not [p for p in run_dir.rglob(".*") if p.name != ".lock"]  # no temporary file
    resumed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "Resuming the interrupted run" in resumed.stdout


def test_a_full_disk_stops_the_run_in_one_line_and_keeps_the_last_checkpoint(tmp_path,
                                                                             capsys,
                                                                             monkeypatch):
    # Keras's .keras saving leaves its (empty) assets directory in TMPDIR when a save fails
    # (its DiskIOStore is closed on success only): here, in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Depth 30 at batch 500: a checkpoint (weights and Adam's two moments) of about 2.2 MB.
    with small_disk(tmp_path / "disk") as disk:
        _fill_the_disk_with_a_run(disk / "run", capsys)


def _fill_the_disk_with_a_run(run_dir, capsys):
    code = cli.main(["train", "highway_fc10_mnist", "--depth", "30", "--epochs", "2",
                     "--batch-size", "500", "--out", str(run_dir), "--verbose", "0",
                     "--no-gate-summaries"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"highway-zoo train: error: Could not write the checkpoint of "
                          f"iteration 8 in {run_dir / 'checkpoint'}: No space left on device")
    assert "; there is no checkpoint yet. Free some space" in err  # the first one failed
    assert "run the same command again to resume" in err
    assert _read(run_dir / "run.json")["status"] == "running"
    # No temporary file, no half-written checkpoint.
    assert sorted(p.name for p in run_dir.rglob("*") if p.is_file()) == [
        "history.json", "run.json"]


def test_a_damaged_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    command = [*TRAIN, "--out", str(run_dir)]
    killed = subprocess.run(  # killed, it leaves its temporary files: in tmp_path
        [sys.executable, str(HERE / "fault_injection.py"), "after-step-checkpoint", "--",
         *command], env={**ENV, "TMPDIR": str(tmp_path)}, capture_output=True, text=True,
        timeout=TIMEOUT)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    checkpoint = run_dir / "checkpoint" / _read(run_dir / "checkpoint" / "checkpoint.json")["file"]
    intact = checkpoint.read_bytes()
    flipped = bytearray(intact)
    flipped[len(flipped) // 2] ^= 1
    for damaged in (bytes(flipped), intact[: len(intact) // 2]):  # a flipped bit, truncated
        checkpoint.write_bytes(damaged)
        assert cli.main(command) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
        assert f"Checkpoint {checkpoint} is damaged: its sha256 is " in err
        assert f"delete {run_dir / 'checkpoint'} to train this run again from epoch 1" in err
        assert checkpoint.read_bytes() == damaged  # refused, not touched


def _listening(port):
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _served_port(process, timeout=60):
    """The port a TensorBoard child says it serves on ("TensorBoard 2.x at http://...:PORT/")."""
    import re
    import threading

    found = []

    def read():
        for line in process.stderr:
            match = re.search(r"TensorBoard \S+ at http://[^:]+:(\d+)/", line)
            if match:
                found.append(int(match.group(1)))
                break
        process.stderr.read()  # drain, so the child never blocks on a full pipe

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found:
        assert time.monotonic() < deadline and process.poll() is None, "no server"
        time.sleep(0.2)
    return found[0]


def test_sigterm_to_tensorboard_stops_its_server(tmp_path):
    (tmp_path / "tensorboard").mkdir()
    # Port 0: TensorBoard binds a free port itself and says which (no port picked here and
    # released for it, which another process could take meanwhile).
    process = subprocess.Popen(
        [sys.executable, "-m", "highway_zoo", "tensorboard", str(tmp_path), "--port", "0"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = _served_port(process)
        assert _listening(port)
        process.terminate()  # SIGTERM, as a service manager stops it
        assert process.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port), "TensorBoard still listens after SIGTERM"
    finally:
        process.kill()
        process.wait()


def test_a_disk_too_full_for_the_final_weights_is_refused_before_hdf5_writes(tmp_path):
    # Room for the run's checkpoint (weights and Adam's moments) but not the final weights
    # beside it. In a subprocess: HDF5 filling a disk crashes its process.
    weights_bytes = 4 * zoo.load("highway_fc10_mnist", depth=8).count_params()
    with small_disk(tmp_path / "disk") as disk:
        (disk / "filler").write_bytes(bytes(2 * 1024 * 1024 - 3 * weights_bytes - 150_000))
        run_dir = disk / "run"
        command = [sys.executable, "-m", "highway_zoo", "train", "highway_fc10_mnist",
                   "--depth", "8", "--epochs", "1", "--batch-size", "500", "--out",
                   str(run_dir), "--verbose", "0", "--no-gate-summaries"]
        failed = subprocess.run(command, env=ENV, capture_output=True, text=True,
                                timeout=TIMEOUT)
        assert failed.returncode == 2, failed.stderr[-3000:]
        assert "Traceback" not in failed.stderr
        last = failed.stderr.strip().splitlines()[-1]
        assert last.startswith(f"highway-zoo train: error: Not enough space in {run_dir} for "
                               "the final weights: about ")
        assert "the last checkpoint (end of epoch 1, iteration 8) stays" in last
        assert not (run_dir / "model.weights.h5").exists()
        (disk / "filler").unlink()  # space freed: the same command finishes the run
        finished = subprocess.run(command, env=ENV, capture_output=True, text=True,
                                  timeout=TIMEOUT)
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert _read(run_dir / "run.json")["status"] == "finished"
        assert not (run_dir / "checkpoint").exists()


def test_a_damaged_run_json_is_named_as_such(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"status": "running", "seed"')
    with pytest.raises(RunDirError, match=f"{run_dir / 'run.json'} is damaged"):
        train("highway_fc10_mnist", dataset=separable_digits(64, 32), depth=2, epochs=1,
              out=run_dir, verbose=0)
    assert (run_dir / "run.json").read_text() == '{"status": "running", "seed"'
