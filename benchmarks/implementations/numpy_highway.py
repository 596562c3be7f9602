"""The headline experiment in pure NumPy: a hand-written forward and backward pass.

Network: Linear 784 -> width + tanh (the stem), `depth` coupled highway blocks of width
`width`, `y = x + T * (H - x)` with `H = tanh(x @ W_H + b_H)`, `T = sigmoid(x @ W_T + b_T)`,
then Linear width -> 10 + softmax and the mean cross-entropy over the batch. Each block keeps
its two weight matrices fused, `kernel[i] = [W_H | W_T]` of shape `(width, 2 * width)` and
`bias[i] = [b_H | b_T]`: the layout of `layers.HighwayStack`'s `kernel` / `bias`.

The backward pass is the one of Srivastava, Greff & Schmidhuber (2015), appendix: with the
upstream gradient `dy` of a block,

    dH = dy * T,          dz_H = dH * (1 - H^2)
    dT = dy * (H - x),    dz_T = dT * T * (1 - T)
    dx = dy * (1 - T) + [dz_H | dz_T] @ kernel^T,   dkernel = x^T dz,   dbias = sum(dz)

and softmax cross-entropy gives `dlogits = (p - onehot) / batch`.

Optimiser: Adam with global-norm gradient clipping of the whole gradient, both written out
here as Keras 3 computes them (`keras.optimizers.Adam(global_clipnorm=...)`): the update is
`theta -= alpha_t * m / (sqrt(v) + eps)` with `alpha_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)`
(Kingma & Ba's "more efficient" ordering, section 2). PyTorch adds eps to the bias-corrected
sqrt(v) instead: in its terms Keras's eps is eps / sqrt(1 - beta2^t), 31.6 eps at step 1 and
eps in the limit, which changes the update only on gradient entries of ~1e-5 and below.

All parameters live in one contiguous float32 vector (the dict's arrays are views of it), and
so do the gradients and Adam's moments: clipping and the update are a handful of whole-vector
operations. Everything stays float32 (no float64 scalars enter an array operation).

This module imports neither TensorFlow nor PyTorch.
"""

from __future__ import annotations

import math
import time

import numpy as np

from benchmarks.implementations import steady_step_s

N_INPUTS = 784
N_CLASSES = 10
# Keras's Adam defaults, besides the learning rate.
BETA_1 = 0.9
BETA_2 = 0.999
EPSILON = 1e-7
_EVAL_BATCH = 1024

PARAM_KEYS = ("stem_kernel", "stem_bias", "kernel", "bias", "head_kernel", "head_bias")


def param_shapes(depth: int, width: int = 50, n_inputs: int = N_INPUTS,
                 n_classes: int = N_CLASSES) -> dict:
    """The shape of each parameter array, by key, in the packing order."""
    return {
        "stem_kernel": (n_inputs, width),
        "stem_bias": (width,),
        "kernel": (depth, width, 2 * width),
        "bias": (depth, 2 * width),
        "head_kernel": (width, n_classes),
        "head_bias": (n_classes,),
    }


def _packed(shapes: dict, dtype) -> tuple[np.ndarray, dict]:
    """One zeroed flat buffer and a dict of views of it, one per shape."""
    sizes = [math.prod(shape) for shape in shapes.values()]
    flat = np.zeros(sum(sizes), dtype=dtype)
    views, offset = {}, 0
    for (key, shape), size in zip(shapes.items(), sizes):
        views[key] = flat[offset:offset + size].reshape(shape)
        offset += size
    return flat, views


def init_params(depth: int, width: int = 50, transform_bias: float = -2.0, seed: int = 0,
                n_inputs: int = N_INPUTS, n_classes: int = N_CLASSES,
                dtype=np.float32) -> dict:
    """Fresh parameters: every weight matrix uniform(+-1/sqrt(fan_in)), biases 0, b_T =
    `transform_bias`. Keys and shapes as `param_shapes`; `kernel[i]` is `[W_H | W_T]`."""
    rng = np.random.default_rng(seed)

    def uniform(shape, fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype(dtype)

    shapes = param_shapes(depth, width, n_inputs, n_classes)
    bias = np.zeros(shapes["bias"], dtype=dtype)
    bias[:, width:] = transform_bias
    return {
        "stem_kernel": uniform(shapes["stem_kernel"], n_inputs),
        "stem_bias": np.zeros(shapes["stem_bias"], dtype=dtype),
        # Both halves (W_H and W_T) have fan-in `width`.
        "kernel": uniform(shapes["kernel"], width),
        "bias": bias,
        "head_kernel": uniform(shapes["head_kernel"], width),
        "head_bias": np.zeros(shapes["head_bias"], dtype=dtype),
    }


def _forward(params: dict, x: np.ndarray, keep: bool):
    """Logits, and (when `keep`) what the backward pass needs: the stem's output, each block's
    input `xs[i]` (`xs[depth]` is the last block's output) and its gates `[H | T]`."""
    kernel, bias = params["kernel"], params["bias"]
    depth, width = kernel.shape[0], kernel.shape[1]
    dtype = kernel.dtype
    x = np.asarray(x, dtype=dtype)
    batch = x.shape[0]

    # Without `keep`, two buffers take turns as a block's input and output.
    xs = np.empty((depth + 1 if keep else 2, batch, width), dtype=dtype)
    gates = np.empty((depth, batch, 2 * width), dtype=dtype) if keep else None
    h = np.matmul(x, params["stem_kernel"], out=xs[0])
    h += params["stem_bias"]
    np.tanh(h, out=h)
    z = np.empty((batch, 2 * width), dtype=dtype)
    for i in range(depth):
        if keep:
            z = gates[i]
        np.matmul(h, kernel[i], out=z)
        z += bias[i]
        H, T = z[:, :width], z[:, width:]
        np.tanh(H, out=H)
        # sigmoid(t) = (1 + tanh(t / 2)) / 2: no overflow in exp, stays float32.
        T *= 0.5
        np.tanh(T, out=T)
        T += 1
        T *= 0.5
        # y = x + T * (H - x)
        y = xs[i + 1] if keep else xs[(i + 1) % 2]
        np.subtract(H, h, out=y)
        y *= T
        y += h
        h = y
    logits = h @ params["head_kernel"]
    logits += params["head_bias"]
    return logits, xs, gates, h


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return shifted


def forward(params: dict, x: np.ndarray) -> np.ndarray:
    """Class probabilities, shape (batch, 10)."""
    logits, *_ = _forward(params, x, keep=False)
    return np.exp(_log_softmax(logits))


def loss_and_grads(params: dict, x: np.ndarray, y: np.ndarray, grads: dict | None = None):
    """Mean cross-entropy on `(x, y)` and its gradient with respect to every parameter array.

    Computes in the dtype of `params` (float32 for training, float64 for gradient checks).
    `grads`, if given, is a dict of arrays of the parameters' shapes that receives the
    gradients (training passes views of one flat buffer); otherwise fresh arrays are returned.
    Returns `(loss as a Python float, grads)`.
    """
    kernel = params["kernel"]
    depth, width = kernel.shape[0], kernel.shape[1]
    dtype = kernel.dtype
    x = np.asarray(x, dtype=dtype)
    y = np.asarray(y)
    batch = x.shape[0]
    if grads is None:
        grads = {key: np.empty_like(params[key]) for key in PARAM_KEYS}

    logits, xs, gates, h = _forward(params, x, keep=True)
    log_p = _log_softmax(logits)
    rows = np.arange(batch)
    loss = -float(log_p[rows, y].mean())

    # Softmax cross-entropy: dlogits = (p - onehot) / batch.
    dlogits = np.exp(log_p)
    dlogits[rows, y] -= 1
    dlogits /= batch
    np.matmul(h.T, dlogits, out=grads["head_kernel"])
    np.sum(dlogits, axis=0, out=grads["head_bias"])
    dy = dlogits @ params["head_kernel"].T

    dz = np.empty((batch, 2 * width), dtype=dtype)
    dz_H, dz_T = dz[:, :width], dz[:, width:]
    for i in range(depth - 1, -1, -1):
        x_i = xs[i]
        H, T = gates[i][:, :width], gates[i][:, width:]
        # dz_H = dH * (1 - H^2), dH = dy * T
        np.multiply(H, H, out=dz_H)
        np.subtract(1, dz_H, out=dz_H)
        dz_H *= T
        dz_H *= dy
        # dz_T = dT * T * (1 - T), dT = dy * (H - x)
        np.subtract(1, T, out=dz_T)
        dz_T *= T
        dz_T *= dy
        carry = dy * (1 - T)  # the carry path's share of dx (before dy is overwritten)
        dz_T *= H - x_i
        np.matmul(x_i.T, dz, out=grads["kernel"][i])
        np.sum(dz, axis=0, out=grads["bias"][i])
        # dx = dy * (1 - T) + dz @ kernel^T
        dy = np.matmul(dz, kernel[i].T)
        dy += carry

    # Stem: h0 = tanh(x @ W + b), xs[0] is h0.
    dz0 = 1 - xs[0] * xs[0]
    dz0 *= dy
    np.matmul(x.T, dz0, out=grads["stem_kernel"])
    np.sum(dz0, axis=0, out=grads["stem_bias"])
    return loss, grads


def pack(params: dict, dtype=np.float32) -> tuple[np.ndarray, dict]:
    """Copies a parameter dict into one contiguous flat vector; returns the vector and a dict
    of views of it (same keys and shapes, in `PARAM_KEYS` order)."""
    flat, views = _packed({key: params[key].shape for key in PARAM_KEYS}, dtype)
    for key in PARAM_KEYS:
        views[key][...] = params[key]
    return flat, views


class Adam:
    """Adam with global-norm clipping of the whole gradient, over one flat parameter vector,
    as Keras 3 computes it (`keras.optimizers.Adam(global_clipnorm=...)`).

    `apply(grad)` scales `grad` in place by `clipnorm / ||grad||` when the norm exceeds
    `clipnorm` (`tf.clip_by_global_norm`), then updates the moments and, in place, the
    parameters: `theta -= alpha_t * m / (sqrt(v) + epsilon)`,
    `alpha_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)`.
    """

    def __init__(self, flat: np.ndarray, learning_rate: float = 5e-3,
                 clipnorm: float | None = 5.0, beta_1: float = BETA_1, beta_2: float = BETA_2,
                 epsilon: float = EPSILON):
        self.flat = flat
        self.learning_rate, self.clipnorm = float(learning_rate), clipnorm
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.m = np.zeros_like(flat)
        self.v = np.zeros_like(flat)
        self._scratch = np.empty_like(flat)
        self.iterations = 0

    def apply(self, grad: np.ndarray) -> None:
        if self.clipnorm is not None:
            norm = math.sqrt(float(np.dot(grad, grad)))
            if norm > self.clipnorm:
                grad *= self.clipnorm / norm  # a Python float: grad stays float32
        self.iterations += 1
        t, scratch = self.iterations, self._scratch
        np.multiply(grad, 1 - self.beta_1, out=scratch)
        self.m *= self.beta_1
        self.m += scratch
        np.multiply(grad, grad, out=scratch)
        scratch *= 1 - self.beta_2
        self.v *= self.beta_2
        self.v += scratch
        alpha = self.learning_rate * math.sqrt(1 - self.beta_2**t) / (1 - self.beta_1**t)
        np.sqrt(self.v, out=scratch)
        scratch += self.epsilon
        np.divide(self.m, scratch, out=scratch)
        scratch *= alpha
        self.flat -= scratch


def accuracy(params: dict, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of `x` classified as `y`, evaluated in batches."""
    correct = 0
    for start in range(0, len(x), _EVAL_BATCH):
        logits, *_ = _forward(params, x[start:start + _EVAL_BATCH], keep=False)
        correct += int((logits.argmax(axis=1) == y[start:start + _EVAL_BATCH]).sum())
    return correct / max(len(x), 1)


def train(data: dict, depth: int, width: int = 50, epochs: int = 12, batch_size: int = 128,
          learning_rate: float = 5e-3, clipnorm: float = 5.0, transform_bias: float = -2.0,
          seed: int = 0, max_steps: int | None = None) -> dict:
    """Trains the headline network on `data` (`x_train`, `y_train`, `x_test`, `y_test`) with
    Adam and global-norm clipping; returns timings, the last epoch's mean loss and the test
    accuracy (see the module docstring)."""
    x_train = np.ascontiguousarray(data["x_train"], dtype=np.float32)
    y_train = np.asarray(data["y_train"], dtype=np.int64)
    n = len(x_train)
    steps_per_epoch = math.ceil(n / batch_size)
    n_inputs = x_train.shape[1]

    start = time.perf_counter()
    flat, params = pack(init_params(depth, width, transform_bias, seed, n_inputs=n_inputs))
    grad_flat, grads = pack(params)
    optimizer = Adam(flat, learning_rate, clipnorm)
    build_s = time.perf_counter() - start

    rng = np.random.default_rng([seed, 1])  # the shuffling stream, apart from init's
    epoch_s, step_s, steps, first_step_s, final_loss = [], [], 0, None, float("nan")
    loop_start = time.perf_counter()
    for _ in range(epochs):
        if max_steps is not None and steps >= max_steps:
            break
        epoch_start = time.perf_counter()
        batch_ends = []
        order = rng.permutation(n)
        loss_sum, seen = 0.0, 0
        for begin in range(0, n, batch_size):
            index = order[begin:begin + batch_size]
            xb, yb = x_train[index], y_train[index]
            loss, _ = loss_and_grads(params, xb, yb, grads)
            optimizer.apply(grad_flat)
            steps += 1
            batch_ends.append(time.perf_counter())
            if first_step_s is None:
                first_step_s = batch_ends[0] - loop_start
            # Keras's fit weights each batch's loss by its size.
            loss_sum += loss * len(index)
            seen += len(index)
            if max_steps is not None and steps >= max_steps:
                break
        epoch_s.append(time.perf_counter() - epoch_start)
        step_s.append(steady_step_s(batch_ends, epoch_s[-1]))
        final_loss = loss_sum / seen if seen else float("nan")

    x_test = np.asarray(data["x_test"], dtype=np.float32)
    y_test = np.asarray(data["y_test"], dtype=np.int64)
    return {
        "build_s": build_s,
        "first_step_s": first_step_s if first_step_s is not None else float("nan"),
        "epoch_s": epoch_s,
        "step_s": step_s,
        "steps": steps,
        "steps_per_epoch": steps_per_epoch,
        "total_s": build_s + sum(epoch_s),
        "final_loss": final_loss,
        "test_accuracy": accuracy(params, x_test, y_test),
        "params": int(flat.size),
    }
