"""`HighwayZooModel`: a functional `keras.Model` that knows which zoo network it is.

Like keras-hub's backbones, its config is the architecture name plus the user's
overrides, so a `.keras` file rebuilds the same graph through the registry and the
metadata travels with the model.
"""

from __future__ import annotations

from typing import Any

import keras

from zoo import registry


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
        inputs, outputs = arch.family.builder(**args)
        kwargs.setdefault("name", architecture)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.architecture = architecture
        self.overrides = dict(overrides or {})
        self.metadata = self._metadata(arch)

    def _metadata(self, arch: registry.Architecture) -> dict[str, Any]:
        meta = {**arch.metadata, "architecture_args": arch.resolve(self.overrides)}
        if self.overrides:
            meta["overrides"] = dict(self.overrides)
            meta["params"] = self.count_params()
            meta["classes"] = meta["architecture_args"]["classes"]
        return meta

    def get_config(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "overrides": self.overrides,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None):
        return cls(**config)
