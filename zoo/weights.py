"""Weights on disk: `.weights.h5` files with a sha256 beside them, written atomically.

A saved model directory (a preset, `zoo/presets.py`) holds::

    model.weights.h5          Keras weights
    model.weights.h5.sha256   "<hex>  model.weights.h5" (the `sha256sum -c` format)
    model.json                architecture name, overrides and metadata
    README.md                 the model card

Every file is written to a temporary name in the same directory and renamed into
place (`zoo.files`), so a killed process never leaves a half-written file under the real name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zoo.files import atomic_path, sha256_of, write_text

WEIGHTS_FILE = "model.weights.h5"
MODEL_FILE = "model.json"


class WeightsHashError(ValueError):
    """A weights file does not match the sha256 recorded beside it."""


def hash_path(weights_path: str | os.PathLike) -> Path:
    return Path(f"{weights_path}.sha256")


def save_weights(model, path: str | os.PathLike, overwrite: bool = False) -> str:
    """Saves `model`'s weights to `path` (a `.weights.h5`) plus its sha256 file.

    Returns the sha256 hex digest.
    """
    path = Path(path)
    if not path.name.endswith(".weights.h5"):
        raise ValueError(
            f"Weights files must end in '.weights.h5' (Keras's format). Received: {path}"
        )
    if getattr(model, "optimizer", None) is not None:
        # A compiled model's .weights.h5 also holds its optimizer state (three times the
        # size under Adam); what is shipped and loaded is the weights alone.
        trained, model = model, type(model).from_config(model.get_config())
        model.set_weights(trained.get_weights())
    with atomic_path(path, overwrite) as tmp:
        model.save_weights(tmp, overwrite=True)
        digest = sha256_of(tmp)
        # The hash is written first: a weights file never exists without its hash.
        write_text(hash_path(path), f"{digest}  {path.name}\n", overwrite=True)
    return digest


def verify(weights_path: str | os.PathLike) -> str:
    """Checks `weights_path` against the sha256 beside it; returns the digest."""
    weights_path = Path(weights_path)
    if not weights_path.is_file():
        raise FileNotFoundError(f"No weights file at {weights_path}.")
    recorded_file = hash_path(weights_path)
    if not recorded_file.is_file():
        raise FileNotFoundError(
            f"No sha256 beside {weights_path}: expected {recorded_file}. Weights are "
            "only loaded with a recorded hash; save them with zoo.save_weights(), or "
            f"record one with `sha256sum {weights_path.name} > {recorded_file.name}` "
            "if you trust the file."
        )
    recorded = recorded_file.read_text(encoding="utf-8").split()
    if not recorded:
        raise WeightsHashError(f"{recorded_file} is empty; it should hold a sha256.")
    # `sha256sum` writes "<hex>  <name>" (a '*' before the name in binary mode).
    named = recorded[1].lstrip("*") if len(recorded) > 1 else weights_path.name
    if Path(named).name != weights_path.name:
        raise WeightsHashError(
            f"{recorded_file} records the hash of {named!r}, not of {weights_path.name!r}: it "
            "belongs to another file. Record this file's own hash (zoo.save_weights, or "
            f"`sha256sum {weights_path.name} > {recorded_file.name}` if you trust it)."
        )
    actual = sha256_of(weights_path)
    if actual != recorded[0].lower():
        raise WeightsHashError(
            f"Weights file {weights_path} has sha256 {actual}, but {recorded_file} "
            f"records {recorded[0]}. The file is corrupt, truncated or was replaced; "
            "do not load it. Re-download or re-train it."
        )
    return actual


def read_model_dir(
    directory: str | os.PathLike, expected: str | None = None
) -> tuple[Path, dict[str, Any]]:
    """The weights path and `model.json` record of a saved model directory.

    With `expected`, checks that the directory holds that architecture.
    """
    directory = Path(directory)
    record_file = directory / MODEL_FILE
    if not record_file.is_file():
        raise FileNotFoundError(
            f"{directory} is not a model directory saved by highway-zoo: it has no "
            f"{MODEL_FILE}. Pass the directory written by `highway-zoo train` (its "
            "--out) or a '.weights.h5' file."
        )
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(
            f"{record_file} is not valid JSON ({err}); the preset is damaged. Save the model "
            "again (zoo.save) or re-run the training that wrote it."
        ) from None
    if not isinstance(record, dict):
        raise ValueError(f"{record_file} holds no JSON object; the preset is damaged.")
    found = record.get("architecture")
    if expected is not None and found != expected:
        raise ValueError(
            f"{directory} holds weights for {found!r}, not {expected!r}. Load it "
            f"with zoo.load({found!r}, weights={str(directory)!r})."
        )
    return directory / WEIGHTS_FILE, record
