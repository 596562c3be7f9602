"""Training on more than one device, and on more than one machine.

The choice of strategy and what every engine shares are here; each engine has its module:
`tf_strategies` (tf.distribute on TensorFlow) and `jax_processes` (keras.distribution and
JAX's processes).

`highway-zoo train NAME --strategy S` picks a `tf.distribute` strategy (TensorFlow) or Keras's
`keras.distribution` (JAX):

- `default`: one device (TensorFlow's default strategy; on the JAX and PyTorch backends,
  `SingleDevice`: the backend's default device, no tf.distribute).
- `mirrored`: `tf.distribute.MirroredStrategy` over every local GPU or, without GPUs,
  every logical CPU device. `--cpu-devices N` splits the host CPU into N logical devices
  (to test distribution without GPUs; it must happen before TensorFlow starts, which the
  command line takes care of).
- `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, TensorFlow's own
  distributed runtime: one process per machine (a *worker*), synchronous data-parallel
  training with collective all-reduce, configured by the `TF_CONFIG` environment variable.
- `data_parallel`: Keras's `keras.distribution.DataParallel` on the JAX backend, over the
  local devices and over several processes (below).

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
`KERAS_BACKEND=tensorflow`; on JAX and PyTorch they are refused with a one-line `ValueError`
that says so. tf.data reads the data only on TensorFlow (and for ImageNet); TensorFlow is
imported here only where a strategy of its own is made or inspected.

`data_parallel` (JAX only): Keras's own `keras.distribution`, as its distribution guide for
JAX and keras-hub's multi-device examples use it. `keras.distribution.DataParallel` over every
device of every process (the GPUs, or without them the host CPU's devices: `--cpu-devices N`
makes N of them, JAX's `jax_num_cpu_devices`, set before JAX starts), made the process's
distribution with `keras.distribution.set_distribution`: the variables are replicated, each
global batch is sharded along the batch axis, and XLA all-reduces the gradients. Several
processes (one per machine, or several on one) are joined by `keras.distribution.initialize`
(`jax.distributed`), configured by Keras's own environment variables (the names
`keras.distribution.initialize` reads; checked here first)::

    # machine 0 (the coordinator: writes the run directory)
    export KERAS_DISTRIBUTION_JOB_ADDRESSES=host0:12345   # process 0's host:port first
    export KERAS_DISTRIBUTION_NUM_PROCESSES=2
    export KERAS_DISTRIBUTION_PROCESS_ID=0
    highway-zoo train highway_cifar10 --strategy data_parallel --out runs/c10-dp

    # machine 1: the same, with KERAS_DISTRIBUTION_PROCESS_ID=1

Why environment variables and not flags: they are the names Keras documents (and a cluster's
launch script sets), every process runs the same command, as with `TF_CONFIG`, and the
command line stays the same for one process or many. Each process reads the whole dataset in
the same seeded order and feeds its contiguous share of each global batch (process i: the
i-th of P equal slices, as Keras's own tf.data sharding does); JAX assembles the global batch
from the shares (`jax.make_array_from_process_local_data`), so the run trains on the same
batches as on one device. The run directory is the multi-worker one: process 0 writes
`run.json`, the history, the checkpoints, the gate summaries and the final files; process
i > 0 writes its own checkpoints, status and final weights under `<out>/workers/<i>/`
(saving builds Keras variables, which every process must do together); on a restart the
processes agree on the newest checkpoint they all have. On CPU, JAX's cross-process
collectives are gloo's (`jax_cpu_collectives_implementation`, set here).

Refused with one line (`ValueError`): a device count that does not divide the global batch
(or an epoch's last, smaller batch, or the test split's); a coordinator address that is not
`host:port` or whose host does not resolve; for process 0 (which runs the coordinator there),
an address that is not this machine's (on one machine: 127.0.0.1 or localhost) or a port in
use; for a process > 0, no coordinator answering within JAX's own 5 minutes (JAX would abort
the process then); `data_parallel` on TensorFlow or PyTorch; several processes with a dataset
read by tf.data (ImageNet). What cannot work: a process lost mid-run is not one line of ours:
JAX aborts the others ("the JAX distributed service detected fatal errors") once it notices;
start all again with the same command, and they resume together.

Keras 3.15 and MultiWorkerMirroredStrategy: `Model.fit` fails out of the box
(keras-team/keras#20585: it all-reduces a nested data batch to build the model, and
reduces the scalar step logs with `axis=0`). `prepare_model` works around both for the
multi-worker case only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from typing import Any

from training.runtime.backend import backend
from training.runtime.distribute import jax_processes, tf_strategies
from training.runtime.distribute.jax_processes import JaxDataParallel
from training.runtime.distribute.tf_strategies import is_multi_worker
from training.runtime.distribute.tf_strategies import prepare_model as prepare_model

STRATEGIES = ("default", "mirrored", "multiworker", "data_parallel")


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


def tf_distribute_only(what: str) -> ValueError:
    """The refusal of `what`, a tf.distribute feature, on the JAX or PyTorch backend."""
    name = backend()
    instead = (
        " (On JAX, --strategy data_parallel trains data-parallel with Keras's "
        "keras.distribution.DataParallel.)" if name == "jax"
        else " (highway-zoo has no multi-device training on PyTorch.)" if name == "torch"
        else ""
    )
    return ValueError(
        f"{what} is TensorFlow's tf.distribute and needs KERAS_BACKEND=tensorflow; this process "
        f"runs Keras on {name}. Train with KERAS_BACKEND=tensorflow, or on one device with "
        f"--strategy default.{instead}"
    )


def set_cpu_devices(count: int) -> None:
    """Splits the host CPU into `count` logical devices (for MirroredStrategy on TensorFlow,
    or `data_parallel` on JAX, without GPUs).

    Raises:
        ValueError: `count` is not a positive integer, or the backend is PyTorch.
        RuntimeError: TensorFlow (or JAX) already initialised its devices in this process;
            call this first thing (the command line's `--cpu-devices` does).
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"cpu devices must be a positive integer. Received: {count!r}")
    if backend() == "jax":
        jax_processes.set_cpu_devices(count)
        return
    if backend() != "tensorflow":
        raise tf_distribute_only("--cpu-devices (logical CPU devices for --strategy mirrored)")
    tf_strategies.set_cpu_devices(count)


def cpu_devices_need_a_strategy(strategy_name: str) -> ValueError | None:
    """The refusal of `--cpu-devices` with `strategy_name` on this backend, if refused: on JAX
    the devices are for `data_parallel` alone (one device trains on the first)."""
    if backend() == "jax" and strategy_name != "data_parallel":
        return ValueError(
            "--cpu-devices N makes N host CPU devices for --strategy data_parallel on jax "
            "(keras.distribution.DataParallel) and for --strategy mirrored, which needs "
            "KERAS_BACKEND=tensorflow: add --strategy data_parallel."
        )
    return None


@dataclasses.dataclass(frozen=True)
class Role:
    """This process's place in the cluster."""

    is_chief: bool
    index: int  # the worker index in TF_CONFIG (0 without a cluster)
    workers: int


def make_strategy(name: str) -> Any:
    """The strategy called `name` (one of `STRATEGIES`): a `tf.distribute.Strategy`,
    `SingleDevice` for "default" on the JAX and PyTorch backends, or `JaxDataParallel` for
    "data_parallel" (which sets Keras's distribution for the whole process and, with
    Keras's environment variables, joins the other processes).

    Raises:
        ValueError: an unknown name, "mirrored" / "multiworker" on JAX or PyTorch,
            "data_parallel" on TensorFlow or PyTorch, or bad process settings.
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}.")
    if name == "data_parallel":
        if backend() != "jax":
            raise jax_processes.data_parallel_needs_jax()
        return jax_processes.make_data_parallel()
    if backend() != "tensorflow":
        if name == "default":
            return SingleDevice()
        raise tf_distribute_only(f"--strategy {name}")
    return tf_strategies.make_strategy(name)


def check_strategy(strategy: Any) -> Any:
    """`strategy` (a `tf.distribute.Strategy`, `SingleDevice` or `JaxDataParallel`) if this
    backend can train under it; a ValueError that says what to use instead if not."""
    if isinstance(strategy, JaxDataParallel):
        if backend() != "jax":
            raise jax_processes.data_parallel_needs_jax()
        return strategy
    if isinstance(strategy, SingleDevice):
        if strategy.backend != backend():
            raise ValueError(f"{strategy!r} is for the {strategy.backend} backend; this process "
                             f"runs Keras on {backend()}.")
        return strategy
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(strategy, tf.distribute.Strategy):
        raise TypeError(
            "strategy must be a name (" + ", ".join(STRATEGIES) + "), a tf.distribute.Strategy, "
            "a training.runtime.distribute.SingleDevice or a "
            "training.runtime.distribute.JaxDataParallel. "
            f"Received: {strategy!r}"
        )
    if backend() != "tensorflow":
        raise tf_distribute_only(f"A {type(strategy).__name__}")
    return strategy


def role(strategy: Any) -> Role:
    """Whether this process is the chief, its worker index and the number of workers
    (processes, for `data_parallel`)."""
    if isinstance(strategy, JaxDataParallel):
        return Role(is_chief=strategy.process_index == 0, index=strategy.process_index,
                    workers=strategy.processes)
    if not is_multi_worker(strategy):
        return Role(is_chief=True, index=0, workers=1)
    resolver = strategy.cluster_resolver
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    index = int(resolver.task_id)
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    is_chief = resolver.task_type == "chief" or (not has_chief and index == 0)
    return Role(is_chief=is_chief, index=index, workers=workers)


def minimum_over_workers(strategy: Any, value: int) -> int:
    """The smallest of every worker's `value` (a collective: all workers must call it)."""
    if isinstance(strategy, JaxDataParallel) and strategy.processes > 1:
        import numpy as np
        from jax.experimental import multihost_utils

        return int(np.min(multihost_utils.process_allgather(np.array([value], np.int64))))
    if not is_multi_worker(strategy):
        return value
    tf = tf_strategies.tf_module()
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


def input_share(strategy: Any) -> tuple[int, int]:
    """(this process's index, processes): the share of each global batch this process feeds
    (JAX's data_parallel; tf.distribute shards tf.data itself, so (0, 1) there)."""
    if isinstance(strategy, JaxDataParallel):
        return strategy.process_index, strategy.processes
    return 0, 1


def check_even_batches(replicas: int, examples: int, batch_size: int, what: str) -> None:
    """Refuses a last, smaller batch of `examples` that `replicas` devices cannot split
    (`data_parallel`: JAX shards an array in equal parts, where tf.distribute pads)."""
    last = examples % batch_size
    if last % replicas:
        raise ValueError(
            f"The last batch of the {what} ({examples} examples in batches of {batch_size}) "
            f"has {last} examples, which do not split evenly over the {replicas} devices; "
            f"choose a batch size that leaves a multiple of {replicas} (or none) over."
        )


def describe(strategy: Any, name: str, global_batch: int) -> dict[str, Any]:
    """What run.json records about the distribution of a run."""
    replicas = strategy.num_replicas_in_sync
    if isinstance(strategy, (SingleDevice, JaxDataParallel)):
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
