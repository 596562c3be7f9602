"""gates.json: per-epoch gate statistics of a run, written by `training.callbacks.GateSummaries`.

The file sits in the run directory and reads::

    {"layers": ["highway_1", ...], "units": [50, ...], "examples": 256,
     "epochs": [{"epoch": 0, "mean_t": [...], "std_t": [...], "transform_bias_mean": [...]},
                ...]}

with one entry per epoch (0 = before training, when the callback saw it), each list in the
order of "layers". An epoch written again (a resumed run trains it again) replaces the old
entry and drops the later ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zoo.files import write_text

GATES_FILE = "gates.json"


def read_gate_history(path: str | os.PathLike) -> dict[str, Any]:
    """gates.json of a run directory (or the file itself), epochs in order."""
    path = Path(path)
    if path.is_dir():
        path = path / GATES_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"No {GATES_FILE} at {path}: runs write it when trained with the GateSummaries "
            "callback (training/callbacks.py)."
        )
    history = json.loads(path.read_text(encoding="utf-8"))
    history["epochs"] = sorted(history.get("epochs", []), key=lambda e: e["epoch"])
    return history


def updated_history(
    previous: dict[str, Any] | None, entry: dict[str, Any], header: dict[str, Any]
) -> dict[str, Any]:
    """`previous` (or a new history with `header`) with `entry` as its last epoch."""
    if previous is None or previous.get("layers") != header["layers"]:
        previous = {**header, "epochs": []}
    kept = [e for e in previous["epochs"] if e["epoch"] < entry["epoch"]]
    return {**previous, **header, "epochs": [*kept, entry]}


def write_gate_history(path: str | os.PathLike, history: dict[str, Any]) -> None:
    """Writes gates.json atomically (a temporary file renamed into place)."""
    write_text(path, json.dumps(history, indent=1) + "\n", overwrite=True)
