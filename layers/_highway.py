"""What the highway layers share: variants, fused initializer, combine formula, layer body.

`HighwayDense` and `HighwayConv2D` differ only in the linear map (a matmul or a convolution) and
the channel axis; everything else lives here, in `HighwayBase`. The gated skips (`GATED_SKIPS`:
ReZero, LayerScale, GTrXL's gate, LAuReL) are here too: their own weights (`skip_weight_specs`)
and their output (`skip_combine`).
"""

import gc
import math
import numbers

import keras
from keras import ops

from layers.variants import (
    ALL_VARIANTS,
    GATED_SKIPS,
    LEARNED_BRANCHES,
    STATIC_SKIPS,
    default_laurel_rank,
    no_routing,
    unknown_variant,
)


def get_bias_initializer(identifier) -> keras.initializers.Initializer:
    """`keras.initializers.get`, where a plain number also means `Constant(number)`."""
    if isinstance(identifier, numbers.Real) and not isinstance(identifier, bool):
        return keras.initializers.Constant(float(identifier))
    return keras.initializers.get(identifier)


def _reseeded(initializer, offset: int):
    """A copy of `initializer` with another random stream (int-seeded ones repeat per call)."""
    seed = getattr(initializer, "seed", None)
    if not isinstance(seed, int) or isinstance(seed, bool):
        return initializer  # not random (zeros, constant), or a SeedGenerator: it advances itself
    config = initializer.get_config()
    config["seed"] = (seed + offset) % 2**31
    return type(initializer).from_config(config)


class FusedInitializer(keras.initializers.Initializer):
    """Fills equal slices of the last axis, each by its own initializer on the slice's shape.

    Every initializer sees one branch's shape, so fan-in and fan-out are those of a single branch,
    not of the fused tensor. A Keras initializer seeded with an integer (or unseeded) returns the
    same values on every call, so an instance listed twice (the kernel initializer reused for T,
    say) is replaced by a re-seeded copy: W_H and W_T must not start equal.
    """

    def __init__(self, initializers):
        initializers = [keras.initializers.get(init) for init in initializers]
        self.initializers = [
            _reseeded(init, i) if any(init is prev for prev in initializers[:i]) else init
            for i, init in enumerate(initializers)
        ]

    def __call__(self, shape, dtype=None):
        *leading, width = shape
        branch_shape = (*leading, width // len(self.initializers))
        return ops.concatenate(
            [init(branch_shape, dtype=dtype) for init in self.initializers], axis=-1
        )

    def get_config(self):
        return {"initializers": [keras.initializers.serialize(i) for i in self.initializers]}


def combine(variant: str, x, h, t=None, c=None):
    """y = H·T + x·C, where a gate given as None is the constant 1 (and C = 1 - T when coupled);
    "plain" is y = H (T = 1, C = 0) unless a lesion mask passes its T and C explicitly."""
    if variant == "plain" and t is None and c is None:
        return h
    if variant == "coupled":
        # x + T·(H - x) equals H·T + x·(1 - T) with one multiply fewer, and reads as what the layer
        # does: move x a fraction T of the way to H (Brainstorm's form; exactly x where T = 0).
        return x + t * (h - x)
    return (h if t is None else h * t) + (x if c is None else x * c)


def combine_backward(variant: str, x, h, t, c, dy):
    """The gradients of `combine`'s y for dL/dy: `(dx, dh, dt, dc)`, where dx is the carry
    path's share of dL/dx (None for "plain": no carry) and dt, dc are None for gates the variant
    does not learn. Operators only, so it runs on any backend's arrays (the hand-written
    backward passes of `HighwayStack` on JAX and PyTorch; TensorFlow's is in _stack_loop.py)."""
    if variant == "plain" and t is None and c is None:  # y = H
        return None, dy, None, None
    if variant == "coupled":  # y = x + T (H - x)
        dh = dy * t
        return dy - dh, dh, dy * (h - x), None
    # y = H T + x C, a gate not learned being 1
    return (dy if c is None else dy * c, dy if t is None else dy * t,
            None if t is None else dy * h, None if c is None else dy * x)


def _per_channel(vector, x, channel_axis):
    """A `(channels,)` vector shaped to broadcast along `x`'s channel axis."""
    if channel_axis == -1:
        return vector
    return ops.reshape(vector, (-1,) + (1,) * (len(x.shape) - channel_axis - 1))


def gru_gate_update(x, h, weights, linear=ops.matmul, channel_axis=-1):
    """GTrXL's gate around y = H(x): `(z, g)`, the update gate and the candidate, with x's
    shape; the layer's output is `(1 - z) x + z g`, so z weighs the transform path as T does
    in the coupled layer, and the gate analyses read z as T (`transform_gate`).

    r = s(W_r y + U_r x), z = s(W_z y + U_z x - b_g), g = tanh(W_g y + U_g (r x)).
    W = [W_r | W_z | W_g] is one map of y; U_g reads r x, so only [U_r | U_z] is applied to x
    at once. `weights`, `linear`, `channel_axis`: as `skip_combine`'s."""
    d = x.shape[channel_axis]
    wr, wz, wg = ops.split(linear(h, weights["gate_kernel"]), 3, axis=channel_axis)
    u_rz, u_g = ops.split(weights["gate_recurrent_kernel"], [2 * d], axis=-1)
    ur, uz = ops.split(linear(x, u_rz), 2, axis=channel_axis)
    r = ops.sigmoid(wr + ur)
    z = ops.sigmoid(wz + uz - _per_channel(weights["gate_bias"], x, channel_axis))
    g = ops.tanh(wg + linear(r * x, u_g))
    return z, g


def skip_combine(variant, x, h, weights, linear=ops.matmul, channel_axis=-1):
    """The output of a gated skip (`GATED_SKIPS`) from x, H(x) and the layer's own weights
    (`weights`, a dict by name; see `HighwayArguments.skip_weight_specs`). `linear(v, kernel)` is
    the layer's map (a matmul or a "same" convolution), used by GTrXL's W and U."""
    if variant == "rezero":  # y = x + a H
        return x + weights["alpha"] * h
    if variant == "layerscale":  # y = x + diag(l) H
        return x + _per_channel(weights["layer_scale"], x, channel_axis) * h
    if variant == "laurel_rw":  # y = a H + b x
        return weights["alpha"] * h + weights["beta"] * x
    if variant == "laurel_lr":  # y = H + x + B A x, A and B per position on the channels
        last = x if channel_axis == -1 else ops.moveaxis(x, channel_axis, -1)
        low = ops.matmul(ops.matmul(last, weights["laurel_a"]), weights["laurel_b"])
        return h + x + (low if channel_axis == -1 else ops.moveaxis(low, -1, channel_axis))
    if variant == "gru_gate":
        z, g = gru_gate_update(x, h, weights, linear, channel_axis)
        return x + z * (g - x)
    raise ValueError(f"{variant!r} is not one of the gated skips {GATED_SKIPS}")


def scaled_combine(x, h, scales):
    """y = s_H·H + s_x·x, `scales` = (s_H, s_x) stacked: a layer of rezero, layerscale or
    laurel_rw as HighwayStack's fast paths run it."""
    return h * scales[0] + x * scales[1]


def scaled_combine_backward(x, h, scales, dy):
    """`(dx, dh, ds_H, ds_x)` of `scaled_combine` for dL/dy, per example (the caller sums the
    scales' gradients over the batch)."""
    return dy * scales[1], dy * scales[0], dy * h, dy * x


def _finite_number(name, value):
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number. Received: {name}={value!r}")
    return float(value)


class HighwayArguments:
    """The constructor arguments every highway layer shares: normalised, serialised, and
    turned into each learned branch's initializers. Mixed into `keras.layers.Layer`s."""

    def _set_highway_arguments(
        self, activation, variant, kernel_initializer, bias_initializer,
        transform_kernel_initializer, transform_bias_initializer, carry_kernel_initializer,
        carry_bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
        bias_constraint,
    ):
        if variant not in ALL_VARIANTS:
            raise ValueError(unknown_variant(variant))
        self.activation = keras.activations.get(activation)
        self.variant = variant
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = get_bias_initializer(bias_initializer)
        self.transform_kernel_initializer = keras.initializers.get(transform_kernel_initializer)
        self.transform_bias_initializer = get_bias_initializer(transform_bias_initializer)
        self.carry_kernel_initializer = keras.initializers.get(carry_kernel_initializer)
        self.carry_bias_initializer = get_bias_initializer(carry_bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self._learned = LEARNED_BRANCHES[variant]

    def _set_skip_arguments(self, layerscale_init, gru_gate_bias, laurel_rank):
        """The gated skips' own arguments (each read by one variant only)."""
        self.layerscale_init = _finite_number("layerscale_init", layerscale_init)
        self.gru_gate_bias = _finite_number("gru_gate_bias", gru_gate_bias)
        if laurel_rank is not None and (not isinstance(laurel_rank, numbers.Integral)
                                        or isinstance(laurel_rank, bool) or laurel_rank < 1):
            raise ValueError("laurel_rank must be None or an integer >= 1 (the rank of B·A). "
                             f"Received: laurel_rank={laurel_rank!r}")
        self.laurel_rank = None if laurel_rank is None else int(laurel_rank)

    def skip_weight_specs(self, channels, kernel_shape):
        """`(name, shape, initializer)` of each weight of one layer's gated skip, after `kernel`
        and `bias` (none for Greff's variants); `kernel_shape` is one branch's d -> d kernel
        shape. A list of initializers fills equal slices of the last axis (`FusedInitializer`)."""
        variant = self.variant
        if variant == "rezero":
            return [("alpha", (), keras.initializers.Zeros())]
        if variant == "layerscale":
            return [("layer_scale", (channels,), keras.initializers.Constant(self.layerscale_init))]
        if variant == "laurel_rw":
            return [("alpha", (), keras.initializers.Ones()),
                    ("beta", (), keras.initializers.Ones())]
        if variant == "gru_gate":
            # W and U are drawn as W_H is (one branch's fans each), from streams of their own.
            w = _reseeded(self.kernel_initializer, 101)
            u = _reseeded(self.kernel_initializer, 201)
            return [("gate_kernel", (*kernel_shape[:-1], 3 * channels), [w, w, w]),
                    ("gate_recurrent_kernel", (*kernel_shape[:-1], 3 * channels), [u, u, u]),
                    ("gate_bias", (channels,), keras.initializers.Constant(self.gru_gate_bias))]
        if variant == "laurel_lr":
            rank = self.laurel_rank or default_laurel_rank(channels)
            if rank > channels:
                raise ValueError(f"laurel_rank ({rank}) must be at most the channels "
                                 f"({channels}): B·A is a low-rank map of x.")
            # B = 0: a fresh layer is the residual layer y = H(x) + x it replaces.
            return [("laurel_a", (channels, rank), [_reseeded(self.kernel_initializer, 301)]),
                    ("laurel_b", (rank, channels), keras.initializers.Zeros())]
        return []

    def _skip_config(self):
        """The config of the variant's own arguments (nothing for Greff's variants, whose
        configs stay as they were)."""
        key = {"layerscale": "layerscale_init", "gru_gate": "gru_gate_bias",
               "laurel_lr": "laurel_rank"}.get(self.variant)
        return {} if key is None else {key: getattr(self, key)}

    def _skip_weights(self):
        """The gated skip's own weights by name (a stack's stacked by layer), in the compute
        dtype; empty for Greff's variants."""
        return {name: ops.cast(getattr(self, name), self.compute_dtype)
                for name in self._skip_names}

    def _refuse_gate(self, gate):
        """Refuses the gate analyses for the static skips (`STATIC_SKIPS`): they have no gate
        (gru_gate's is its update gate z: `transform_gate`)."""
        if self.variant in STATIC_SKIPS:
            raise ValueError(f"{type(self).__name__} of variant={self.variant!r} has no {gate}; "
                             f"{no_routing(self.variant)}.")

    def _branch_initializers(self):
        """(kernel initializers, bias initializers) of the learned branches, in order."""
        kernel = {
            "h": self.kernel_initializer,
            "t": self.transform_kernel_initializer or self.kernel_initializer,
            "c": self.carry_kernel_initializer or self.kernel_initializer,
        }
        bias = {
            "h": self.bias_initializer,
            "t": self.transform_bias_initializer,
            "c": self.carry_bias_initializer,
        }
        return [kernel[b] for b in self._learned], [bias[b] for b in self._learned]

    def _require_built(self):
        if not self.built:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' has no bias yet: call it on an input "
                "(or build it) first."
            )

    def bias_columns(self, branch):
        """Where gate `branch`'s bias ("t": the transform gate, "c": the carry gate) lies on
        the last axis of `bias` (which holds the learned branches side by side): a `slice`,
        or None for a gate the variant does not learn. Reading `bias` as NumPy and slicing it
        there gives b_T without a backend op (on JAX each new eager op is a compilation)."""
        if branch not in self._learned:
            return None
        self._require_built()
        width = self.bias.shape[-1] // len(self._learned)
        start = self._learned.index(branch) * width
        return slice(start, start + width)

    def _bias_slice(self, branch):
        """The `branch` gate's slice of `bias`'s last axis (one per layer for a stack)."""
        columns = self.bias_columns(branch)
        if columns is None:
            return None
        # (A tensor, not the variable: JAX's and PyTorch's slicing take no Keras variable.)
        return ops.convert_to_tensor(self.bias)[..., columns]

    @property
    def transform_bias(self):
        """b_T, the transform gate's slice of `bias` (`(depth, d)` for a stack); for
        "gru_gate" the bias of its update gate z (read as T), -b_g (`-gate_bias`); None for
        variants without T."""
        if self.variant == "gru_gate":
            self._require_built()
            return ops.negative(ops.convert_to_tensor(self.gate_bias))
        return self._bias_slice("t")

    @property
    def carry_bias(self):
        """b_C, the carry gate's slice of `bias` (`(depth, d)` for a stack); None for variants
        without a learned C."""
        return self._bias_slice("c")

    def _highway_config(self):
        serialize_init = keras.initializers.serialize
        return {
            "activation": keras.activations.serialize(self.activation),
            "variant": self.variant,
            "kernel_initializer": serialize_init(self.kernel_initializer),
            "bias_initializer": serialize_init(self.bias_initializer),
            "transform_kernel_initializer": serialize_init(self.transform_kernel_initializer),
            "transform_bias_initializer": serialize_init(self.transform_bias_initializer),
            "carry_kernel_initializer": serialize_init(self.carry_kernel_initializer),
            "carry_bias_initializer": serialize_init(self.carry_bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": keras.regularizers.serialize(self.activity_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        }


def _delete_variable(layer: keras.layers.Layer, name: str) -> None:
    """`del layer.<name>`: Keras untracks the variable, then runs gc.collect() to free its
    memory sooner. A full collection walks every object of the process (TensorFlow's too):
    0.27 s a layer here, 27 s to quantize fc100. With the process's objects frozen
    (`gc.freeze`) it walks only those made since, and the whole quantize takes 0.8 s. A
    process that froze them already (the command line, after its imports) stays as it was."""
    if gc.get_freeze_count():
        delattr(layer, name)
        return
    gc.freeze()
    try:
        delattr(layer, name)
    finally:
        gc.unfreeze()


class Int8Kernel:
    """Keras's int8 quantization hooks (`quantize`, `quantized_build`, `_int8_call`), as
    `keras.layers.Dense` implements them, for a layer with one fused `kernel` whose last axis
    is the output channels. Mixed into `keras.layers.Layer`s. The underscored `_int8_call`
    and `_is_quantized` are the hooks keras.io's guide "Writing quantization-compatible
    layers" has a custom layer implement, not private code.

    `quantize("int8")` (what `model.quantize("int8")` calls) replaces the float `kernel` by an
    int8 one of the same shape (non-trainable) and a float `kernel_scale` with one abs-max scale
    per output channel (and per layer, in a stack): `kernel ≈ int8_kernel / kernel_scale`, as
    Keras stores them; the bias stays float. The layer's dtype policy becomes
    `int8_from_<policy>`, so a saved `.keras` file rebuilds the int8 variables (`build` calls
    `quantized_build`) and loads them. Float weight files are untouched: quantize after loading.
    """

    # Whether the inputs are quantized too (per row, abs-max) for an int8 x int8 matmul, as
    # Dense does; otherwise weights only: the int8 kernel is dequantized for a float op (no
    # backend has an int8 convolution on every device, and Keras's Conv2D has no int8 mode).
    _int8_inputs = False

    def _int8_scale_axes(self, rank: int) -> tuple[int, ...]:
        """The axes of a kernel of `rank` that one scale spans: all but the output channels."""
        return tuple(range(rank - 1))

    def _unsupported_mode(self, mode) -> NotImplementedError:
        # NotImplementedError, as keras.io's quantization guide asks: model.quantize warns
        # and goes on.
        return NotImplementedError(
            f"{type(self).__name__} supports quantize('int8') only (its fused [H|T|C] "
            f"kernel, one scale per output channel). Received: mode={mode!r}"
        )

    def quantize(self, mode=None, type_check=True, config=None):
        if mode != "int8":
            raise self._unsupported_mode(mode)
        from keras.quantizers import AbsMaxQuantizer, QuantizationConfig

        axes = self._int8_scale_axes(len(self.kernel.shape))
        quantizer = QuantizationConfig.weight_quantizer_or_default(
            config, AbsMaxQuantizer(axis=axes))
        values, scale = quantizer(self.kernel, to_numpy=True)
        self.quantized_build(tuple(self.kernel.shape), mode, config)
        self.kernel.assign(values)
        self.kernel_scale.assign(ops.reshape(scale, self.kernel_scale.shape))
        if self.dtype_policy.quantization_mode is None:
            self.dtype_policy = keras.dtype_policies.get(f"int8_from_{self.dtype_policy.name}")

    def quantized_build(self, kernel_shape, mode, config=None):
        """Replaces the float `kernel` by the int8 one and adds `kernel_scale` (zeros and ones:
        `quantize` or a loaded file fills them)."""
        if mode != "int8":
            raise self._unsupported_mode(mode)
        from keras.quantizers import AbsMaxQuantizer, QuantizationConfig

        self.inputs_quantizer = QuantizationConfig.activation_quantizer_or_default(
            config, AbsMaxQuantizer()) if self._int8_inputs else None
        if getattr(self, "kernel", None) is not None:
            _delete_variable(self, "kernel")
        axes = set(self._int8_scale_axes(len(kernel_shape)))
        self.kernel = self.add_weight(name="kernel", shape=kernel_shape, initializer="zeros",
                                      dtype="int8", trainable=False)
        self.kernel_scale = self.add_weight(
            name="kernel_scale", initializer="ones", trainable=False,
            shape=tuple(s for i, s in enumerate(kernel_shape) if i not in axes))
        self._is_quantized = True

    def _int8_call(self, *args, **kwargs):
        # The same body: the kernel reads (`_int8_linear`, `_compute_kernel`) see the mode.
        return self.call(*args, **kwargs)

    def _dequantized_kernel(self):
        """The int8 kernel as floats, `int8 / kernel_scale`, in the compute dtype."""
        scale = ops.convert_to_tensor(self.kernel_scale)
        for axis in self._int8_scale_axes(len(self.kernel.shape)):
            scale = ops.expand_dims(scale, axis)
        return ops.divide(ops.cast(self.kernel, self.compute_dtype), scale)


class HighwayBase(HighwayArguments, Int8Kernel, keras.layers.Layer):
    """The body of a highway layer; a subclass sets `channel_axis` and supplies the linear map.

    Subclasses implement `_branch_kernel_shape(channels)` (one branch's kernel shape, its last
    axis the branch's output channels) and `_linear(x, kernel)`, and set an `input_spec` with
    `ndim` or `min_ndim` before `build`.

    `lesioned` (default False; neither a weight nor part of the config) closes the gates: the
    layer then returns its input unchanged, bit for bit, in every variant (T := 0, and C := 1
    where C is not 1 - T), as in the paper's layer-lesioning experiment (NIPS 2015, §4.2). The
    flag is read when `call` runs or is traced, so it costs nothing in a traced graph, and a
    function traced before it changed keeps the old behaviour: run the model eagerly or trace
    afresh (`zoo.analysis.lesion.lesioned(layer, model=model)` drops the model's traced
    predict and evaluate functions).
    """

    channel_axis = -1

    def __init__(
        self,
        activation,
        variant,
        kernel_initializer,
        bias_initializer,
        transform_kernel_initializer,
        transform_bias_initializer,
        carry_kernel_initializer,
        carry_bias_initializer,
        kernel_regularizer,
        bias_regularizer,
        activity_regularizer,
        kernel_constraint,
        bias_constraint,
        layerscale_init=1e-5,
        gru_gate_bias=2.0,
        laurel_rank=None,
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self._set_highway_arguments(
            activation, variant, kernel_initializer, bias_initializer,
            transform_kernel_initializer, transform_bias_initializer, carry_kernel_initializer,
            carry_bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
            bias_constraint,
        )
        self._set_skip_arguments(layerscale_init, gru_gate_bias, laurel_rank)
        self.lesioned = False

    def build(self, input_shape):
        channels = input_shape[self.channel_axis]
        if channels is None:
            raise ValueError(
                f"{type(self).__name__} needs a defined channel axis (axis {self.channel_axis}) to "
                "create its weights, since its output has the same width as its input. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        kernel_initializers, bias_initializers = self._branch_initializers()
        n = len(self._learned)
        branch_shape = self._branch_kernel_shape(channels)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*branch_shape[:-1], n * channels),
            initializer=FusedInitializer(kernel_initializers),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(n * channels,),
            initializer=FusedInitializer(bias_initializers),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self._skip_names = []
        for name, shape, init in self.skip_weight_specs(channels, branch_shape):
            init = FusedInitializer(init) if isinstance(init, list) else init
            setattr(self, name, self.add_weight(name=name, shape=shape, initializer=init))
            self._skip_names.append(name)
        self.input_spec = keras.layers.InputSpec(
            ndim=self.input_spec.ndim,
            min_ndim=self.input_spec.min_ndim,
            axes={self.channel_axis: channels},
        )
        if self.quantization_mode:  # a saved int8 layer: the kernel becomes int8, as quantize()'s
            self.quantized_build(tuple(self.kernel.shape), self.quantization_mode)

    def _branches(self, x):
        """H, T, C (T or C None where the variant fixes it to 1) from one fused linear map."""
        bias = ops.cast(self.bias, self.compute_dtype)
        if self.quantization_mode == "int8":  # quantize("int8"): Int8Kernel
            z = self._int8_linear(x)
        else:
            z = self._linear(x, ops.cast(self.kernel, self.compute_dtype))
        if self.channel_axis == -1:
            z = z + bias
        else:
            z = z + ops.reshape(bias, (-1,) + (1,) * (len(z.shape) - self.channel_axis - 1))
        parts = dict(zip(self._learned, ops.split(z, len(self._learned), axis=self.channel_axis)))
        h = self.activation(parts["h"])
        t = ops.sigmoid(parts["t"]) if "t" in parts else None
        c = ops.sigmoid(parts["c"]) if "c" in parts else None
        return h, t, c

    def _int8_linear(self, x):
        """`_linear` with the int8 kernel: an int8 x int8 product of the inputs quantized per
        row (int32 sums, then divided by both scales) where `_int8_inputs`, as Dense's
        `_int8_call`, whose gradient (the dequantized kernel's) it copies; else weights only."""
        if self.inputs_quantizer is None:
            return self._linear(x, self._dequantized_kernel())

        @ops.custom_gradient
        def int8_linear(x, kernel, kernel_scale):
            def grad_fn(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream
                float_kernel = ops.divide(ops.cast(kernel, self.compute_dtype), kernel_scale)
                return ops.matmul(upstream, ops.transpose(float_kernel)), None, None

            q, x_scale = self.inputs_quantizer(x, axis=-1)
            z = ops.cast(self._linear(q, kernel), self.compute_dtype)
            return ops.divide(z, ops.multiply(kernel_scale, x_scale)), grad_fn

        return int8_linear(x, ops.convert_to_tensor(self.kernel),
                           ops.convert_to_tensor(self.kernel_scale))

    def call(self, inputs):
        if self.lesioned:
            return inputs
        if self.variant in GATED_SKIPS:
            return skip_combine(self.variant, inputs, self._branches(inputs)[0],
                                self._skip_weights(), self._linear, self.channel_axis)
        return combine(self.variant, inputs, *self._branches(inputs))

    def _prepare(self, x):
        x = ops.convert_to_tensor(x, dtype=self.compute_dtype)
        if not self.built:
            self.build(x.shape)
        return x

    def block_state(self, x):
        """H(x), the candidate output, with x's shape."""
        return self._branches(self._prepare(x))[0]

    def _update_gate(self, x):
        """gru_gate's update gate z at x (the layer's T for the analyses)."""
        h = self._branches(x)[0]
        return gru_gate_update(x, h, self._skip_weights(), self._linear, self.channel_axis)[0]

    def transform_gate(self, x):
        """T(x), with x's shape; ones for variants without a transform gate (c_only, residual,
        plain). For "gru_gate", T is GTrXL's update gate z (out = z g + (1 - z) x, as
        y = T H + (1 - T) x). Refused for the other gated skips (`STATIC_SKIPS`), which
        scale every example alike."""
        self._refuse_gate("transform gate")
        x = self._prepare(x)
        if self.variant == "gru_gate":
            return self._update_gate(x)
        t = self._branches(x)[1]
        return ops.ones_like(x) if t is None else t

    def carry_gate(self, x):
        """C(x), with x's shape: 1 - T(x) when coupled (and 1 - z for "gru_gate"), ones for
        t_only and residual, zeros for plain. Refused for the other gated skips."""
        self._refuse_gate("carry gate")
        x = self._prepare(x)
        if self.variant == "gru_gate":
            return 1.0 - self._update_gate(x)
        _, t, c = self._branches(x)
        if self.variant == "coupled":
            return 1.0 - t
        if self.variant == "plain":
            return ops.zeros_like(x)
        return ops.ones_like(x) if c is None else c

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), **self._highway_config(), **self._skip_config()}
