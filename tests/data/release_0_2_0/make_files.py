"""Writes the files in this directory with highway-zoo 0.2.0's own code (commit 9804afd).

Run it from a worktree of that commit, with the worktree first on the import path:

    git worktree add /tmp/rel020 9804afd
    cd /tmp/rel020 && KERAS_BACKEND=tensorflow PYTHONPATH=/tmp/rel020 \
        python /path/to/highway-zoo/tests/data/release_0_2_0/make_files.py OUT_DIR

It writes, under OUT_DIR (this directory, tests/data/release_0_2_0/, by default):

    inputs.npy                 8 raw-pixel images (uint8, 28x28x1), np.random.default_rng(0)
    preset/                    zoo.save(zoo.load("highway_fc10_mnist", depth=3, width=8), ...)
                               with seeded non-default weights
    preset_stacked/            the same weights saved from the stacked form (stacked=True)
    run/                       training.train("highway_fc10_mnist", depth=3, width=8, epochs=1,
                               out=...) on 64 synthetic digits; only the files a run directory
                               is loaded from and its records (tensorboard/, checkpoints,
                               locks dropped)
    exported/highway_fc10_mnist/1/
                               zoo.export("highway_fc10_mnist", weights=preset/, version=1):
                               the SavedModel in TF Serving's layout (models.config dropped:
                               it holds the writer's absolute paths)
    expected.json              what the release reported for each: class, architecture,
                               overrides, parameter count, layer names, versions
    *_predictions.npy          the release's outputs on inputs.npy (float32)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

SEED = 0
NAME = "highway_fc10_mnist"
OVERRIDES = {"depth": 3, "width": 8}


def synthetic_digits(n_train=64, n_test=32, seed=0):
    """The release's own test data (tests/test_training.py, separable_digits): one bright
    square per class on dim noise."""
    import tensorflow as tf

    from training.data import Dataset

    rng = np.random.default_rng(seed)

    def make(n):
        y = rng.integers(0, 10, n)
        x = rng.integers(0, 40, (n, 28, 28, 1)).astype("uint8")
        for i, label in enumerate(y):
            r, c = divmod(int(label), 5)
            x[i, 4 + 10 * r : 10 + 10 * r, 1 + 5 * c : 5 + 5 * c] = 250
        return tf.data.Dataset.from_tensor_slices((x, y.astype("int64")))

    return Dataset(
        name="synthetic", train=make(n_train), test=make(n_test), num_classes=10,
        image_shape=(28, 28, 1), num_train=n_train, num_test=n_test, source="synthetic squares",
    )


def describe(model) -> dict:
    return {
        "class": type(model).__name__,
        "architecture": model.architecture,
        "overrides": model.overrides,
        "params": int(model.count_params()),
        "layers": [layer.name for layer in model.layers],
        "layer_classes": [type(layer).__name__ for layer in model.layers],
    }


def main(out: Path) -> None:
    import keras
    import tensorflow as tf

    import highway_zoo
    import training
    import zoo

    root = Path(zoo.__file__).resolve().parent.parent
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("preset", "preset_stacked", "run", "exported"):
        shutil.rmtree(out / name, ignore_errors=True)

    images = np.random.default_rng(SEED).integers(0, 256, (8, 28, 28, 1)).astype("uint8")
    np.save(out / "inputs.npy", images)
    x = images.astype("float32")
    expected = {
        "written_by": {"highway_zoo": highway_zoo.__version__, "commit": commit,
                       "zoo_file": str(Path(zoo.__file__).resolve().relative_to(root)),
                       "tensorflow": tf.__version__, "keras": keras.__version__,
                       "numpy": np.__version__},
        "inputs": "inputs.npy: uint8 raw pixels, np.random.default_rng(0).integers(0, 256, "
                  "(8, 28, 28, 1)); fed as float32",
    }

    # a. A preset: a small FC net with seeded, non-default weights.
    keras.utils.set_random_seed(SEED)
    model = zoo.load(NAME, **OVERRIDES)
    rng = np.random.default_rng(SEED)
    model.set_weights([w + rng.normal(0.0, 0.3, w.shape).astype(w.dtype)
                       for w in model.get_weights()])
    zoo.save(model, out / "preset", metrics={"test_accuracy": 0.5},
             training={"dataset": "none: seeded weights", "seed": SEED})
    loaded = zoo.load(out / "preset")
    probabilities = loaded.predict(x, verbose=0)
    np.testing.assert_array_equal(probabilities, model.predict(x, verbose=0))
    np.save(out / "preset_predictions.npy", probabilities)
    expected["preset"] = describe(loaded)

    # The same weights saved from the stacked form (a HighwayStack layer, not highway_1..N).
    stacked = zoo.load(out / "preset", stacked=True)
    zoo.save(stacked, out / "preset_stacked")
    loaded = zoo.load(out / "preset_stacked")
    np.save(out / "preset_stacked_predictions.npy", loaded.predict(x, verbose=0))
    expected["preset_stacked"] = describe(loaded)

    # b. A run directory written by training.train (what `highway-zoo train --out` runs).
    metrics = training.train(NAME, dataset=synthetic_digits(), epochs=1, out=out / "run",
                             seed=SEED, verbose=0, gate_summaries=False, **OVERRIDES)
    keep = {"model.json", "model.weights.h5", "model.weights.h5.sha256", "README.md",
            "run.json", "history.json", "metrics.json"}
    for path in (out / "run").iterdir():
        if path.name not in keep:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    loaded = zoo.load(out / "run")
    np.save(out / "run_predictions.npy", loaded.predict(x, verbose=0))
    expected["run"] = {**describe(loaded), "test_accuracy": metrics["test_accuracy"]}

    # c. A SavedModel export of the preset's weights, in TF Serving's layout.
    version = zoo.export(NAME, weights=out / "preset", base_dir=out / "exported", version=1)
    for path in (out / "exported").iterdir():
        if path.is_file():
            path.unlink()  # models.config, models.docker.config: the writer's absolute paths
    served = tf.saved_model.load(str(version))
    signatures = {}
    for signature, fn in served.signatures.items():
        result = fn(pixels=tf.constant(x))
        signatures[signature] = sorted(result)
        for key, value in result.items():
            np.save(out / f"export_{signature}_{key}_predictions.npy", value.numpy())
    expected["export"] = {
        "path": str(version.relative_to(out)),
        "signatures": signatures,
        "provenance": json.loads((version / "assets.extra" / "highway_zoo.json").read_text()),
    }
    served_probabilities = np.load(out / "export_serving_default_probabilities_predictions.npy")
    np.testing.assert_allclose(served_probabilities, np.load(out / "preset_predictions.npy"),
                               rtol=1e-5, atol=1e-6)
    (out / "expected.json").write_text(json.dumps(expected, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
