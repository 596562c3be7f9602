"""The fast path of `HighwayStack` on JAX: one `jax.lax.scan` over the layers, and the paper's
backward pass written out as a `jax.custom_vjp`.

A scan's body is traced and compiled once, whatever the depth, so start-up does not grow with
depth. Its backward pass, written out (Srivastava et al. 2015, appendix), is a reverse scan whose
step is the layer's dL/dx (one matmul with the fused `[H | T | C]` kernel); the weight gradients
of all layers are then two batched reductions over what the scans kept (each layer's input and
its dL/dz), out of the serial loop. Measured on a CPU (depth 29, width 50, batch 128, forward
+ backward, jitted): 2.4-2.7 ms against 3.0-3.1 ms for autodiff through the scan; scanning with
`unroll` > 1 was slower (and compiled longer), so `HighwayStack.unroll` is not used here.

Other activations (no derivative in terms of the output) and `hand_written_backward = False`
autodiff through the same scan.

The scaled skips (rezero, layerscale, laurel_rw) come as `scales` (depth, 2, d), each layer's
y = s_H·H + s_x·x: scanned with the weights, their gradients are two more batch sums per layer.
"""

import jax
import keras
from jax import numpy as jnp

from layers._highway import combine, combine_backward, scaled_combine, scaled_combine_backward

# dL/dz from dL/dy written with the activation's output y = activation(z), so the backward pass
# uses the saved H instead of recomputing z.
_BACKPROP_FROM_OUTPUT = {
    keras.activations.tanh: lambda y, dy: dy * (1 - y * y),
    keras.activations.sigmoid: lambda y, dy: dy * y * (1 - y),
    keras.activations.relu: lambda y, dy: jnp.where(y > 0, dy, jnp.zeros_like(dy)),
    keras.activations.linear: lambda y, dy: dy,
}


def has_fast_path(activation):
    """Whether the hand-written backward pass covers this activation."""
    return activation in _BACKPROP_FROM_OUTPUT


def highway_stack(x, kernel, bias, activation, variant, learned, hand_written=True,
                  scales=None):
    """`depth` highway layers on `x` (batch, d), kernel (depth, d, n*d), bias (depth, n*d):
    the paper's backward pass where `hand_written` (and the activation allows), autodiff
    through the scan otherwise. `scales` (depth, 2, d): a scaled skip, y = s_H·H + s_x·x."""
    gates = learned[1:]  # ("t",), ("t", "c"), ("c",) or () (residual, plain, the skips)
    n = len(learned)

    def forward(x, kernel, bias, scales, keep):
        def step(x, weights):
            z = jnp.split(x @ weights[0] + weights[1], n, axis=-1)
            h = activation(z[0])
            g = {name: jax.nn.sigmoid(v) for name, v in zip(gates, z[1:])}
            if scales is None:
                y = combine(variant, x, h, g.get("t"), g.get("c"))
            else:
                y = scaled_combine(x, h, weights[2])
            return y, ((x, h, *g.values()) if keep else None)

        return jax.lax.scan(step, x, (kernel, bias, *(() if scales is None else (scales,))))

    if not (hand_written and has_fast_path(activation)):
        return forward(x, kernel, bias, scales, keep=False)[0]
    backprop_h = _BACKPROP_FROM_OUTPUT[activation]
    backprop_gate = _BACKPROP_FROM_OUTPUT[keras.activations.sigmoid]

    @jax.custom_vjp
    def run(x, kernel, bias, scales):
        return forward(x, kernel, bias, scales, keep=False)[0]

    def run_forward(x, kernel, bias, scales):
        y, saved = forward(x, kernel, bias, scales, keep=True)
        return y, (kernel, scales, saved)

    def run_backward(residuals, dy):
        kernel, scales, saved = residuals

        def step(dy, layer):
            k, s, (x, h, *gate_values) = layer
            g = dict(zip(gates, gate_values))
            if s is None:
                dx, dh, dt, dc = combine_backward(variant, x, h, g.get("t"), g.get("c"), dy)
                ds = None
            else:
                dx, dh, ds_h, ds_x = scaled_combine_backward(x, h, s, dy)
                dt = dc = None
                ds = jnp.stack([jnp.sum(ds_h, axis=0), jnp.sum(ds_x, axis=0)])
            dg = {"t": dt, "c": dc}
            dz = jnp.concatenate(
                [backprop_h(h, dh), *(backprop_gate(g[name], dg[name]) for name in gates)],
                axis=-1)
            back = dz @ k.T
            return (back if dx is None else dx + back), (dz, ds)

        dx, (dz, ds) = jax.lax.scan(step, dy, (kernel, scales, saved), reverse=True)
        inputs = saved[0]  # (depth, batch, d)
        return dx, jnp.einsum("lbi,lbj->lij", inputs, dz), jnp.sum(dz, axis=1), ds

    run.defvjp(run_forward, run_backward)
    return run(x, kernel, bias, scales)
