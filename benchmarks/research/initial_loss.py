"""The Table 3 net's test loss before any training, by the scale of its input and its first conv.

    python -m benchmarks.research.initial_loss --data-dir DIR [--scales 0.05,0.1,0.2,0.3,0.5,1]
        [--seeds 0,1,2,3] [--first-conv-stddev 1.0] [--every 5] [--out FILE]

The released log prints the authors' test loss at iteration 0: 2.49712, every test image in one
class (accuracy 0.1000). Their data's global contrast normalisation has unknown constants, and
their first conv started N(0, 1) (Caffe's Gaussian filler reads `std`, default 1). This builds
the net as released (`first_conv_stddev`), feeds it GCN'd test images (every `--every`th: 200
of each class for 5) times each scale, and prints the mean cross-entropy and the share of the
most-predicted class for each seed and scale: the scale at which the untrained net's loss is the
log's is the scale the authors' data most likely had.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

LOG_INITIAL_LOSS = 2.49712  # sample.log, "Iteration 0, Testing net": loss = 2.49712


def gcn(images: np.ndarray) -> np.ndarray:
    """Each image minus its mean over pixels and channels, over its standard deviation (as
    `layers.GlobalContrastNormalization`, epsilon 1e-8)."""
    x = images.astype(np.float64)
    x = x - x.mean(axis=(1, 2, 3), keepdims=True)
    return (x / np.sqrt(x.var(axis=(1, 2, 3), keepdims=True) + 1e-8)).astype(np.float32)


def loss_and_majority(probabilities: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean cross-entropy of the labels, and the share of the most-predicted class."""
    picked = probabilities[np.arange(len(labels)), labels]
    predicted = probabilities.argmax(axis=1)
    share = np.bincount(predicted, minlength=probabilities.shape[1]).max() / len(labels)
    return float(-np.mean(np.log(np.maximum(picked, 1e-12)))), float(share)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--scales", default="0.05,0.1,0.2,0.3,0.5,1")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--first-conv-stddev", type=float, default=1.0,
                        help="the first conv's start, N(0, s^2) (0: He-normal, the project's)")
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import keras

    import zoo
    from training.data import load_dataset

    test = load_dataset("cifar10", args.data_dir, fallback=False).test
    images, labels = gcn(test.images[::args.every]), test.labels[::args.every]
    stddev = args.first_conv_stddev or None
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        keras.utils.set_random_seed(seed)
        model = zoo.load("highway_cifar10", first_conv_stddev=stddev)
        after_gcn = keras.Model(model.get_layer("gcn").output, model.output)
        for scale in (float(s) for s in args.scales.split(",")):
            probabilities = after_gcn.predict(images * scale, batch_size=500, verbose=0)
            loss, share = loss_and_majority(np.asarray(probabilities, np.float64), labels)
            rows.append({"seed": seed, "scale": scale, "loss": round(loss, 4),
                         "most_predicted_share": round(share, 4)})
            print(json.dumps(rows[-1]), flush=True)
    result = {"first_conv_stddev": stddev, "images": len(labels),
              "log_initial_loss": LOG_INITIAL_LOSS, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
