"""The fast path of `HighwayStack` on TensorFlow: chunks of straight-line layers in a loop, and
the paper's backward pass written out. Imported only on the TensorFlow backend (JAX's and
PyTorch's paths are _stack_jax.py and _stack_torch.py).

On a CPU a width-50 highway layer is a few microseconds of arithmetic, so what a step costs is
mostly bookkeeping. Three kinds are avoided here:

- Autodiff through a loop keeps every intermediate of every iteration on accumulator stacks and
  replays the loop's control backwards. The backward pass is written out instead (Srivastava et
  al. 2015, appendix): the forward pass keeps each layer's input x, block state H and gates; a
  layer's backward step is one matmul per branch for dL/dx and one per branch for its weights.
- A loop iteration per layer. Layers are written out `unroll` at a time, and the loop runs over
  those chunks; a stack up to `unroll` deep has no loop at all. The rest (depth mod `unroll`)
  is written out after the loop, so a graph never holds more than 2 * `unroll` - 1 layers each
  way, however deep the stack: start-up does not grow with depth.
- Splitting, concatenating and stacking per layer. The fused `[H | T | C]` weights are split
  once per step into one kernel per branch, and every per-layer tensor (weights, what the
  backward pass keeps, weight gradients) lives in a `TensorArray` read and written one layer
  at a time, inside the loop or out of it.

The scaled skips (rezero, layerscale, laurel_rw) come as `scales` (depth, 2, d), each layer's
y = s_H·H + s_x·x: one more per-layer weight, whose gradient is two batch sums per layer.
"""

import keras
import tensorflow as tf

from layers._highway import combine, scaled_combine

# dL/dz from dL/dy written with the activation's output y = activation(z) (TensorFlow's fused
# gradient kernels): what lets the backward pass use the saved H instead of recomputing z.
_BACKPROP_FROM_OUTPUT = {
    keras.activations.tanh: lambda y, dy: tf.raw_ops.TanhGrad(y=y, dy=dy),
    keras.activations.sigmoid: lambda y, dy: tf.raw_ops.SigmoidGrad(y=y, dy=dy),
    keras.activations.relu: lambda y, dy: tf.raw_ops.ReluGrad(gradients=dy, features=y),
    keras.activations.linear: lambda y, dy: dy,
}


def has_fast_path(activation):
    """Whether `highway_stack` can run a stack with this activation (on this backend)."""
    return keras.backend.backend() == "tensorflow" and activation in _BACKPROP_FROM_OUTPUT


def _per_layer(tensor):
    """A (depth, ...) tensor as a TensorArray read one layer at a time."""
    return tf.TensorArray(tensor.dtype, size=tensor.shape[0], clear_after_read=False,
                          element_shape=tensor.shape[1:]).unstack(tensor)


def _empty(like, depth):
    """A TensorArray for one `like`-shaped tensor per layer (batch size may be unknown)."""
    return tf.TensorArray(like.dtype, size=depth, clear_after_read=False,
                          element_shape=like.shape)


def _over_layers(depth, unroll, layers, carry, arrays, reverse=False):
    """`layers(first, count, carry, arrays)` run over all `depth` layers: in a loop over chunks
    of `unroll` (`first` a tensor), and written out for the remaining depth % unroll (`first` a
    number) after the loop, or before it when `reverse`."""
    loops = depth // unroll if depth > unroll else 0
    rest = (loops * unroll, depth - loops * unroll)

    def loop(carry, arrays):
        if not loops:
            return carry, arrays

        def body(j, carry, arrays):
            carry, arrays = layers(j * unroll, unroll, carry, arrays)
            return (j - 1 if reverse else j + 1), carry, arrays

        _, carry, arrays = tf.while_loop(
            (lambda j, *_: j >= 0) if reverse else (lambda j, *_: j < loops),
            body,
            (loops - 1 if reverse else 0, carry, arrays),
            maximum_iterations=loops,
        )
        return carry, arrays

    if reverse:
        return loop(*layers(*rest, carry, arrays))
    return layers(*rest, *loop(carry, arrays))


def _split_branches(kernel, bias, n):
    """Fused `[H | T | C]` weights as per-branch kernels (depth, d, d), then biases (depth, d)."""
    return (*tf.split(kernel, n, axis=-1), *tf.split(bias, n, axis=-1))


def highway_stack(x, kernel, bias, activation, variant, learned, unroll, training=True,
                  scales=None):
    """`depth` highway layers on `x` (batch, d), kernel (depth, d, n*d), bias (depth, n*d), with
    a hand-written gradient for x, kernel and bias (and `scales`, (depth, 2, d), for a scaled
    skip: y = s_H·H + s_x·x). `training=False` keeps nothing per layer."""
    backprop_h = _BACKPROP_FROM_OUTPUT[activation]
    backprop_gate = _BACKPROP_FROM_OUTPUT[keras.activations.sigmoid]
    gates = learned[1:]  # ("t",), ("t", "c"), ("c",) or () (residual, plain)
    n = len(learned)
    depth = kernel.shape[0]

    def forward(weights, keep):
        def layers(first, count, x, saved):
            for u in range(count):
                i = first + u
                w = [a.read(i) for a in weights]
                z = [tf.matmul(x, k) + b for k, b in zip(w[:n], w[n:2 * n])]
                h, g = activation(z[0]), dict(zip(gates, map(tf.sigmoid, z[1:])))
                if keep:
                    saved = [a.write(i, v) for a, v in zip(saved, (x, h, *g.values()))]
                if scales is None:
                    x = combine(variant, x, h, g.get("t"), g.get("c"))
                else:
                    x = scaled_combine(x, h, w[2 * n])
            return x, saved

        return layers

    def backward(weights, saved):
        def layers(first, count, dy, grads):
            for u in reversed(range(count)):
                i = first + u
                kernels = [w.read(i) for w in weights[:n]]
                x, h, *gate_values = (a.read(i) for a in saved)
                g = dict(zip(gates, gate_values))
                t, c = g.get("t"), g.get("c")
                # dL/dH, dL/dT, dL/dC and the carry path's share of dL/dx, per variant.
                dh = dy if t is None else dy * t
                if scales is not None:  # y = s_H H + s_x x
                    s = weights[2 * n].read(i)
                    dh, dx, dz = dy * s[0], dy * s[1], {}
                    d_scales = [tf.stack([tf.reduce_sum(dy * h, axis=0),
                                          tf.reduce_sum(dy * x, axis=0)])]
                elif variant == "coupled":  # y = x + T (H - x)
                    dz = {"t": dy * (h - x)}
                    dx = dy - dh
                elif variant == "plain":  # y = H: no carry path
                    dz, dx = {}, None
                else:  # y = H T + x C, a gate not learned being 1
                    dz = {name: dy * (h if name == "t" else x) for name in gates}
                    dx = dy if c is None else dy * c
                dz["h"] = backprop_h(h, dh)
                for name in gates:
                    dz[name] = backprop_gate(g[name], dz[name])
                dz = [dz[name] for name in learned]
                dy = tf.add_n([*([] if dx is None else [dx]),
                               *(tf.matmul(z, k, transpose_b=True) for z, k in zip(dz, kernels))])
                layer_grads = [*(tf.matmul(x, z, transpose_a=True) for z in dz),
                               *(tf.reduce_sum(z, axis=0) for z in dz),
                               *(d_scales if scales is not None else ())]
                grads = [a.write(i, v) for a, v in zip(grads, layer_grads)]
            return dy, grads

        return layers

    def run_forward(x, kernel, bias, scales, keep):
        weights = [_per_layer(w) for w in _split_branches(kernel, bias, n)]
        if scales is not None:
            weights.append(_per_layer(scales))
        saved = [_empty(x, depth) for _ in range(2 + len(gates))] if keep else []
        y, saved = _over_layers(depth, unroll, forward(weights, keep), x, saved)
        # `write` returns arrays that log "TensorArray ... never used" when dropped unread, as
        # these are by a forward pass with no gradient taken; `identity` gives plain ones.
        return y, weights, [a.identity() for a in saved]

    if not training:
        return run_forward(x, kernel, bias, scales, keep=False)[0]

    @tf.custom_gradient
    def run(x, kernel, bias, *scaled):
        y, weights, saved = run_forward(x, kernel, bias, scaled[0] if scaled else None,
                                        keep=True)

        def grad(dy):
            shapes = [w.element_shape for w in weights]
            grads = [tf.TensorArray(dy.dtype, size=depth, element_shape=s) for s in shapes]
            dx, grads = _over_layers(depth, unroll, backward(weights, saved), dy, grads,
                                     reverse=True)
            grads = [a.stack() for a in grads]
            return (dx, tf.concat(grads[:n], axis=-1), tf.concat(grads[n:2 * n], axis=-1),
                    *grads[2 * n:])

        return y, grad

    return run(x, kernel, bias, *(() if scales is None else (scales,)))
