"""The NumPy peer as a whole process: the script a user writes instead of
`highway-zoo train highway_fc10_mnist --depth N --stacked --epochs E`.

    python -m benchmarks.implementations.numpy_script [--depth 30] [--epochs 12]

The same network (the stem and N - 1 highway blocks of width 50, b_T = -2: depth counted as
the zoo counts it), data and recipe (Adam 5e-3, global-norm clip 5, batch 128): MNIST read as
`highway-zoo train` reads it (`training.data.load_dataset`: the offline sample, or full MNIST
where it is prepared), trained by `numpy_highway` with its hand-written backward pass, then
evaluated on the test split. Prints one JSON line: the test accuracy, the last epoch's loss,
the parameters, and where the process's time went in the phases a run's run.json records
(`training.timeline`: "phases_s", and "process_s", the process's age at the end). Imports
neither Keras nor a framework; `benchmarks.whole_process` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

from training import timeline


def main(argv: list[str] | None = None) -> int:
    # The process's age: the interpreter and the modules above (argparse, training.timeline).
    started, entered = timeline.process_age(), time.perf_counter()
    p = argparse.ArgumentParser(prog="python -m benchmarks.implementations.numpy_script",
                                description=__doc__.splitlines()[0])
    p.add_argument("--depth", type=int, default=30,
                   help="layers in all, the stem counted, as `highway-zoo train --depth`")
    p.add_argument("--epochs", type=int, default=12)
    args = p.parse_args(argv)
    if args.depth < 2:
        p.error(f"--depth must be at least 2 (the stem and a highway layer); got {args.depth}")

    clock = time.perf_counter()
    import numpy as np

    from benchmarks.implementations import numpy_highway
    from training.data import OfflineFallbackWarning, load_dataset

    imported = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OfflineFallbackWarning)
        dataset = load_dataset("mnist")

    def flat(images):
        return images.reshape(len(images), -1).astype(np.float32) / np.float32(255)

    data = {"x_train": flat(dataset.train.images), "y_train": dataset.train.labels,
            "x_test": flat(dataset.test.images), "y_test": dataset.test.labels}
    loaded = time.perf_counter()
    result = numpy_highway.train(data, depth=args.depth - 1, epochs=args.epochs)
    trained = time.perf_counter()
    epochs_s = sum(result["epoch_s"])
    phases = {"imports": imported - clock, "data": loaded - imported,
              "build": result["build_s"], "compile": result["first_step_s"],
              "training": epochs_s - result["first_step_s"],
              # the test split, after the epochs (inside numpy_highway.train)
              "evaluation": trained - loaded - result["build_s"] - epochs_s}
    record = {"test_accuracy": result["test_accuracy"], "final_loss": result["final_loss"],
              "params": result["params"], "steps": result["steps"]}
    if started is not None:
        phases = {"interpreter": started + clock - entered, **phases}
        record["process_s"] = round(started + trained - entered, 4)
    record["phases_s"] = {k: round(v, 4) for k, v in phases.items()}
    print(json.dumps(record), flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
