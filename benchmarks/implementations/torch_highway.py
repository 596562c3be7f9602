"""The headline experiment in idiomatic PyTorch, eager mode.

The network as a user would write it: an `nn.Module` per coupled highway block with two
`nn.Linear(width, width)` (the block state H and the transform gate T),
`y = x + T * (H - x)`, between a Linear 784 -> width + tanh stem and a Linear width -> 10 head
giving logits; `F.cross_entropy` on the logits, `torch.optim.Adam(eps=1e-7)` and
`torch.nn.utils.clip_grad_norm_` on the whole gradient before each step. No `torch.compile`.
On a machine with a CUDA GPU the model and data live there (what a PyTorch user does); timings
wait for the GPU at the end of every epoch.

Initialisation: every weight matrix uniform(+-1/sqrt(fan_in)) (what `nn.Linear`'s default
gives its weights), biases zero, the gates' biases `transform_bias`, all drawn from a
`torch.Generator` seeded by `seed` (the global RNG is left alone). The training set is held as
two tensors and shuffled each epoch with `torch.randperm`; each batch is an index into them
(a `DataLoader` over a `TensorDataset` would collate 128 single samples per step, which is
slower than the step itself for a net this small).

`torch.optim.Adam` adds eps to the bias-corrected sqrt(v), Keras (and `numpy_highway`) to the
uncorrected one, so with the same eps the three agree except on gradient entries of ~1e-5 and
below during the first few hundred steps (Keras's eps is, in PyTorch's terms,
eps / sqrt(1 - beta2^t)).

`load_params(model, params)` loads the NumPy implementation's parameter dict
(`numpy_highway.init_params` layout) so both can be run on the same weights.

PyTorch is an optional dependency of the project: import this module only where it is installed.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.implementations import steady_step_s

N_INPUTS = 784
N_CLASSES = 10
_EVAL_BATCH = 1024
# Environment variables that already fix the number of threads PyTorch uses.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


class HighwayBlock(nn.Module):
    """A coupled highway layer: `x + T(x) * (H(x) - x)`, i.e. `H * T + x * (1 - T)`."""

    def __init__(self, width: int):
        super().__init__()
        self.H = nn.Linear(width, width)
        self.T = nn.Linear(width, width)

    def forward(self, x):
        h = torch.tanh(self.H(x))
        t = torch.sigmoid(self.T(x))
        return x + t * (h - x)


class HighwayNet(nn.Module):
    """Linear + tanh stem, `depth` highway blocks, Linear head (logits)."""

    def __init__(self, depth: int, width: int = 50, n_inputs: int = N_INPUTS,
                 n_classes: int = N_CLASSES):
        super().__init__()
        self.stem = nn.Linear(n_inputs, width)
        self.blocks = nn.Sequential(*(HighwayBlock(width) for _ in range(depth)))
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.head(self.blocks(torch.tanh(self.stem(x))))


def _init_linear(linear: nn.Linear, generator: torch.Generator, bias: float = 0.0):
    bound = 1.0 / math.sqrt(linear.in_features)
    nn.init.uniform_(linear.weight, -bound, bound, generator=generator)
    nn.init.constant_(linear.bias, bias)


def build_model(depth: int, width: int = 50, transform_bias: float = -2.0, seed: int = 0,
                n_inputs: int = N_INPUTS, n_classes: int = N_CLASSES) -> HighwayNet:
    """The network, initialised: weights uniform(+-1/sqrt(fan_in)), biases 0, b_T =
    `transform_bias`."""
    generator = torch.Generator().manual_seed(seed)
    model = HighwayNet(depth, width, n_inputs, n_classes)
    with torch.no_grad():
        _init_linear(model.stem, generator)
        for block in model.blocks:
            _init_linear(block.H, generator)
            _init_linear(block.T, generator, bias=transform_bias)
        _init_linear(model.head, generator)
    return model


def load_params(model: HighwayNet, params: dict) -> HighwayNet:
    """Copies a `numpy_highway` parameter dict into `model` (float32): `stem_kernel` (in, w),
    `stem_bias`, `kernel` (depth, w, 2w) as `[W_H | W_T]` per block, `bias` (depth, 2w),
    `head_kernel` (w, classes), `head_bias`. `nn.Linear` keeps its weight as (out, in), the
    transpose of a kernel. Returns `model`."""

    def put(parameter, array):
        value = torch.as_tensor(np.ascontiguousarray(array, dtype=np.float32))
        if value.shape != parameter.shape:
            raise ValueError(f"shape {tuple(value.shape)} != {tuple(parameter.shape)}")
        parameter.copy_(value)

    kernel, bias = params["kernel"], params["bias"]
    if len(kernel) != len(model.blocks):
        raise ValueError(f"{len(kernel)} blocks of weights for {len(model.blocks)} blocks")
    width = kernel.shape[1]
    with torch.no_grad():
        put(model.stem.weight, params["stem_kernel"].T)
        put(model.stem.bias, params["stem_bias"])
        for block, k, b in zip(model.blocks, kernel, bias):
            put(block.H.weight, k[:, :width].T)
            put(block.H.bias, b[:width])
            put(block.T.weight, k[:, width:].T)
            put(block.T.bias, b[width:])
        put(model.head.weight, params["head_kernel"].T)
        put(model.head.bias, params["head_bias"])
    return model


def _set_threads():
    if not any(os.environ.get(name) for name in _THREAD_VARIABLES):
        torch.set_num_threads(os.cpu_count() or 1)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of `x` classified as `y`, evaluated in batches."""
    model.eval()
    correct = 0
    for start in range(0, len(x), _EVAL_BATCH):
        logits = model(x[start:start + _EVAL_BATCH])
        correct += int((logits.argmax(dim=1) == y[start:start + _EVAL_BATCH]).sum())
    return correct / max(len(x), 1)


def train(data: dict, depth: int, width: int = 50, epochs: int = 12, batch_size: int = 128,
          learning_rate: float = 5e-3, clipnorm: float = 5.0, transform_bias: float = -2.0,
          seed: int = 0, max_steps: int | None = None) -> dict:
    """Trains the headline network on `data` (`x_train`, `y_train`, `x_test`, `y_test`);
    returns timings, the last epoch's mean loss and the test accuracy."""
    _set_threads()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x_train = torch.as_tensor(np.ascontiguousarray(data["x_train"], dtype=np.float32),
                              device=device)
    y_train = torch.as_tensor(np.asarray(data["y_train"], dtype=np.int64), device=device)
    n = len(x_train)
    steps_per_epoch = math.ceil(n / batch_size)

    start = time.perf_counter()
    model = build_model(depth, width, transform_bias, seed, n_inputs=x_train.shape[1])
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.999),
                                 eps=1e-7)
    build_s = time.perf_counter() - start

    generator = torch.Generator().manual_seed(seed + 1)  # the shuffling stream
    epoch_s, step_s, steps, first_step_s, final_loss = [], [], 0, None, float("nan")
    model.train()
    loop_start = time.perf_counter()
    for _ in range(epochs):
        if max_steps is not None and steps >= max_steps:
            break
        epoch_start = time.perf_counter()
        batch_ends = []
        order = torch.randperm(n, generator=generator).to(device)
        loss_sum, seen = torch.zeros((), device=device), 0
        for begin in range(0, n, batch_size):
            index = order[begin:begin + batch_size]
            xb, yb = x_train[index], y_train[index]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clipnorm)
            optimizer.step()
            steps += 1
            if first_step_s is None and device.type == "cuda":
                torch.cuda.synchronize()  # the first step's time is its kernels' too
            batch_ends.append(time.perf_counter())
            if first_step_s is None:
                first_step_s = batch_ends[0] - loop_start
            # Keras's fit weights each batch's loss by its size.
            loss_sum += loss.detach() * len(index)
            seen += len(index)
            if max_steps is not None and steps >= max_steps:
                break
        if device.type == "cuda":
            torch.cuda.synchronize()
        epoch_s.append(time.perf_counter() - epoch_start)
        step_s.append(steady_step_s(batch_ends, epoch_s[-1]))
        final_loss = float(loss_sum) / seen if seen else float("nan")

    x_test = torch.as_tensor(np.asarray(data["x_test"], dtype=np.float32), device=device)
    y_test = torch.as_tensor(np.asarray(data["y_test"], dtype=np.int64), device=device)
    return {
        "build_s": build_s,
        "first_step_s": first_step_s if first_step_s is not None else float("nan"),
        "epoch_s": epoch_s,
        "step_s": step_s,
        "steps": steps,
        "steps_per_epoch": steps_per_epoch,
        "total_s": build_s + sum(epoch_s),
        "final_loss": final_loss,
        "test_accuracy": accuracy(model, x_test, y_test),
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
