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

Batch-normalised blocks (`layers.BNHighwayBlock`, the BN CIFAR and ImageNet highway nets) are
highway layers like the others: T(x) is the block's gate in inference mode (moving
statistics), with the block's output shape, its units the output channels, b_T its gate's
last BN beta. A block that changes the shape (strides, a projection shortcut) starts a new
stage, so a stage's blocks share one output shape.

The gated skips (`layers.variants.GATED_SKIPS`): a "gru_gate" layer (GTrXL's gate) is a highway
layer like the others, its T being the update gate z (out = z·g + (1 - z)·x weighs the
transform path as T does in y = T·H + (1 - T)·x; `HighwayDense.transform_gate`) and its b_T
z's bias, -b_g. The static skips (`layers.variants.STATIC_SKIPS`: rezero, layerscale,
laurel_rw, laurel_lr) scale every example alike: they have no T and are left out here, as
"plain" is (`skip_layers` lists them; `zoo.analysis.skips` reports their learned scales).

Stacked nets (`layers.HighwayStack`, `zoo.load(..., stacked=True)`): `highway_layers` lists
each of a stack's layers as a `StackedLayer`, a light view named as the per-layer net names
that layer (`highway_1`, ...), and `GateProbe` reads every layer's input, output and T out of
the stack's `(depth, ...)` analysis tensors, so every analysis (and the export's "gates"
signature and the TensorBoard summaries) gives a stacked net the per-layer net's layers,
names and numbers, without converting it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import keras
import numpy as np

from layers import BNHighwayBlock, HighwayConv2D, HighwayDense, HighwayStack
from layers.variants import STATIC_SKIPS, no_routing

# Variants without a gate to analyse: plain (y = H(x)) and the static skips, which scale every
# example alike (gru_gate's update gate z is analysed as T).
_UNGATED = ("plain", *STATIC_SKIPS)

# The layers the analyses look at: each computes y from x through a transform gate T(x).
HIGHWAY_LAYERS = (HighwayDense, HighwayConv2D, BNHighwayBlock, HighwayStack)


class StackedLayer:
    """Layer `index` of a `HighwayStack`, standing in for the `HighwayDense` it equals.

    `name` is the name that layer has in the equivalent per-layer net (`stack.layer_names()`:
    `highway_1`, ...). A view holds no weights or tensors of its own: `GateProbe` reads its
    values out of the stack's per-layer analysis tensors. `lesioned` reads and sets whether
    `index` is in `stack.lesioned_layers` (a new set is assigned; the stack reads it when its
    `call` runs or is traced), so `zoo.analysis.lesioned(view)` works as for a `HighwayDense`.
    """

    __slots__ = ("stack", "index", "name")
    channel_axis = -1

    def __init__(self, stack: HighwayStack, index: int, name: str):
        self.stack = stack
        self.index = int(index)
        self.name = name

    def __repr__(self) -> str:
        return f"<StackedLayer {self.name!r}: layer {self.index} of {self.stack.name!r}>"

    @property
    def variant(self) -> str:
        return self.stack.variant

    @property
    def width(self) -> int:
        return int(self.stack.kernel.shape[1])

    @property
    def transform_bias(self):
        """This layer's b_T, `(d,)` (gru_gate: -b_g, its update gate's); None for variants
        without a transform gate."""
        bias = self.stack.transform_bias
        return None if bias is None else bias[self.index]

    @property
    def lesioned(self) -> bool:
        return self.index in self.stack.lesioned_layers

    @lesioned.setter
    def lesioned(self, value: bool) -> None:
        current = set(self.stack.lesioned_layers)
        self.stack.lesioned_layers = current | {self.index} if value else current - {self.index}


def stacked_layers(stack: HighwayStack, names: list[str] | None = None) -> list[StackedLayer]:
    """The views of `stack`'s layers, named `names` (default: `stack.layer_names()`)."""
    names = stack.layer_names() if names is None else list(names)
    return [StackedLayer(stack, i, name) for i, name in enumerate(names)]


def _units(model: keras.Model, keep) -> list:
    """The model's highway layers whose variant `keep(variant)` accepts, in graph order, each
    stack's as `StackedLayer` views (named as `highway_layers` says)."""
    found = [layer for layer in model.layers
             if isinstance(layer, HIGHWAY_LAYERS) and keep(layer.variant)]
    stacks = [layer for layer in found if isinstance(layer, HighwayStack)]
    others = {layer.name for layer in model.layers}
    default = [name for stack in stacks for name in stack.layer_names()]
    own_names = len(set(default)) == len(default) and not set(default) & others
    units = []
    for layer in found:
        if isinstance(layer, HighwayStack):
            prefix = "highway_" if own_names else f"{layer.name}_"
            units.extend(stacked_layers(layer, layer.layer_names(prefix=prefix)))
        else:
            units.append(layer)
    return units


def highway_layers(model: keras.Model) -> list:
    """The model's highway layers, in graph order: each `HighwayDense`, `HighwayConv2D` and
    `BNHighwayBlock`, and for each `HighwayStack` one `StackedLayer` per layer it holds.

    A stack's layers get the names of the per-layer net (`stack.layer_names()`, `highway_1`,
    ...); where those would clash (two stacks, or a layer of that name), every stack's layers
    are named `<stack name>_1`, ... instead.

    Layers of variant "plain" (y = H(x): no gates, no carry) are left out: T is undefined
    there, so a net of them is summarised, exported and analysed as a plain Dense net is
    (no gate summaries, no "gates" signature, `analyze` refuses it with a message). So are
    the static skips (`layers.variants.STATIC_SKIPS`: rezero, layerscale, laurel_rw,
    laurel_lr), which scale every example alike and have no T either (`skip_layers` lists
    them). "gru_gate" layers are in, their T being GTrXL's update gate z.
    """
    return _units(model, lambda variant: variant not in _UNGATED)


def skip_layers(model: keras.Model) -> list:
    """The model's layers of a static skip (`layers.variants.STATIC_SKIPS`), in graph order and
    named as `highway_layers` names its layers (a stack's as `StackedLayer` views): what
    `zoo.analysis.skips` reads the learned scales of."""
    return _units(model, lambda variant: variant in STATIC_SKIPS)


def no_gates_reason(model: keras.Model) -> str:
    """Why `highway_layers(model)` is empty, in words, for an error message."""
    plain = [layer.name for layer in model.layers
             if isinstance(layer, HIGHWAY_LAYERS) and layer.variant == "plain"]
    if plain:
        return (f"its layers {', '.join(plain[:3])}{', ...' if len(plain) > 3 else ''} are "
                "variant 'plain' (y = H(x)), which has no gates; gate analyses need a gated "
                "variant (coupled, full, c_only, t_only, residual) or gru_gate.")
    skips = [layer for layer in model.layers
             if isinstance(layer, HIGHWAY_LAYERS) and layer.variant in STATIC_SKIPS]
    if skips:
        return f"{no_routing(skips[0].variant)}."
    return ("it holds no HighwayDense, HighwayConv2D, BNHighwayBlock or HighwayStack layer (a "
            "plain net has no gates).")


def highway_layer(model: keras.Model, name: str):
    """The highway layer `name` of `highway_layers(model)` (a `StackedLayer` in a stack):
    `model.get_layer` for per-layer and stacked nets alike."""
    for layer in highway_layers(model):
        if layer.name == name:
            return layer
    names = [layer.name for layer in highway_layers(model)]
    shown = ", ".join(names[:5]) + (f", ... ({len(names)} in all)" if len(names) > 5 else "")
    raise ValueError(
        f"{model.name} has no highway layer named {name!r}. Its highway layers: {shown or 'none'}"
    )


def source_layer(layer):
    """The Keras layer that computes `layer`: itself, or the stack a `StackedLayer` is in."""
    return layer.stack if isinstance(layer, StackedLayer) else layer


def width_of(layer) -> int:
    """The number of units (channels) of a highway layer's output and T."""
    if isinstance(layer, StackedLayer):
        return layer.width
    return int(layer.output.shape[layer.channel_axis])


def _sources(layers: list) -> list[tuple[Any, list]]:
    """The distinct Keras layers computing `layers`, in order, each with its units."""
    grouped: dict[int, tuple[Any, list]] = {}
    for layer in layers:
        grouped.setdefault(id(source_layer(layer)), (source_layer(layer), []))[1].append(layer)
    return list(grouped.values())


def _input_of(layer):
    if isinstance(layer, StackedLayer):
        return layer.stack.input if layer.index == 0 else None
    return layer.input


def _output_of(layer):
    if isinstance(layer, StackedLayer):
        return layer.stack.output if layer.index == layer.stack.depth - 1 else None
    return layer.output


def _feeds(previous, layer) -> bool:
    """Whether `layer` takes `previous`'s output as its input and keeps its shape."""
    if isinstance(layer, StackedLayer) and layer.index > 0:
        return (isinstance(previous, StackedLayer) and previous.stack is layer.stack
                and previous.index == layer.index - 1)
    output = _output_of(previous)
    return output is not None and _input_of(layer) is output and _keeps_shape(layer)


def _keeps_shape(layer) -> bool:
    """Whether a highway layer's output has its input's shape (a layer of a stack always)."""
    return (isinstance(layer, StackedLayer)
            or tuple(layer.input.shape) == tuple(layer.output.shape))


def stages(model: keras.Model) -> list[tuple[str, list]]:
    """The model's highway stages: maximal chains of highway layers, each fed by the last
    and keeping its shape (a layer that changes it, such as a strided block, starts a stage).

    A fully connected zoo net is one stage ("highway"), stacked or not; a conv net has one per
    `stage{s}_highway{i}` group ("stage{s}"), a BN net one per `stage{s}_block{b}` or
    `conv{s}_block{b}` group. Returns `(stage name, layers)` pairs.
    """
    chains: list[list] = []
    for layer in highway_layers(model):
        if chains and _feeds(chains[-1][-1], layer):
            chains[-1].append(layer)
        else:
            chains.append([layer])
    named = []
    for i, chain in enumerate(chains, start=1):
        match = re.fullmatch(r"(.+?)_?(?:highway|block)_?\d+", chain[0].name)
        name = match.group(1) if match and match.group(1) else "highway"
        named.append((name if name not in {n for n, _ in named} else f"{name}{i}", chain))
    return named


def probe(model: keras.Model, layers: list | None = None) -> keras.Model:
    """A model giving, for each highway layer, `{name: (input, output)}` on the same inputs.

    For the layers of a stack (`StackedLayer`s) the entry is the whole stack's, under the
    stack's name: its input and its last layer's output. `GateProbe` gives every layer's own.
    """
    layers = highway_layers(model) if layers is None else layers
    if not layers:
        raise ValueError(f"{model.name} has no highway layers to analyse: {no_gates_reason(model)}")
    inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
    return keras.Model(
        inputs, {source.name: (source.input, source.output) for source, _ in _sources(layers)}
    )


class GateProbe:
    """Runs a model on a batch and gives each highway layer's input, output and T(x).

    `probe(x)` returns `{name: (input, output, T)}` and `probe.gates(x)` `{name: T}`, one
    entry per layer of `layers` (default `highway_layers(model)`), with the per-layer net's
    shapes (`x`'s batch, then the layer's). A `HighwayDense`/`HighwayConv2D`/`BNHighwayBlock`
    gives its own (T with the output's shape, a BN block's in inference mode);
    the layers of a `HighwayStack` are read out of the stack's `layer_inputs` and
    `transform_gates` (one loop each over the stack, whatever its depth), so a stacked net gives
    what the per-layer net with the same weights gives. Tensors are the backend's (usable
    inside a traced function, e.g. an exported signature); `numpy=True` returns NumPy arrays,
    converting each stack's `(depth, ...)` tensors once, float32 under a mixed-precision policy
    (a float16 sum of squares overflows: a std of T came out infinite).
    """

    def __init__(self, model: keras.Model, layers: list | None = None):
        self.model = model
        self.layers = highway_layers(model) if layers is None else list(layers)
        self.net = probe(model, self.layers)
        self.sources = _sources(self.layers)
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
        # For T alone: the inputs only (no pass through a stack just for its output).
        self.inputs_net = keras.Model(
            inputs, {source.name: source.input for source, _ in self.sources}
        )
        self._compiled = {}  # on JAX: what -> (variables, the jitted function)
        self._stack_names = {source.name for source, _ in self.sources
                             if isinstance(source, HighwayStack)}
        self._stacks_only = len(self._stack_names) == len(self.sources)

    @property
    def compiled(self) -> bool:
        """Whether NumPy results come from a compiled function (JAX) rather than eagerly."""
        return keras.backend.backend() == "jax"

    def _run(self, x, with_io: bool, numpy: bool) -> dict[str, Any]:
        if numpy and self.compiled:
            return self._run_compiled(x, "io" if with_io else "gates")
        return self._trace(x, with_io, numpy)

    def _run_compiled(self, x, what: str) -> Any:
        """On JAX, one compiled function of the weights and the batch. Run eagerly, each op
        is dispatched on its own and a stack's lax.scan is traced again at every call (a
        gate summary per epoch: 0.2 s each on 2 cores); compiled, a call costs milliseconds,
        and JAX's persistent cache keeps the compilation for the next process. The weights
        are arguments, not constants, so a later call sees the weights as they are then.
        It returns each source's arrays as they come (a stack's `(depth, ...)` ones) and they
        are split by layer in NumPy: a function with an output per layer took twice as long
        to compile. `what`: "gates", "io" or "first" (`gates_and_first`)."""
        import jax

        if what not in self._compiled:
            variables = list(self.model.variables)

            def run(values, x):
                with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                    if what != "first":
                        return self._source_values(x, with_io=what == "io")
                    return self._gates_and_first_values(x)

            self._compiled[what] = variables, jax.jit(run)
        variables, run = self._compiled[what]
        out = jax.tree_util.tree_map(_to_numpy, run([v.value for v in variables], x))
        if what != "first":
            return self._per_layer(out, with_io=what == "io")
        gates, first = out
        return self._per_layer(gates, with_io=False), self._per_layer(first, with_io=True)

    def gates_and_first(self, x) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
        """`probe.gates(x)` and `probe(x[:1])`, as NumPy arrays: T of every layer on the batch,
        and the first example's inputs, outputs and T (a training run's gate summaries, and
        its final Fig. 2 from the last of them). On JAX one compiled function gives both."""
        if self.compiled:
            return self._run_compiled(x, "first")
        return self.gates(x, numpy=True), self(x[:1], numpy=True)

    def _gates_and_first_values(self, x) -> tuple[dict[str, Any], dict[str, tuple]]:
        """`_source_values(x, with_io=True)` as T on the batch and the first example's values,
        per source (a stack's still `(depth, ...)`)."""
        gates, first = {}, {}
        for name, value in self._source_values(x, with_io=True).items():
            if name in self._stack_names:  # (depth, batch, ...) inputs and T; the output
                inputs, t, output = value
                gates[name], first[name] = t, (inputs[:, :1], t[:, :1], output[:1])
            else:  # input, output, T
                gates[name], first[name] = value[2], tuple(v[:1] for v in value)
        return gates, first

    def _source_values(self, x, with_io: bool) -> dict[str, Any]:
        """Per source (a highway layer, or a `HighwayStack`): T, or with `with_io` its
        `(input, output, T)`; a stack's as its `(depth, ...)` tensors, `(inputs, T, output)`."""
        # A stack gives its layers' inputs, gates and output from one pass of its own: the
        # net need not run through it (a net of stacks only), nor twice more for T.
        if with_io and not self._stacks_only:
            results = self.net(x, training=False)
        else:
            results = {name: (value, None)
                       for name, value in self.inputs_net(x, training=False).items()}
        values = {}
        for source, _ in self.sources:
            source_in, source_out = results[source.name]
            if isinstance(source, HighwayStack):
                values[source.name] = (source.layer_inputs_and_gates(source_in) if with_io
                                       else source.transform_gates(source_in))
            else:
                t = source.transform_gate(source_in)
                values[source.name] = (source_in, source_out, t) if with_io else t
        return values

    def _per_layer(self, values: dict[str, Any], with_io: bool) -> dict[str, Any]:
        """`_source_values`, one entry per layer of `self.layers`."""
        out = {}
        for source, units in self.sources:
            value = values[source.name]
            if not isinstance(source, HighwayStack):
                out[source.name] = value
                continue
            for unit in units:
                i = unit.index
                if not with_io:
                    out[unit.name] = value[i]
                    continue
                ins, ts, last = value
                output = ins[i + 1] if i + 1 < source.depth else last
                out[unit.name] = (ins[i], output, ts[i])
        return out

    def _trace(self, x, with_io: bool, numpy: bool) -> dict[str, Any]:
        values = self._source_values(x, with_io)
        if numpy:  # a stack's (depth, ...) tensors converted once each
            values = keras.tree.map_structure(_to_numpy, values)
        return self._per_layer(values, with_io)

    def __call__(self, x, *, numpy: bool = False) -> dict[str, tuple]:
        """`{name: (input, output, T)}` of every layer on the batch `x`."""
        return self._run(x, with_io=True, numpy=numpy)

    def gates(self, x, *, numpy: bool = False) -> dict[str, Any]:
        """`{name: T}` of every layer on the batch `x`."""
        return self._run(x, with_io=False, numpy=numpy)


def _to_numpy(value) -> np.ndarray:
    """A tensor as NumPy, float16 and bfloat16 widened to float32."""
    array = keras.ops.convert_to_numpy(value)
    if keras.backend.standardize_dtype(array.dtype) in ("float16", "bfloat16"):
        return array.astype(np.float32)
    return array


def per_unit(values, channel_axis: int = -1) -> np.ndarray:
    """(batch, units): the spatial axes (all but batch and channels) averaged away."""
    values = np.moveaxis(np.asarray(values), channel_axis, -1)
    return values.mean(axis=tuple(range(1, values.ndim - 1))) if values.ndim > 2 else values


def _transform_bias_numpy(layer) -> np.ndarray | None:
    """`layer.transform_bias` as NumPy. Where b_T is columns of the layer's fused `bias`
    (`bias_columns`), they are sliced in NumPy: on JAX an eager slice is one more compilation
    (0.4-1 s of a first training run, where it comes beside the train step's). Elsewhere (a
    gru_gate's -b_g, a BN block's, no T at all) the layer's own `transform_bias`."""
    columns = layer.bias_columns("t") if hasattr(layer, "bias_columns") else None
    if columns is not None:
        return keras.ops.convert_to_numpy(layer.bias)[..., columns]
    bias = layer.transform_bias
    return None if bias is None else keras.ops.convert_to_numpy(bias)


def transform_biases(layers: list) -> list[np.ndarray]:
    """Each layer's b_T as NumPy (NaN for variants without a transform gate: T is the
    constant 1), reading each stack's `(depth, d)` b_T once."""
    stacked: dict[int, np.ndarray | None] = {}
    result = []
    for layer in layers:
        if isinstance(layer, StackedLayer):
            key = id(layer.stack)
            if key not in stacked:
                stacked[key] = _transform_bias_numpy(layer.stack)
            bias = stacked[key]
            result.append(np.full(layer.width, np.nan, np.float32) if bias is None
                          else bias[layer.index])
            continue
        bias = _transform_bias_numpy(layer)
        result.append(np.full(width_of(layer), np.nan, np.float32) if bias is None else bias)
    return result


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
    net = GateProbe(model, layers)
    stage_list = stages(model)
    if num_classes is None:
        num_classes = int(model.outputs[0].shape[-1])
    widths = [width_of(layer) for layer in layers]
    sum_t = [np.zeros(w) for w in widths]
    class_sum_t = [np.zeros((num_classes, w)) for w in widths]
    class_counts = np.zeros(num_classes, np.int64)
    example: dict[str, Any] = {}
    err_sum: dict[str, np.ndarray] = {}
    err_sq: dict[str, np.ndarray] = {}
    for start, batch in _batches(images, batch_size):
        results = net(batch, numpy=True)  # {name: (input, output, T)}
        onehot = None
        if labels is not None:
            y = np.asarray(labels[start : start + len(batch)], np.int64)
            onehot = np.eye(num_classes)[y]
            class_counts += onehot.sum(axis=0).astype(np.int64)
        for i, layer in enumerate(layers):
            inputs, outputs, t = results[layer.name]
            axis = layer.channel_axis
            t = per_unit(t, axis)
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
        convolutional=_convolutional(layers),
        examples=n,
        transform_bias=padded(transform_biases(layers)),
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


def _convolutional(layers: list) -> list[bool]:
    return [isinstance(layer, HighwayConv2D | BNHighwayBlock) for layer in layers]


def sample_statistics(layers: list, gates: dict[str, np.ndarray],
                      example_io: dict[str, tuple], example_label: int | None = None
                      ) -> GateStatistics:
    """Fig. 2's numbers (what `gate_statistics` gives with `example_index=0`) from T on a
    sample, `GateProbe(...).gates(sample, numpy=True)`, and the sample's first example's inputs
    and outputs, `GateProbe(...)(sample[:1])` (both: `GateProbe.gates_and_first`): a training
    run's final Fig. 2 thus needs no pass over the whole sample for every layer's inputs and
    outputs. No class means and no estimation errors (Figs. 3-4).
    """
    def first(values, layer):
        return per_unit(np.asarray(values), layer.channel_axis)[0]

    unit_t = [per_unit(gates[layer.name], layer.channel_axis) for layer in layers]
    widths = [width_of(layer) for layer in layers]
    return GateStatistics(
        layers=[layer.name for layer in layers],
        units=widths,
        convolutional=_convolutional(layers),
        examples=len(unit_t[0]),
        transform_bias=padded(transform_biases(layers)),
        mean_t=padded([t.mean(axis=0, dtype=np.float64) for t in unit_t]),
        class_mean_t=np.zeros((0, len(layers), max(widths))),
        class_counts=np.zeros(0, np.int64),
        example_index=0,
        example_label=example_label,
        example_t=padded([t[0] for t in unit_t]),
        example_output=padded([first(example_io[layer.name][1], layer) for layer in layers]),
        example_input=np.asarray(first(example_io[layers[0].name][0], layers[0]), np.float64),
        estimation=[],
    )


def layer_mean_t(model: keras.Model, images: np.ndarray) -> dict[str, float]:
    """Mean T(x) of each highway layer over `images` (all units, positions and examples)."""
    gates = GateProbe(model).gates(np.asarray(images, np.float32), numpy=True)
    return {name: float(np.mean(t)) for name, t in gates.items()}
