"""Data parallelism on JAX with `keras.distribution` (`--strategy data_parallel`): 2 host CPU
devices in one process and 2 processes joined on 127.0.0.1 (`jax.distributed`), both against
one device for the same global batch; 2 processes SIGKILLed mid-epoch and resumed; the
refusals. The runs are real `highway-zoo train` commands in child processes with
KERAS_BACKEND=jax (the device count and `jax.distributed` must be set before JAX starts its
devices); the children of one test share a compilation cache.
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

from highway_zoo import cli
from training import distribute
from training.checkpoints import Checkpoints
from training.data.images import Examples
from training.pipeline import ExampleBatches
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
os._exit(0)  # skip JAX's slow interpreter teardown
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


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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


def test_data_parallel_equals_one_device_and_two_processes_resume_together(tmp_path, subtests):
    (tmp_path / "no-data").mkdir()  # empty: the offline MNIST sample
    checkpoints = ("--checkpoint-every", str(CHECKPOINT_EVERY))
    both, killed_port, resumed_port = _free_ports(3)
    dp = ("--strategy", "data_parallel")
    one = Child(tmp_path, "one-device", [
        {"argv": _train(tmp_path, "refused-0", *dp),  # process 0 runs the coordinator
         "env": {**_processes(both, 0), "KERAS_DISTRIBUTION_JOB_ADDRESSES": "192.0.2.1:1234"}},
        {"argv": _train(tmp_path, "refused-1", "--strategy", "mirrored")},
        {"argv": _train(tmp_path, "refused-2", "--cpu-devices", "2")},
        {"argv": _train(tmp_path, "one", "--no-gate-summaries")},
    ])
    two_devices = Child(tmp_path, "two-devices", [
        {"argv": _train(tmp_path, "refused-3", *dp, "--cpu-devices", "2",
                        "--batch-size", "99")},
        {"argv": _train(tmp_path, "devices", *dp, "--cpu-devices", "2",
                        "--no-gate-summaries")},
    ])
    processes = [Child(tmp_path, f"processes-{i}", [{"argv": _train(tmp_path, "processes", *dp,
                                                                    *checkpoints)}],
                       env=_env(tmp_path, **_processes(both, i))) for i in range(2)]
    killed = [_killed(tmp_path, f"killed-{i}", _train(tmp_path, "resumed", *dp, *checkpoints),
                      _env(tmp_path, **_processes(killed_port, i))) for i in range(2)]
    for proc in killed:
        assert proc.wait(timeout=TIMEOUT) == -9, (tmp_path / "killed-0.log").read_text()[-3000:]
    worker_checkpoints = tmp_path / "resumed" / "workers" / "1" / "checkpoint"
    assert _read(worker_checkpoints / Checkpoints.POINTER)["iterations"] == 20
    _point_worker_back(worker_checkpoints, 10)
    resumed = [Child(tmp_path, f"resumed-{i}", [{"argv": _train(tmp_path, "resumed", *dp,
                                                                 *checkpoints)}],
                     env=_env(tmp_path, **_processes(resumed_port, i))) for i in range(2)]
    records = {"one": one.record(), "devices": two_devices.record(),
               **{f"processes-{i}": c.record() for i, c in enumerate(processes)},
               **{f"resumed-{i}": c.record() for i, c in enumerate(resumed)}}
    expected = _weights(tmp_path / "one")

    with subtests.test(msg="every run finished without importing TensorFlow"):
        for name, record in records.items():
            calls = record["calls"]
            _finished({**record, "calls": calls[-1:]})
            assert _read(tmp_path / name.split("-")[0] / "run.json")["status"] == "finished"

    with subtests.test(msg="two devices train as one device does"):
        distribution = _read(tmp_path / "devices" / "run.json")["distribution"]
        assert distribution == {
            "name": "data_parallel", "replicas": 2, "workers": 1, "devices": ["cpu:0", "cpu:1"],
            "global_batch_size": 100, "per_replica_batch_size": 50,
            "learning_rate_scaled_with_replicas": False}
        got = _weights(tmp_path / "devices")
        assert got.keys() == expected.keys() and len(got) == 8
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=2e-5,
                                       err_msg=name)
        assert not all(np.array_equal(got[n], expected[n]) for n in expected)  # really two

    with subtests.test(msg="two processes train as one device does; process 0 writes"):
        run_dir, worker_dir = tmp_path / "processes", tmp_path / "processes" / "workers" / "1"
        run = _read(run_dir / "run.json")
        assert run["distribution"]["replicas"] == 2 and run["distribution"]["workers"] == 2
        assert run["role"] == {"chief": True, "worker_index": 0}
        assert _read(worker_dir / "run.json")["role"] == {"chief": False, "worker_index": 1}
        for got in (_weights(run_dir), _weights(worker_dir)):
            for name in expected:
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=2e-5,
                                           err_msg=name)
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

    with subtests.test(msg="bad input is one line"):
        coordinator, mirrored, cpu_devices, _ = records["one"]["calls"]
        _one_line(coordinator, "192.0.2.1:1234", "not an address of this machine")
        _one_line(mirrored, "needs KERAS_BACKEND=tensorflow", "--strategy data_parallel")
        _one_line(cpu_devices, "add --strategy data_parallel")
        odd_batch, _ = records["devices"]["calls"]
        _one_line(odd_batch, "global batch and must split evenly over the 2 replicas")


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
        distribute._process_settings()
    assert "\n" not in str(refused.value)


def test_process_settings_on_loopback(monkeypatch):
    assert distribute._process_settings() is None  # no variables: one process
    for process_id in (0, 1):
        monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "localhost:1234,127.0.0.1:1235")
        monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
        monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", str(process_id))
        assert distribute._process_settings() == ("localhost:1234", 2, process_id)


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

