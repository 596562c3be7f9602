"""Training throughput of the zoo's character-aware LM against the same net in stock Keras.

    python -m highway_zoo.bench.language_model [--model lstm_char_small_ptb] [--repeats 5]
        [--steps 20] [--out FILE]

Both nets are Kim et al.'s layout with the same parameter count (checked), trained on random
data of PTB's shape (batch 20, 35 steps, words of 21 characters, a 10,000-word softmax) with
the zoo's training step (stateful LSTMs, SGD with clipping, the time-summed cross-entropy):

  (a) zoo: `zoo.load(model, stateful=True, batch_size=20)`: `layers.CharCNNEmbedder` (masked
      max over each word's windows, the activation after the max) and `HighwayDense`;
  (b) stock: `Embedding`, `TimeDistributed(Conv1D(tanh))`, `TimeDistributed(
      GlobalMaxPooling1D)` and highway layers of two `Dense` each, as one writes them with
      Keras's own layers.

After a warm-up (tracing), (a) and (b) alternate `--repeats` times, `--steps` training steps
each; the table gives median tokens/s of each and the median of the per-repeat ratios (a)/(b)
(back-to-back runs on a shared machine: the ratio cancels most of its load). Writes
highway_zoo/bench/results/language_model.json (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RESULTS = Path(__file__).resolve().parent / "results" / "language_model.json"
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
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return y.size / (time.perf_counter() - start)


def run(model_name: str = "lstm_char_small_ptb", repeats: int = 5, steps: int = 20,
        batch: int = BATCH, seq: int = STEPS, **overrides) -> dict:
    import keras
    import numpy as np

    import zoo
    from training import distribute

    args = {**zoo.describe(model_name)["architecture_args"], **overrides}
    ours = _compiled(zoo.load(model_name, stateful=True, batch_size=batch, **overrides))
    stock = _compiled(stock_model(args, batch))
    if ours.count_params() != stock.count_params():
        raise AssertionError(f"not the same net: {ours.count_params():,} parameters vs "
                             f"{stock.count_params():,}")
    rng = np.random.default_rng(0)
    x = rng.integers(3, args["char_vocab_size"], (steps * batch, seq, args["input_shape"][1]),
                     dtype="int32")
    x[..., 8:] = 0  # words of 6 characters plus start and end, then padding
    y = rng.integers(0, args["classes"], (steps * batch, seq), dtype="int32")
    for model in (ours, stock):  # warm-up: tracing
        _tokens_per_second(model, x[:2 * batch], y[:2 * batch], batch)
    zoo_rates, stock_rates = [], []
    for _ in range(repeats):
        zoo_rates.append(_tokens_per_second(ours, x, y, batch))
        stock_rates.append(_tokens_per_second(stock, x, y, batch))
    ratios = [a / b for a, b in zip(zoo_rates, stock_rates)]
    return {
        "model": model_name, "overrides": overrides, "params": ours.count_params(),
        "batch": batch, "steps": seq, "word_length": args["input_shape"][1],
        "steps_per_repeat": steps, "repeats": repeats,
        "zoo_tokens_per_second": statistics.median(zoo_rates),
        "stock_tokens_per_second": statistics.median(stock_rates),
        "ratio_zoo_over_stock": statistics.median(ratios),
        "zoo_runs": zoo_rates, "stock_runs": stock_rates,
        "machine": {"processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "backend": keras.backend.backend(),
                    **distribute.versions()},
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lstm_char_small_ptb")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run(args.model, args.repeats, args.steps)
    print(f"{result['model']} ({result['params']:,} parameters, {result['machine']['backend']}):"
          f" zoo {result['zoo_tokens_per_second']:,.0f} tokens/s, stock Keras "
          f"{result['stock_tokens_per_second']:,.0f} tokens/s, ratio "
          f"{result['ratio_zoo_over_stock']:.2f} (median of {result['repeats']})")
    from zoo.files import write_text

    write_text(args.out, json.dumps(result, indent=1) + "\n", overwrite=True)


if __name__ == "__main__":
    main()
