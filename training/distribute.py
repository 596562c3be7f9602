"""Training on more than one device, and on more than one machine.

`highway-zoo train NAME --strategy S` picks a `tf.distribute` strategy:

- `default`: one device (TensorFlow's default strategy; on the JAX and PyTorch backends,
  `SingleDevice`: the backend's default device, no tf.distribute).
- `mirrored`: `tf.distribute.MirroredStrategy` over every local GPU or, without GPUs,
  every logical CPU device. `--cpu-devices N` splits the host CPU into N logical devices
  (to test distribution without GPUs; it must happen before TensorFlow starts, which the
  command line takes care of).
- `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, TensorFlow's own
  distributed runtime: one process per machine (a *worker*), synchronous data-parallel
  training with collective all-reduce, configured by the `TF_CONFIG` environment variable.

Batch and learning rate: `--batch-size` is the GLOBAL batch, split evenly over all
replicas (replicas = devices per worker x workers), so the recipe's batch 100 means 100
images per step whatever the hardware, as in Caffe. The learning rate is NOT scaled with
the number of replicas. `run.json` records "replicas", "workers", "global_batch_size" and
"per_replica_batch_size".

How to start the workers. On each of the N machines, in the same checkout, run the same
command with the same `--out`, after setting `TF_CONFIG` to the same cluster and that
machine's own index::

    # machine 0 (the chief: writes the run directory)
    export TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                       "task": {"type": "worker", "index": 0}}'
    highway-zoo train highway_cifar10 --strategy multiworker --out runs/c10-mw

    # machine 1
    export TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                       "task": {"type": "worker", "index": 1}}'
    highway-zoo train highway_cifar10 --strategy multiworker --out runs/c10-mw

Every worker must see the data (`--data-dir`); the workers wait for each other at start-up,
and each one reads the whole dataset in the same seeded order and keeps its share of every
global batch. Worker 0 is the chief: it alone writes the run directory's files (`run.json`,
`history.json`, `metrics.json`, the final weights). Worker i > 0 writes its own
checkpoints, status, history and final weights under `<out>/workers/<i>/`, so the run
directory works on a shared filesystem and on separate disks alike. To resume after a
failure, start all workers again with the same command: each keeps its last two
checkpoints, and the workers agree on the newest one they all have (a worker killed
before its last checkpoint was complete holds them back by one). On one machine the
workers can share it, with ports on 127.0.0.1 (the tests do this). If one worker stops
(say it refuses a directory holding a finished run), the others stop too, with "another
worker stopped": fix the cause and start all again.

Backends: `mirrored` and `multiworker` are TensorFlow's own (tf.distribute) and need
`KERAS_BACKEND=tensorflow`; on JAX and PyTorch they (and `--cpu-devices`) are refused with a
one-line `ValueError` that says so. (On JAX, Keras's own `keras.distribution.DataParallel`
distributes data-parallel training; highway-zoo does not wire it in.) tf.data still reads
the data on every backend, as `Model.fit` takes it everywhere; TensorFlow is imported here
only where a strategy of its own is made or inspected.

Keras 3.15 and MultiWorkerMirroredStrategy: `Model.fit` fails out of the box
(keras-team/keras#20585: it all-reduces a nested data batch to build the model, and
reduces the scalar step logs with `axis=0`). `prepare_model` works around both for the
multi-worker case only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from typing import Any

STRATEGIES = ("default", "mirrored", "multiworker")


def backend() -> str:
    """Keras's backend in this process: "tensorflow", "jax" or "torch"."""
    import keras  # here, not at the top: the command line's parsers read STRATEGIES

    return keras.backend.backend()


class SingleDevice:
    """The `default` strategy of the JAX and PyTorch backends: one device, the backend's
    default (Keras places the variables and the computation there); the few members of a
    `tf.distribute.Strategy` that training uses, without TensorFlow."""

    num_replicas_in_sync = 1

    def __init__(self, backend_name: str | None = None):
        self.backend = backend_name or backend()

    def scope(self):
        return contextlib.nullcontext()

    def devices(self) -> list[str]:
        """The device, as the backend names it ("cpu:0", "gpu:0", "cuda:0", "cpu")."""
        if self.backend == "jax":
            import keras

            return keras.distribution.list_devices()[:1]
        if self.backend == "torch":
            import torch

            return ["cuda:0" if torch.cuda.is_available() else "cpu"]
        return []

    def __repr__(self) -> str:
        return f"SingleDevice(backend={self.backend!r})"


def _not_on_this_backend(what: str) -> ValueError:
    name = backend()
    instead = (
        " (On JAX, Keras's own keras.distribution.DataParallel distributes data-parallel "
        "training; highway-zoo does not wire it in.)" if name == "jax"
        else " (highway-zoo has no multi-device training on PyTorch.)" if name == "torch"
        else ""
    )
    return ValueError(
        f"{what} is TensorFlow's tf.distribute and needs KERAS_BACKEND=tensorflow; this process "
        f"runs Keras on {name}. Train with KERAS_BACKEND=tensorflow, or on one device with "
        f"--strategy default.{instead}"
    )


def _tf():
    import tensorflow as tf

    return tf


def versions() -> dict[str, str]:
    """The Keras backend and the versions a run records: Keras, the backend's library and
    TensorFlow (which reads the data on every backend)."""
    name = backend()
    import keras

    found = {"backend": name, "keras": keras.__version__}
    library = {"jax": "jax", "torch": "torch"}.get(name)
    if library is not None:
        found[library] = __import__(library).__version__
    if "tensorflow" in sys.modules:
        found["tensorflow"] = sys.modules["tensorflow"].__version__
    return found


def set_cpu_devices(count: int) -> None:
    """Splits the host CPU into `count` logical devices (for MirroredStrategy without GPUs).

    Raises:
        ValueError: `count` is not a positive integer.
        RuntimeError: TensorFlow already initialised its devices in this process; call this
            first thing (the command line's `--cpu-devices` does).
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"cpu devices must be a positive integer. Received: {count!r}")
    if backend() != "tensorflow":
        raise _not_on_this_backend("--cpu-devices (logical CPU devices for --strategy mirrored)")
    tf = _tf()
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError as err:
        have = len(tf.config.list_logical_devices("CPU"))
        raise RuntimeError(
            f"Cannot split the CPU into {count} logical devices: TensorFlow has already "
            f"initialised its devices in this process ({have} logical CPU device(s)). Call "
            "training.distribute.set_cpu_devices() before anything runs a TensorFlow op, "
            "or use `highway-zoo train --cpu-devices N`, which does. "
            f"(TensorFlow said: {err})"
        ) from None


@dataclasses.dataclass(frozen=True)
class Role:
    """This process's place in the cluster."""

    is_chief: bool
    index: int  # the worker index in TF_CONFIG (0 without a cluster)
    workers: int


def _tf_config() -> dict[str, Any]:
    text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        raise ValueError(
            "--strategy multiworker needs the TF_CONFIG environment variable, e.g. "
            '\'{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
            '"task": {"type": "worker", "index": 0}}\' on machine 0 and index 1 on machine '
            "1 (see `python -c 'import training.distribute as d; help(d)'`)."
        )
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task = config["task"]
        if task["type"] != "worker" or not 0 <= int(task["index"]) < len(workers):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            "TF_CONFIG must be JSON with cluster.worker (a list of host:port) and task "
            '{"type": "worker", "index": i} with i < the number of workers. '
            f"Received: TF_CONFIG={text!r}"
        ) from None
    return config


def make_strategy(name: str) -> Any:
    """The strategy called `name` (one of `STRATEGIES`): a `tf.distribute.Strategy`, or
    `SingleDevice` for "default" on the JAX and PyTorch backends.

    Raises:
        ValueError: an unknown name, or "mirrored" / "multiworker" on JAX or PyTorch.
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}.")
    if backend() != "tensorflow":
        if name == "default":
            return SingleDevice()
        raise _not_on_this_backend(f"--strategy {name}")
    tf = _tf()
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multiworker":
        _tf_config()
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except (RuntimeError, ValueError) as err:
            raise RuntimeError(
                "Could not start MultiWorkerMirroredStrategy; it must be created before "
                "TensorFlow runs anything else in the process (use the command line, or "
                f"create the strategy first and pass it to train()). TensorFlow said: {err}"
            ) from None
    raise AssertionError(name)  # every name of STRATEGIES is handled above


def check_strategy(strategy: Any) -> Any:
    """`strategy` (a `tf.distribute.Strategy` or `SingleDevice`) if this backend can train
    under it; a ValueError that says what to use instead if not."""
    if isinstance(strategy, SingleDevice):
        if strategy.backend != backend():
            raise ValueError(f"{strategy!r} is for the {strategy.backend} backend; this process "
                             f"runs Keras on {backend()}.")
        return strategy
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            "strategy must be a name (" + ", ".join(STRATEGIES) + "), a tf.distribute.Strategy "
            f"or a training.distribute.SingleDevice. Received: {strategy!r}"
        )
    if backend() != "tensorflow":
        raise _not_on_this_backend(f"A {type(strategy).__name__}")
    return strategy


def is_multi_worker(strategy: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) \
        and strategy.extended._in_multi_worker_mode()


def role(strategy: Any) -> Role:
    """Whether this process is the chief, its worker index and the number of workers."""
    if not is_multi_worker(strategy):
        return Role(is_chief=True, index=0, workers=1)
    resolver = strategy.cluster_resolver
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    index = int(resolver.task_id)
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    is_chief = resolver.task_type == "chief" or (not has_chief and index == 0)
    return Role(is_chief=is_chief, index=index, workers=workers)


def prepare_model(model, strategy: Any, first_epoch) -> None:
    """Lets `model.fit`/`evaluate` run under MultiWorkerMirroredStrategy (Keras 3.15).

    Two workarounds for keras-team/keras#20585, applied to this model only and only with
    more than one worker:

    - Keras builds the model's metrics and optimizer symbolically from a first batch that
      it all-reduces across workers, which the collective runtime rejects for a nested
      (images, labels) batch: build from `first_epoch`'s `element_spec` instead (shapes
      and dtypes are all it needs) and skip Keras's own build.
    - Keras reduces each step's logs with `strategy.reduce("MEAN", v, axis=0)`, which fails
      for scalar metrics: return them with shape (1,), so that the reduction averages over
      all replicas and every worker logs the same (global) values.
    """
    if not is_multi_worker(strategy):
        return
    tf = _tf()
    with strategy.scope():
        model._symbolic_build(data_batch=first_epoch.element_spec)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None

    def with_vector_logs(step):
        def wrapped(data):
            return {k: tf.reshape(v, [1]) for k, v in step(data).items()}

        return wrapped

    model.train_step = with_vector_logs(model.train_step)
    model.test_step = with_vector_logs(model.test_step)


def minimum_over_workers(strategy: Any, value: int) -> int:
    """The smallest of every worker's `value` (a collective: all workers must call it)."""
    if not is_multi_worker(strategy):
        return value
    tf = _tf()
    local = strategy.experimental_distribute_values_from_function(
        lambda _: tf.constant([value], tf.int64)
    )
    return int(tf.reduce_min(strategy.gather(local, axis=0)).numpy())


def per_replica_batch(global_batch: int, replicas: int) -> int:
    """Each replica's share of the global batch; it must divide evenly."""
    if global_batch % replicas:
        raise ValueError(
            f"The batch size {global_batch} is the global batch and must split evenly over "
            f"the {replicas} replicas; choose a multiple of {replicas}."
        )
    return global_batch // replicas


def describe(strategy: Any, name: str, global_batch: int) -> dict[str, Any]:
    """What run.json records about the distribution of a run."""
    replicas = strategy.num_replicas_in_sync
    if isinstance(strategy, SingleDevice):
        devices = strategy.devices()
    else:
        try:
            devices = list(strategy.extended.worker_devices)
        except RuntimeError:  # the default strategy has no device list
            devices = []
    return {
        "name": name,
        "replicas": replicas,
        "workers": role(strategy).workers,
        "devices": devices,
        "global_batch_size": global_batch,
        "per_replica_batch_size": per_replica_batch(global_batch, replicas),
        "learning_rate_scaled_with_replicas": False,
    }
