"""`zoo.load`: a network by name or from a preset directory, with weights from any source.

A weights source (the shipped weights, a preset or run directory, a `.weights.h5` file) is
hash-checked, then read layer by layer and copied into the requested network by layer name:

- a `HighwayStack` and the chain of `HighwayDense` layers `highway_1 .. highway_N` convert into
  each other, so every source loads into `stacked=True` and per-layer nets alike;
- the top's weighted layers (`zoo.heads.TOP_LAYERS`) start afresh where the requested top
  differs from the source's (`classes=N`, a source saved with `include_top=False`), and are
  left out with `include_top=False`; the model says so once, in a warning;
- anything else that does not match (another depth, width or variant) is refused, naming the
  layer and both shapes, before a single weight is assigned: nothing is loaded half-way;
- a model of `feature_stages`, which holds the body up to its deepest stage, takes its
  weights from the whole body loaded with these checks (a source saved from the same
  feature model loads into it directly).

Keras's own `load_weights` is not used for this: it fills a shallower net from a deeper file
without a word and leaves a net half-loaded when a shape differs. The file is read with h5py
in Keras's `.weights.h5` layout instead (`layers/<key>/vars/<i>`, keys named by Keras after
each layer's class, in the model's layer order), and each layer takes its arrays through
Keras's `Layer.load_own_variables`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from zoo import pretrained, registry
from zoo.heads import TOP_LAYERS
from zoo.model import HighwayZooModel
from zoo.weights import read_model_dir, verify

# Overrides that shape only the top or the form, never a body weight: a bare weights file is
# read as the architecture with the user's other overrides.
_NOT_BODY = (*registry.TOP_OVERRIDES, *registry.COMPUTE_OVERRIDES, "stacked", "input_shape")
_STACK = "highway_stack"
_PER_LAYER = re.compile(r"highway_(\d+)")
_LSTM = re.compile(r"lstm_\d+")  # zoo/char_lm/builders.py's layer names


class WeightsMismatchError(ValueError):
    """A weights source does not fit the network it is loaded into."""


class UnknownWeightsError(ValueError, FileNotFoundError):
    """`weights=` names no tag of the architecture's shipped weights and no file: a ValueError
    (an unknown tag), and a FileNotFoundError as before tags (no such file)."""


@dataclasses.dataclass(frozen=True)
class WeightsSource:
    """A hash-checked `.weights.h5` and the network it was saved from.

    `overrides` is None for a bare file (no record of how it was made): it is then read as
    the requested architecture with the caller's body overrides.
    """

    path: Path
    architecture: str
    overrides: dict[str, Any] | None
    label: str
    # A language model's words and characters (model.json's "vocabulary", its tokenizer's
    # config): the ids its weights were trained on, which the model carries on
    # (`model.tokenizer`).
    vocabulary: dict[str, list[str]] | None = None


def is_preset(name: str | os.PathLike) -> bool:
    """Whether `name` is a preset directory rather than a registered architecture."""
    if isinstance(name, str) and name in registry.list_models():
        return False
    return Path(name).is_dir()


def load(
    name: str | os.PathLike, weights: str | os.PathLike | None = None, **overrides: Any
) -> HighwayZooModel:
    """Builds the zoo network `name`, optionally with trained weights.

    Args:
        name: a registered name (`list_models()`), e.g. `"highway_b_cifar10"`, or a preset
            directory (written by `zoo.save`, `highway-zoo train --out` or `highway-zoo
            tune`): its architecture, overrides and weights, as keras-hub's
            `from_preset(local_dir)`.
        weights: None for a fresh initialisation (for a name; a preset brings its weights);
            `"default"` for the default weights shipped with the package, or a tag of them,
            RECIPE.DATA.PRECISION (`"caffe_cifar_tenth.cifar10_jpeg.f32"`;
            `describe(name)["pretrained_tags"]` lists them, `["pretrained"]` is the
            default's record: how they were trained and what they scored; the
            overrides they were trained with, its `training_overrides`, e.g. `dropout=0.0`,
            are applied before `overrides`); a preset or
            run directory, whose recorded overrides are applied before `overrides`; or a
            `.weights.h5` file with a `.sha256` beside it. The sha256 is checked first.
        **overrides: builder arguments the family allows (`describe(name)["overridable"]`):
            `depth`, `width`, `transform_bias`, `variant`, `stacked`, `input_shape`, ...,
            and for every family `include_top`, `pooling`, `classes`,
            `classifier_activation` as in keras.applications, and `dtype`, the Keras dtype
            policy every layer computes in, as keras-hub's (`"mixed_bfloat16"`: bfloat16
            arithmetic on float32 variables; the weights files are the same). `classes=N` or
            `include_top=False` with weights loads every body weight and starts the
            classifier afresh (fine-tuning). With `include_top=False`, `feature_stages="all"`
            or a list of stage names (`describe(name)["feature_stages"]`) returns one
            feature per stage instead of the last: for a conv net the output before each
            down-sampling and the body's last, keyed by keras-hub's pyramid levels
            (`"P2"`: stride 4); for an FC net hidden layers by name. The name is timm's
            idea (`features_only`, `out_indices`) in keras.applications' style, a load
            argument; the keys are keras-hub's, because a detection or segmentation head
            written for a keras-hub backbone reads `{"P2": ..., "P3": ...}`.

    Returns:
        A `keras.Model` taking raw pixel values 0-255 of shape `input_shape`, with its
        metadata in `model.metadata`: class probabilities, or with `include_top=False` the
        body's features (`describe(name)["features"]`), or with `feature_stages` a dict
        {stage name: features} (`model.metadata["feature_stages"]` gives each one's layer,
        stride and shape).
    """
    if is_preset(name):
        if weights is not None:
            raise ValueError(
                f"{name} is a preset directory, which brings its own weights; weights= applies "
                f"to an architecture name. Load the preset with zoo.load({str(name)!r}), or an "
                "architecture with zoo.load(NAME, weights=...)."
            )
        record = read_model_dir(name)[1]
        name, weights = _recorded_architecture(record, Path(name)), Path(name)
    arch = registry.get(name)
    source = weights_source(arch.name, weights)
    if source is not None and source.overrides is not None:
        overrides = _inherit(source.overrides, overrides)
    model = HighwayZooModel(arch.name, overrides)
    if source is not None:
        load_into(model, source, user_overrides=overrides)
        if source.vocabulary is not None:
            model.vocabulary = source.vocabulary  # sets model.tokenizer
    return model


def _recorded_architecture(record: dict[str, Any], directory: Path) -> str:
    name = record.get("architecture")
    if not isinstance(name, str):
        raise ValueError(
            f"{directory / 'model.json'} names no architecture; it is not a preset written by "
            "highway-zoo (or it was edited). Save the model again with zoo.save(model, DIR)."
        )
    return name


def _inherit(recorded: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The recorded overrides under the caller's; a caller who configures the top replaces
    the recorded top as a whole (a preset of features takes `classes=10` and gets a top)."""
    if any(key in overrides for key in registry.TOP_OVERRIDES):
        recorded = {k: v for k, v in recorded.items() if k not in registry.TOP_OVERRIDES}
    return {**recorded, **overrides}


def weights_source(name: str, weights: str | os.PathLike | None) -> WeightsSource | None:
    """Where `weights` are and what network they were saved from, hash-checked."""
    if weights is None:
        return None
    if isinstance(weights, str) and (weights == "default" or weights in pretrained.tags(name)):
        tag = pretrained.resolve(name, weights)
        path = pretrained.fetch(name, tag)  # get_file checks the recorded sha256
        # The architecture settings the weights were trained with travel with them, as a
        # keras-hub preset's config does: fine-tuning conv nets trained without dropout under
        # the released dropout cost 30 points (README, Transfer).
        trained_with = dict(pretrained.record(name, tag).get("training_overrides") or {})
        return WeightsSource(path, name, trained_with, f"the shipped weights {name}.{tag}",
                             pretrained.vocabulary(name, tag))
    path = Path(weights)
    if path.is_dir():
        weights_path, record = read_model_dir(path)
        source_name = _recorded_architecture(record, path)
        family, theirs = registry.get(name).family.name, registry.get(source_name).family.name
        if family != theirs:
            raise WeightsMismatchError(
                f"{path} holds weights for {source_name!r} (family {theirs!r}), which cannot "
                f"load into {name!r} (family {family!r}). Load it with "
                f"zoo.load({str(path)!r})."
            )
        verify(weights_path)
        _check_record_hash(weights_path, record)
        return WeightsSource(weights_path, source_name, dict(record.get("overrides") or {}),
                             f"preset {path}", record.get("vocabulary"))
    if path.is_file() or str(path).endswith(".weights.h5"):
        verify(path)
        return WeightsSource(path, name, None, f"weights file {path}")
    if isinstance(weights, str) and not any(sep in weights for sep in ("/", os.sep)):
        if registry.WEIGHTS_TAG.fullmatch(weights):  # a tag `name` does not ship
            try:
                pretrained.resolve(name, weights)
            except ValueError as err:
                raise UnknownWeightsError(str(err)) from None
        raise UnknownWeightsError(
            f"weights={weights!r} is not 'default', a '.weights.h5' file, a directory saved by "
            f"highway-zoo or a tag of {name}'s shipped weights; its tags: "
            f"{pretrained.tag_list(name)}."
        )
    raise FileNotFoundError(
        f"weights={str(weights)!r} is not 'default', a '.weights.h5' file or a directory saved "
        "by highway-zoo. Train your own with `highway-zoo train NAME --out DIR` and pass DIR."
    )


def _check_record_hash(weights_path: Path, record: dict[str, Any]) -> None:
    recorded = record.get("sha256")
    if recorded is not None and verify(weights_path) != recorded:
        raise ValueError(
            f"{weights_path} matches its .sha256 but not the sha256 in "
            f"{weights_path.parent / 'model.json'} ({recorded}): one of the two was replaced. "
            "Do not load it; save the model again."
        )


# --- reading a Keras .weights.h5 ----------------------------------------------------------


def _snake_case(name: str) -> str:
    """A class name as Keras 3 writes it in a `.weights.h5` (its `to_snake_case`)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _keras_keys(model) -> dict[str, Any]:
    """The file key of each layer of `model` in a Keras 3 `.weights.h5`: the snake-case class
    name, made unique in layer order (keras/src/saving/saving_lib.py, _save_container_state)."""
    keys, used = {}, {}
    for layer in model.layers:
        key = _snake_case(type(layer).__name__)
        if key in used:
            used[key] += 1
            key = f"{key}_{used[key]}"
        else:
            used[key] = 0
        keys[key] = layer
    return keys


def _nested(model) -> bool:
    """Whether a weighted layer of `model` holds layers of its own (an LSTM's cell, the
    CharCNNEmbedder's convolutions): Keras files keep their variables in sub-groups. A
    variable's path is its layer's path and its name; an inner layer's adds that layer's."""
    return any(variable.path != f"{layer.path}/{variable.name}"
               for layer in model.layers for variable in layer.weights)


def _read_through_keras(path, model) -> dict[str, list[np.ndarray]]:
    """`read_layer_weights` for networks of nested layers: Keras reads the file into `model`
    (the network it was saved from), which then gives each layer's arrays."""
    import keras

    try:
        model.load_weights(path)
    except ValueError as err:
        raise WeightsMismatchError(
            f"Cannot load {path} into {_describe(model)}: {str(err).splitlines()[0]} Pass the "
            "overrides the weights were trained with (variant, highway_layers, ...)."
        ) from None
    return {layer.name: [keras.ops.convert_to_numpy(w) for w in _trained(layer)]
            for layer in model.layers if _trained(layer)}


def read_layer_weights(path: str | os.PathLike, model) -> dict[str, list[np.ndarray]]:
    """The arrays of each weighted layer in the `.weights.h5` at `path`, by the layer names
    of `model`, the network the file was saved from. A file holding other layers than
    `model`'s is refused, naming how many of each kind either has."""
    import h5py

    if _nested(model):
        return _read_through_keras(path, model)

    keys = _keras_keys(model)
    with h5py.File(path, "r") as f:
        group = f.get("layers")
        if not isinstance(group, h5py.Group):
            raise WeightsMismatchError(
                f"{path} is not a Keras model weights file (it has no 'layers' group)."
            )
        stored = {k: group[k]["vars"] for k in group if len(group[k].get("vars", ()))}
        expected = {k for k, layer in keys.items() if layer.weights}
        if set(stored) != expected:
            there = sum(1 for k in stored if re.fullmatch(r"highway_dense(_\d+)?", k))
            if _STACK in stored:
                there += stored[_STACK]["0"].shape[0]
            raise WeightsMismatchError(
                f"Cannot load {path} into {_describe(model)}: the file holds {_census(stored)}, "
                f"the network {_census(expected)}{_depths_of(there, model)}. Pass the "
                "overrides the weights were trained with (depth, width, variant, ...)."
            )
        return {keys[k].name: [np.asarray(v[str(i)]) for i in range(len(v))]
                for k, v in stored.items()}


def _census(keys) -> str:
    """'9 highway_dense, 2 dense': weighted layers by kind, from Keras file keys."""
    counts: dict[str, int] = {}
    for key in keys:
        kind = re.sub(r"_\d+$", "", key)
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no weights"


def _describe(model) -> str:
    overrides = ", ".join(f"{k}={v!r}" for k, v in getattr(model, "overrides", {}).items())
    return f"{getattr(model, 'architecture', model.name)}({overrides})"


# --- copying layer by layer ---------------------------------------------------------------


def _source_model(source: WeightsSource, target: HighwayZooModel, user_overrides):
    """A network of the form the source was saved from, for the layer names of its file."""
    if source.overrides is not None:
        overrides = source.overrides
    else:
        overrides = {k: v for k, v in user_overrides.items() if k not in _NOT_BODY}
        if registry.get(source.architecture).family.name == "highway_fc":
            overrides["stacked"] = _holds_stack(source.path)
    same = source.architecture == target.architecture and overrides == target.overrides
    return target if same else HighwayZooModel(source.architecture, overrides)


def _holds_stack(path: Path) -> bool:
    import h5py

    with h5py.File(path, "r") as f:
        return f"layers/{_STACK}" in f


def _top(args: dict[str, Any]) -> tuple:
    return (args.get("include_top", True), args["classes"])


def load_into(model: HighwayZooModel, source: WeightsSource, user_overrides=None) -> None:
    """Copies the weights of `source` into `model`, converting stacked and per-layer forms;
    the top starts afresh where it differs from the source's. Checks every layer first."""
    user_overrides = dict(user_overrides or {})
    if model.overrides.get("feature_stages") is not None and not _saved_from(source, model):
        _load_through_body(model, source, user_overrides)
        return
    source_model = _source_model(source, model, user_overrides)
    arrays = read_layer_weights(source.path, source_model)
    target_args = registry.get(model.architecture).resolve(model.overrides)
    if source.overrides is not None:
        source_args = registry.get(source.architecture).resolve(source.overrides)
        new_top = _top(source_args) != _top(target_args)
    else:  # a bare file: the caller says whether the top is meant to differ
        new_top = "classes" in user_overrides or not target_args.get("include_top", True)

    plan, fresh, used, from_stack = [], [], set(), 0
    for layer in model.layers:
        weights = _trained(layer)
        if not weights:
            continue
        found, names = _arrays_for(layer, arrays)
        shapes = [tuple(v.shape) for v in weights]
        if found is not None and [a.shape for a in found] == shapes:
            plan.append((layer, found))
            used.update(names)
            from_stack += names == [_STACK] and layer.name != _STACK
        elif layer.name in TOP_LAYERS and new_top:
            fresh.append(_fresh_reason(layer, found, shapes))
            used.update(names)
        elif found is None:
            raise _mismatch(source, model, f"the weights have no layer {layer.name!r}"
                            f"{_per_layer_hint(layer, arrays)}")
        else:
            raise _mismatch(source, model, f"layer {layer.name!r} has weights of shape "
                            f"{_shapes([a.shape for a in found])} there and "
                            f"{_shapes(shapes)} here")
    if from_stack and from_stack != len(arrays[_STACK][0]):
        raise _mismatch(source, model, f"the weights' {_STACK} does not match"
                        f"{_depths(arrays, model)}")
    unused = [n for n in arrays if n not in used and not (_in_top(n, model) and new_top)]
    if unused:
        raise _mismatch(source, model, f"the weights hold layers the network lacks, "
                        f"{_name_range(unused)}{_depths(arrays, model)}")
    nested = _nested(source_model)  # then the arrays are each layer's get_weights()
    for layer, values in plan:
        if nested:
            for variable, value in zip(_trained(layer), values):
                variable.assign(value)
        else:
            layer.load_own_variables({str(i): v for i, v in enumerate(values)})
    if fresh:
        warnings.warn(
            f"{_describe(model)}: loaded every body weight from {source.label}; "
            f"{'; '.join(fresh)}. Train it before use.", UserWarning, stacklevel=3,
        )


def _trained(layer) -> list:
    """The layer's weights but a stateful LSTM's carried states, which belong to one batch
    size and are no part of trained weights (layers.carried_state_lstm)."""
    from layers.carried_state_lstm import is_carried_state

    return [w for w in layer.weights if not is_carried_state(w)]


def _saved_from(source: WeightsSource, model: HighwayZooModel) -> bool:
    return source.architecture == model.architecture and source.overrides == model.overrides


def _load_through_body(model: HighwayZooModel, source: WeightsSource, user_overrides) -> None:
    """Loads a feature model's weights from the whole body's: a feature model lacks the layers
    after its deepest stage, so the source's would be refused as layers it does not have, and
    a source of another depth could not be told from one cut at that stage."""
    def body_of(overrides):
        return {k: v for k, v in overrides.items() if k != "feature_stages"}

    body = HighwayZooModel(model.architecture, body_of(model.overrides))
    load_into(body, source, body_of(user_overrides))
    for layer in model.layers:
        if layer.weights:
            layer.set_weights(body.get_layer(layer.name).get_weights())


def _in_top(name: str, model) -> bool:
    """Whether the source's layer `name` is part of the top `include_top=False` removes: the
    classifier, and a language model's LSTMs (its features are the embedder's, per word)."""
    if name in TOP_LAYERS:
        return True
    return model.metadata.get("family") == "char_lm" and bool(_LSTM.fullmatch(name))


def _arrays_for(layer, arrays) -> tuple[list[np.ndarray] | None, list[str]]:
    """The source arrays for `layer`, converting between a stack and per-layer weights, and
    the source layer names they come from."""
    from layers import HighwayDense, HighwayStack

    if layer.name in arrays:
        return arrays[layer.name], [layer.name]
    if isinstance(layer, HighwayStack):
        names = layer.layer_names()
        if all(n in arrays for n in names):
            per_layer = [arrays[n] for n in names]
            if len({tuple(a.shape for a in w) for w in per_layer}) == 1:
                return [np.stack([w[i] for w in per_layer]) for i in range(2)], names
    match = _PER_LAYER.fullmatch(layer.name)
    if isinstance(layer, HighwayDense) and match and _STACK in arrays:
        kernel, bias = arrays[_STACK]
        i = int(match.group(1)) - 1
        if i < len(kernel):
            return [kernel[i], bias[i]], [_STACK]
    return None, []


def _fresh_reason(layer, found, shapes) -> str:
    if found is None:
        return f"{layer.name} {_shapes(shapes)} is freshly initialised (not in the weights)"
    return (f"{layer.name} is freshly initialised: {_shapes(shapes)} here, "
            f"{_shapes([a.shape for a in found])} in the weights")


def _per_layer_hint(layer, arrays) -> str:
    from layers import HighwayStack

    if isinstance(layer, HighwayStack):
        have = [n for n in arrays if _PER_LAYER.fullmatch(n)]
        return (f" (a stack of {layer.depth} highway layers; the weights have "
                f"{len(have)} per-layer highway layers)")
    return ""


def _depths(arrays, model) -> str:
    """' (9 highway layers there, 4 here)', counting a stack's layers too."""
    there = sum(1 for n in arrays if _PER_LAYER.fullmatch(n))
    there += len(arrays[_STACK][0]) if _STACK in arrays else 0
    return _depths_of(there, model)


def _depths_of(there: int, model) -> str:
    from layers import HighwayStack

    here = sum(layer.depth if isinstance(layer, HighwayStack) else 1
               for layer in model.layers
               if isinstance(layer, HighwayStack) or _PER_LAYER.fullmatch(layer.name))
    return f" ({there} highway layers there, {here} here)" if there and here else ""


def _shapes(shapes) -> str:
    return " + ".join(str(tuple(s)) for s in shapes)


def _name_range(names) -> str:
    if len(names) > 4:
        return f"{names[0]}, {names[1]}, ..., {names[-1]} ({len(names)} layers)"
    return ", ".join(names)


def _mismatch(source: WeightsSource, model, detail: str) -> WeightsMismatchError:
    made = ""
    if source.overrides is not None:
        args = ", ".join(f"{k}={v!r}" for k, v in source.overrides.items())
        made = (f" They were saved from {source.architecture}({args})." if args else
                f" They were saved from {source.architecture} as registered.")
    return WeightsMismatchError(
        f"Cannot load {source.label} into {_describe(model)}: {detail}.{made} Load weights "
        "with the architecture and overrides they were trained with; only the classifier may "
        "differ (classes=N or include_top=False)."
    )
