"""A stack of identical fully connected highway layers kept as stacked weights: trace time
independent of depth."""

import keras
import numpy as np
from keras import ops

from layers._highway import (
    FusedInitializer,
    HighwayArguments,
    Int8Kernel,
    _reseeded,
    combine,
    gru_gate_update,
    skip_combine,
)
from layers.variants import GATED_SKIPS, SCALED_SKIPS

# Layers written out per chunk of the TensorFlow fast path's loop (layers/_stack_loop.py): the
# loop's control is then paid once per 4 layers, and a step at depth 30 is as fast as with all
# 30 written out (bench: 2.42 ms forward + backward with 4 or 8, 2.95 with 2, 3.02 with 1);
# tracing and graph optimisation grow with it.
UNROLL = 4


def _backend_path():
    """The module with this backend's fast path (`has_fast_path`, `highway_stack`), imported
    when first needed, so that a backend never imports another's framework; None elsewhere."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        from layers import _stack_loop as path
    elif backend == "jax":
        from layers import _stack_jax as path
    elif backend == "torch":
        from layers import _stack_torch as path
    else:
        return None
    return path

# Initializers whose values do not depend on the shape's fans: one call fills the whole stack.
_FAN_FREE = (
    keras.initializers.Constant,
    keras.initializers.Zeros,
    keras.initializers.Ones,
    keras.initializers.RandomUniform,
    keras.initializers.RandomNormal,
    keras.initializers.TruncatedNormal,
)


def _whole_stack(init, depth):
    """An initializer that, called on `(depth, *layer_shape)`, draws each layer's slice from the
    distribution `init` gives `layer_shape`; None when there is no such shortcut."""
    if isinstance(init, _FAN_FREE):
        return init
    if type(init) in (
        keras.initializers.VarianceScaling,
        keras.initializers.GlorotUniform,
        keras.initializers.GlorotNormal,
        keras.initializers.HeUniform,
        keras.initializers.HeNormal,
        keras.initializers.LecunUniform,
        keras.initializers.LecunNormal,
    ):
        # Keras reads a 3-D shape (depth, d, d) as a kernel with receptive field `depth`:
        # fan_in = fan_out = depth * d. Scaling the variance by `depth` gives back one layer's
        # fans (d, d) in every mode (fan_in, fan_out, fan_avg).
        if getattr(init, "input_axes", None) or getattr(init, "output_axes", None):
            return None
        # (Read the attributes: GlorotUniform & co. put only their seed in get_config.)
        return keras.initializers.VarianceScaling(
            scale=init.scale * depth, mode=init.mode, distribution=init.distribution,
            seed=init.seed,
        )
    return None


class _PerLayerInitializer(keras.initializers.Initializer):
    """Initialises a stacked weight `(depth, *layer_shape)` as `depth` separate layers would be.

    Each branch's slice of each layer is drawn with a single `HighwayDense` branch's fan-in and
    fan-out (not the 3-D tensor's), every layer from its own random stream. Fan-free and
    variance-scaling initializers (Glorot, He, LeCun, uniform, normal, constants) fill the whole
    stack in one call; others (orthogonal, identity, custom) run once per layer, re-seeded with
    offset `i * n` for layer `i` (n branches), through `FusedInitializer`.
    """

    def __init__(self, initializers):
        self.initializers = [keras.initializers.get(init) for init in initializers]

    def __call__(self, shape, dtype=None):
        depth, *layer_shape = shape
        by_id = {}  # one converted instance per original, so FusedInitializer re-seeds repeats
        for init in self.initializers:
            if id(init) not in by_id:
                by_id[id(init)] = _whole_stack(init, depth)
        whole = [by_id[id(init)] for init in self.initializers]
        if all(w is not None for w in whole):
            return FusedInitializer(whole)(tuple(shape), dtype=dtype)
        n = len(self.initializers)

        def layer_initializer(i):
            reseeded = {}  # keeps repeats the same instance, so FusedInitializer re-seeds them
            for init in self.initializers:
                reseeded.setdefault(id(init), _reseeded(init, i * n))
            return FusedInitializer([reseeded[id(init)] for init in self.initializers])

        return ops.stack(
            [layer_initializer(i)(tuple(layer_shape), dtype=dtype) for i in range(depth)], axis=0
        )

    def get_config(self):
        return {"initializers": [keras.initializers.serialize(i) for i in self.initializers]}


def _positive_int(name, value, meaning):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 ({meaning}). Received: {name}={value!r}")
    return int(value)


@keras.saving.register_keras_serializable(package="highway_zoo")
class HighwayStack(HighwayArguments, Int8Kernel, keras.layers.Layer):
    """`depth` fully connected highway layers of one width, kept as stacked weights.

    Computes the same function as `depth` chained `HighwayDense` layers,
    `x_{i+1} = H_i(x_i) * T_i(x_i) + x_i * C_i(x_i)` for `i = 0 .. depth - 1`, with
    `H_i(x) = activation(x @ W_H[i] + b_H[i])`, `T_i(x) = sigmoid(x @ W_T[i] + b_T[i])` and
    `C_i` set by `variant` exactly as in `HighwayDense` (coupled: `C = 1 - T`, computed as
    `x + T * (H - x)`). Layer `i`'s fused weights are `kernel[i]` of shape `(d, n * d)` and
    `bias[i]` of shape `(n * d,)`, in `HighwayDense`'s `[H | T | C]` layout (`n` = the branches
    the variant learns), so `stack_weights` / `unstack_weights` (or `from_layers` /
    `to_layers`) convert losslessly between the two.

    Each layer's slice is initialised like a `HighwayDense` would be (per-branch fan-in, its
    own random stream).

    Each backend has its fast path, imported only on that backend (activations `tanh`,
    `sigmoid`, `relu`, `linear` get the paper's backward pass written out: the forward pass
    keeps each layer's input, H and gates, and a layer's backward step is a matmul for dL/dx,
    with no autodiff bookkeeping):

    - TensorFlow (`layers/_stack_loop.py`): `unroll` layers are written out as straight-line
      code and a `tf.while_loop` runs over such chunks, with the remaining depth % `unroll`
      layers written out after it, so the traced graph, and the time to trace and optimise it,
      holds fewer than 2 * `unroll` layers whether the stack is 20 or 20,000 deep; a
      `tf.custom_gradient`. With `training=False` (predict, evaluate, serving) nothing is kept
      per layer. Other activations autodiff through `keras.ops.scan`.
    - JAX (`layers/_stack_jax.py`): one `jax.lax.scan` over the layers, compiled once at any
      depth, with a `jax.custom_vjp` (a reverse scan, then the weight gradients of all layers
      in one batched matmul). Other activations autodiff through the scan. `unroll` is not
      used (scanning unrolled measured slower).
    - PyTorch (`layers/_stack_torch.py`): a Python loop of plain `torch` ops over the layers'
      `unbind` slices, with a `torch.autograd.Function` (one autograd node for the stack).
      Other activations autograd through the loop.

    The gated skips (`"rezero"`, `"layerscale"`, `"gru_gate"`, `"laurel_rw"`, `"laurel_lr"`;
    see `HighwayDense` for their formulas, initial values and references) keep their own
    weights stacked too, one entry per layer: `alpha` `(depth,)` (rezero, laurel_rw), `beta`
    `(depth,)`, `layer_scale` `(depth, d)`, `gate_kernel` and `gate_recurrent_kernel`
    `(depth, d, 3d)` and `gate_bias` `(depth, d)` (gru_gate), `laurel_a` `(depth, d, r)` and
    `laurel_b` `(depth, r, d)` (laurel_lr). `"rezero"`, `"layerscale"` and `"laurel_rw"` are
    `y = s_H * H + s_x * x` with per-layer scales, and run on every backend's fast path with the
    backward pass written out for them too (the scales' gradients are reductions of what each
    layer keeps anyway). `"gru_gate"` and `"laurel_lr"` add matmuls of their own per layer that
    the written-out passes do not cover: they autodiff through `keras.ops.scan` on every
    backend (the same path as lesioning).

    A stack with lesioned layers autodiffs through `keras.ops.scan` over single layers.
    `hand_written_backward = False` (an attribute, not config) autodiffs instead of the
    written-out backward pass (TensorFlow: through `keras.ops.scan`; JAX, PyTorch: through
    their loop), for checking and benchmarking.

    Analysis: `layer_outputs(x)`, `transform_gates(x)`, `block_states(x)` and `carry_gates(x)`
    return one entry per layer, shape `(depth, *x.shape)`, where entry `i` is evaluated at layer
    `i`'s input (`x` for `i = 0`, `layer_outputs(x)[i - 1]` after). `layer_names()` gives the
    names `to_layers()` gives its `HighwayDense` layers. For `"gru_gate"` the transform gate
    is GTrXL's update gate z (`HighwayDense.transform_gate`); the other gated skips have none.

    Lesioning: `lesioned_layers` (a set of layer indices; default empty; neither a weight nor
    part of the config) closes those layers' gates, T := 0 and C := 1, so they return their
    input unchanged, bit for bit, as `HighwayDense.lesioned` does. It is read when `call` is run
    or traced: with nothing lesioned the loop carries no mask and costs nothing; with any layer
    lesioned a constant `(depth,)` 0/1 mask rides along the loop and each layer does one extra
    `where` on its gates (a few percent of a layer's work). A function traced before the set
    changed keeps the old behaviour: run eagerly or trace afresh.

    Masking: as `keras.layers.Dense` (and `HighwayDense`). Every layer maps each position
    from itself alone, on every backend's fast path too (they run on the input reshaped to
    `(-1, d)`, one row per position), so an incoming mask is passed on unchanged and padded
    time steps change no result at the unmasked ones (nor, behind a layer that masks them,
    such as an LSTM, any gradient). The per-layer analyses (`transform_gates` & co.,
    `mean_transform_gates`) take no mask: they see padded positions as any other.

    Args:
        depth: Number of highway layers, >= 1.
        activation: Activation of the block state H. Defaults to `"tanh"`, where
            `HighwayDense` defaults to ReLU: a stack is the deep fully connected net of NIPS
            2015 §4 (the 50-layer analysis nets use tanh), a single layer the CIFAR and
            language-model blocks (ReLU H).
        variant: One of `"coupled"`, `"full"`, `"c_only"`, `"t_only"`, `"residual"`,
            `"plain"`, or a gated skip: `"rezero"`, `"layerscale"`, `"gru_gate"`,
            `"laurel_rw"`, `"laurel_lr"`.
        kernel_initializer: Initializer of each layer's W_H (and W_T, W_C when their own are
            None). Defaults to `"glorot_uniform"`.
        bias_initializer: Initializer of b_H. Defaults to `"zeros"`.
        transform_kernel_initializer: Initializer of W_T; None means `kernel_initializer`
            (re-seeded).
        transform_bias_initializer: Initializer of b_T, or a number. Defaults to -2.0.
        carry_kernel_initializer: Initializer of W_C (`"full"`); None means
            `kernel_initializer` (re-seeded).
        carry_bias_initializer: Initializer of b_C (`"full"`, `"c_only"`), or a number.
            Defaults to +2.0.
        kernel_regularizer, bias_regularizer, kernel_constraint, bias_constraint: Applied to
            the stacked `kernel` / `bias` (a sum-type regularizer such as L2 gives the same
            penalty as on the per-layer weights).
        activity_regularizer: Applied to the stack's output.
        unroll: Layers written out per iteration of the TensorFlow fast path's loop (default
            4): a stack up to that deep runs with no loop, and start-up grows with `unroll`,
            not depth. A speed / trace-time trade like `keras.layers.RNN(unroll=...)`; results
            do not depend on it (nor, on JAX and PyTorch, anything else).
        layerscale_init, gru_gate_bias, laurel_rank: as in `HighwayDense`, for every layer
            (`"layerscale"`, `"gru_gate"`, `"laurel_lr"` only).
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Input shape: `(batch_size, ..., d)`, `d` defined. Output shape: the same.

    Reference:
        - [Srivastava, Greff & Schmidhuber, 2015](https://arxiv.org/abs/1507.06228),
          "Training Very Deep Networks".
        - [Greff, Srivastava & Schmidhuber, 2017](https://arxiv.org/abs/1612.07771),
          "Highway and Residual Networks learn Unrolled Iterative Estimation".
        - The gated skips' papers: see `HighwayDense`.
    """

    def __init__(
        self,
        depth,
        activation="tanh",
        variant="coupled",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        transform_kernel_initializer=None,
        transform_bias_initializer=-2.0,
        carry_kernel_initializer=None,
        carry_bias_initializer=2.0,
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        unroll=UNROLL,
        layerscale_init=1e-5,
        gru_gate_bias=2.0,
        laurel_rank=None,
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.depth = _positive_int("depth", depth, "highway layers")
        self.unroll = _positive_int("unroll", unroll, "layers written out per loop iteration")
        self._set_highway_arguments(
            activation, variant, kernel_initializer, bias_initializer,
            transform_kernel_initializer, transform_bias_initializer, carry_kernel_initializer,
            carry_bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
            bias_constraint,
        )
        self._set_skip_arguments(layerscale_init, gru_gate_bias, laurel_rank)
        self.lesioned_layers = set()
        self.hand_written_backward = True
        self.input_spec = keras.layers.InputSpec(min_ndim=2)
        # Every fast path maps rows of (-1, d) independently: a padding mask stays valid.
        self.supports_masking = True

    def build(self, input_shape):
        d = input_shape[-1]
        if d is None:
            raise ValueError(
                "HighwayStack needs a defined last axis to create its weights. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        kernel_initializers, bias_initializers = self._branch_initializers()
        n = len(self._learned)
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.depth, d, n * d),
            initializer=_PerLayerInitializer(kernel_initializers),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(self.depth, n * d),
            initializer=_PerLayerInitializer(bias_initializers),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )
        self._skip_names = []
        for name, shape, init in self.skip_weight_specs(d, (d, d)):
            init = _PerLayerInitializer(init) if isinstance(init, list) else init
            setattr(self, name, self.add_weight(name=name, shape=(self.depth, *shape),
                                                initializer=init))
            self._skip_names.append(name)
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: d})
        if self.quantization_mode:  # a saved int8 stack: the kernel becomes int8, as quantize()'s
            self.quantized_build(tuple(self.kernel.shape), self.quantization_mode)

    # -- int8 (Int8Kernel) --------------------------------------------------------------------
    # Weights only: one scale per layer and output channel, and every backend's loop runs on
    # the kernel dequantized once per call (an int8 matmul would need a quantizing step inside
    # each fast path's loop and its hand-written backward pass).

    def _int8_scale_axes(self, rank):
        return (1,)  # (depth, d, n * d): per layer and output channel

    def _compute_kernel(self):
        """The stacked kernel in the compute dtype (an int8 one dequantized)."""
        if self.quantization_mode == "int8":
            return self._dequantized_kernel()
        return ops.cast(self.kernel, self.compute_dtype)

    # -- one layer ---------------------------------------------------------------------------

    def _branches(self, x, kernel, bias):
        """H, T, C of one layer (T or C None where the variant fixes it to 1); `kernel` and
        `bias` fused, or lists of the branches' slices."""
        if isinstance(kernel, list):
            z = [ops.matmul(x, k) + b for k, b in zip(kernel, bias)]
        else:
            z = ops.split(ops.matmul(x, kernel) + bias, len(self._learned), axis=-1)
        gates = {name: ops.sigmoid(v) for name, v in zip(self._learned[1:], z[1:])}
        return self.activation(z[0]), gates.get("t"), gates.get("c")

    def _gates(self, x, kernel, bias, keep):
        """H, T, C with lesioning applied: where `keep` is False, T := 0 and C := 1."""
        h, t, c = self._branches(x, kernel, bias)
        if keep is not None:
            t = ops.where(keep, ops.ones_like(x) if t is None else t, ops.zeros_like(x))
            if c is not None:
                c = ops.where(keep, c, ops.ones_like(x))
            elif self.variant == "plain":  # its C is 0, not 1: say so where a lesion needs 1
                c = ops.where(keep, ops.zeros_like(x), ops.ones_like(x))
        return h, t, c

    def _layer(self, x, kernel, bias, skip, keep):
        """One layer: `(h, t, c, y)`, its H, gates (as `_gates`) and output; `skip` its gated
        skip's weights (a dict), `keep` its lesion flag. For "gru_gate" t is the update gate z
        (0 where lesioned), computed once for the output and the analyses."""
        h, t, c = self._gates(x, kernel, bias, keep)
        if self.variant not in GATED_SKIPS:
            return h, t, c, combine(self.variant, x, h, t, c)
        if self.variant == "gru_gate":
            z, g = gru_gate_update(x, h, skip)
            y = x + z * (g - x)
            t = z if keep is None else ops.where(keep, z, ops.zeros_like(z))
        else:
            y = skip_combine(self.variant, x, h, skip)
        return h, t, c, (y if keep is None else ops.where(keep, y, x))

    def _scales(self, d):
        """`(depth, 2, d)`: each layer's s_H and s_x for the fast paths, y = s_H H + s_x x."""
        skip = self._skip_weights()
        ones = ops.ones((self.depth, d), self.compute_dtype)
        if self.variant == "layerscale":
            s_h = skip["layer_scale"]
        else:  # rezero, laurel_rw: one scalar per layer
            s_h = ops.expand_dims(skip["alpha"], -1) * ones
        s_x = ops.expand_dims(skip["beta"], -1) * ones if "beta" in skip else ones
        return ops.stack([s_h, s_x], axis=1)

    # -- the loop ----------------------------------------------------------------------------

    def _xs(self):
        kernel = self._compute_kernel()
        bias = ops.cast(self.bias, self.compute_dtype)
        if not self.lesioned_layers:
            return (kernel, bias, None)
        bad = sorted(i for i in self.lesioned_layers if not 0 <= i < self.depth)
        if bad:
            raise ValueError(f"lesioned_layers {bad} out of range for depth {self.depth}")
        keep = np.ones((self.depth,), dtype=bool)
        keep[sorted(self.lesioned_layers)] = False
        return (kernel, bias, ops.convert_to_tensor(keep))

    def _scan(self, x, collect):
        """Runs the layers on `x`; `collect(x_i, h, t, c, y)` gives what each layer stacks up.

        Keras's TensorFlow `scan` stacks its per-step outputs into arrays shaped like the carry,
        and cannot stack nothing when the batch size is unknown, so each step yields a tensor
        of x's shape (its output, for `call`). On the backward pass those are the activations
        backprop keeps anyway.
        """
        kernel, bias, keep = self._xs()
        skip = self._skip_weights()
        names = list(skip)

        def step(carry, xs):
            k, b, *rest = xs
            w = dict(zip(names, rest))
            m = rest[len(names)] if keep is not None else None
            h, t, c, y = self._layer(carry, k, b, w, m)
            return y, collect(carry, h, t, c, y)

        xs = (kernel, bias, *skip.values(), *(() if keep is None else (keep,)))
        return ops.scan(step, x, xs)

    def call(self, inputs, training=None):
        path = _backend_path()
        fast = self.variant not in GATED_SKIPS or self.variant in SCALED_SKIPS
        if path is not None and fast and not self.lesioned_layers:
            tensorflow = keras.backend.backend() == "tensorflow"
            if not tensorflow or (self.hand_written_backward
                                  and path.has_fast_path(self.activation)):
                return self._fast_call(path, inputs, training, tensorflow)
        if not training:
            return self._loop(inputs)
        # Autodiff through keras.ops.scan: any activation, and lesioning for the analyses.
        y, _ = self._scan(inputs, lambda x, h, t, c, y: y)
        return y

    def _loop(self, x):
        """The layers on `x` with nothing stacked per layer: a `fori_loop` over the layer
        index, each layer's weights taken by it. Inference runs this: TFLite and ONNX convert
        a while loop of builtin ops, not the TensorList a scan stacks its outputs into."""
        kernel, bias, keep = self._xs()
        skip = self._skip_weights()

        def body(i, x):
            def pick(w):
                return ops.take(w, i, axis=0)

            weights = {name: pick(w) for name, w in skip.items()}
            return self._layer(x, pick(kernel), pick(bias), weights,
                               None if keep is None else pick(keep))[3]

        return ops.fori_loop(0, self.depth, body, x)

    def _fast_call(self, path, inputs, training, tensorflow):
        d = inputs.shape[-1]
        x = ops.reshape(inputs, (-1, d))
        kernel = self._compute_kernel()
        bias = ops.cast(self.bias, self.compute_dtype)
        scales = self._scales(d) if self.variant in SCALED_SKIPS else None
        if tensorflow:
            y = path.highway_stack(x, kernel, bias, self.activation, self.variant,
                                   self._learned, self.unroll, training=bool(training),
                                   scales=scales)
        else:  # JAX, PyTorch: their loop, autodiffed for other activations or when asked
            y = path.highway_stack(x, kernel, bias, self.activation, self.variant,
                                   self._learned, hand_written=self.hand_written_backward,
                                   scales=scales)
        return ops.reshape(y, ops.shape(inputs))

    # -- analysis ------------------------------------------------------------------------------

    def _prepare(self, x):
        x = ops.convert_to_tensor(x, dtype=self.compute_dtype)
        if not self.built:
            self.build(x.shape)
        return x

    def layer_outputs(self, x):
        """Every layer's output, `(depth, *x.shape)`; the last entry is `self(x)`."""
        return self._scan(self._prepare(x), lambda x, h, t, c, y: y)[1]

    def layer_inputs(self, x):
        """Every layer's input, `(depth, *x.shape)`: `x`, then the outputs of layers 0..depth-2."""
        return self._scan(self._prepare(x), lambda x, h, t, c, y: x)[1]

    def block_states(self, x):
        """H_i at each layer's input, `(depth, *x.shape)`."""
        return self._scan(self._prepare(x), lambda x, h, t, c, y: h)[1]

    def transform_gates(self, x):
        """T_i at each layer's input, `(depth, *x.shape)`; ones for c_only / residual / plain
        (zeros for lesioned layers). For "gru_gate", T is GTrXL's update gate z (as in
        `HighwayDense.transform_gate`). Refused for the other gated skips (`STATIC_SKIPS`)."""
        self._refuse_gate("transform gate")
        x = self._prepare(x)
        return self._scan(x, lambda x, h, t, c, y: ops.ones_like(x) if t is None else t)[1]

    def layer_inputs_and_gates(self, x):
        """`(layer_inputs(x), transform_gates(x), self(x))` from one pass over the layers
        (the analyses' probe: one loop to compile instead of three). On TensorFlow, whose
        Keras `scan` stacks one tensor per step, two passes."""
        self._refuse_gate("transform gate")
        x = self._prepare(x)
        if keras.backend.backend() == "tensorflow":
            y, inputs = self._scan(x, lambda x, h, t, c, y: x)
            return inputs, self.transform_gates(x), y
        y, (inputs, gates) = self._scan(
            x, lambda x, h, t, c, y: (x, ops.ones_like(x) if t is None else t))
        return inputs, gates, y

    def carry_gates(self, x):
        """C_i at each layer's input, `(depth, *x.shape)`: 1 - T when coupled (1 - z for
        "gru_gate"), ones for t_only and residual, zeros for plain. Refused for the other
        gated skips."""
        self._refuse_gate("carry gate")

        def collect(x, h, t, c, y):
            if self.variant in ("coupled", "gru_gate"):
                return 1.0 - t
            if self.variant == "plain" and c is None:
                return ops.zeros_like(x)
            return ops.ones_like(x) if c is None else c

        return self._scan(self._prepare(x), collect)[1]

    transform_gate = transform_gates

    def mean_transform_gates(self, x):
        """Each layer's T averaged over all axes but the batch, `(batch, depth)` float32 (under
        a mixed-precision policy too): column `i` is `mean(transform_gates(x)[i])` per example
        (what the export's "gates" signature gives).

        One loop carries the layer input and the `(batch, depth)` means, filling a column per
        layer, so nothing is kept per layer: unlike the `(depth, ...)` methods it converts to
        TFLite with builtin ops (their per-layer arrays need a static batch size there).
        For "gru_gate" the means are of the update gate z; refused for the other gated skips.
        """
        self._refuse_gate("transform gate")
        x = self._prepare(x)
        kernel, bias, keep = self._xs()
        skip = self._skip_weights()
        # Split by branch as the fast path splits them: an export holds one copy of each.
        n = len(self._learned)
        kernels, biases = ops.split(kernel, n, axis=-1), ops.split(bias, n, axis=-1)
        axes = tuple(range(1, len(x.shape)))
        columns = ops.arange(self.depth)

        def body(i, carry):
            x, means = carry
            m = None if keep is None else ops.take(keep, i)
            k = [ops.take(w, i, axis=0) for w in kernels]
            w = {name: ops.take(v, i, axis=0) for name, v in skip.items()}
            h, t, c, y = self._layer(x, k, [ops.take(b, i, axis=0) for b in biases], w, m)
            t = ops.ones_like(x) if t is None else t
            mean = ops.mean(ops.cast(t, "float32"), axis=axes)
            means = ops.where(ops.equal(columns, i), mean[:, None], means)
            return y, means

        means = ops.zeros((ops.shape(x)[0], self.depth), dtype="float32")
        return ops.fori_loop(0, self.depth, body, (x, means))[1]

    def layer_names(self, prefix="highway_", start=1):
        """The per-layer names, `prefix + str(start + i)` (the zoo's FC nets: highway_1...)."""
        return [f"{prefix}{start + i}" for i in range(self.depth)]

    # -- conversion --------------------------------------------------------------------------

    def _dense_config(self):
        config = self.get_config()
        for key in ("name", "trainable", "depth", "unroll", "dtype"):
            config.pop(key, None)
        config.pop("activity_regularizer", None)
        return config

    def to_layers(self, prefix="highway_", start=1):
        """`depth` built `HighwayDense` layers with this stack's configuration and weights."""
        from layers.highway_dense import HighwayDense

        if not self.built:
            raise ValueError("HighwayStack.to_layers needs a built stack: call it first.")
        if self.quantization_mode:
            raise ValueError("HighwayStack.to_layers needs a float stack; this one is "
                             f"quantized ({self.quantization_mode}): convert before quantizing.")
        d = self.kernel.shape[1]
        layers = []
        for name, (kernel, bias) in zip(self.layer_names(prefix, start), unstack_weights(self)):
            layer = HighwayDense(name=name, dtype=self.dtype_policy, **self._dense_config())
            layer.build((None, d))
            layer.kernel.assign(kernel)
            layer.bias.assign(bias)
            for weight in self._skip_names:
                getattr(layer, weight).assign(getattr(self, weight)[len(layers)])
            layers.append(layer)
        return layers

    @classmethod
    def from_layers(cls, layers, **kwargs):
        """A built stack computing what the chain of built `HighwayDense` `layers` computes."""
        layers = list(layers)
        if not layers:
            raise ValueError("from_layers needs at least one HighwayDense layer")
        config = layers[0].get_config()
        keep = (
            "activation", "variant", "kernel_initializer", "bias_initializer",
            "transform_kernel_initializer", "transform_bias_initializer",
            "carry_kernel_initializer", "carry_bias_initializer", "kernel_regularizer",
            "bias_regularizer", "kernel_constraint", "bias_constraint",
        )
        for layer in layers[1:]:
            other = layer.get_config()
            for key in ("activation", "variant"):
                if other[key] != config[key]:
                    raise ValueError(
                        f"from_layers needs layers of one {key}: {config[key]!r} != "
                        f"{other[key]!r} ({layer.name})"
                    )
        kernel, bias = stack_weights(layers)
        skip = {k: config[k] for k in ("layerscale_init", "gru_gate_bias", "laurel_rank")
                if k in config}
        stack = cls(depth=len(layers), **{k: config[k] for k in keep}, **skip, **kwargs)
        stack.build((None, kernel.shape[1]))
        stack.kernel.assign(kernel)
        stack.bias.assign(bias)
        for weight in stack._skip_names:
            getattr(stack, weight).assign(np.stack(
                [keras.ops.convert_to_numpy(getattr(layer, weight)) for layer in layers]))
        return stack

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "depth": self.depth, **self._highway_config(),
                "unroll": self.unroll, **self._skip_config()}


def stack_weights(layers):
    """(kernel, bias) as NumPy arrays `(depth, d, n*d)`, `(depth, n*d)` from built HighwayDense
    layers, in order."""
    layers = list(layers)
    kernel = np.stack([keras.ops.convert_to_numpy(layer.kernel) for layer in layers])
    bias = np.stack([keras.ops.convert_to_numpy(layer.bias) for layer in layers])
    return kernel, bias


def unstack_weights(stack):
    """[(kernel_i, bias_i)] as NumPy arrays, one pair per layer of a built `HighwayStack`, ready
    for `HighwayDense.kernel.assign` / `set_weights`."""
    kernel = keras.ops.convert_to_numpy(stack.kernel)
    bias = keras.ops.convert_to_numpy(stack.bias)
    return [(kernel[i], bias[i]) for i in range(stack.depth)]
