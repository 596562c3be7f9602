"""What tests/test_backends_training.py runs on the JAX and PyTorch backends, in one process.

    KERAS_BACKEND=jax python tests/backends_workload.py PART WORK_DIR

PART "train": the one-device strategy, an event file and GateSummaries without TensorFlow,
`highway-zoo train` (the quick recipe, 2 epochs, depth 3, the offline MNIST
sample), a second run of the same configuration interrupted mid-epoch by a raising callback
and resumed by the same call, `highway-zoo analyze` on the first run, the run's predictions
on a few test images (for the export test, which runs under TensorFlow), and the strategies
this backend refuses. PART "experiments": the demo, a sweep and a search, each as small as
they come. Everything goes under WORK_DIR; WORK_DIR/PART.json says what happened (exit
statuses, messages), for the test to check. One process per part: start-up (TensorFlow for
tf.data, the backend, Keras) is a good part of each part's time.
"""

import contextlib
import io
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository, as `python -m pytest` has it

NAME = "highway_fc10_mnist"
TRAIN = ["--recipe", "quick", "--epochs", "2", "--depth", "3", "--verbose", "0"]
INTERRUPT_AT = 45  # of 64 iterations (2 epochs of 32): epoch 2, after the checkpoint at 40
CHECKPOINT_EVERY = 10


def _cli(argv):
    """`highway-zoo ARGV` in this process: its exit status and what it wrote to stderr."""
    from highway_zoo import cli

    err = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            code = cli.main([str(a) for a in argv])
        except Exception:  # a bug: keep its traceback for the test's message
            code, _ = None, err.write(traceback.format_exc())
    return {"code": code, "stderr": err.getvalue()[-4000:],
            "seconds": round(time.perf_counter() - start, 1)}


class Interrupt(Exception):
    pass


def _interrupted_and_resumed(work: Path, data_dir: Path) -> dict:
    import keras

    from training.trainer import train

    class InterruptAt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) == INTERRUPT_AT:
                raise Interrupt(f"interrupted at iteration {INTERRUPT_AT}")

    settings = dict(recipe="quick", epochs=2, depth=3, data_dir=data_dir, verbose=0,
                    out=work / "resumed", checkpoint_every=CHECKPOINT_EVERY)
    result = {}
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            train(NAME, callbacks=[InterruptAt()], **settings)
            result["interrupted"] = False
        except Interrupt:
            result["interrupted"] = True
        pointer = work / "resumed" / "checkpoint" / "checkpoint.json"
        result["checkpoint"] = json.loads(pointer.read_text()) if pointer.is_file() else None
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            train(NAME, **settings)
        result["resume_stdout"] = out.getvalue()
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _hook_threads(work: Path, data_dir: Path) -> dict:
    """The CLI run's configuration trained again in this process, with the progress bar and
    a batch hook that notes its thread: on the main thread, each step was awaited; in Keras's
    thread pool, the run's own batch hooks let the loop go on (async dispatch)."""
    import threading

    import keras

    from training.trainer import train

    class Threads(keras.callbacks.Callback):
        async_safe = True

        def __init__(self):
            super().__init__()
            self.on_main = set()

        def on_train_batch_end(self, batch, logs=None):
            self.on_main.add(threading.current_thread() is threading.main_thread())

    threads = Threads()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        train(NAME, callbacks=[threads], recipe="quick", epochs=2, depth=3, verbose=1,
              data_dir=data_dir, out=work / "threads")
    return {"on_main": sorted(threads.on_main)}


def _predictions(work: Path, data_dir: Path) -> None:
    """The trained run's probabilities on the first 16 test images, beside the images."""
    import numpy as np

    import zoo
    from training.data import load_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = load_dataset("mnist", data_dir)
    images = data.test.images[:16].astype(np.float32)
    model = zoo.load(NAME, weights=str(work / "run"))
    probabilities = np.asarray(model.predict(images, verbose=0))
    np.savez(work / "predictions.npz", images=images, probabilities=probabilities)


def _without_tensorflow(work: Path) -> dict:
    """The one-device strategy, an event file and GateSummaries on a model fit on NumPy
    arrays, before anything loads TensorFlow."""
    import numpy as np

    import zoo
    from training.callbacks import GateSummaries
    from training.runtime import distribute
    from training.summaries import EventWriter, png_of

    strategy = distribute.make_strategy("default")
    devices = distribute.describe(strategy, "default", 100)["devices"]
    with EventWriter(work / "events") as writer:
        writer.scalar("a/scalar", 0.5, step=3, description="one half")
        writer.histogram("a/histogram", [[0.0, 1.0, 4.0]], step=3)
        writer.image("a/image", png_of(np.zeros((2, 3, 3), np.uint8)), step=3)
    model = zoo.load(NAME, depth=3)
    model.compile("sgd", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).uniform(0, 255, (64, 28, 28, 1)).astype(np.float32)
    y = np.arange(64) % 10
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[
        GateSummaries(work / "numpy_fit" / "tensorboard", (x[:16], y[:16]))])
    return {"strategy": type(strategy).__name__, "devices": bool(devices),
            "tensorflow_imported": "tensorflow" in sys.modules}


def train_part(work: Path, data_dir: Path) -> dict:
    import keras

    result = {"backend": keras.backend.backend(), "without_tensorflow": _without_tensorflow(work)}
    result["train"] = _cli(["train", NAME, *TRAIN, "--data-dir", data_dir,
                            "--out", work / "run"])
    # The run read its data, trained, checkpointed and saved without TensorFlow.
    result["train"]["tensorflow_imported"] = "tensorflow" in sys.modules
    result["resume"] = _interrupted_and_resumed(work, data_dir)
    result["resume"]["tensorflow_imported"] = "tensorflow" in sys.modules
    result["hook_threads"] = _hook_threads(work, data_dir)
    result["analyze"] = _cli(["analyze", NAME, "--weights", work / "run", "--data-dir",
                              data_dir, "--examples", 200])
    if result["train"]["code"] == 0:
        _predictions(work, data_dir)
    result["refused"] = {
        name: _cli(["train", NAME, *TRAIN, "--data-dir", data_dir, "--out",
                    work / f"refused-{i}", *flags])
        for i, (name, flags) in enumerate({
            "mirrored": ["--strategy", "mirrored"],
            "multiworker": ["--strategy", "multiworker"],
            "cpu_devices": ["--cpu-devices", "2"],
        }.items())
    }
    return result


def experiments_part(work: Path, data_dir: Path) -> dict:
    return {
        "demo": _cli(["demo", "--depths", "2", "--epochs", "1", "--data-dir", data_dir,
                      "--out", work / "demo"]),
        "sweep": _cli(["sweep", "--depths", "2", "--kinds", "highway", "--epochs", "1",
                       "--in-process", "--data-dir", data_dir, "--out", work / "sweep"]),
        "tune": _cli(["tune", NAME, "--max-trials", "1", "--epochs", "1", "--depth", "3",
                      "--max-train-examples", "500", "--max-test-examples", "200",
                      "--data-dir", data_dir, "--out", work / "tune"]),
    }


if __name__ == "__main__":
    started = time.perf_counter()
    part, work = sys.argv[1], Path(sys.argv[2])
    data_dir = work / "no-data"  # empty: the offline MNIST sample
    data_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):  # the commands' own output
        result = {"train": train_part, "experiments": experiments_part}[part](work, data_dir)
    result["seconds"] = round(time.perf_counter() - started, 1)
    (work / f"{part}.json").write_text(json.dumps(result, indent=2, default=str))
    os._exit(0)  # skip the backends' slow interpreter teardown
