"""Hyperparameter search as in the NIPS 2015 paper, with KerasTuner.

    space.py       the paper's search space (`SearchSpace`): ranges only, no Keras
    hypermodel.py  `ZooHyperModel`: that space as a KerasTuner HyperModel for every family
    tuner.py       `search()`: the tuner, its directory, resuming, chief/workers, ranked trials

The transform-bias study, which trains at fixed biases rather than searching, is an
experiment: `training.experiments.bias_study`.
"""

from training.tuning.space import SearchSpace

__all__ = ["SearchSpace", "ZooHyperModel", "search"]


def __getattr__(name):
    # KerasTuner (and TensorFlow) load on first use: the space imports neither.
    if name == "ZooHyperModel":
        from training.tuning.hypermodel import ZooHyperModel

        return ZooHyperModel
    if name == "search":
        from training.tuning.tuner import search

        return search
    raise AttributeError(f"module 'training.tuning' has no attribute {name!r}")
