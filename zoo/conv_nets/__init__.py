"""Convolutional highway nets: MNIST (NIPS 2015 Table 1, and their Fashion-MNIST twins) and
CIFAR (Tables 2 and 3).

    builders.py    the builders `highway_conv_mnist` and `highway_cifar`
    presets.json   the named nets: builder arguments, metadata, shipped weights' records
                   (or why none ship yet)
    weights/       the shipped weights files the presets' records name
"""

from pathlib import Path

from zoo.conv_nets.builders import CAFFE_XAVIER, MNIST_DROPOUT, highway_cifar, highway_conv_mnist
from zoo.registry import register_presets

register_presets(Path(__file__).with_name("presets.json"))

__all__ = ["CAFFE_XAVIER", "MNIST_DROPOUT", "highway_cifar", "highway_conv_mnist"]
