"""`--strategy default|mirrored|multiworker` on TensorFlow: `tf.distribute`'s strategies, the
logical CPU devices MirroredStrategy needs without GPUs, `TF_CONFIG` for
MultiWorkerMirroredStrategy, and its Keras workarounds. TensorFlow is imported only here, and
only when one of these is made or inspected."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from training.runtime import private_api


def tf_module():
    import tensorflow as tf

    return tf



def tf_config() -> dict[str, Any]:
    text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        raise ValueError(
            "--strategy multiworker needs the TF_CONFIG environment variable, e.g. "
            '\'{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
            '"task": {"type": "worker", "index": 0}}\' on machine 0 and index 1 on machine '
            "1 (see `python -c 'import training.runtime.distribute as d; help(d)'`)."
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



def is_multi_worker(strategy: Any) -> bool:
    """Whether `strategy` is a MultiWorkerMirroredStrategy of more than one worker (the chief
    counts as one, as TensorFlow counts them)."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return len(cluster.get("chief", [])) + len(cluster.get("worker", [])) > 1



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
    tf = tf_module()
    with strategy.scope():
        private_api.build_for_multi_worker(model, first_epoch.element_spec)

    def with_vector_logs(step):
        def wrapped(data):
            return {k: tf.reshape(v, [1]) for k, v in step(data).items()}

        return wrapped

    model.train_step = with_vector_logs(model.train_step)
    model.test_step = with_vector_logs(model.test_step)


def set_cpu_devices(count: int) -> None:
    """Splits the host CPU into `count` logical devices, before TensorFlow starts."""
    tf = tf_module()
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
            "training.runtime.distribute.set_cpu_devices() before anything runs a TensorFlow op, "
            "or use `highway-zoo train --cpu-devices N`, which does. "
            f"(TensorFlow said: {err})"
        ) from None


def make_strategy(name: str) -> Any:
    """TensorFlow's strategy for "default", "mirrored" or "multiworker"."""
    tf = tf_module()
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multiworker":
        tf_config()
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except (RuntimeError, ValueError) as err:
            raise RuntimeError(
                "Could not start MultiWorkerMirroredStrategy; it must be created before "
                "TensorFlow runs anything else in the process (use the command line, or "
                f"create the strategy first and pass it to train()). TensorFlow said: {err}"
            ) from None
    raise AssertionError(name)  # the package checked the name
