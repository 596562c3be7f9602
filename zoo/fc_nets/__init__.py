"""Fully connected nets: the optimisation study (NIPS 2015 §3.1, Fig. 1), the 50-layer
analysis nets (§4, Figs. 2-4) and the gated-skip nets of the same layout, for MNIST,
Fashion-MNIST and CIFAR-100.

    builders.py    the builders `highway_fc` and `plain_fc` (Keras imported when called)
    presets.json   the named nets: builder arguments, metadata, shipped weights' records
    weights/       the shipped weights files the presets' records name
"""

from pathlib import Path

from zoo.fc_nets.builders import FC_OVERRIDES, highway_fc, plain_fc
from zoo.registry import register_presets

register_presets(Path(__file__).with_name("presets.json"))

__all__ = ["FC_OVERRIDES", "highway_fc", "plain_fc"]
