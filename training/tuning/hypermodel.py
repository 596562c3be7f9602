"""`ZooHyperModel`: a zoo architecture with the paper's search space, as a KerasTuner
`HyperModel`, trained with SGD + momentum."""

from __future__ import annotations

from typing import Any

from training.tuning.space import SearchSpace


def is_highway(name: str) -> bool:
    """Whether `name` has transform gates whose bias b_T is searched: a family that takes
    `transform_bias` and a registered b_T (the gated-skip nets, registered in such a family
    with no T, have none)."""
    import zoo

    info = zoo.describe(name)
    return "transform_bias" in info["overridable"] and info["default_transform_bias"] is not None


def _hypermodel_base():
    import keras_tuner

    return keras_tuner.HyperModel


class ZooHyperModel(_hypermodel_base()):
    """A zoo architecture with the paper's search space, trained with SGD + momentum.

    `build(hp)` samples "learning_rate" (log), "momentum", "lr_decay", "activation" and,
    for highway families, "transform_bias", and returns `zoo.load(name, activation=...,
    transform_bias=..., **overrides)` compiled with `keras.optimizers.SGD(momentum)` on
    `keras.optimizers.schedules.ExponentialDecay(lr, steps_per_epoch, lr_decay,
    staircase=True)` (the rate falls by `lr_decay` once per epoch), sparse categorical
    cross-entropy and accuracy. `fit(hp, model, **kwargs)` trains on `data` with the
    project's pipeline (`training.data.pipeline.training_batches`: every epoch shuffled from its
    own seed) and validates on the test split.

    Args:
        name: a `zoo.list_models()` name.
        space: the `SearchSpace` (default: the paper's).
        data: a `training.data.Dataset` (needed by `build` for the steps per epoch and
            by `fit`).
        epochs: epochs per trial.
        batch_size: the global batch size.
        seed: seeds the weights and the data order of every trial.
        **overrides: fixed architecture overrides (e.g. depth=30).
    """

    def __init__(self, name: str, space: SearchSpace | None = None, *, data=None,
                 epochs: int = 10, batch_size: int = 100, seed: int = 0, **overrides: Any):
        import zoo

        super().__init__(name=name)
        info = zoo.describe(name)
        self.architecture = name
        self.space = space or SearchSpace()
        self.highway = is_highway(name)
        searched = {"activation", "transform_bias"} & set(overrides)
        if searched:
            raise ValueError(
                f"{sorted(searched)} are searched; narrow their range in the SearchSpace "
                "instead of fixing them as overrides."
            )
        bad = sorted(set(overrides) - set(info["overridable"]))
        if bad:
            raise ValueError(f"{name} has no override {bad}; it allows "
                             f"{', '.join(info['overridable'])}.")
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be a positive integer. Received: {epochs!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer. Received: {batch_size!r}")
        self.data, self.epochs, self.batch_size, self.seed = data, epochs, batch_size, seed
        self.overrides = dict(overrides)
        if data is not None and info["classes"] != data.num_classes:
            self.overrides.setdefault("classes", data.num_classes)

    @property
    def steps_per_epoch(self) -> int:
        num_train = self.data.num_train if self.data is not None else 1000
        return -(-num_train // self.batch_size)

    def declare(self, hp) -> dict[str, Any]:
        """Declares the space on `hp`; returns the architecture overrides it chose."""
        s = self.space
        hp.Float("learning_rate", *s.learning_rate, sampling="log")
        hp.Float("momentum", *s.momentum)
        hp.Float("lr_decay", *s.lr_decay)
        chosen = {"activation": hp.Choice("activation", list(s.activations))}
        if self.highway:
            chosen["transform_bias"] = hp.Float("transform_bias", *s.transform_bias)
        return chosen

    def build(self, hp):
        import keras

        import zoo

        chosen = self.declare(hp)
        keras.utils.set_random_seed(self.seed)
        model = zoo.load(self.architecture, **self.overrides, **chosen)
        schedule = keras.optimizers.schedules.ExponentialDecay(
            hp.get("learning_rate"), decay_steps=self.steps_per_epoch,
            decay_rate=hp.get("lr_decay"), staircase=True,
        )
        model.compile(
            optimizer=keras.optimizers.SGD(schedule, momentum=hp.get("momentum")),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
        )
        return model

    def fit(self, hp, model, *args, callbacks=None, verbose=0, **kwargs):
        import keras

        from training.data.pipeline import evaluation_batches, training_batches
        from training.runtime import distribute

        if self.data is None:
            raise ValueError("ZooHyperModel needs `data` (a training.data.Dataset) to fit.")
        strategy = getattr(model, "distribute_strategy", None)  # TensorFlow's only
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        distribute.per_replica_batch(self.batch_size, replicas)
        epochs = [training_batches(self.data.train, num_examples=self.data.num_train,
                                   batch_size=self.batch_size, seed=self.seed, epoch=e)
                  for e in range(self.epochs)]
        train = epochs[0]
        for more in epochs[1:]:
            train = train.concatenate(more)
        return model.fit(
            train, epochs=self.epochs, steps_per_epoch=self.steps_per_epoch,
            validation_data=evaluation_batches(self.data.test),
            callbacks=[*(callbacks or []), keras.callbacks.TerminateOnNaN()],
            verbose=verbose, shuffle=False,
        )
