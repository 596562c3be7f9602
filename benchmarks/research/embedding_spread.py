"""How the embedder's output changes in the first SGD steps of Kim's recipe on the real PTB.

    KERAS_BACKEND=tensorflow python -m benchmarks.research.embedding_spread \\
        PTB_DIR VARIANT [--model lstm_char_large_ptb] [--highway-layers N] [--steps 100]

Builds the net and its optimizer as `highway-zoo train` does (`training.language_model`), trains
on the run's own first batches, in order, one step at a time, and after chosen steps reads the
embedder's output on the first batch (20 x 35 words): the fraction of its units that are zero
for every word ("dead"), its root mean square, and its spread across words (the standard
deviation over the 700 words, averaged over units). Prints one JSON line per reading (the
readings of docs/results/language_model/ptb_large_gpu_8epochs/embedding_spread.json).
"""

import argparse
import json

import keras
import numpy as np

from training.language_model import compiled_model, settle

READ_AFTER = (0, 1, 2, 3, 5, 10, 20, 40, 60, 100, 150)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus")
    parser.add_argument("variant")
    parser.add_argument("--model", default="lstm_char_large_ptb")
    parser.add_argument("--highway-layers", type=int, default=None)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    overrides = {"variant": args.variant}
    if args.highway_layers:
        overrides["highway_layers"] = args.highway_layers
    settings = settle(args.model, args.corpus, **overrides)
    model = compiled_model(settings)
    embedder = keras.Model(model.inputs, model.get_layer("embedder").output)
    x, y = settings.train
    batch = settings.recipe["batch_size"]
    loss = None
    for step in range(args.steps + 1):
        if step in READ_AFTER:
            f = np.asarray(embedder.predict_on_batch(x[:batch]))
            f = f.reshape(-1, f.shape[-1])
            print(json.dumps({
                "step": step, "loss_per_token": loss,
                "dead_units": round(float(np.mean(np.all(f == 0, axis=0))), 4),
                "rms": float(np.sqrt(np.mean(f ** 2))),
                "spread_across_words": float(f.std(axis=0).mean()),
            }), flush=True)
        if step < args.steps:
            rows = slice(batch * step, batch * step + batch)
            loss = round(float(model.train_on_batch(x[rows], y[rows]))
                         / settings.recipe["bptt_steps"], 3)


if __name__ == "__main__":
    main()
