"""Training: datasets, recipes, runs and the command line.

    >>> import training
    >>> metrics = training.train("highway_fc10_mnist", epochs=5, out="runs/fc10", depth=20)
"""

from training.trainer import train

__all__ = ["train"]
