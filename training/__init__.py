"""Training: datasets, recipes, runs, the experiments and the search.

    >>> import training
    >>> metrics = training.train("highway_fc10_mnist", epochs=5, out="runs/fc10", depth=20)

`train` is loaded on first use, so that `training.run_dir`, `training.tuning.space` and the
experiments' constants import without TensorFlow.
"""

__all__ = ["train"]


def __getattr__(name):
    if name == "train":
        from training.trainer import train

        return train
    raise AttributeError(f"module 'training' has no attribute {name!r}")
