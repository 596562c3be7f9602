"""Kim et al.'s character-aware language model in idiomatic PyTorch, eager mode.

What a PyTorch user writes for LSTM-Char-Small/Large: `nn.Embedding` of characters, an
`nn.Conv1d` per width with tanh and a max over the word, highway layers of two `nn.Linear`,
`nn.LSTM` (cuDNN on a GPU) with dropout between its layers, dropout, `nn.Linear` logits;
`F.cross_entropy` times the steps (Kim's gradient, as `TimeSummedCrossentropy`), SGD, the
global gradient norm clipped at 5, the LSTM states detached and carried from batch to batch.
`nn.LSTM` has two biases per gate where Keras has one: 4 * units more parameters per layer.

PyTorch is an optional dependency of the project: import this module only where it is installed.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class CharLM(nn.Module):
    def __init__(self, args: dict):
        super().__init__()
        self.embedding = nn.Embedding(args["char_vocab_size"], args["char_embedding_dim"])
        self.convs = nn.ModuleList(nn.Conv1d(args["char_embedding_dim"], f, k)
                                   for f, k in zip(args["filters"], args["kernel_sizes"]))
        d = sum(args["filters"])
        self.highway = nn.ModuleList(nn.ModuleList([nn.Linear(d, d), nn.Linear(d, d)])
                                     for _ in range(args["highway_layers"]))
        self.lstm = nn.LSTM(d, args["lstm_units"], args["lstm_layers"], batch_first=True,
                            dropout=args["dropout"])
        self.dropout = nn.Dropout(args["dropout"])
        self.out = nn.Linear(args["lstm_units"], args["classes"])
        for p in self.parameters():
            nn.init.uniform_(p, -args["init_scale"], args["init_scale"])
        for _, t in self.highway:
            nn.init.constant_(t.bias, -2.0)

    def forward(self, chars, state):
        b, steps, width = chars.shape
        e = self.embedding(chars.reshape(b * steps, width)).transpose(1, 2)
        x = torch.cat([torch.tanh(conv(e)).amax(-1) for conv in self.convs], -1)
        for h, t in self.highway:
            gate = torch.sigmoid(t(x))
            x = gate * torch.relu(h(x)) + (1 - gate) * x
        y, state = self.lstm(x.reshape(b, steps, -1), state)
        return self.out(self.dropout(y)), state


def tokens_per_second(model: CharLM, x: np.ndarray, y: np.ndarray, batch: int,
                      optimizer: torch.optim.Optimizer, device: torch.device) -> float:
    """Steady-state tokens/s of one pass of training over (x, y) in contiguous batches of
    `batch` rows, from the end of the second batch to the end of the last."""
    xs = torch.from_numpy(x).long().to(device)
    ys = torch.from_numpy(y).long().to(device)
    state, steps = None, y.shape[1]
    model.train()
    ends = []
    for i in range(0, len(xs), batch):
        logits, state = model(xs[i:i + batch], state)
        state = tuple(s.detach() for s in state)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               ys[i:i + batch].reshape(-1)) * steps
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())
    # Steady state, as the Keras nets are timed: from the end of the second batch on.
    return (len(ends) - 2) * batch * steps / (ends[-1] - ends[1])
