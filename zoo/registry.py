"""The registry: named architectures, their families and their metadata.

A *builder family* is a builder function with JSON-able keyword arguments (timm's
``model_args``), registered with ``register_family``; an *architecture* (a preset) is a builder
plus fixed arguments plus the metadata that travels with the model (parameter counts, the
paper's numbers, the recipe, where each fact comes from) and, where weights ship, their record.
Architectures are data: each model family's folder (``zoo/fc_nets/``, ``zoo/char_lm/``, ...)
holds its builders (``builders.py``) and its presets (``presets.json``, keras-hub's
``<family>_presets.py`` dicts, timm's ``default_cfgs``), which ``register_presets`` reads.
Everything else (``list_models``, ``describe``, ``load``, the model pages, the tests) reads
from here.

No Keras here or in the family folders' top level (their builders import it when called):
the command line reads the registry (`highway-zoo list`, `describe`) without importing it.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.recipes import RECIPES

# Provenance tags of ../shared/specs/architectures.md, and COMBINED for the named gated-skip
# nets (a later paper's skip form in one of the zoo's nets).
PROVENANCE = {
    "CODE": "read from the authors' released code (their Caffe files; Kim et al.'s Torch code "
    "for the language models)",
    "DERIVED": "follows from the authors' code or the paper by arithmetic",
    "RECON": "reconstructed to fit the published layer and parameter counts; "
    "not confirmed by any source",
    "COMBINED": "a published layer form (its paper's formula and initialisation) in a "
    "published net of this zoo: each part is from a paper, the combination from none",
}


# Overrides about the classifier on top (keras.applications' vocabulary), which every family
# takes: `include_top=False` returns the body's features, optionally `pooling`-ed, or with
# `feature_stages` one feature map per stage.
TOP_OVERRIDES = ("include_top", "pooling", "classes", "classifier_activation", "feature_stages")
# Overrides about how the network computes, not what it is (no weight changes with them), which
# every family takes: `dtype`, a Keras dtype policy, as keras-hub's models take it.
COMPUTE_OVERRIDES = ("dtype",)
POOLINGS = (None, "avg", "max")


@dataclasses.dataclass(frozen=True)
class Family:
    """A builder, the keyword arguments a user may override, and what its body outputs.

    `features(args)` gives the shape of the body's output (what `include_top=False` returns
    with `pooling=None`) from the builder arguments, and whether it is a feature map that
    `pooling` can pool; `stages(args)` lists the features `feature_stages` can return
    (`zoo.heads.stage_info`), None for a family without; both are arithmetic, so
    `describe` needs no model built.
    """

    name: str
    builder: Callable[..., tuple[Any, Any]]
    overridable: tuple[str, ...]
    features: Callable[[dict[str, Any]], dict[str, Any]]
    stages: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None


@dataclasses.dataclass(frozen=True)
class Architecture:
    """One named network: a family, its arguments and its metadata."""

    name: str
    family: Family
    args: dict[str, Any]
    metadata: dict[str, Any]

    def resolve(self, overrides: dict[str, Any] | None) -> dict[str, Any]:
        """The builder arguments with `overrides` applied, after checking them."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.family.overridable))
        if unknown:
            raise ValueError(
                f"{self.name} (family {self.family.name!r}) has no override "
                f"{', '.join(repr(k) for k in unknown)}. It accepts: "
                f"{', '.join(self.family.overridable)}."
            )
        _check_top(self.name, overrides)
        return {**self.args, **overrides}

    def features(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """What `include_top=False` returns: the body's output layer and shapes."""
        return self.family.features(self.resolve(overrides))

    def stages(self, overrides: dict[str, Any] | None = None) -> list[dict[str, Any]] | None:
        """Every feature stage of the network `overrides` build, shallow to deep; None for a
        family without stages."""
        if self.family.stages is None:
            return None
        return self.family.stages(self.resolve(overrides))

    def feature_stages(self, overrides: dict[str, Any] | None = None
                       ) -> list[dict[str, Any]] | None:
        """The stages the `feature_stages` override selects, shallow to deep; None without it.

        A conv net's stages are the outputs before each spatial down-sampling (a pool or a
        strided conv) and the body's last output, keyed by keras-hub's pyramid levels
        (`"P0"` .. `"P5"`, the number log2 of the stride), as keras-hub's `pyramid_outputs`;
        their layers, strides and shapes are listed as timm's `feature_info`. An FC net's are
        its hidden layers, by name. An unknown name is refused, listing the stages there are.
        """
        requested = (overrides or {}).get("feature_stages")
        if requested is None:
            return None
        available = self.stages(overrides)  # a family without stages refused the override
        if requested == "all":
            return available
        names = [stage["name"] for stage in available]
        unknown = [n for n in requested if n not in names]
        if unknown:
            raise ValueError(
                f"{self.name} has no feature stage {', '.join(repr(n) for n in unknown)}"
                f"{self._stacked_hint(unknown, overrides)}. Its stages: "
                f"{_stage_list(available)}. Pass feature_stages='all' or a list of these "
                "names (describe(name)['feature_stages'])."
            )
        return [stage for stage in available if stage["name"] in requested]

    def _stacked_hint(self, unknown: list[str], overrides: dict[str, Any]) -> str:
        """Why a stacked FC net lacks a hidden layer the per-layer form has."""
        if not overrides.get("stacked"):
            return ""
        per_layer = {stage["name"] for stage in self.stages({**overrides, "stacked": False})}
        if not set(unknown) <= per_layer:
            return ""
        return (" (stacked=True holds the highway layers in one layer, highway_stack, which "
                "gives only the last one's output; stacked=False, into which every weights "
                "source loads, has them all)")


def _stage_list(stages: list[dict[str, Any]]) -> str:
    """'P0 (stride 1, (32, 32, 16)), ...': the stages, the middle elided past eight."""
    def one(stage):
        where = f"stride {stage['stride']}, " if stage["stride"] is not None else ""
        shape = ", ".join("None" if d is None else str(d) for d in stage["shape"])
        return f"{stage['name']} ({where}({shape}{',' if len(stage['shape']) == 1 else ''}))"

    if len(stages) > 8:
        return ", ".join([*map(one, stages[:3]), "...", *map(one, stages[-2:])])
    return ", ".join(map(one, stages))


def _check_top(name: str, overrides: dict[str, Any]) -> None:
    """Refuses top-related overrides that contradict each other (keras.applications' rules)."""
    include_top = overrides.get("include_top", True)
    if not isinstance(include_top, bool):
        raise ValueError(
            f"include_top must be True or False. Received: include_top={include_top!r}"
        )
    pooling = overrides.get("pooling")
    if pooling not in POOLINGS:
        raise ValueError(
            f"pooling must be None, 'avg' or 'max'. Received: pooling={pooling!r}"
        )
    stages = overrides.get("feature_stages")
    if stages is not None and not (stages == "all" or (
            isinstance(stages, (list, tuple)) and stages
            and all(isinstance(s, str) for s in stages))):
        raise ValueError(
            "feature_stages must be 'all' or a list of stage names "
            f"(describe({name!r})['feature_stages']). Received: feature_stages={stages!r}"
        )
    if include_top:
        if pooling is not None:
            raise ValueError(
                f"pooling={pooling!r} applies to the features of include_top=False; with the "
                "classifier on top the network pools as the paper does. Pass "
                f"zoo.load({name!r}, include_top=False, pooling={pooling!r})."
            )
        if stages is not None:
            raise ValueError(
                "feature_stages returns the body's stages, which replace the classifier. "
                f"Pass zoo.load({name!r}, include_top=False, feature_stages={stages!r})."
            )
        return
    if stages is not None and pooling is not None:
        raise ValueError(
            f"pooling={pooling!r} pools the body's last feature map; feature_stages returns "
            "one per stage. Leave pooling=None and pool the stages your head needs."
        )
    head_args = sorted({"classes", "classifier_activation"} & set(overrides))
    if head_args:
        raise ValueError(
            f"{', '.join(head_args)} configure the classifier, which include_top=False "
            "removes. Either keep the classifier (include_top=True, the default) with "
            f"{head_args[0]}=..., or put your own head on the features."
        )


_FAMILIES: dict[str, Family] = {}
_ARCHITECTURES: dict[str, Architecture] = {}
# Name -> the presets file that defines it (where its weights record is written).
_PRESET_FILES: dict[str, Path] = {}
# Metadata `register` derives from the arguments and the recipe: not written in presets.
DERIVED_METADATA = ("name", "family", "input_shape", "classes", "provenance_meaning",
                    "recipe_settings")
# A preset's keys: the builder family, its arguments, its metadata, and optionally its shipped
# weights ("weights": {"default": TAG, "tags": {TAG: record}}) or why none ship yet
# ("weights_pending").
PRESET_KEYS = ("builder", "args", "metadata", "weights", "weights_pending")
# A weights tag: RECIPE.DATA.PRECISION, each part lower-case letters, digits and underscores
# (`zoo.pretrained.make_tag`), e.g. "caffe_cifar_tenth.cifar10_jpeg.f32".
WEIGHTS_TAG = re.compile(r"[a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+")


def register_family(name: str, overridable: tuple[str, ...], features, stages=None):
    """Decorator: registers a builder ``f(**args) -> (inputs, outputs)``.

    Every family also takes `TOP_OVERRIDES` (`feature_stages` where it has `stages`) and
    `COMPUTE_OVERRIDES`;
    `features(args)` describes its body's output, `stages(args)` its feature stages (see
    `Family`).
    """

    def decorator(builder):
        top = [k for k in TOP_OVERRIDES if stages is not None or k != "feature_stages"]
        allowed = tuple(dict.fromkeys((*overridable, *top, *COMPUTE_OVERRIDES)))
        _FAMILIES[name] = Family(name, builder, allowed, features, stages)
        return builder

    return decorator


def register(name: str, family: str, args: dict[str, Any], **metadata: Any) -> None:
    """Registers architecture `name` built by `family` with `args`."""
    if name in _ARCHITECTURES:
        raise ValueError(f"Architecture {name!r} is already registered.")
    fam = _FAMILIES[family]
    provenance = metadata.get("provenance")
    if provenance not in PROVENANCE:
        raise ValueError(
            f"{name}: provenance must be one of {sorted(PROVENANCE)}. "
            f"Received: provenance={provenance!r}"
        )
    meta = {
        "name": name,
        "family": family,
        "input_shape": list(args["input_shape"]),
        "classes": args["classes"],
        **metadata,
    }
    meta["provenance_meaning"] = PROVENANCE[provenance]
    meta["recipe_settings"] = dict(RECIPES[metadata["recipe"]])
    _ARCHITECTURES[name] = Architecture(name, fam, dict(args), meta)


def register_presets(path: str | Path) -> None:
    """Registers every architecture of a family's presets file: a JSON object of
    name -> {"builder", "args", "metadata"[, "weights" | "weights_pending"]}."""
    path = Path(path)
    presets = read_presets(path)
    for name, preset in presets.items():
        unknown = sorted(set(preset) - set(PRESET_KEYS))
        if unknown or not {"builder", "args", "metadata"} <= set(preset):
            raise ValueError(f"{path}: preset {name!r} must have the keys builder, args and "
                             f"metadata (and optionally weights or weights_pending); it has "
                             f"{', '.join(sorted(preset))}.")
        if preset["builder"] not in _FAMILIES:
            raise ValueError(f"{path}: preset {name!r} names the builder "
                             f"{preset['builder']!r}, which no builders.py registers.")
        if "weights" in preset:
            _check_weights(path, name, preset["weights"])
        args = {k: tuple(v) if k == "input_shape" else v for k, v in preset["args"].items()}
        register(name, preset["builder"], args, **preset["metadata"])
        _PRESET_FILES[name] = path


def _check_weights(path: Path, name: str, weights: Any) -> None:
    """A preset's "weights": its tags, each named by the scheme, and the default among them."""
    tags = weights.get("tags") if isinstance(weights, dict) else None
    if not isinstance(tags, dict) or not tags or set(weights) != {"default", "tags"}:
        raise ValueError(f"{path}: preset {name!r}'s weights must be {{\"default\": TAG, "
                         "\"tags\": {TAG: record, ...}} with at least one tag.")
    badly_named = [tag for tag in tags if not WEIGHTS_TAG.fullmatch(tag)]
    if badly_named:
        raise ValueError(f"{path}: preset {name!r} has the weights tag {badly_named[0]!r}, which "
                         "is not RECIPE.DATA.PRECISION (lower-case letters, digits, '_').")
    if weights["default"] not in tags:
        raise ValueError(f"{path}: preset {name!r}'s default weights {weights['default']!r} are "
                         f"none of its tags ({', '.join(tags)}).")


def read_presets(path: str | Path) -> dict[str, dict[str, Any]]:
    """A presets file as written (`register_presets` reads it; `highway-zoo pretrain`
    rewrites its weights records)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def presets_text(presets: dict[str, dict[str, Any]]) -> str:
    """A presets file's text, as every writer writes it (two-space indents, in the order read:
    the order of a paper's table in the metadata is kept)."""
    return json.dumps(presets, indent=2, ensure_ascii=False) + "\n"


def preset_file(name: str) -> Path:
    """The presets file that defines architecture `name`."""
    get(name)
    return _PRESET_FILES[name]


@functools.cache
def weights_tags() -> dict[str, dict[str, Any]]:
    """Name -> its preset's "weights": `{"default": TAG, "tags": {TAG: record, ...}}`, every
    set of shipped weights of the architecture by its tag (`zoo.pretrained`'s scheme,
    RECIPE.DATA.PRECISION) and the one `weights="default"` loads. Read from the files once
    (`weights_tags.cache_clear()`, or `weights_records.cache_clear()`, reads them again)."""
    return _preset_field("weights")


def weights_records() -> dict[str, dict[str, Any]]:
    """Name -> the record of its default shipped weights (`weights="default"`)."""
    return {name: found["tags"][found["default"]] for name, found in weights_tags().items()}


weights_records.cache_clear = weights_tags.cache_clear  # one cache for both


@functools.cache
def pending_records() -> dict[str, str]:
    """Name -> why its weights do not ship yet (its preset's "weights_pending")."""
    return _preset_field("weights_pending")


def _preset_field(key: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for path in dict.fromkeys(_PRESET_FILES.values()):
        found.update({name: preset[key] for name, preset in read_presets(path).items()
                      if key in preset})
    return found


def get(name: str) -> Architecture:
    """The registered architecture `name`; a clear error names the closest ones."""
    try:
        return _ARCHITECTURES[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), _ARCHITECTURES, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"Unknown model {name!r}.{hint} "
            "See zoo.list_models() or `highway-zoo list` for all names."
        ) from None


def _natural_key(name: str) -> list:
    """Sorts fc10 < fc20 < fc100, as timm's list_models does."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def list_models(pattern: str = "*", pretrained: bool = False) -> list[str]:
    """Names of the registered architectures matching fnmatch `pattern`, naturally sorted.

    With `pretrained=True`, only those with shipped weights (`weights="default"`), as timm's
    `list_models(pretrained=True)`.
    """
    names = (n for n in _ARCHITECTURES if fnmatch.fnmatch(n, pattern))
    if pretrained:
        names = (n for n in names if n in weights_records())
    return sorted(names, key=_natural_key)


def describe(name: str) -> dict[str, Any]:
    """The metadata of architecture `name`, with its builder arguments, its features and
    its feature stages (None for a family without), and its shipped weights: `pretrained`, the
    default's record (None without), `pretrained_tag`, its tag, and `pretrained_tags`, every
    tag's record ({} without)."""
    arch = get(name)
    shipped = weights_tags().get(name) or {}
    return {
        **arch.metadata,
        "pretrained": weights_records().get(name),
        "pretrained_tag": shipped.get("default"),
        "pretrained_tags": dict(shipped.get("tags") or {}),
        "architecture_args": dict(arch.args),
        "overridable": list(arch.family.overridable),
        "features": arch.features(),
        "feature_stages": arch.stages(),
    }
