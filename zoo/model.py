"""`HighwayZooModel`: a functional `keras.Model` that knows which zoo network it is.

Like keras-hub's backbones, its config is the architecture name plus the user's
overrides, so a `.keras` file rebuilds the same graph through the registry and the
metadata travels with the model.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator
from typing import Any

import keras

from zoo import registry
from zoo.char_lm.tokenizer import CharLMTokenizer
from zoo.class_names import class_names


@contextlib.contextmanager
def recursion_headroom(depth: int) -> Iterator[None]:
    """Room for Keras to map a `depth`-layer functional graph.

    Keras walks a functional graph recursively, a frame per layer: from about depth 950
    on, Python's default limit of 1000 frames raises RecursionError.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10 * depth + 1000))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@contextlib.contextmanager
def dtype_policy(architecture: str, name: str | None) -> Iterator[None]:
    """Every layer made inside computes and keeps its variables as Keras dtype policy `name`
    says (e.g. "mixed_bfloat16": bfloat16 arithmetic, float32 variables); None: the global
    policy. The global policy is as before afterwards."""
    if name is None:
        yield
        return
    try:
        policy = keras.dtype_policies.get(name)
    except (ValueError, TypeError):
        policy = None
    if policy is None or policy.quantization_mode is not None:
        raise ValueError(
            f"{architecture}: dtype must name a Keras dtype policy such as float32, "
            f"mixed_bfloat16 or mixed_float16 (int8: zoo.quantize). Received: dtype={name!r}")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _stage_outputs(inputs, body, stages: list[dict[str, Any]]) -> dict[str, Any]:
    """{stage name: its layer's output} in the graph from `inputs` to `body`. The model made
    of them holds the layers up to the deepest stage only (Keras keeps what the outputs
    need), as timm's `features_only` nets end at their last `out_indices`."""
    graph = keras.Model(inputs, body)  # only to find the layers by name
    return {stage["name"]: graph.get_layer(stage["layer"]).output for stage in stages}


def quantized_layers(model) -> dict[str, str]:
    """`{layer name: quantization mode}` of the model's quantized layers, in graph order.

    The model's own layers (`model.layers`): those `quantize` quantizes, and those its config
    records and `from_config` finds again by name (`model.get_layer`)."""
    return {layer.name: layer.quantization_mode for layer in model.layers
            if getattr(layer, "quantization_mode", None)}


@keras.saving.register_keras_serializable(package="highway_zoo")
class HighwayZooModel(keras.Model):
    """A registered highway architecture, built with optional overrides.

    Args:
        architecture: a name from `zoo.list_models()`.
        overrides: builder arguments to change, among those the family allows
            (`zoo.describe(name)["overridable"]`).
        **kwargs: `keras.Model` arguments (`name`, `trainable`).

    Use `zoo.load(name, weights=..., **overrides)` rather than this class directly.
    """

    def __init__(
        self, architecture: str, overrides: dict[str, Any] | None = None, **kwargs
    ):
        arch = registry.get(architecture)
        args = arch.resolve(overrides)
        kwargs.setdefault("name", architecture)
        # feature_stages and dtype are the model's business, not the builder's: the first
        # picks tensors out of the body the builder makes with include_top=False, the second
        # is the policy every layer is made under.
        args.pop("feature_stages", None)
        dtype = args.pop("dtype", None)
        with recursion_headroom(args.get("depth", 0)), dtype_policy(architecture, dtype):
            inputs, outputs = arch.family.builder(**args)
            stages = arch.feature_stages(overrides)
            if stages is not None:
                outputs = _stage_outputs(inputs, outputs, stages)
            super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.architecture = architecture
        self.overrides = dict(overrides or {})
        # A language model loaded with trained weights gets its tokenizer here (zoo.loading),
        # which zoo.save and zoo.export carry on; None for any other.
        self.tokenizer = None
        self.metadata = self._metadata(arch)

    @property
    def vocabulary(self) -> dict[str, list[str]] | None:
        """A language model's words and characters, as model.json records them (its
        tokenizer's config); None without a tokenizer. Setting it sets the tokenizer."""
        return None if self.tokenizer is None else self.tokenizer.get_config()

    @vocabulary.setter
    def vocabulary(self, value: dict[str, list[str]] | None) -> None:
        self.tokenizer = None if value is None else CharLMTokenizer(
            value["words"], value["chars"], max_word_length=int(self.inputs[0].shape[-1]))

    def _metadata(self, arch: registry.Architecture) -> dict[str, Any]:
        args = arch.resolve(self.overrides)
        meta = {**arch.metadata, "architecture_args": args,
                "features": arch.features(self.overrides)}
        stages = arch.feature_stages(self.overrides)
        if stages is not None:
            meta["feature_stages"] = stages
        if self.overrides:
            meta["overrides"] = dict(self.overrides)
            meta["params"] = self._trained_params()
            meta["input_shape"] = list(args["input_shape"])
            # Without the top the output is the features, not class probabilities.
            meta["classes"] = args["classes"] if args.get("include_top", True) else None
        # A classifier given its own classes=N learns the user's classes, whose names the zoo
        # cannot know (even N equal to the dataset's): those answer with ids.
        meta["class_names"] = None if "classes" in self.overrides else class_names(
            meta.get("dataset"), meta.get("classes"))
        return meta

    def _trained_params(self) -> int:
        """`count_params()` less a stateful LSTM's carried states, which are no parameters
        (the registry's count is the stateless net's)."""
        from layers.carried_state_lstm import is_carried_state

        return self.count_params() - sum(
            math.prod(v.shape) for v in self.weights if is_carried_state(v))

    def generate(self, prompt, max_length: int = 20, **kwargs):
        """A language model's text after `prompt`, as keras-hub's `CausalLM.generate`
        (`zoo.char_lm.generation.generate`: `sampler="greedy"` or `"top_k"`, `k`, `seed`,
        `stop_token`)."""
        from zoo.char_lm.generation import generate

        return generate(self, prompt, max_length, **kwargs)

    def get_config(self) -> dict[str, Any]:
        config = {
            "architecture": self.architecture,
            "overrides": self.overrides,
            "name": self.name,
            "trainable": self.trainable,
        }
        quantized = quantized_layers(self)
        if quantized:  # zoo.quantize: rebuilt from the float architecture, then these layers
            config["quantized_layers"] = quantized
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None):
        config = dict(config)
        quantized = config.pop("quantized_layers", None) or {}
        model = cls(**config)
        for name, mode in quantized.items():  # int8 variables, for the saved ones to fill
            model.get_layer(name).quantize(mode)
        return model
