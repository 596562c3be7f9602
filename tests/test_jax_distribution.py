"""Data parallelism on JAX with `keras.distribution` (`--strategy data_parallel`): 2 host CPU
devices in one process and (slow, as the two-worker test of tests/test_distribute.py) 2
processes joined on 127.0.0.1 by `jax.distributed`, both against one device for the same
global batch; the 2 processes SIGKILLed mid-epoch and resumed; the refusals. The runs are real
`highway-zoo train` commands in child processes with KERAS_BACKEND=jax (the device count and
`jax.distributed` must be set before JAX starts its devices); the children of one test share a
compilation cache.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from places import free_ports

from highway_zoo import cli
from training.checkpoints import Checkpoints
from training.data.images import Examples
from training.data.pipeline import ExampleBatches
from training.runtime import distribute
from training.runtime.distribute import jax_processes
from zoo.files import sha256_of

HERE = Path(__file__).resolve().parent
TIMEOUT = 300  # seconds per child: a hang fails the test instead of blocking CI
# 4,000 training digits of the offline MNIST sample: 40 steps of the global batch 100.
STEPS = 40
KILL_AT, CHECKPOINT_EVERY = 25, 10  # killed after step 25; checkpoints at 10 and 20

# Runs `highway-zoo` once per call of argv[1] (a JSON list of {"argv": [...], "env": {...}})
# in this one process, and writes what happened to argv[2]: exit statuses, stdout, stderr, and
# whether anything imported TensorFlow (a JAX run must not).
CHILD = r"""
import contextlib, io, json, os, sys, warnings
from highway_zoo import cli
calls, record = json.loads(sys.argv[1]), []
for call in calls:
    saved = dict(os.environ)
    os.environ.update(call.get("env", {}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(call["argv"])
    os.environ.clear()
    os.environ.update(saved)
    record.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
with open(sys.argv[2], "w") as out:
    json.dump({"calls": record, "tensorflow_imported": "tensorflow" in sys.modules}, out)
# As highway-zoo's own exit (highway_zoo.cli.run): the atexit handlers, JAX's among them (its
# distributed shutdown waits for the other processes: process 0 ending first would take the
# coordination service with it while process 1 still writes), then no interpreter teardown.
import atexit
atexit._run_exitfuncs()
os._exit(0)
"""


def _env(work, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERAS_DISTRIBUTION_")}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return {**env, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3",
            "XDG_CACHE_HOME": str(work / "cache"), "PYTHONPATH": str(HERE.parent), **extra}


def _train(work, out, *extra):
    return ["train", "highway_fc10_mnist", "--depth", "3", "--epochs", "1", "--batch-size",
            "100", "--data-dir", str(work / "no-data"), "--out", str(work / out),
            "--verbose", "0", *extra]


def _processes(port, process_id):
    return {"KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{port}",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
            "KERAS_DISTRIBUTION_PROCESS_ID": str(process_id)}


class Child:
    """A child process running CHILD's calls; `record()` waits and reads what it wrote."""

    def __init__(self, work, tag, calls, env=None):
        self.record_file, self.log = work / f"{tag}.json", work / f"{tag}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(calls), str(self.record_file)],
                env=env or _env(work), stdout=log, stderr=subprocess.STDOUT)

    def record(self):
        self.proc.wait(timeout=TIMEOUT)
        assert self.record_file.is_file(), self.log.read_text()[-3000:]
        return json.loads(self.record_file.read_text())


def _killed(work, tag, argv, env):
    """`highway-zoo ARGV` SIGKILLed from inside after training step KILL_AT."""
    with open(work / f"{tag}.log", "w") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "fault_injection.py"), f"mid-epoch:{KILL_AT}", "--",
             *argv], env=env, stdout=log, stderr=subprocess.STDOUT)


def _read(path):
    return json.loads(Path(path).read_text())


def _weights(run_dir):
    found = {}
    with h5py.File(Path(run_dir) / "model.weights.h5") as f:
        f.visititems(lambda name, item: found.__setitem__(name, item[()])
                     if isinstance(item, h5py.Dataset) else None)
    return found


def _finished(record):
    for call in record["calls"]:
        assert call["code"] == 0, call["stderr"][-3000:]
    assert record["tensorflow_imported"] is False


def _one_line(call, *phrases):
    assert call["code"] == 2, call["stderr"]
    message = call["stderr"].strip()
    assert "\n" not in message and message.startswith("highway-zoo train: error: "), message
    for phrase in phrases:
        assert phrase in message, message


def _point_worker_back(checkpoint_dir, iterations):
    """As if process 1 died before its newest checkpoint: only `iterations` is left."""
    for old in checkpoint_dir.glob("ckpt-*"):
        if old.name != Checkpoints.file_name(iterations):
            old.unlink()
    kept = checkpoint_dir / Checkpoints.file_name(iterations)
    (checkpoint_dir / Checkpoints.POINTER).write_text(json.dumps({
        "file": kept.name, "sha256": sha256_of(kept), "iterations": iterations,
        "epoch": 0, "batch": iterations}))


def _close_to(got, expected):
    assert got.keys() == expected.keys() and len(got) == 8  # the kernels and biases
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=2e-5,
                                   err_msg=name)


def test_two_host_devices_train_as_one_device_and_bad_input_is_one_line(tmp_path):
    """One JAX process with 2 host CPU devices (XLA's flag, before JAX starts): the one-device
    run, then data-parallel over both, the same global batch of 100; the refusals first."""
    (tmp_path / "no-data").mkdir()  # empty: the offline MNIST sample
    dp = ("--strategy", "data_parallel")
    env = _env(tmp_path, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    record = Child(tmp_path, "child", [
        {"argv": _train(tmp_path, "refused", *dp),  # process 0 runs the coordinator
         "env": {**_processes(1234, 0), "KERAS_DISTRIBUTION_JOB_ADDRESSES": "192.0.2.1:1234"}},
        {"argv": _train(tmp_path, "refused", "--strategy", "mirrored")},
        {"argv": _train(tmp_path, "refused", "--cpu-devices", "2")},
        {"argv": _train(tmp_path, "refused", *dp, "--cpu-devices", "2", "--batch-size", "99")},
        {"argv": _train(tmp_path, "one", "--no-gate-summaries")},
        {"argv": _train(tmp_path, "devices", *dp, "--cpu-devices", "2", "--no-gate-summaries")},
    ], env=env).record()
    coordinator, mirrored, cpu_devices, odd_batch, *runs = record["calls"]
    _one_line(coordinator, "192.0.2.1:1234", "not an address of this machine")
    _one_line(mirrored, "needs KERAS_BACKEND=tensorflow", "--strategy data_parallel")
    _one_line(cpu_devices, "add --strategy data_parallel")
    _one_line(odd_batch, "global batch and must split evenly over the 2 replicas")
    assert not (tmp_path / "refused").exists()
    _finished({**record, "calls": runs})

    assert _read(tmp_path / "one" / "run.json")["distribution"]["devices"] == ["cpu:0"]
    run = _read(tmp_path / "devices" / "run.json")
    assert run["status"] == "finished" and "tensorflow" not in run["versions"]
    assert run["distribution"] == {
        "name": "data_parallel", "replicas": 2, "workers": 1, "devices": ["cpu:0", "cpu:1"],
        "global_batch_size": 100, "per_replica_batch_size": 50,
        "learning_rate_scaled_with_replicas": False}
    expected, got = _weights(tmp_path / "one"), _weights(tmp_path / "devices")
    _close_to(got, expected)  # (here often bit for bit: XLA splits one device's sums too)
    one, two = (_read(tmp_path / d / "history.json")[0] for d in ("one", "devices"))
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)
    assert two["val_accuracy"] == pytest.approx(one["val_accuracy"], abs=2e-3)


@pytest.mark.slow
def test_two_processes_train_as_one_device_and_resume_together(tmp_path, subtests):
    """2 processes on 127.0.0.1 (one host CPU device each), against one device; the same 2,
    SIGKILLed after step 25 with process 1's newest checkpoint lost, resumed by the same
    command, against the uninterrupted pair."""
    (tmp_path / "no-data").mkdir()
    checkpoints = ("--checkpoint-every", str(CHECKPOINT_EVERY))
    both, killed_port, resumed_port = free_ports(3)
    dp = ("--strategy", "data_parallel")
    one = Child(tmp_path, "one", [{"argv": _train(tmp_path, "one", "--no-gate-summaries")}])
    processes = [Child(tmp_path, f"processes-{i}", [{"argv": _train(tmp_path, "processes", *dp,
                                                                    *checkpoints)}],
                       env=_env(tmp_path, **_processes(both, i))) for i in range(2)]
    # The gate summaries of a run in processes are the uninterrupted run's to show.
    resumable = _train(tmp_path, "resumed", *dp, *checkpoints, "--no-gate-summaries")
    killed = [_killed(tmp_path, f"killed-{i}", resumable,
                      _env(tmp_path, **_processes(killed_port, i))) for i in range(2)]
    for i, proc in enumerate(killed):
        assert proc.wait(timeout=TIMEOUT) == -9, (tmp_path / f"killed-{i}.log").read_text()[-3000:]
    worker_checkpoints = tmp_path / "resumed" / "workers" / "1" / "checkpoint"
    assert _read(worker_checkpoints / Checkpoints.POINTER)["iterations"] == 20
    _point_worker_back(worker_checkpoints, 10)
    resumed = [Child(tmp_path, f"resumed-{i}", [{"argv": resumable}],
                     env=_env(tmp_path, **_processes(resumed_port, i))) for i in range(2)]
    records = {"one": one.record(),
               **{f"processes-{i}": c.record() for i, c in enumerate(processes)},
               **{f"resumed-{i}": c.record() for i, c in enumerate(resumed)}}
    expected = _weights(tmp_path / "one")

    with subtests.test(msg="every run finished without importing TensorFlow"):
        for name, record in records.items():
            _finished(record)
            assert _read(tmp_path / name.split("-")[0] / "run.json")["status"] == "finished"

    with subtests.test(msg="two processes train as one device does; process 0 writes"):
        run_dir, worker_dir = tmp_path / "processes", tmp_path / "processes" / "workers" / "1"
        run = _read(run_dir / "run.json")
        assert run["distribution"]["replicas"] == 2 and run["distribution"]["workers"] == 2
        assert run["distribution"]["per_replica_batch_size"] == 50
        assert run["role"] == {"chief": True, "worker_index": 0}
        assert _read(worker_dir / "run.json")["role"] == {"chief": False, "worker_index": 1}
        _close_to(_weights(run_dir), expected)
        # One set of summaries, one run directory: process 1 keeps only its own state.
        assert (run_dir / "tensorboard").is_dir() and (run_dir / "gates.json").is_file()
        assert {p.name for p in worker_dir.iterdir()} == {
            "README.md", "history.json", "metrics.json", "model.json", "model.weights.h5",
            "model.weights.h5.sha256", "run.json"}
        assert _read(run_dir / "metrics.json")["iterations"] == STEPS

    with subtests.test(msg="killed mid-epoch, the processes resume bit-identically"):
        said = [records[f"resumed-{i}"]["calls"][0]["stdout"] for i in range(2)]
        assert "another worker's at 10: all resume from 10" in said[0]  # process 0 had 20
        assert all("epoch 1 of 1 goes on after batch 10" in text for text in said)
        run = _read(tmp_path / "resumed" / "run.json")
        assert [r["iterations"] for r in run["resumed"]] == [10]  # the common checkpoint
        reference = _weights(tmp_path / "processes")
        for resumed_dir in (tmp_path / "resumed", tmp_path / "resumed" / "workers" / "1"):
            got = _weights(resumed_dir)
            for name in reference:
                np.testing.assert_array_equal(got[name], reference[name], err_msg=name)
        assert _read(tmp_path / "resumed" / "metrics.json")["test_loss"] == _read(
            tmp_path / "processes" / "metrics.json")["test_loss"]


def test_data_parallel_on_tensorflow_is_one_line(tmp_path, capsys):
    code = cli.main(["train", "highway_fc10_mnist", "--strategy", "data_parallel", "--out",
                     str(tmp_path / "run")])
    assert code == 2
    message = capsys.readouterr().err.strip()
    assert message == (
        "highway-zoo train: error: --strategy data_parallel is Keras's keras.distribution on "
        "JAX and needs KERAS_BACKEND=jax; this process runs Keras on tensorflow. Use "
        "KERAS_BACKEND=jax, or --strategy mirrored (local devices) or multiworker (TF_CONFIG).")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("env, message", [
    ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "2"}, "Several processes need"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:1234", "KERAS_DISTRIBUTION_NUM_PROCESSES":
      "2", "KERAS_DISTRIBUTION_PROCESS_ID": "2"}, "0 to processes - 1"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
      "KERAS_DISTRIBUTION_PROCESS_ID": "1"}, "must be host:port"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
      "KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": "1"},
     "names 3 processes but KERAS_DISTRIBUTION_NUM_PROCESSES is 2"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "no-such-host.invalid:1234",
      "KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": "1"},
     "does not resolve"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "192.0.2.1:1234", "KERAS_DISTRIBUTION_NUM_PROCESSES":
      "2", "KERAS_DISTRIBUTION_PROCESS_ID": "0"}, "not an address of this machine"),
])
def test_process_settings_refuse_what_jax_would_wait_for(monkeypatch, env, message):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message) as refused:
        jax_processes.process_settings()
    assert "\n" not in str(refused.value)


def test_a_coordinator_port_in_use_is_refused(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", f"127.0.0.1:{port}")
        monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "0")
        with pytest.raises(ValueError, match=f"port {port} .* is in use on this machine"):
            jax_processes.process_settings()
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "1")  # connects to it: fine
        assert jax_processes.process_settings() == (f"127.0.0.1:{port}", 2, 1)


def test_a_process_without_its_coordinator_stops_in_one_line():
    (port,) = free_ports(1)  # nothing listens there
    with pytest.raises(ValueError, match=f"No coordinator answered at '127.0.0.1:{port}' in "
                                         "0.5 s: start process 0") as refused:
        jax_processes.wait_for_coordinator(f"127.0.0.1:{port}", 0.5)
    assert "\n" not in str(refused.value)
    with socket.socket() as coordinator:
        coordinator.bind(("127.0.0.1", 0))
        coordinator.listen()
        jax_processes.wait_for_coordinator(f"127.0.0.1:{coordinator.getsockname()[1]}", 0.5)


def test_process_settings_on_loopback(monkeypatch):
    assert jax_processes.process_settings() is None  # no variables: one process
    first, second = free_ports(2)
    for process_id in (0, 1):
        monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES",
                           f"localhost:{first},127.0.0.1:{second}")
        monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", str(process_id))
        assert jax_processes.process_settings() == (f"localhost:{first}", 2, process_id)


def test_a_last_batch_the_devices_cannot_split_is_refused():
    distribute.check_even_batches(2, 4000, 100, "training split")  # 40 full batches
    with pytest.raises(ValueError, match="has 100 examples, which do not split evenly over "
                                         "the 3 devices") as refused:
        distribute.check_even_batches(3, 4000, 300, "training split")  # 13 x 300 + 100
    assert "\n" not in str(refused.value)
    distribute.check_even_batches(4, 4000, 300, "training split")  # 100 = 4 x 25


def test_each_process_feeds_its_slice_of_every_global_batch():
    rng = np.random.default_rng(0)
    examples = Examples(rng.integers(0, 255, (10, 2, 2, 1)).astype(np.uint8),
                        np.arange(10, dtype=np.int64))
    order = rng.permutation(10)
    whole = ExampleBatches(examples, 4, order, skip_batches=1)
    shares = [ExampleBatches(examples, 4, order, skip_batches=1, share=(i, 2)) for i in (0, 1)]
    assert len(whole) == len(shares[0]) == 2
    for b in range(len(whole)):
        images, labels = whole[b]
        np.testing.assert_array_equal(np.concatenate([s[b][0] for s in shares]), images)
        np.testing.assert_array_equal(np.concatenate([s[b][1] for s in shares]), labels)
        assert len(shares[0][b][1]) == len(labels) // 2
    with pytest.raises(ValueError):  # 10 examples in batches of 4: the last has 2, not 3
        ExampleBatches(examples, 4, order, share=(0, 3))[0]

