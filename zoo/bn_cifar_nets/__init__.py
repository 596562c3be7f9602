"""110-layer batch-normalised CIFAR nets: the highway net of the first author's 2025
comparison and its residual twin, ResNet-110.

    builders.py    the builder `bn_cifar`
    presets.json   the named nets: builder arguments and metadata
"""

from pathlib import Path

from zoo.bn_cifar_nets.builders import bn_cifar
from zoo.registry import register_presets

register_presets(Path(__file__).with_name("presets.json"))

__all__ = ["bn_cifar"]
