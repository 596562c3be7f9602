"""`--strategy data_parallel`: Keras's `keras.distribution` on JAX, over the local devices
and over several processes joined through Keras's environment variables (the package's
docstring says how to start them)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time

from training.runtime.backend import backend

# How long a process > 0 waits for the coordinator to come up: JAX's own limit, after which it
# aborts the process (SIGABRT, "DEADLINE_EXCEEDED") where we say so in one line.
COORDINATOR_WAIT_S = 300.0
# Keras's own names (keras.distribution.initialize reads them).
JOB_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"


class JaxDataParallel:
    """The `data_parallel` strategy: Keras's `keras.distribution.DataParallel` on JAX, over
    every device of every process, set as the process's distribution (Keras's JAX trainer
    reads it in `fit`); the few members of a `tf.distribute.Strategy` that training uses."""

    def __init__(self, distribution):
        self.distribution = distribution
        self.num_replicas_in_sync = int(distribution.device_mesh.devices.size)
        self.processes = distribution.num_processes
        self.process_index = distribution.data_shard_id  # DataParallel: the process's id

    def scope(self):
        return contextlib.nullcontext()  # set process-wide: fit runs outside any scope

    def devices(self) -> list[str]:
        return [str(d) for d in self.distribution.device_mesh.devices.flatten()]

    def __repr__(self) -> str:
        return (f"JaxDataParallel(devices={self.num_replicas_in_sync}, "
                f"processes={self.processes})")



def data_parallel_needs_jax() -> ValueError:
    name = backend()
    instead = ("--strategy mirrored (local devices) or multiworker (TF_CONFIG)"
               if name == "tensorflow" else "--strategy default (one device)")
    return ValueError(
        "--strategy data_parallel is Keras's keras.distribution on JAX and needs "
        f"KERAS_BACKEND=jax; this process runs Keras on {name}. Use KERAS_BACKEND=jax, or "
        f"{instead}."
    )



def set_cpu_devices(count: int) -> None:
    import jax

    try:  # read when JAX makes its devices; JAX refuses a change once it has made them
        jax.config.update("jax_num_cpu_devices", count)
        return
    except RuntimeError:
        pass
    have = jax.local_device_count("cpu")
    if have != count:
        raise RuntimeError(
            f"Cannot make {count} CPU devices: JAX has already started its devices in this "
            f"process ({have} CPU device(s)). Call training.runtime.distribute.set_cpu_devices() "
            "before anything runs a JAX computation, or use `highway-zoo train --cpu-devices "
            "N`, which does."
        )



def process_settings() -> tuple[str, int, int] | None:
    """(coordinator host:port, processes, this process's id) from Keras's environment
    variables; None for one process. Refuses what would make JAX wait or fail obscurely."""
    text = {name: os.environ.get(name, "").strip()
            for name in (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID)}
    if not any(text.values()):
        return None
    example = (f"e.g. {JOB_ADDRESSES}=host0:12345 {NUM_PROCESSES}=2 and {PROCESS_ID}=0 on "
               "machine 0, 1 on machine 1")
    try:
        processes, process_id = int(text[NUM_PROCESSES]), int(text[PROCESS_ID])
        if not text[JOB_ADDRESSES] or processes < 1 or not 0 <= process_id < processes:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"Several processes need {JOB_ADDRESSES} (process 0's host:port first), "
            f"{NUM_PROCESSES} (a positive integer) and {PROCESS_ID} (0 to processes - 1), "
            f"{example}. Received: " + ", ".join(f"{k}={v!r}" for k, v in text.items())
        ) from None
    addresses = text[JOB_ADDRESSES].split(",")
    if len(addresses) > 1 and len(addresses) != processes:
        raise ValueError(f"{JOB_ADDRESSES} names {len(addresses)} processes but "
                         f"{NUM_PROCESSES} is {processes}.")
    coordinator = addresses[0].strip()
    check_coordinator(coordinator, process_id)
    return coordinator, processes, process_id



def check_coordinator(coordinator: str, process_id: int) -> None:
    """Refuses in one line a coordinator JAX would wait minutes for, or fail on: not
    host:port, a host that does not resolve, or (process 0 runs the coordinator) not this
    machine's address or a port in use there."""
    host, _, port = coordinator.rpartition(":")
    host = host.strip("[]")  # [::1]:1234
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"The coordinator address {coordinator!r} (the first of "
                         f"{JOB_ADDRESSES}) must be host:port, e.g. 127.0.0.1:12345.")
    try:
        family, *_, address = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)[0]
    except socket.gaierror as err:
        raise ValueError(f"The coordinator address {coordinator!r} does not resolve "
                         f"({err.strerror}); give process 0's host name or IP address.") from None
    if process_id != 0:
        return
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As gRPC binds: a killed run's connections in TIME_WAIT do not hold the port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address[0], int(port)))  # released at once, for JAX's coordinator
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ValueError(
                    f"The coordinator's port {port} ({coordinator!r}) is in use on this "
                    "machine (an earlier run still going?): stop that process, or choose "
                    "another port."
                ) from None
            if err.errno != errno.EADDRNOTAVAIL:
                raise
            raise ValueError(
                f"The coordinator address {coordinator!r} is not an address of this machine, "
                "and process 0 runs the coordinator there: start process 0 on that host, or "
                "give this machine's address (127.0.0.1 when all processes run here)."
            ) from None



def wait_for_coordinator(coordinator: str, seconds: float) -> None:
    """Returns once something listens at `coordinator`; a one-line ValueError after
    `seconds` (process 0 not started, or the address is not reachable from here)."""
    host, _, port = coordinator.rpartition(":")
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"No coordinator answered at {coordinator!r} in {seconds:g} s: start "
                    "process 0 (KERAS_DISTRIBUTION_PROCESS_ID=0) on that host, and check that "
                    "this machine reaches it (127.0.0.1 when all processes run here)."
                ) from None
            time.sleep(0.2)



def join_processes() -> None:
    """`keras.distribution.initialize` (jax.distributed) when Keras's environment variables
    name several processes; before JAX starts its devices (it cannot join them later)."""
    settings = process_settings()
    if settings is None:
        return
    import jax

    if jax.distributed.is_initialized():
        return  # joined already (a second run in this process)
    import keras

    coordinator, processes, process_id = settings
    if process_id != 0:
        wait_for_coordinator(coordinator, COORDINATOR_WAIT_S)
    # JAX's CPU devices all-reduce across processes through gloo (jax 0.10.2's default;
    # without it, a computation across processes on CPU fails).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    keras.distribution.initialize(coordinator, processes, process_id)



def make_data_parallel() -> JaxDataParallel:
    import keras

    join_processes()
    distribution = keras.distribution.DataParallel(
        devices=keras.distribution.list_devices(),
        # Our batches are each process's share already (training.data.pipeline); Keras shards
        # only tf.data itself.
        auto_shard_dataset=False,
    )
    keras.distribution.set_distribution(distribution)
    return JaxDataParallel(distribution)
