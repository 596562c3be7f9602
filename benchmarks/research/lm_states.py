"""What grows in a language model's first steps with the LSTM states carried or reset.

    python -m benchmarks.research.lm_states PTB_DIR --states carried|reset \\
        [--variant residual] [--highway-layers 4] [--model lstm_char_large_ptb] \\
        [--steps 400] [--every 25] [--seed 0] [--out FILE.json]

Issue 50's check of why LSTM-Char-Large's Residual does not learn with Kim's recipe: the net
and its optimizer as `highway-zoo train` builds them (`training.language_model`), trained on
the run's own first batches in order, one step at a time, with the LSTM states carried from
batch to batch (Kim's code, and the runs here) or set to zero before every batch (what JAX did
before the states were carried: 35 words of context). Every `--every` steps it reads:

- `loss_per_token`: the mean training cross-entropy per word over the steps since the last
  reading (ln 10,000 = 9.21 is a uniform guess, about 6.5 the unigram distribution);
- `gradient_norm`: the global norm of the gradient of the step's loss before Kim's clipping
  at 5 (the next step's batch, with the states and dropout masks that step will use);
- `cell_rms`, `hidden_rms`: per LSTM layer, the root mean square of its cell and hidden
  states at the end of the step's batch;
- `embedder_rms`, `embedder_spread`, `offset_ratio`: the embedder's output on the first batch
  (20 x 35 words): its root mean square, its spread across words (the standard deviation over
  the words, averaged over units), and their ratio (how much of the output is the same for
  every word).

At the end, the validation perplexity of the net as it stands, read as one stream (Kim's
evaluation). Prints a JSON line per reading, and writes them all to `--out` when given. The
LSTM path is the backend's own: on a CPU the step loop; on a GPU with JAX, cuDNN.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import keras
import numpy as np

from layers.carried_state_lstm import CarriedStateLSTM
from training.language_model import compiled_model, perplexity, settle, stream_loss
from zoo.char_lm import trained_weights
from zoo.files import write_text


def gradient_norm(model: keras.Model, x, y) -> float:
    """The global norm of the gradient of `model`'s loss on (x, y), before any clipping, from
    the model's variables as they are (no state, seed or weight is changed)."""
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss(values):
        y_pred, _ = model.stateless_call(values, non_trainable, x, training=True)
        return model.loss(y, y_pred)

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        grads = jax.grad(loss)(trainable)
    elif backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(trainable)
            value = loss(trainable)
        grads = tape.gradient(value, trainable)
    else:
        raise ValueError(f"lm_states reads gradients on JAX or TensorFlow, not {backend}.")
    return math.sqrt(sum(float(np.sum(np.square(keras.ops.convert_to_numpy(g))))
                         for g in grads))


def _rms(value) -> float:
    return float(np.sqrt(np.mean(np.square(keras.ops.convert_to_numpy(value)))))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus")
    parser.add_argument("--states", choices=("carried", "reset"), required=True)
    parser.add_argument("--variant", default="residual")
    parser.add_argument("--highway-layers", type=int, default=4)
    parser.add_argument("--model", default="lstm_char_large_ptb")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--recipe", help="default: the net's own (kim_char_lm)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    settings = settle(args.model, args.corpus, recipe=args.recipe, seed=args.seed,
                      variant=args.variant, highway_layers=args.highway_layers)
    model = compiled_model(settings)
    lstms = [layer for layer in model.layers if isinstance(layer, CarriedStateLSTM)]
    embedder = keras.Model(model.inputs, model.get_layer("embedder").output)
    x, y = settings.train
    batch, bptt = settings.recipe["batch_size"], settings.recipe["bptt_steps"]
    steps = min(args.steps, len(x) // batch)
    readings, losses, start = [], [], time.perf_counter()
    for step in range(steps + 1):
        rows = slice(batch * step, batch * step + batch)
        read = step % args.every == 0 or step == steps
        if read:  # the states at the end of the last batch, before a reset
            states = {"cell_rms": [round(_rms(layer.states[1]), 4) for layer in lstms],
                      "hidden_rms": [round(_rms(layer.states[0]), 4) for layer in lstms]}
        if args.states == "reset":
            for layer in lstms:
                layer.reset_state()
        if read:
            f = np.asarray(embedder.predict_on_batch(x[:batch]))
            f = f.reshape(-1, f.shape[-1])
            rms, spread = float(np.sqrt(np.mean(f ** 2))), float(f.std(axis=0).mean())
            reading = {
                "step": step,
                "loss_per_token": round(float(np.mean(losses)), 4) if losses else None,
                "gradient_norm": (round(gradient_norm(model, x[rows], y[rows]), 4)
                                  if step < steps else None),
                **states,
                "embedder_rms": round(rms, 5), "embedder_spread": round(spread, 6),
                "offset_ratio": round(rms / spread, 2) if spread > 0 else None,
                "seconds": round(time.perf_counter() - start, 1)}
            readings.append(reading)
            losses = []
            print(json.dumps(reading), flush=True)
        if step < steps:
            losses.append(float(model.train_on_batch(x[rows], y[rows])) / bptt)
    valid = perplexity(stream_loss(settings, trained_weights(model), split="valid"))
    result = {"model": args.model, "variant": args.variant,
              "highway_layers": args.highway_layers, "states": args.states,
              "seed": args.seed, "recipe": settings.recipe["name"], "steps": steps,
              "tokens": steps * batch * bptt, "validation_perplexity": round(valid, 2),
              "backend": keras.backend.backend(),
              "machine": f"{platform.machine()}, {platform.system()}",
              "corpus": settings.corpus_record, "readings": readings}
    print(json.dumps({"validation_perplexity": result["validation_perplexity"]}), flush=True)
    if args.out:
        write_text(args.out, json.dumps(result, indent=1) + "\n", overwrite=True)
    return readings


if __name__ == "__main__":
    main()
