"""What the benchmark scripts share: running one measurement in a fresh process, the machine's
description, and writing results atomically."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class MeasurementFailed(RuntimeError):
    """A measurement's own process failed; the message says which, and its last error line."""


def run_child(module: str, args: list[str], timeout: float | None = None) -> dict:
    """`python -m module *args` in a fresh process; its last stdout line, parsed as JSON."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
    proc = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          check=False, env=env, cwd=ROOT, timeout=timeout)
    if proc.returncode:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise MeasurementFailed(
            f"`python -m {module} {' '.join(args)}` exited with status {proc.returncode}: "
            f"{lines[-1] if lines else 'no error output'} (run it by hand for the traceback)")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def memory_mb(field: str = "VmHWM") -> float:
    """A /proc/self/status memory figure (Linux), MB: VmHWM (peak RSS, the default) or VmRSS.

    Not `getrusage`'s ru_maxrss: Linux carries it across exec, so a child started from a
    process holding TensorFlow would report that process's peak; VmHWM starts afresh."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}")


def write_results(path: Path, summary: dict) -> None:
    """Writes `summary` (plus machine and date) as JSON via a temporary file and a rename."""
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **summary}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)
    print(f"\nWrote {path}")
