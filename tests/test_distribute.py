"""More than one device and more than one machine: MirroredStrategy over 2 logical CPU
devices, and 2 workers of MultiWorkerMirroredStrategy on 127.0.0.1 (killed and resumed),
in real processes: logical devices and the collective runtime must be set up before
TensorFlow starts."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from places import free_ports

import zoo
from training.checkpoints import Checkpoints
from training.runtime import distribute
from zoo.files import sha256_of

HIGHWAY_ZOO = os.path.join(os.path.dirname(sys.executable), "highway-zoo")
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
TIMEOUT = 240  # seconds: a hang fails the test instead of blocking CI


def _train_command(tmp_path, *extra, out="run"):
    return [HIGHWAY_ZOO, "train", "highway_fc10_mnist", "--depth", "3", "--epochs", "2",
            "--batch-size", "100", "--data-dir", str(tmp_path),
            "--out", str(tmp_path / out), "--verbose", "0", *extra]


def _read(path):
    return json.loads(path.read_text())


def test_mirrored_strategy_trains_on_two_cpu_replicas(tmp_path):
    proc = subprocess.run(
        _train_command(tmp_path, "--strategy", "mirrored", "--cpu-devices", "2"),
        env=ENV, capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = _read(tmp_path / "run" / "run.json")
    assert run["status"] == "finished"
    assert run["distribution"] == {
        "name": "mirrored", "replicas": 2, "workers": 1,
        "devices": ["/job:localhost/replica:0/task:0/device:CPU:0",
                    "/job:localhost/replica:0/task:0/device:CPU:1"],
        "global_batch_size": 100, "per_replica_batch_size": 50,
        "learning_rate_scaled_with_replicas": False,
    }
    history = _read(tmp_path / "run" / "history.json")
    assert history[1]["loss"] < history[0]["loss"]
    assert _read(tmp_path / "run" / "metrics.json")["test_accuracy"] > 0.8  # chance is 0.1


def _listens_on(pid, port):
    """Whether process `pid` holds a socket listening on `port` (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for fields in map(str.split, lines):
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except FileNotFoundError:
            continue
    return False


def _port_taken(workers, ports, logs):
    """Waits until every worker listens on its own port (True: one found it taken first)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if all(_listens_on(proc.pid, port) for (proc, _), port in zip(workers, ports)):
            return False
        for (proc, _), log in zip(workers, logs):
            if proc.poll() is not None:  # ended before serving: taken port, or its own error
                text = log.read_text()
                return "Could not start gRPC server" in text or "already in use" in text
        time.sleep(0.1)
    return False  # the callers' own deadlines report a hang


def _start_workers(tmp_path, command, tag, attempts=3):
    """Two workers of one cluster. TF_CONFIG must name both ports before either server
    starts, and TensorFlow's gRPC server turns SO_REUSEPORT off, so no port can be held for
    them while they start: each worker is watched until it listens on its own port, and the
    pair starts again on new ports if one found its port taken in between."""
    for _ in range(attempts):
        ports = free_ports(2)
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        workers, logs = [], []
        for index in range(2):
            tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            logs.append(tmp_path / f"{tag}-worker{index}.log")
            log = open(logs[-1], "w")  # noqa: SIM115 (closed by _stop)
            proc = subprocess.Popen(command, env={**ENV, "TF_CONFIG": json.dumps(tf_config)},
                                    stdout=log, stderr=subprocess.STDOUT)
            workers.append((proc, log))
        if not _port_taken(workers, ports, logs):
            return workers
        _stop(workers, kill=True)
    raise AssertionError(f"{tag}: the workers' ports were taken {attempts} times in a row")


def _stop(workers, kill=False):
    try:
        for proc, _ in workers:
            if kill:
                proc.kill()
            proc.wait(timeout=TIMEOUT)
    finally:
        for proc, log in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


def _wait_for_checkpoint(workers, pointer, iterations):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and all(p.poll() is None for p, _ in workers):
        try:
            if _read(pointer)["iterations"] >= iterations:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    raise AssertionError("no checkpoint appeared before the workers ended")


@pytest.mark.slow
def test_two_workers_train_one_model_and_resume_together(tmp_path, request):
    run_dir, worker_dir = tmp_path / "run", tmp_path / "run" / "workers" / "1"
    # 40 steps of the global batch 100 per epoch; a checkpoint every 20 steps.
    options = ("--strategy", "multiworker", "--epochs", "3", "--checkpoint-every", "20")
    command = _train_command(tmp_path, *options)
    # The same two workers never interrupted: what the resumed ones must end with.
    reference = _start_workers(tmp_path, _train_command(tmp_path, *options, out="reference"),
                               "reference")
    request.addfinalizer(lambda: _stop(reference, kill=True))
    workers = _start_workers(tmp_path, command, "first")
    try:
        _wait_for_checkpoint(workers, run_dir / "checkpoint" / "checkpoint.json", 60)
    finally:
        _stop(workers, kill=True)
    chief_at = _read(run_dir / "checkpoint" / "checkpoint.json")["iterations"]
    pointer = worker_dir / "checkpoint" / "checkpoint.json"
    worker_at = _read(pointer)["iterations"]
    if worker_at == chief_at:
        # As if worker 1 died before its last checkpoint: the workers must agree on 20 less.
        (worker_dir / "checkpoint" / Checkpoints.file_name(worker_at)).unlink()
        worker_at -= 20
        older = worker_dir / "checkpoint" / Checkpoints.file_name(worker_at)
        pointer.write_text(json.dumps({"file": older.name, "sha256": sha256_of(older),
                                       "iterations": worker_at, "epoch": worker_at // 40,
                                       "batch": worker_at % 40}))

    workers = _start_workers(tmp_path, command, "resumed")
    _stop(workers)
    logs = [(tmp_path / f"resumed-worker{i}.log").read_text() for i in range(2)]
    for (proc, _), log in zip(workers, logs):
        assert proc.returncode == 0, log[-3000:]
    common = min(chief_at, worker_at)
    assert sum(f"another worker's at {common}: all resume from {common}" in log
               for log in logs) == 1
    assert all("Resuming the interrupted run" in log for log in logs)

    run = _read(run_dir / "run.json")
    assert run["status"] == "finished" and run["role"] == {"chief": True, "worker_index": 0}
    assert run["resumed"][0]["iterations"] == common
    assert run["distribution"]["workers"] == 2 and run["distribution"]["replicas"] == 2
    assert run["distribution"]["per_replica_batch_size"] == 50
    assert _read(run_dir / "metrics.json")["iterations"] == 3 * 40
    assert [e["epoch"] for e in _read(run_dir / "history.json")] == [1, 2, 3]
    assert _read(run_dir / "metrics.json")["test_accuracy"] > 0.8  # chance is 0.1
    # Worker 1 writes only under workers/1/; the chief writes the run directory.
    assert _read(worker_dir / "run.json")["status"] == "finished"
    assert {"history.json", "metrics.json", "model.weights.h5", "run.json"} <= {
        p.name for p in worker_dir.iterdir()} and not (worker_dir / "checkpoint").exists()
    _stop(reference)
    for i in range(2):
        assert reference[i][0].returncode == 0, (tmp_path / f"reference-worker{i}.log").read_text()
    expected = zoo.load("highway_fc10_mnist", weights=tmp_path / "reference").get_weights()
    for resumed in (run_dir, worker_dir):  # the chief and worker 1, each as if never stopped
        got = zoo.load("highway_fc10_mnist", weights=resumed).get_weights()
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)


def test_cpu_devices_must_be_set_before_tensorflow_starts():
    import tensorflow as tf

    tf.constant(1.0)  # this process's TensorFlow has started
    with pytest.raises(RuntimeError, match="already initialised its devices"):
        distribute.set_cpu_devices(len(tf.config.list_logical_devices("CPU")) + 1)
    with pytest.raises(ValueError, match="positive integer"):
        distribute.set_cpu_devices(0)


def test_strategy_errors_say_what_to_do(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs the TF_CONFIG environment variable"):
        distribute.make_strategy("multiworker")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": {"index": 3}}')
    with pytest.raises(ValueError, match="TF_CONFIG must be JSON with cluster.worker"):
        distribute.make_strategy("multiworker")
    with pytest.raises(ValueError, match="choose from default, mirrored, multiworker"):
        distribute.make_strategy("parameter_server")
    assert distribute.per_replica_batch(100, 4) == 25
    with pytest.raises(ValueError, match="global batch and must split evenly over the 3"):
        distribute.per_replica_batch(100, 3)
