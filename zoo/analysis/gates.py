"""What the highway layers do on data: gate statistics, block outputs and estimation errors.

One pass over the data collects everything the NIPS 2015 Figs. 2-3 and Greff et al. 2017
§4.2 show, batch by batch (so any number of examples fits in memory):

- per layer and unit: the transform-gate bias b_T, the mean of T(x) over all examples and
  over the examples of each class, and T(x) and the layer's output for one example;
- per stage (a chain of highway layers, each fed by the previous one): the estimation error
  of every block, its output minus the stage's final output, mean and standard deviation.

Convolutional layers: T(x) and outputs are averaged over the spatial axes (height, width)
first, so a "unit" is a channel; estimation errors are taken per position and channel and
then averaged over them (as Greff et al. do over "the three spatial dimensions").
Layers narrower than the widest one are padded with NaN in the (layer x unit) arrays.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import keras
import numpy as np

from layers import HighwayConv2D, HighwayDense


def highway_layers(model: keras.Model) -> list:
    """The model's highway layers (HighwayDense, HighwayConv2D), in graph order."""
    return [layer for layer in model.layers if isinstance(layer, HighwayDense | HighwayConv2D)]


def stages(model: keras.Model) -> list[tuple[str, list]]:
    """The model's highway stages: maximal chains of highway layers, each fed by the last.

    A fully connected zoo net is one stage ("highway"); a conv net has one per
    `stage{s}_highway{i}` group ("stage{s}"). Returns `(stage name, layers)` pairs.
    """
    chains: list[list] = []
    for layer in highway_layers(model):
        if chains and layer.input is chains[-1][-1].output:
            chains[-1].append(layer)
        else:
            chains.append([layer])
    named = []
    for i, chain in enumerate(chains, start=1):
        match = re.fullmatch(r"(.+?)_?highway_?\d+", chain[0].name)
        name = match.group(1) if match and match.group(1) else "highway"
        named.append((name if name not in {n for n, _ in named} else f"{name}{i}", chain))
    return named


def probe(model: keras.Model, layers: list | None = None) -> keras.Model:
    """A model giving, for each highway layer, `{name: (input, output)}` on the same inputs."""
    layers = highway_layers(model) if layers is None else layers
    if not layers:
        raise ValueError(
            f"{model.name} has no highway layers (HighwayDense, HighwayConv2D) to analyse."
        )
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return keras.Model(inputs, {layer.name: (layer.input, layer.output) for layer in layers})


def per_unit(values, channel_axis: int = -1) -> np.ndarray:
    """(batch, units): the spatial axes (all but batch and channels) averaged away."""
    values = np.moveaxis(np.asarray(values), channel_axis, -1)
    return values.mean(axis=tuple(range(1, values.ndim - 1))) if values.ndim > 2 else values


def transform_bias(layer) -> np.ndarray:
    """b_T as NumPy; NaN for variants without a transform gate (T is the constant 1)."""
    bias = layer.transform_bias
    if bias is None:
        return np.full(layer.bias.shape[0] // len(layer._learned), np.nan, np.float32)
    return keras.ops.convert_to_numpy(bias)


def nanmean(values, axis=None) -> np.ndarray:
    """`np.nanmean`, NaN (without a warning) where there is nothing but NaN."""
    values = np.asarray(values, np.float64)
    count = np.sum(np.isfinite(values), axis=axis)
    total = np.nansum(values, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def padded(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of different lengths as one 2-D float array, NaN-padded on the right."""
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), np.nan, np.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


@dataclasses.dataclass
class GateStatistics:
    """The numbers behind the gate figures. Arrays are (layer x unit) unless said otherwise."""

    layers: list[str]
    units: list[int]
    convolutional: list[bool]
    examples: int
    transform_bias: np.ndarray
    mean_t: np.ndarray
    class_mean_t: np.ndarray  # (class, layer, unit)
    class_counts: np.ndarray  # (class,)
    example_index: int
    example_label: int | None
    example_t: np.ndarray
    example_output: np.ndarray
    example_input: np.ndarray  # (unit,): what the first highway layer receives
    estimation: list[dict[str, Any]]

    @property
    def layer_mean_t(self) -> np.ndarray:
        """(layer,): mean T over units and data."""
        return nanmean(self.mean_t, axis=1)

    @property
    def routing(self) -> np.ndarray:
        """(class, layer, unit): a class's mean T minus the mean T over all data (Fig. 3)."""
        return self.class_mean_t - self.mean_t[None]


def _batches(images: np.ndarray, batch_size: int):
    for start in range(0, len(images), batch_size):
        yield start, np.asarray(images[start : start + batch_size], np.float32)


def gate_statistics(
    model: keras.Model,
    images: np.ndarray,
    labels: np.ndarray | None = None,
    *,
    num_classes: int | None = None,
    example_index: int = 0,
    batch_size: int = 500,
) -> GateStatistics:
    """Runs `model` over `images` (raw pixels, as the model takes them) and collects the
    gate statistics, block outputs and estimation errors of its highway layers.

    Args:
        model: a zoo model (or any functional model with highway layers).
        images: (n, ...) raw pixel values.
        labels: (n,) integer classes, for the per-class means; None skips them.
        num_classes: the number of classes (default: the model's output width).
        example_index: which example's T(x) and block outputs to keep (Fig. 2, columns 3-4).
        batch_size: examples per forward pass.
    """
    n = len(images)
    if n == 0:
        raise ValueError("gate_statistics needs at least one example; received none.")
    if not 0 <= example_index < n:
        raise ValueError(f"example_index must be in [0, {n}). Received: {example_index}")
    layers = highway_layers(model)
    net = probe(model, layers)
    stage_list = stages(model)
    if num_classes is None:
        num_classes = int(model.outputs[0].shape[-1])
    widths = [int(layer.input.shape[layer.channel_axis]) for layer in layers]
    sum_t = [np.zeros(w) for w in widths]
    class_sum_t = [np.zeros((num_classes, w)) for w in widths]
    class_counts = np.zeros(num_classes, np.int64)
    example: dict[str, Any] = {}
    err_sum: dict[str, np.ndarray] = {}
    err_sq: dict[str, np.ndarray] = {}
    for start, batch in _batches(images, batch_size):
        results = net(batch, training=False)
        onehot = None
        if labels is not None:
            y = np.asarray(labels[start : start + len(batch)], np.int64)
            onehot = np.eye(num_classes)[y]
            class_counts += onehot.sum(axis=0).astype(np.int64)
        for i, layer in enumerate(layers):
            inputs, outputs = results[layer.name]
            axis = layer.channel_axis
            t = per_unit(keras.ops.convert_to_numpy(layer.transform_gate(inputs)), axis)
            sum_t[i] += t.sum(axis=0)
            if onehot is not None:
                class_sum_t[i] += onehot.T @ t
            if start <= example_index < start + len(batch):
                j = example_index - start
                example.setdefault("t", []).append(t[j])
                example.setdefault("out", []).append(per_unit(outputs, axis)[j])
                if i == 0:
                    example["in"] = per_unit(inputs, axis)[j]
        for _, chain in stage_list:
            final = np.asarray(results[chain[-1].name][1], np.float64)
            for layer in chain:
                error = np.asarray(results[layer.name][1], np.float64) - final
                err_sum[layer.name] = err_sum.get(layer.name, 0.0) + error.sum(axis=0)
                err_sq[layer.name] = err_sq.get(layer.name, 0.0) + (error**2).sum(axis=0)
    estimation = []
    for name, chain in stage_list:
        means, stds = [], []
        for layer in chain:
            mean = err_sum[layer.name] / n
            std = np.sqrt(np.maximum(err_sq[layer.name] / n - mean**2, 0.0))
            means.append(float(mean.mean()))
            stds.append(float(std.mean()))
        estimation.append(
            {"stage": name, "layers": [layer.name for layer in chain], "mean": means, "std": stds}
        )
    counts = np.where(class_counts > 0, class_counts, np.nan)  # a class without examples: NaN
    return GateStatistics(
        layers=[layer.name for layer in layers],
        units=widths,
        convolutional=[isinstance(layer, HighwayConv2D) for layer in layers],
        examples=n,
        transform_bias=padded([transform_bias(layer) for layer in layers]),
        mean_t=padded([s / n for s in sum_t]),
        class_mean_t=np.stack(
            [padded([c[k] / counts[k] for c in class_sum_t]) for k in range(num_classes)]
        ) if labels is not None else np.zeros((0, len(layers), max(widths))),
        class_counts=class_counts if labels is not None else np.zeros(0, np.int64),
        example_index=example_index,
        example_label=None if labels is None else int(labels[example_index]),
        example_t=padded(example["t"]),
        example_output=padded(example["out"]),
        example_input=np.asarray(example["in"], np.float64),
        estimation=estimation,
    )


def layer_mean_t(model: keras.Model, images: np.ndarray) -> dict[str, float]:
    """Mean T(x) of each highway layer over `images` (all units, positions and examples)."""
    outputs = probe(model)(np.asarray(images, np.float32), training=False)
    return {
        layer.name: float(np.mean(keras.ops.convert_to_numpy(
            layer.transform_gate(outputs[layer.name][0]))))
        for layer in highway_layers(model)
    }
