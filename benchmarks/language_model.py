"""Training throughput of the zoo's character-aware LM against the same net in stock Keras
and in plain PyTorch.

    python -m benchmarks.language_model [--models lstm_char_small_ptb,lstm_char_large_ptb]
        [--backends tensorflow,jax] [--repeats 5] [--steps 40] [--out FILE]

Three nets of Kim et al.'s layout, trained on random data of PTB's shape (batch 20, 35 steps,
words of 21 characters, a 10,000-word softmax) with Kim's step (states carried from batch to
batch, SGD with the global norm clipped at 5, the cross-entropy summed over the steps):

  (a) zoo: `zoo.load(model, stateful=True, batch_size=20)`: `layers.CharCNNEmbedder` (masked
      max over each word's windows, the activation after the max), `HighwayDense` and
      `layers.carried_state_lstm.CarriedStateLSTM`;
  (b) stock: `Embedding`, `TimeDistributed(Conv1D(tanh))`, `TimeDistributed(
      GlobalMaxPooling1D)`, highway layers of two `Dense` each and `LSTM(stateful=True)`, as
      one writes them with Keras's own layers (same parameters as (a), checked);
  (c) torch: the same net in plain PyTorch (`implementations.torch_char_lm`: `nn.LSTM`, cuDNN
      on a GPU), eager, all the CPU's threads (4 * units more parameters per LSTM layer: two
      biases per gate).

After a warm-up (tracing), (a), (b) and (c) alternate `--repeats` times, `--steps` training
steps each (one `fit` call for a Keras net, as an epoch is one), timed in steady state from
the end of the second step to the end of the last; the table gives the median
tokens/s of each and the medians of the per-repeat ratios to (c) (back-to-back runs on a shared
machine: the ratio cancels most of its load). Each (model, backend) is one fresh process
(`--backends`, default `KERAS_BACKEND`, else tensorflow), the three nets interleaved inside it.
Writes benchmarks/results/language_model.json (on a GPU, gpu_language_model.json by the suite's
--gpu: Small and Large, alone on the GPU, PyTorch with cuDNN).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from benchmarks import driver

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "language_model.json"
MODELS = ["lstm_char_small_ptb"]
BACKENDS = ("tensorflow", "jax", "torch")
BATCH, STEPS, WORD = 20, 35, 21


def stock_model(args: dict, batch: int):
    """Kim et al.'s net from Keras's stock layers (no zoo layer)."""
    import keras
    from keras import ops

    init = {"class_name": "RandomUniform", "config": {"minval": -0.05, "maxval": 0.05}}
    inputs = keras.Input((None, args["input_shape"][1]), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(args["char_vocab_size"], args["char_embedding_dim"],
                               embeddings_initializer=init)(inputs)
    pooled = []
    for f, k in zip(args["filters"], args["kernel_sizes"]):
        z = keras.layers.TimeDistributed(keras.layers.Conv1D(
            f, k, activation="tanh", kernel_initializer=init, bias_initializer=init))(x)
        pooled.append(keras.layers.TimeDistributed(keras.layers.GlobalMaxPooling1D())(z))
    x = keras.layers.Concatenate()(pooled)
    d = sum(args["filters"])
    for _ in range(args["highway_layers"]):
        h = keras.layers.Dense(d, activation="relu", kernel_initializer=init,
                               bias_initializer=init)(x)
        t = keras.layers.Dense(d, activation="sigmoid", kernel_initializer=init,
                               bias_initializer=keras.initializers.Constant(-2.0))(x)
        x = ops.add(ops.multiply(t, h), ops.multiply(1.0 - t, x))
    for i in range(args["lstm_layers"]):
        if i:
            x = keras.layers.Dropout(args["dropout"])(x)
        x = keras.layers.LSTM(args["lstm_units"], return_sequences=True, stateful=True,
                              kernel_initializer=init, recurrent_initializer=init,
                              bias_initializer=init, unit_forget_bias=False)(x)
    x = keras.layers.Dropout(args["dropout"])(x)
    return keras.Model(inputs, keras.layers.Dense(args["classes"], kernel_initializer=init)(x))


def _compiled(model):
    import keras

    from training.language_model import TimeSummedCrossentropy

    model.compile(optimizer=keras.optimizers.SGD(1.0, global_clipnorm=5.0),
                  loss=TimeSummedCrossentropy())
    return model


def _tokens_per_second(model, x, y, batch: int) -> float:
    """Steady-state training tokens/s of one `fit` over (x, y): timed from the end of its
    second batch to the end of its last (an epoch is one `fit` of 1,328 batches on PTB, so
    `fit`'s own start-up, seconds for a few dozen batches, is left out)."""
    import keras

    ends = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            ends.append(time.perf_counter())

    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[Clock()])
    return (len(ends) - 2) * batch * y.shape[1] / (ends[-1] - ends[1])


def torch_net(args: dict):
    """(c): the net in PyTorch, its optimizer and device (a CUDA GPU where there is one)."""
    import torch

    from benchmarks.implementations.torch_char_lm import CharLM

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    net = CharLM(args).to(device)
    return net, torch.optim.SGD(net.parameters(), lr=1.0), device


def measure(model_name: str = "lstm_char_small_ptb", repeats: int = 5, steps: int = 40,
            batch: int = BATCH, seq: int = STEPS, **overrides) -> dict:
    """Runs in a fresh process: the three nets of one model on the process's backend."""
    import keras
    import numpy as np
    import torch

    import zoo
    from benchmarks.implementations import torch_char_lm
    from training.runtime import backend as runtime_backend
    from zoo.char_lm import trained_weights

    if steps < 3:
        raise ValueError(f"steps must be at least 3 (timed from the end of the second). "
                         f"Received: {steps}")
    args = {**zoo.describe(model_name)["architecture_args"], **overrides}
    ours = _compiled(zoo.load(model_name, stateful=True, batch_size=batch, **overrides))
    stock = _compiled(stock_model(args, batch))
    params = sum(int(w.size) for w in trained_weights(ours))
    if params != stock.count_params():
        raise AssertionError(f"not the same net: {params:,} parameters vs "
                             f"{stock.count_params():,}")
    net, optimizer, device = torch_net(args)
    torch_params = sum(p.numel() for p in net.parameters())
    if torch_params != params + 4 * args["lstm_units"] * args["lstm_layers"]:
        raise AssertionError(f"not the same net: {torch_params:,} parameters in PyTorch")
    rng = np.random.default_rng(0)
    x = rng.integers(3, args["char_vocab_size"], (steps * batch, seq, args["input_shape"][1]),
                     dtype="int32")
    x[..., 8:] = 0  # words of 6 characters plus start and end, then padding
    y = rng.integers(0, args["classes"], (steps * batch, seq), dtype="int32")

    def torch_rate(x, y):
        return torch_char_lm.tokens_per_second(net, x, y, batch, optimizer, device)

    nets = {"zoo": lambda x, y: _tokens_per_second(ours, x, y, batch),
            "stock": lambda x, y: _tokens_per_second(stock, x, y, batch), "torch": torch_rate}
    for rate in nets.values():  # warm-up: tracing
        rate(x[:3 * batch], y[:3 * batch])
    runs = {name: [] for name in nets}
    for _ in range(repeats):
        for name, rate in nets.items():
            runs[name].append(rate(x, y))

    def ratio(name):
        return statistics.median(a / b for a, b in zip(runs[name], runs["torch"]))

    return {
        "model": model_name, "overrides": overrides, "params": params,
        "torch_params": torch_params, "batch": batch, "steps": seq,
        "word_length": args["input_shape"][1], "steps_per_repeat": steps, "repeats": repeats,
        **{f"{name}_tokens_per_second": statistics.median(r) for name, r in runs.items()},
        "ratio_zoo_over_torch": ratio("zoo"), "ratio_stock_over_torch": ratio("stock"),
        "ratio_zoo_over_stock": statistics.median(
            a / b for a, b in zip(runs["zoo"], runs["stock"])),
        **{f"{name}_runs": r for name, r in runs.items()},
        "machine": {"processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "backend": keras.backend.backend(),
                    "torch_device": str(device), "torch_threads": torch.get_num_threads(),
                    **runtime_backend.versions()},
    }


def format_table(rows: list[dict]) -> str:
    return driver.table(
        ["model", "backend", "zoo tokens/s", "stock Keras", "PyTorch", "zoo / PyTorch",
         "stock / PyTorch"],
        [":---", ":---", "---:", "---:", "---:", "---:", "---:"],
        [[f"{r['model']} ({r['params']:,})", r["machine"]["backend"],
          f"{r['zoo_tokens_per_second']:,.0f}", f"{r['stock_tokens_per_second']:,.0f}",
          f"{r['torch_tokens_per_second']:,.0f} ({r['machine']['torch_device']})",
          f"{r['ratio_zoo_over_torch']:.2f}", f"{r['ratio_stock_over_torch']:.2f}"]
         for r in rows])


def _names(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def parser() -> argparse.ArgumentParser:
    p = driver.parser("benchmarks.language_model", __doc__, RESULTS)
    p.add_argument("--models", type=_names, default=MODELS,
                   help=f"comma-separated character-aware LMs (default {','.join(MODELS)})")
    p.add_argument("--backends", type=_names,
                   default=[os.environ.get("KERAS_BACKEND", "tensorflow")],
                   help="comma-separated Keras backends, one process each (default "
                        "$KERAS_BACKEND, else tensorflow)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (5)")
    p.add_argument("--steps", type=int, default=40, help="training steps a net a repeat (40)")
    return p


def _refusal(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, in one line, or None."""
    import zoo

    for name in args.models:
        try:
            family = zoo.describe(name)["family"]
        except ValueError as error:
            return str(error)
        if family != "char_lm":
            models = [n for n in zoo.list_models() if zoo.describe(n)["family"] == "char_lm"]
            return (f"{name} is not a character-aware language model; choose from "
                    f"{', '.join(models)}")
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown:
        return f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}"
    if args.steps < 3:
        return f"--steps must be at least 3 (timed from the end of the second); got {args.steps}"
    if args.repeats < 1:
        return f"--repeats must be at least 1; got {args.repeats}"
    return None


def run(args: argparse.Namespace) -> int:
    refusal = _refusal(args)  # before any process starts
    if refusal:
        print(f"python -m benchmarks.language_model: {refusal}", file=sys.stderr)
        return 2
    rows = []
    for name in args.models:
        for backend in args.backends:
            print(f"{name} on {backend}: {args.repeats} repeats of {args.steps} steps",
                  flush=True)
            rows.append(driver.run_child("benchmarks.language_model", {
                "model_name": name, "repeats": args.repeats, "steps": args.steps},
                backend=backend))
    print()
    print(format_table(rows))
    driver.write_results(args.out, {
        "settings": {"repeats": args.repeats, "steps": args.steps, "batch": BATCH,
                     "sequence": STEPS, "word_length": WORD,
                     "optimizer": "SGD(1.0, global_clipnorm=5.0), Kim's step",
                     "inputs": "random character ids of PTB's shape, states carried"},
        "results": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
