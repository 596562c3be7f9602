"""Pretrained weights: `zoo.load(name, weights="default")`.

A net's preset (its family's `presets.json`) holds the record of its shipped weights under
"weights", written by `highway-zoo pretrain`: the weights file (in the family's `weights/`
folder), its sha256 and how it was made: the data it was trained and tested on, the recipe,
the command, the test accuracy measured. A file is fetched with
`keras.utils.get_file(file_hash=sha256)` into the Keras cache (`~/.keras/models/highway_zoo/`),
from its `origin` URL or, for the files shipped inside the package, from the package itself;
the sha256 is checked before anything is loaded. A net whose paper number is being reproduced
says instead, under "weights_pending", why its weights do not ship yet: `zoo.load` says so in
one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zoo import registry

CACHE_SUBDIR = "models/highway_zoo"


# Architecture name -> the record of its default weights; -> why they do not ship yet. Both
# read the presets once (`index.cache_clear()` reads them again).
index = registry.weights_records
pending = registry.pending_records


def weights_dir(name: str) -> Path:
    """The folder of `name`'s family that holds its shipped weights files."""
    return registry.preset_file(name).with_name("weights")


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


def ship(name: str, entry: dict[str, Any]) -> None:
    """Writes `entry` as the record of `name`'s shipped weights into its family's presets
    (whole, atomically), and drops the reason none shipped."""
    from zoo.files import write_text

    path = registry.preset_file(name)
    presets = registry.read_presets(path)
    presets[name]["weights"] = entry
    presets[name].pop("weights_pending", None)
    write_text(path, registry.presets_text(presets), overwrite=True)
    index.cache_clear()
    pending.cache_clear()


def fetch(name: str) -> Path:
    """The local path of `name`'s default weights, fetched and hash-checked."""
    import keras

    entry = record(name)
    if "origin" in entry:  # a real download: Keras's progress bar says how it goes
        return Path(keras.utils.get_file(
            fname=entry["file"], origin=entry["origin"], file_hash=entry["sha256"],
            hash_algorithm="sha256", cache_subdir=CACHE_SUBDIR))
    return _from_package(weights_dir(name) / entry["file"], entry["sha256"])


def _from_package(path: Path, sha256: str) -> Path:
    """A file the package holds, copied into the Keras cache and hash-checked by
    `keras.utils.get_file`, without the "Downloading data from file://..." line and progress
    bar it prints for a download (nothing is downloaded)."""
    import keras

    quiet = keras.config.is_interactive_logging_enabled()
    if quiet:
        keras.config.disable_interactive_logging()  # get_file's messages go to absl's log
    try:
        return Path(keras.utils.get_file(
            fname=path.name, origin=path.as_uri(), file_hash=sha256,
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
    path = _from_package(weights_dir(name) / entry["file"], entry["sha256"])
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    return {"words": list(found["words"]), "chars": list(found["chars"])}
