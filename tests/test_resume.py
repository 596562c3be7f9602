"""Runs that survive faults: SIGKILL and resume, what is refused, a non-finite loss."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import keras
import numpy as np
import pytest
from test_training import separable_digits

from highway_zoo import cli
from training.checkpoints import Checkpoints, RunMonitor
from training.data import OfflineFallbackWarning, load_dataset
from training.run_dir import RunDir
from training.trainer import RunDirError, train

HIGHWAY_ZOO = os.path.join(os.path.dirname(sys.executable), "highway-zoo")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
TIMEOUT = 240  # seconds: a hang fails the test instead of blocking CI


def _read(path):
    return json.loads(path.read_text())


def _kill_after_checkpoint(command, pointer, iterations, log, tmp_dir):
    """Starts `command`, waits for a checkpoint at `iterations` or later, SIGKILLs it. The
    process's temporary files go to `tmp_dir`: killed, it cannot remove them."""
    proc = subprocess.Popen(command, env={**ENV, "TMPDIR": str(tmp_dir)},
                            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if _read(pointer)["iterations"] >= iterations:
                    break
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"


@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_as_if_never_stopped(tmp_path):
    run_dir = tmp_path / "run"
    # 4,000 offline MNIST digits at batch 20: 200 steps per epoch, a checkpoint every 50.
    options = ["--depth", "3", "--epochs", "5", "--batch-size", "20",
               "--data-dir", str(tmp_path), "--verbose", "0"]
    command = [HIGHWAY_ZOO, "train", "highway_fc10_mnist", "--out", str(run_dir),
               "--checkpoint-every", "50", *options]
    pointer = run_dir / "checkpoint" / "checkpoint.json"
    with open(tmp_path / "killed.log", "w") as log:
        _kill_after_checkpoint(command, pointer, 250, log, tmp_path)  # inside the second epoch
    killed_at = _read(pointer)
    assert _read(run_dir / "run.json")["status"] == "running"
    assert not (run_dir / "metrics.json").exists()

    # Another configuration is refused, and the interrupted run is left as it was.
    other = subprocess.run([*command, "--seed", "1"], env=ENV, capture_output=True, text=True,
                           timeout=TIMEOUT)
    assert other.returncode == 2
    assert "another configuration" in other.stderr and "seed: recorded 0, now 1" in other.stderr
    assert _read(pointer) == killed_at

    resumed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming the interrupted run in {run_dir}" in resumed.stdout
    history = _read(run_dir / "history.json")
    assert [e["epoch"] for e in history] == [1, 2, 3, 4, 5]  # continued, nothing repeated
    metrics, run = _read(run_dir / "metrics.json"), _read(run_dir / "run.json")
    assert metrics["iterations"] == 5 * 200  # the optimizer's count went on from the checkpoint
    assert run["status"] == "finished"
    assert run["resumed"][0]["iterations"] == killed_at["iterations"]
    assert not (run_dir / "checkpoint").exists()

    # The same run without the interruption: each epoch's data comes from its own seed and
    # the checkpoint holds the optimizer state, so the curves agree.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OfflineFallbackWarning)
        data = load_dataset("mnist", tmp_path)
    reference = train("highway_fc10_mnist", dataset=data, depth=3, epochs=5, batch_size=20,
                      out=tmp_path / "reference", verbose=0)
    expected = _read(tmp_path / "reference" / "history.json")
    killed_epoch = killed_at["epoch"] + 1  # its metrics cover only the batches after the resume
    for got, want in zip(history, expected):
        keys = ("val_loss", "val_accuracy") + (() if got["epoch"] == killed_epoch else ("loss",))
        for key in keys:
            assert got[key] == pytest.approx(want[key], rel=1e-3), (got["epoch"], key)
    assert metrics["test_accuracy"] == pytest.approx(reference["test_accuracy"], abs=2e-3)

    # A finished run is never redone.
    before = (run_dir / "metrics.json").read_bytes()
    again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert again.returncode == 2 and "already finished" in again.stderr
    assert (run_dir / "metrics.json").read_bytes() == before


def test_a_finished_run_is_refused_and_left_untouched(tmp_path):
    run_dir = tmp_path / "run"
    data = separable_digits(64, 32)
    train("highway_fc10_mnist", dataset=data, depth=2, epochs=1, out=run_dir, verbose=0)
    def contents():
        return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}

    before = contents()
    with pytest.raises(RunDirError, match="already finished") as refused:
        train("highway_fc10_mnist", dataset=data, depth=2, epochs=1, out=run_dir, verbose=0)
    assert "Choose a new --out" in str(refused.value)
    assert contents() == before


def test_a_live_run_directory_is_not_shared(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / ".lock", "a") as lock:  # as a training process holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunDirError, match="in use by another training process"):
            train("highway_fc10_mnist", dataset=separable_digits(64, 32), depth=2, epochs=1,
                  out=run_dir, verbose=0)


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # SGD whose rate jumps to 1e28 after the first epoch: ReLU activations overflow.
    args = ["train", "highway_fc10_mnist", "--depth", "3", "--activation", "relu",
            "--optimizer", "sgd", "--learning-rate", "0.01", "--lr-boundaries", "1",
            "--lr-decay", "1e30", "--epochs", "3", "--data-dir", str(tmp_path),
            "--out", str(run_dir), "--verbose", "0"]
    with pytest.warns(OfflineFallbackWarning):
        assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert "The training loss became " in err and " at epoch 2, batch " in err
    assert "lower it (--learning-rate)" in err
    run = _read(run_dir / "run.json")
    assert run["status"] == "failed: non-finite loss" and run["failure"]["epoch"] == 2
    # The epoch that failed wrote nothing: epoch 1's checkpoint and history stay.
    assert _read(run_dir / "checkpoint" / "checkpoint.json")["iterations"] == 32  # 4000 / 128
    assert f"last good checkpoint (end of epoch 1, iteration 32) stays in {run_dir}" in err
    assert [e["epoch"] for e in _read(run_dir / "history.json")] == [1]
    assert not (run_dir / "model.weights.h5").exists()
    with pytest.warns(OfflineFallbackWarning):
        assert cli.main(args) == 2
    assert "status 'failed: non-finite loss'" in capsys.readouterr().err


def test_a_non_finite_loss_reported_out_of_order_is_recorded_at_its_first_batch(tmp_path):
    """Without checkpoints inside epochs the monitor's batch hook is async_safe: Keras may run
    it in a thread pool, where batches report in any order and the model is steps further on.
    The failure recorded is the earliest non-finite batch, its iteration counted from the
    epoch, the batch and where a resumed epoch began."""
    checkpoints = Checkpoints(tmp_path / "checkpoint", steps_per_epoch=32)
    monitor = RunMonitor(RunDir(tmp_path), checkpoints, [], checkpoint_every=None)
    assert monitor.async_safe
    assert not RunMonitor(RunDir(tmp_path), checkpoints, [], checkpoint_every=10).async_safe
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.stop_training = False  # as fit() sets it
    monitor.set_model(model)
    monitor.first_batch = 5  # a resumed epoch: its batch 0 is the epoch's 6th
    monitor.on_epoch_begin(1)
    monitor.on_train_batch_end(3, {"loss": 0.5})
    assert monitor.failure is None and not model.stop_training
    for batch, loss in [(7, float("nan")), (6, float("inf")), (9, float("nan"))]:
        monitor.on_train_batch_end(batch, {"loss": loss})
    assert model.stop_training
    failure = monitor.failure
    assert (failure["epoch"], failure["batch"], failure["iterations"]) == (2, 12, 32 + 12)
    assert failure["loss"] == "inf"
    assert "became inf at epoch 2, batch 12 (iteration 44)" in failure["message"]


def _dropout_net(width, seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(width, name="hidden"),
                              keras.layers.Dropout(0.5, name="dropout"),
                              keras.layers.Dense(3, name="out")])
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    return model


def _values(model):
    return [keras.ops.convert_to_numpy(v) for v in [*model.variables,
                                                    *model.optimizer.variables]]


def test_a_checkpoint_holds_the_weights_the_optimizer_and_the_dropout_seeds(tmp_path):
    rng = np.random.default_rng(0)
    trained = _dropout_net(8, seed=0)
    trained.fit(rng.normal(size=(40, 6)), rng.integers(0, 3, 40), batch_size=8, verbose=0)
    checkpoints = Checkpoints(tmp_path, steps_per_epoch=5)
    checkpoints.save(trained, 5)
    saved = np.load(tmp_path / "ckpt-000000005.npz")
    names = [str(n) for n in saved["names"]]
    assert names[0].endswith("hidden/kernel") and "optimizer/iteration" in names
    assert any("seed_generator_state" in n for n in names)  # dropout's masks go on, too
    fresh = _dropout_net(8, seed=1)
    assert not np.array_equal(_values(fresh)[0], _values(trained)[0])
    Checkpoints(tmp_path, steps_per_epoch=5).restore(fresh, 5)
    after, want = _values(fresh), _values(trained)
    assert len(after) == len(want) == len(names)
    for got, expected in zip(after, want, strict=True):
        np.testing.assert_array_equal(got, expected)
    # Another model's checkpoint is refused, saying what does not fit.
    with pytest.raises(RunDirError, match=r"cannot be read \(ValueError: \w+/hidden/kernel is "
                       r"float32\[6, 8\] there, float32\[6, 4\] in this model\)"):
        Checkpoints(tmp_path, steps_per_epoch=5).restore(_dropout_net(4, seed=0), 5)


def test_a_dropout_net_restored_trains_on_as_if_never_stopped(tmp_path):
    """With the seeds' states restored, the dropout masks after the checkpoint are those of
    an uninterrupted run (a `.keras` checkpoint has no seeds: the masks started over)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6)), rng.integers(0, 3, 40)
    options = dict(batch_size=8, shuffle=False, verbose=0)
    uninterrupted = _dropout_net(8, seed=0)
    uninterrupted.fit(x, y, epochs=2, **options)
    first = _dropout_net(8, seed=0)
    first.fit(x, y, epochs=1, **options)
    Checkpoints(tmp_path, steps_per_epoch=5).save(first, 5)
    resumed = _dropout_net(8, seed=2)
    Checkpoints(tmp_path, steps_per_epoch=5).restore(resumed, 5)
    resumed.fit(x, y, epochs=1, **options)
    for got, want in zip(_values(resumed), _values(uninterrupted), strict=True):
        np.testing.assert_array_equal(got, want)


def test_another_backends_checkpoint_is_restored_in_this_backends_dtypes(tmp_path):
    """JAX keeps the iteration count in int32 and the seeds in uint32, TensorFlow both in
    int64: a run resumed on another backend converts them (a float array where an integer
    belongs is refused)."""
    rng = np.random.default_rng(0)
    trained = _dropout_net(8, seed=0)
    trained.fit(rng.normal(size=(40, 6)), rng.integers(0, 3, 40), batch_size=8, verbose=0)
    Checkpoints(tmp_path, steps_per_epoch=5).save(trained, 5)
    path = tmp_path / "ckpt-000000005.npz"
    with np.load(path) as saved:
        arrays = {key: saved[key] for key in saved.files}
    names = [str(n) for n in arrays["names"]]
    as_jax = {**arrays, **{str(i): arrays[str(i)].astype(
        np.uint32 if "seed" in name else np.int32)
        for i, name in enumerate(names) if arrays[str(i)].dtype.kind in "iu"}}
    assert sum(arrays[k].dtype != as_jax[k].dtype for k in arrays) == 2  # iteration, seed
    np.savez(path, **as_jax)
    (tmp_path / "checkpoint.json").write_text(json.dumps(  # its new sha256
        {"file": path.name, "iterations": 5, "epoch": 1, "batch": 0}))
    fresh = _dropout_net(8, seed=1)
    Checkpoints(tmp_path, steps_per_epoch=5).restore(fresh, 5)
    for got, want in zip(_values(fresh), _values(trained), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    np.savez(path, **{**as_jax, names.index("optimizer/iteration").__str__(): np.float32(5)})
    with pytest.raises(RunDirError, match=r"optimizer/iteration is float32\[\] there"):
        Checkpoints(tmp_path, steps_per_epoch=5).restore(_dropout_net(8, seed=1), 5)


def test_a_keras_checkpoint_of_an_earlier_version_is_still_restored(tmp_path):
    rng = np.random.default_rng(0)
    trained = _dropout_net(8, seed=0)
    trained.fit(rng.normal(size=(40, 6)), rng.integers(0, 3, 40), batch_size=8, verbose=0)
    trained.save(tmp_path / "ckpt-000000005.keras")  # as those versions wrote them
    (tmp_path / "checkpoint.json").write_text(json.dumps(
        {"file": "ckpt-000000005.keras", "iterations": 5, "epoch": 1, "batch": 0}))
    fresh = _dropout_net(8, seed=1)
    Checkpoints(tmp_path, steps_per_epoch=5).restore(fresh, 5)
    for got, want in zip(fresh.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert int(fresh.optimizer.iterations.numpy()) == 5


def test_a_resumed_runs_progress_counts_the_runs_epochs(tmp_path, capsys):
    class Interrupted(Exception):
        pass

    class InterruptAfterTheFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise Interrupted  # after the run's own checkpoint of the epoch

    run_dir = tmp_path / "run"
    options = {"dataset": separable_digits(128, 64), "depth": 2, "epochs": 3, "out": run_dir,
               "verbose": 2, "gate_summaries": False}
    with pytest.raises(Interrupted):
        train("highway_fc10_mnist", callbacks=[InterruptAfterTheFirstEpoch()], **options)
    assert _read(run_dir / "run.json")["status"] == "running"
    assert _read(run_dir / "checkpoint" / "checkpoint.json")["epoch"] == 1

    def epoch_lines(out):
        return [line for line in out.splitlines() if line.startswith("Epoch ")]

    assert epoch_lines(capsys.readouterr().out) == ["Epoch 1/3"]
    train("highway_fc10_mnist", **options)
    out = capsys.readouterr().out
    assert "epoch 2 of 3 goes on after batch 0" in out
    assert epoch_lines(out) == ["Epoch 2/3", "Epoch 3/3"]  # not 2/2, 3/3
    assert [e["epoch"] for e in _read(run_dir / "history.json")] == [1, 2, 3]
    assert _read(run_dir / "run.json")["status"] == "finished"
