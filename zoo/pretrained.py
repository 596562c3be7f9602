"""Pretrained weights: `zoo.load(name, weights="default")`.

`zoo/pretrained/index.json` (pure data, written by `highway-zoo pretrain`) lists,
per architecture, a weights file, its sha256 and how it was made: the data it was trained
and tested on, the recipe, the command, the test accuracy measured. A file is fetched with
`keras.utils.get_file(file_hash=sha256)` into the Keras cache
(`~/.keras/models/highway_zoo/`), from its `origin` URL or, for the files shipped inside
the package, from the package itself; the sha256 is checked before anything is loaded.
`zoo/pretrained/pending.json` (data too) says, per architecture whose paper number is being
reproduced, why its weights are not shipped yet: `zoo.load` says so in one line.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).parent / "pretrained"
INDEX = PACKAGE_DIR / "index.json"
PENDING = PACKAGE_DIR / "pending.json"
CACHE_SUBDIR = "models/highway_zoo"


@cache
def index() -> dict[str, dict[str, Any]]:
    """Architecture name -> the record of its default weights."""
    if not INDEX.is_file():
        return {}
    return json.loads(INDEX.read_text(encoding="utf-8"))


@cache
def pending() -> dict[str, str]:
    """Architecture name -> why its weights are not shipped yet."""
    if not PENDING.is_file():
        return {}
    return json.loads(PENDING.read_text(encoding="utf-8"))


def record(name: str) -> dict[str, Any]:
    """The default-weights record of `name`; a clear error if there is none."""
    entries = index()
    if name not in entries and (why := pending().get(name)):
        raise ValueError(f"No weights for {name!r} yet: {why} Train your own with "
                         f"`highway-zoo train {name} --data-dir DIR --out RUN` and pass "
                         "weights=RUN.")
    if name not in entries:
        have = ", ".join(sorted(entries)) or "none"
        raise ValueError(
            f"No pretrained weights for {name!r}. Architectures with weights=\"default\": "
            f"{have}. Train your own with `highway-zoo train {name} --out DIR` and pass "
            "weights=DIR."
        )
    return entries[name]


def fetch(name: str) -> Path:
    """The local path of `name`'s default weights, fetched and hash-checked."""
    import keras

    entry = record(name)
    if "origin" in entry:  # a real download: Keras's progress bar says how it goes
        return Path(keras.utils.get_file(
            fname=entry["file"], origin=entry["origin"], file_hash=entry["sha256"],
            hash_algorithm="sha256", cache_subdir=CACHE_SUBDIR))
    return _from_package(entry["file"], entry["sha256"])


def _from_package(file: str, sha256: str) -> Path:
    """A file the package holds, copied into the Keras cache and hash-checked by
    `keras.utils.get_file`, without the "Downloading data from file://..." line and progress
    bar it prints for a download (nothing is downloaded)."""
    import keras

    quiet = keras.config.is_interactive_logging_enabled()
    if quiet:
        keras.config.disable_interactive_logging()  # get_file's messages go to absl's log
    try:
        return Path(keras.utils.get_file(
            fname=file, origin=(PACKAGE_DIR / file).as_uri(), file_hash=sha256,
            hash_algorithm="sha256", cache_subdir=CACHE_SUBDIR))
    finally:
        if quiet:
            keras.config.enable_interactive_logging()


def vocabulary(name: str) -> dict[str, list[str]] | None:
    """The words and characters a shipped language model's weights were trained with (its
    record's `vocabulary` file, hash-checked like the weights); None for other nets."""
    entry = record(name).get("vocabulary")
    if entry is None:
        return None
    path = _from_package(entry["file"], entry["sha256"])
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    return {"words": list(found["words"]), "chars": list(found["chars"])}
