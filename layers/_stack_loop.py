"""The fast path of `HighwayStack`: a lean loop over the layers and the paper's backward pass.

Autodiff through a loop has to keep every intermediate of every iteration on accumulator stacks
and replays the loop's bookkeeping backwards; on a CPU, where a width-50 layer costs a few
microseconds of arithmetic, that bookkeeping is most of the step. Here the forward loop keeps
only what the backward pass needs (each layer's input x, its block state H and its gates), and
the backward loop is written out by hand (Srivastava et al. 2015, appendix), one matmul per
layer; the weight gradients of all layers are then one batched matmul after the loop instead of
`depth` small ones inside it.
"""

import keras
from keras import ops

from layers._highway import combine

# dL/dz from dL/dy written with the activation's output y = activation(z): what lets the backward
# pass use the saved H instead of recomputing z. Other activations take the autodiff path.
_BACKPROP_FROM_OUTPUT = {
    keras.activations.tanh: lambda y, dy: dy * (1.0 - y * y),
    keras.activations.sigmoid: lambda y, dy: dy * y * (1.0 - y),
    keras.activations.relu: lambda y, dy: ops.where(y > 0, dy, ops.zeros_like(dy)),
    keras.activations.linear: lambda y, dy: dy,
}


def _tensorflow_kernels():
    """TensorFlow's fused kernels for the same: one op each instead of three."""
    import tensorflow as tf

    return {
        keras.activations.tanh: lambda y, dy: tf.raw_ops.TanhGrad(y=y, dy=dy),
        keras.activations.sigmoid: lambda y, dy: tf.raw_ops.SigmoidGrad(y=y, dy=dy),
        keras.activations.relu: lambda y, dy: tf.raw_ops.ReluGrad(gradients=dy, features=y),
        keras.activations.linear: lambda y, dy: dy,
    }


def backprop_from_output(activation):
    """`(y, dy) -> dy * activation'(z)` for `y = activation(z)`, where the fast path knows it;
    None for other activations."""
    if activation not in _BACKPROP_FROM_OUTPUT:
        return None
    if keras.backend.backend() == "tensorflow":
        return _tensorflow_kernels()[activation]
    return _BACKPROP_FROM_OUTPUT[activation]


def matmul_transposed(a, b, which):
    """`a @ b` with `a` (which="a") or `b` (which="b") transposed in its last two axes; on
    TensorFlow by the matmul kernel itself, with no transposed copy."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.matmul(a, b, transpose_a=which == "a", transpose_b=which == "b")

    def t(m):
        n = len(m.shape)
        return ops.transpose(m, (*range(n - 2), n - 1, n - 2))

    return ops.matmul(t(a), b) if which == "a" else ops.matmul(a, t(b))


def scan(step, init, xs, num_outputs, reverse=False):
    """`keras.ops.scan(step, init, xs, reverse=reverse)` for a one-tensor carry and `step`
    outputs that are a tuple of `num_outputs` tensors of the carry's dtype.

    On TensorFlow, Keras's `scan` keeps the carry in a TensorArray and sets no iteration bound
    (so XLA cannot compile it); this is a plain `tf.while_loop` with the carry as a loop variable,
    the stacked `xs` indexed in place, and `maximum_iterations` set.
    """
    if keras.backend.backend() != "tensorflow":
        return ops.scan(step, init, xs, reverse=reverse)
    import tensorflow as tf

    n = xs[0].shape[0]
    arrays = tuple(
        tf.TensorArray(init.dtype, size=n, element_shape=None, infer_shape=True)
        for _ in range(num_outputs)
    )

    def body(i, carry, arrays):
        carry, outputs = step(carry, tuple(tf.gather(x, i) for x in xs))
        arrays = tuple(a.write(i, y) for a, y in zip(arrays, outputs))
        return (i - 1 if reverse else i + 1), carry, arrays

    _, carry, arrays = tf.while_loop(
        (lambda i, *_: i >= 0) if reverse else (lambda i, *_: i < n),
        body,
        (n - 1 if reverse else 0, init, arrays),
        maximum_iterations=n,
    )
    return carry, tuple(a.stack() for a in arrays)


def branches(x, kernel, bias, activation, learned):
    """One layer's H and its learned gates by name ("t", "c")."""
    parts = dict(zip(learned, ops.split(ops.matmul(x, kernel) + bias, len(learned), axis=-1)))
    return activation(parts.pop("h")), {name: ops.sigmoid(z) for name, z in parts.items()}


def highway_stack(x, kernel, bias, activation, variant, learned):
    """`depth` highway layers on `x` (batch, d), kernel (depth, d, n*d), bias (depth, n*d):
    the forward loop, with a hand-written gradient for x, kernel and bias."""
    backprop_h = backprop_from_output(activation)
    backprop_gate = backprop_from_output(keras.activations.sigmoid)
    gates = learned[1:]  # ("t",), ("t", "c"), ("c",) or ()

    def forward_step(x, kernel_and_bias):
        h, g = branches(x, *kernel_and_bias, activation, learned)
        y = combine(variant, x, h, g.get("t"), g.get("c"))
        return y, (x, h, *(g[name] for name in gates))

    def backward_step(dy, saved):
        kernel, x, h, *gate_values = saved
        g = dict(zip(gates, gate_values))
        t, c = g.get("t"), g.get("c")
        # dL/dH, dL/dT, dL/dC and the carry path's share of dL/dx, per variant.
        dh = dy if t is None else dy * t
        if variant == "coupled":  # y = x + T (H - x)
            dz = {"t": dy * (h - x)}
            dx = dy - dh
        else:  # y = H T + x C, a gate not learned being 1
            dz = {name: dy * (h if name == "t" else x) for name in gates}
            dx = dy if c is None else dy * c
        dz["h"] = backprop_h(h, dh)
        for name in gates:
            dz[name] = backprop_gate(g[name], dz[name])
        dz = ops.concatenate([dz[name] for name in learned], axis=-1)
        return dx + matmul_transposed(dz, kernel, "b"), (dz,)

    @ops.custom_gradient
    def run(x, kernel, bias):
        y, saved = scan(forward_step, x, (kernel, bias), num_outputs=2 + len(gates))

        def grad(*args, upstream=None):
            dy = args[0] if upstream is None else upstream
            dx, (dz,) = scan(backward_step, dy, (kernel, *saved), 1, reverse=True)
            # All layers' weight gradients at once: x_i^T dz_i for every i.
            dkernel = matmul_transposed(saved[0], dz, "a")
            return dx, dkernel, ops.sum(dz, axis=1)

        return y, grad

    return run(x, kernel, bias)


def highway_stack_inference(x, kernel, bias, activation, variant, learned):
    """The forward loop alone, keeping nothing per layer (for `training=False`)."""

    def step(x, kernel_and_bias):
        h, g = branches(x, *kernel_and_bias, activation, learned)
        return combine(variant, x, h, g.get("t"), g.get("c")), ()

    return scan(step, x, (kernel, bias), num_outputs=0)[0]
