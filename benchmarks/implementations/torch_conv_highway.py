"""The zoo's convolutional highway nets written in plain PyTorch: the peers a user would pick for
`bench.conv_peer`'s training speed (cuDNN on a GPU).

`build(name)` reads a zoo architecture's arguments (`zoo.describe(name)`) and builds the same
net, layer by layer, for the two families of NIPS 2015 Tables 1-3: `highway_conv_mnist`
(Rescaling 1/256, 5x5 conv, highway stages with Caffe's ceil-mode max pools, flatten, softmax)
and `highway_cifar` (per-image GCN, a plain 3x3 conv and highway convs per stage, 2x2 pools,
the global-max-pool + Dense head or the 1x1-conv + global-average-pool head). Each highway
layer is one fused convolution to [H | T] (as `layers.HighwayConv2D` is), coupled:
y = x + T (H - x). Dropout as the zoo's. The net returns logits. `load_keras_weights(net,
model)` copies a built Keras model's weights in, so the two compute the same function
(tests/test_bench.py checks it).
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

# The zoo's dropout rates (zoo.conv_nets): MNIST's on the pixels and after each stage, CIFAR's.
MNIST_DROPOUT = (0.2, 0.3, 0.4, 0.5)
MNIST_STAGES = ((2, 3), (3, 3), (3, 2))  # (highway convs, pool size), stride 2 each
CIFAR_DROPOUT = 0.2


class HighwayConv(nn.Module):
    """A coupled convolutional highway layer: one conv to 2c channels, split into H (ReLU)
    and T (sigmoid); y = x + T (H - x). "same" padding, stride 1."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, 2 * channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        h, t = self.conv(x).chunk(2, dim=1)
        return x + torch.sigmoid(t) * (torch.relu(h) - x)


def _same_pool(x, size: int, stride: int):
    """TensorFlow's "same" max pooling (Caffe's ceil mode): the padding at the bottom and
    right, as TensorFlow puts the odd pixel."""
    pads = []
    for length in (x.shape[3], x.shape[2]):
        out = math.ceil(length / stride)
        total = max((out - 1) * stride + size - length, 0)
        pads += [total // 2, total - total // 2]
    return F.max_pool2d(F.pad(x, pads, value=-math.inf), size, stride)


class MnistNet(nn.Module):
    """`highway_conv_mnist`: NIPS 2015 Table 1's nets."""

    def __init__(self, width: int, classes: int = 10, channels: int = 1):
        super().__init__()
        self.stem = nn.Conv2d(channels, width, 5)
        self.stages = nn.ModuleList(nn.Sequential(*(HighwayConv(width, 3) for _ in range(n)))
                                    for n, _ in MNIST_STAGES)
        self.logits = nn.Linear(3 * 3 * width, classes)

    def forward(self, pixels):
        x = F.dropout(pixels / 256.0, MNIST_DROPOUT[0], self.training)
        x = torch.relu(self.stem(x))
        for stage, (_, pool), rate in zip(self.stages, MNIST_STAGES, MNIST_DROPOUT[1:],
                                          strict=True):
            x = F.dropout(_same_pool(stage(x), pool, 2), rate, self.training)
        # Keras flattens (height, width, channels): the same order here
        return self.logits(x.permute(0, 2, 3, 1).flatten(1))


class CifarNet(nn.Module):
    """`highway_cifar`: Tables 2 (head "maxpool_fc") and 3 (head "conv1x1_gap")."""

    def __init__(self, stage_widths, highway_per_stage, highway_kernel_sizes, head, head_width,
                 classes: int = 10, channels: int = 3):
        super().__init__()
        self.head = head
        self.convs, self.stages = nn.ModuleList(), nn.ModuleList()
        previous = channels
        for width, n in zip(stage_widths, highway_per_stage, strict=True):
            self.convs.append(nn.Conv2d(previous, width, 3, padding=1))
            self.stages.append(nn.Sequential(*(
                HighwayConv(width, k) for k in itertools.islice(
                    itertools.cycle(highway_kernel_sizes), n))))
            previous = width
        if head == "conv1x1_gap":
            self.head_layer = nn.Conv2d(previous, head_width, 1)
        else:
            self.head_layer = nn.Linear(previous, head_width)
        self.logits = nn.Linear(head_width, classes)

    def forward(self, pixels):
        flat = pixels.flatten(1)  # GCN over each image's pixels and channels
        mean = flat.mean(1).view(-1, 1, 1, 1)
        var = flat.var(1, unbiased=False).view(-1, 1, 1, 1)
        x = F.dropout((pixels - mean) / torch.sqrt(var + 1e-8), CIFAR_DROPOUT, self.training)
        for s, (conv, stage) in enumerate(zip(self.convs, self.stages, strict=True)):
            if s:
                x = F.dropout(F.max_pool2d(x, 2, 2), CIFAR_DROPOUT, self.training)
            x = stage(torch.relu(conv(x)))
        if self.head == "conv1x1_gap":
            x = torch.relu(self.head_layer(x)).mean((2, 3))
        else:
            x = torch.relu(self.head_layer(x.amax((2, 3))))
        return self.logits(F.dropout(x, CIFAR_DROPOUT, self.training))


def build(name: str) -> nn.Module:
    """The zoo net `name` (family highway_conv_mnist or highway_cifar, coupled, ReLU) in
    PyTorch, NCHW, with PyTorch's default initialisation."""
    import zoo

    meta = zoo.describe(name)
    args, family = meta["architecture_args"], meta["family"]
    if family not in ("highway_conv_mnist", "highway_cifar"):
        raise ValueError(f"{name} (family {family}) has no PyTorch twin: the conv highway nets "
                         "of NIPS 2015 Tables 1-3 have.")
    if args.get("variant", "coupled") != "coupled" or args.get("activation") != "relu":
        raise ValueError(f"{name}: only coupled ReLU highway nets have a PyTorch twin here.")
    channels = args["input_shape"][-1]
    if family == "highway_conv_mnist":
        return MnistNet(args["width"], args["classes"], channels)
    return CifarNet(args["stage_widths"], args["highway_per_stage"],
                    args["highway_kernel_sizes"], args["head"], args["head_width"],
                    args["classes"], channels)


def _conv(target: nn.Conv2d, kernel, bias) -> None:
    target.weight.data = torch.as_tensor(kernel).permute(3, 2, 0, 1).contiguous()
    target.bias.data = torch.as_tensor(bias).clone()


def _dense(target: nn.Linear, kernel, bias) -> None:
    target.weight.data = torch.as_tensor(kernel).T.contiguous()
    target.bias.data = torch.as_tensor(bias).clone()


def load_keras_weights(net: nn.Module, model) -> nn.Module:
    """`model`'s weights (the zoo net `net` was built for) copied into `net`, in place."""
    import keras

    def weights(layer_name):
        return [keras.ops.convert_to_numpy(v) for v in model.get_layer(layer_name).weights]

    highway = [layer.name for layer in model.layers if "_highway" in layer.name]
    twins = [m for m in net.modules() if isinstance(m, HighwayConv)]
    if len(highway) != len(twins):
        raise ValueError(f"{model.name} has {len(highway)} highway layers, the PyTorch net "
                         f"{len(twins)}: not the same architecture.")
    for name, twin in zip(highway, twins, strict=True):
        _conv(twin.conv, *weights(name))
    if isinstance(net, MnistNet):
        _conv(net.stem, *weights("stem_conv"))
    else:
        for s, conv in enumerate(net.convs, start=1):
            _conv(conv, *weights(f"stage{s}_conv"))
        if net.head == "conv1x1_gap":
            _conv(net.head_layer, *weights("head_conv"))
        else:
            _dense(net.head_layer, *weights("head_dense"))
    _dense(net.logits, *weights("logits"))
    return net
