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
