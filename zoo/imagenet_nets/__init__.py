"""50-layer bottleneck nets for ImageNet: Greff et al. 2017's Highway and Highway-Full beside
ResNet-50.

    builders.py    the builder `bottleneck_imagenet`
    presets.json   the named nets: builder arguments and metadata
"""

from pathlib import Path

from zoo.imagenet_nets.builders import (
    HIGHWAY_WIDTH_MULTIPLIER,
    VARIANTS,
    bottleneck_imagenet,
)
from zoo.registry import register_presets

register_presets(Path(__file__).with_name("presets.json"))

__all__ = ["HIGHWAY_WIDTH_MULTIPLIER", "VARIANTS", "bottleneck_imagenet"]
