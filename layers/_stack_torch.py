"""The fast path of `HighwayStack` on PyTorch: a Python loop over the layers in plain `torch`
ops, with the paper's backward pass written out as one `torch.autograd.Function`.

PyTorch runs eagerly, so what a step costs is the ops it launches and the autograd graph it
records; nothing is compiled, and the first step costs what any step does. Two traps are
avoided:

- Indexing a stacked weight per layer (`kernel[i]`, what `keras.ops.scan` does on this
  backend) gives each layer's slice its own backward node that writes a zero-filled
  `(depth, ...)` gradient: a step costs O(depth^2). `unbind` gives all slices one node.
- Autograd through the loop records some eight nodes per layer. The written-out backward pass
  (Srivastava et al. 2015, appendix) is one node for the whole stack: the forward pass runs
  without autograd and keeps each layer's input, H and gates; backwards, a layer's step is one
  `addmm` with the fused `[H | T | C]` kernel for dL/dx and the fused activation gradients
  (`tanh_backward` & co., in terms of the saved outputs), and the weight gradients of all
  layers are one batched matmul and one sum after the loop.

Measured on a CPU (depth 29, width 50, batch 128, forward + backward of the stack alone, one
thread): 4.5-5 ms written out or autograd through `unbind`, 6 ms or more indexing per layer; at
depth 300, 50-55 ms written out, 57-70 ms autograd through `unbind`, 160-250 ms indexing. In a
whole training step (Keras's trainer, Adam) the written-out pass and autograd through `unbind`
measure the same (depth 300, one thread: 72-83 ms a step either way); the written-out pass
keeps fewer tensors (each layer's x, H and gates). Other activations and
`hand_written_backward = False` autograd through the `unbind` loop.

(Pure PyTorch: keras.ops' conversions cost more than a width-50 layer's arithmetic.)

The scaled skips (rezero, layerscale, laurel_rw) come as `scales` (depth, 2, d), each layer's
y = s_H·H + s_x·x, unbound with the weights; their gradients are two batch sums per layer.
"""

import keras
import torch

from layers._highway import combine, combine_backward, scaled_combine, scaled_combine_backward

_aten = torch.ops.aten

# Activations as torch functions, and dL/dz from dL/dy written with the activation's output
# y = activation(z) (PyTorch's fused gradient kernels): the backward pass uses the saved H.
_ACTIVATIONS = {
    keras.activations.tanh: torch.tanh,
    keras.activations.sigmoid: torch.sigmoid,
    keras.activations.relu: torch.relu,
    keras.activations.linear: lambda z: z,
}
_BACKPROP_FROM_OUTPUT = {
    keras.activations.tanh: lambda y, dy: _aten.tanh_backward(dy, y),
    keras.activations.sigmoid: lambda y, dy: _aten.sigmoid_backward(dy, y),
    keras.activations.relu: lambda y, dy: _aten.threshold_backward(dy, y, 0),
    keras.activations.linear: lambda y, dy: dy,
}


def has_fast_path(activation):
    """Whether the hand-written backward pass covers this activation."""
    return activation in _BACKPROP_FROM_OUTPUT


def _forward(x, kernel, bias, activation, variant, learned, saved=None, scales=None):
    """The layers on `x`; `saved`, a list, gets each layer's (x, h, *gates) appended."""
    gates = learned[1:]
    width = x.shape[-1]
    per_layer = [None] * kernel.shape[0] if scales is None else scales.unbind(0)
    for k, b, s in zip(kernel.unbind(0), bias.unbind(0), per_layer):
        z = torch.addmm(b, x, k).split(width, dim=-1)
        h = activation(z[0])
        g = {name: torch.sigmoid(v) for name, v in zip(gates, z[1:])}
        if saved is not None:
            saved.append((x, h, *g.values()))
        if s is None:
            x = combine(variant, x, h, g.get("t"), g.get("c"))
        else:
            x = scaled_combine(x, h, s)
    return x


class _HighwayStack(torch.autograd.Function):
    """The stack with the paper's backward pass (one autograd node for all layers)."""

    @staticmethod
    def forward(ctx, x, kernel, bias, scales, activation, variant, learned):
        saved = []
        y = _forward(x, kernel, bias, _ACTIVATIONS[activation], variant, learned, saved, scales)
        per_layer = [torch.stack(values) for values in zip(*saved)]  # x, h, *gates
        ctx.save_for_backward(kernel, scales, *per_layer)
        ctx.spec = (activation, variant, learned)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        kernel, scales, inputs, hs, *gate_values = ctx.saved_tensors
        activation, variant, learned = ctx.spec
        backprop_h = _BACKPROP_FROM_OUTPUT[activation]
        gates = learned[1:]
        dz = dy.new_empty((kernel.shape[0], dy.shape[0], kernel.shape[-1]))
        d_scales = None if scales is None else torch.empty_like(scales)
        for i in reversed(range(kernel.shape[0])):
            x, h = inputs[i], hs[i]
            g = {name: values[i] for name, values in zip(gates, gate_values)}
            if scales is None:
                dx, dh, dt, dc = combine_backward(variant, x, h, g.get("t"), g.get("c"), dy)
            else:
                dx, dh, ds_h, ds_x = scaled_combine_backward(x, h, scales[i], dy)
                torch.stack([ds_h.sum(dim=0), ds_x.sum(dim=0)], out=d_scales[i])
                dt = dc = None
            dg = {"t": dt, "c": dc}
            dz_i = dz[i]
            torch.cat([backprop_h(h, dh),
                       *(_aten.sigmoid_backward(dg[name], g[name]) for name in gates)],
                      dim=-1, out=dz_i)
            dy = torch.mm(dz_i, kernel[i].T) if dx is None else torch.addmm(dx, dz_i,
                                                                             kernel[i].T)
        d_kernel = torch.bmm(inputs.transpose(1, 2), dz) if ctx.needs_input_grad[1] else None
        d_bias = dz.sum(dim=1) if ctx.needs_input_grad[2] else None
        return dy, d_kernel, d_bias, d_scales, None, None, None


def highway_stack(x, kernel, bias, activation, variant, learned, hand_written=True,
                  scales=None):
    """`depth` highway layers on `x` (batch, d), kernel (depth, d, n*d), bias (depth, n*d):
    the paper's backward pass where `hand_written` (and the activation allows), autograd
    through the loop otherwise; without gradients, the loop alone. `scales` (depth, 2, d): a
    scaled skip, y = s_H·H + s_x·x."""
    differentiated = torch.is_grad_enabled() and (
        x.requires_grad or kernel.requires_grad or bias.requires_grad
        or (scales is not None and scales.requires_grad))
    if differentiated and hand_written and has_fast_path(activation):
        return _HighwayStack.apply(x, kernel, bias, scales, activation, variant, learned)
    return _forward(x, kernel, bias, _ACTIVATIONS.get(activation, activation), variant, learned,
                    scales=scales)
