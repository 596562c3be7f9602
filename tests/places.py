"""Real places for tests: ones that refuse writes (a read-only mount, a full disk, a user with
no rights) and free ports on 127.0.0.1. Everything here runs as root (CI too), where chmod
stops nothing."""

import contextlib
import os
import socket
import subprocess
from pathlib import Path

import pytest

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@contextlib.contextmanager
def tmpfs(mount_point: Path, options: str):
    """A tmpfs mounted at `mount_point` for the block; fails the test where mount is refused
    (these machines and CI run as root and can mount: a skip would hide an untested fault)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.fail(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): run the tests as "
                    "root, or where `mount -t tmpfs` is allowed")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@contextlib.contextmanager
def read_only_dir(path: Path):
    """An empty directory no one may write: a read-only tmpfs as root, else mode 0555."""
    if os.geteuid() == 0:
        with tmpfs(path, "ro,size=1m") as mount_point:
            yield mount_point
    else:
        path.mkdir(parents=True)
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)


def small_disk(path: Path, size: str = "2m"):
    """A real file system of `size` (tmpfs) at `path`, to fill up."""
    return tmpfs(path, f"size={size}")


def free_ports(n: int) -> list[int]:
    """`n` TCP ports on 127.0.0.1 that nothing listened on a moment ago (bound, then freed),
    for the multi-process tests' coordinators and workers."""
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def reserved_ports(n: int = 1) -> list[socket.socket]:
    """`n` consecutive ports on 127.0.0.1, each held by a socket bound with SO_REUSEPORT and
    kept open (close them when done): KerasTuner's gRPC oracle (SO_REUSEPORT by default) binds
    the same port beside it, while no other process can take it meanwhile. Only listening
    sockets take connections, so these never answer. Consecutive: fig1's cell i listens on
    PORT + i."""
    for _ in range(50):
        held = []
        try:
            for i in range(n):
                s = socket.socket()
                held.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                s.bind(("127.0.0.1", held[0].getsockname()[1] + i if i else 0))
            return held
        except OSError:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1")


def run_together(commands: dict[str, list[str]], envs: dict[str, dict[str, str]],
                 logs: Path, timeout: float, cwd: Path,
                 head_start: float = 0.0) -> dict[str, tuple[int, str]]:
    """Starts every command (the first `head_start` seconds before the others; `envs[name]`
    its environment, its output in `logs/NAME.log`), waits for all (SIGKILLing what still
    runs after `timeout` seconds in all); each one's exit status and output by name."""
    import time

    procs = {}
    try:
        for name, command in commands.items():
            log = open(logs / f"{name}.log", "w")  # noqa: SIM115 (closed below)
            procs[name] = (subprocess.Popen(command, env=envs[name], stdout=log,
                                            stderr=subprocess.STDOUT, cwd=cwd,
                                            start_new_session=True), log)
            if len(procs) == 1:
                time.sleep(head_start)
        deadline = time.monotonic() + timeout
        for proc, _ in procs.values():
            proc.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for proc, log in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
            log.close()
    return {name: (proc.returncode, (logs / f"{name}.log").read_text())
            for name, (proc, _) in procs.items()}
