"""`GateSummaries`: what the transform gates do, epoch by epoch, in TensorBoard.

Wiring it into a run (its log directory by convention `RUN_DIR/tensorboard/`)::

    callbacks.append(GateSummaries(run_dir / "tensorboard", data.test))

and `highway-zoo tensorboard RUN_DIR` shows it. On a fixed held-out batch (the first
`examples` examples of `sample_batch`) it writes, at step = the number of epochs trained
(step 0 = before training, if the callback sees the untrained model), for each highway
layer:

- `transform_gate/<layer>`: histogram of T(x) (every unit, position and example);
- `mean_transform_gate/<layer>`: scalar, the mean of T(x);
- `transform_bias/<layer>`: histogram of b_T (one value per unit);

and for the whole net the image `gates/mean_T_heatmap` (rows: highway layers, the first at
the top; columns: units; viridis, T = 0 dark to T = 1 yellow; conv layers averaged over
positions), plus, when training ends, the NIPS 2015 Fig. 2 panel as the image `gates/fig2`.
Each epoch it also rewrites `gates.json` beside the log directory (in the run directory):
the per-layer mean T, std T and mean b_T by epoch (`zoo.analysis.evolution`), which
`highway-zoo analyze` plots as the T-gate evolution and its GIF.

A stacked net (`HighwayStack`) gets the same tags, rows and gates.json entries as the per-layer
net with the same weights: one per layer it holds, named as in the per-layer net (`highway_1`,
...), read out of the stack's per-layer gate tensor (`zoo.analysis.gates.GateProbe`).

A gru_gate net's T is its update gate z (and b_T is -b_g: `HighwayDense.transform_gate`); the
static skips (rezero, layerscale, laurel_rw, laurel_lr) have no gate and get no summaries, as
a plain net.

Backends: the callback works on every Keras backend (TensorFlow, JAX, PyTorch). The event
files are written by `training.summaries.EventWriter` (TensorBoard's own protos and record
format, no TensorFlow ops), in the format `tf.summary` writes; a `tf.data.Dataset` as
`sample_batch` is read with TensorFlow, anything else needs none.

Distribution (TensorFlow): Keras calls callbacks outside the replica context; the gates are
computed there, eagerly, from the (mirrored) variables' values under
`model.distribute_strategy`'s scope, so MirroredStrategy and MultiWorkerMirroredStrategy need
nothing special. (A multi-worker run gives each worker its own run directory: see
training/trainer.py.) Other backends have no `distribute_strategy`: the gates are computed
as they are.

`EpochClock`, for `train(callbacks=[EpochClock()])`, records the wall time of each epoch
(the experiments' seconds per epoch).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

from training.summaries import EventWriter, png_of
from zoo.analysis import plots
from zoo.analysis.evolution import (
    GATES_FILE,
    read_gate_history,
    updated_history,
    write_gate_history,
)
from zoo.analysis.gates import (
    GateProbe,
    highway_layers,
    per_unit,
    sample_statistics,
    transform_biases,
)

DEFAULT_EXAMPLES = 256
BUCKETS = 30  # tf.summary.histogram's default


def histogram_buckets(values: np.ndarray, bucket_count: int = BUCKETS) -> np.ndarray:
    """`tf.summary.histogram`'s (bucket_count, 3) [left, right, count] tensor, in NumPy.

    The same buckets as TensorBoard's own op (equal widths from min to max, the last one
    closed; a single value all in the last bucket), without its ~10 eager ops per tag.
    Non-finite values are left out.
    """
    data = np.asarray(values, np.float64).reshape(-1)
    data = data[np.isfinite(data)]  # a diverged run must still end cleanly
    if data.size == 0:
        return np.zeros((bucket_count, 3))
    low, high = data.min(), data.max()
    if low == high:
        counts = np.zeros(bucket_count)
        counts[-1] = data.size
        return np.stack([np.full(bucket_count, high), np.full(bucket_count, high), counts], 1)
    index = np.minimum(np.floor((data - low) / ((high - low) / bucket_count)), bucket_count - 1)
    counts = np.bincount(index.astype(np.int64), minlength=bucket_count).astype(np.float64)
    edges = np.linspace(low, high, bucket_count + 1)
    edges[-1] = high
    return np.stack([edges[:-1], edges[1:], counts], 1)


def _is_tf_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")  # a tf.data.Dataset means TensorFlow is loaded
    return tf is not None and isinstance(value, tf.data.Dataset)


def _strategy_scope(model: keras.Model):
    """The TensorFlow model's distribution strategy scope; nothing on other backends."""
    strategy = getattr(model, "distribute_strategy", None)
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def take_examples(sample_batch: Any, examples: int, input_rank: int):
    """The first `examples` images (float32) and labels (or None) of `sample_batch`.

    `sample_batch`: an array of images; an `(images, labels)` pair; or a `tf.data.Dataset` of
    `(image, label)` pairs or images, batched or not. `input_rank` is the rank of one image.
    """
    if _is_tf_dataset(sample_batch):
        images, labels = [], []
        count = 0
        for element in sample_batch:
            x, y = element[:2] if isinstance(element, tuple) else (element, None)
            x = np.asarray(x)
            batched = x.ndim == input_rank + 1
            if not batched:
                x = x[None]
                y = None if y is None else np.asarray(y)[None]
            images.append(x)
            labels.append(None if y is None else np.asarray(y))
            count += len(x)
            if count >= examples:
                break
        if not images:
            raise ValueError("sample_batch is an empty dataset; GateSummaries needs examples.")
        x = np.concatenate(images)
        y = None if any(v is None for v in labels) else np.concatenate(labels)
    else:
        x, y = sample_batch if isinstance(sample_batch, tuple) else (sample_batch, None)
        x = np.asarray(x)
    if x.ndim != input_rank + 1 or len(x) == 0:
        raise ValueError(
            f"sample_batch must hold a batch of images of rank {input_rank} (shape (n, ...)). "
            f"Received images of shape {x.shape}."
        )
    y = None if y is None else np.asarray(y, np.int64).reshape(-1)[:examples]
    return x[:examples].astype(np.float32), y


class GateSummaries(keras.callbacks.Callback):
    """Writes transform-gate summaries of every highway layer to TensorBoard each epoch.

    Args:
        log_dir: where the event files go (by convention `RUN_DIR/tensorboard`).
        sample_batch: the fixed held-out examples (raw pixels, as the model takes them):
            an array, an `(images, labels)` pair or a `tf.data.Dataset` (e.g. the test
            split); the first `examples` of them are used, every epoch the same.
        examples: how many examples (default 256).
        gates_file: where to write gates.json; "auto" (default): beside `log_dir`, i.e. in
            the run directory; None: not at all.
        final_epoch: the run's last epoch (1-based). The Fig. 2 image is written at the end
            of that epoch (before a checkpoint callback placed after this one, so a run
            killed after its last checkpoint has it); None (default): whenever `fit` ends.

    A model without highway layers (a plain net) gets no summaries and no gates.json, so
    the callback can be added to every run.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        sample_batch: Any,
        examples: int = DEFAULT_EXAMPLES,
        gates_file: str | os.PathLike | None = "auto",
        final_epoch: int | None = None,
    ):
        super().__init__()
        if not isinstance(examples, int) or examples < 1:
            raise ValueError(f"examples must be a positive integer. Received: {examples!r}")
        self.log_dir = Path(log_dir)
        self.sample_batch = sample_batch
        self.examples = examples
        self.gates_file = (self.log_dir.parent / GATES_FILE if gates_file == "auto"
                           else None if gates_file is None else Path(gates_file))
        self.final_epoch = final_epoch
        self._writer = None
        self._images = self._labels = None
        self._probe = None
        self._step = None
        self._last_gates = self._first = None  # the last summaries', for Fig. 2

    # --- set-up ------------------------------------------------------------------------

    def _prepare(self) -> bool:
        """Sets up on first use; False for a model without highway layers (a plain net)."""
        if self._probe is None:
            self._layers = highway_layers(self.model)
            if not self._layers:
                return False
            self._probe = GateProbe(self.model, self._layers)
        if self._images is None:
            rank = len(self.model.inputs[0].shape) - 1
            self._images, self._labels = take_examples(self.sample_batch, self.examples, rank)
        if self._writer is None:
            self._writer = EventWriter(self.log_dir)
        return True

    def _iterations(self) -> int | None:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return None
        return int(keras.ops.convert_to_numpy(optimizer.iterations))

    # --- the summaries -----------------------------------------------------------------

    def _gates(self) -> tuple[list[dict[str, Any]], dict[str, tuple] | None]:
        """Per layer: T values, per-unit mean T and b_T on the sample batch; and, where the
        probe is compiled, the first example's inputs, outputs and T (for Fig. 2; None
        elsewhere)."""
        with _strategy_scope(self.model):
            if self._probe.compiled:  # one function gives both: the example costs nothing
                gates, first = self._probe.gates_and_first(self._images)
            else:  # an eager pass of the example, once, for Fig. 2 (0.13 s on TF, depth 30)
                gates, first = self._probe.gates(self._images, numpy=True), None
            biases = transform_biases(self._layers)
            result = []
            for layer, bias in zip(self._layers, biases):
                t = gates[layer.name]
                result.append({"name": layer.name, "t": t,
                               "unit_mean": per_unit(t, layer.channel_axis).mean(axis=0),
                               "bias": bias})
        return result, first

    def _write(self, step: int) -> None:
        gates, first = self._gates()
        writer = self._writer
        for g in gates:
            writer.histogram(f"transform_gate/{g['name']}", histogram_buckets(g["t"]), step)
            writer.scalar(f"mean_transform_gate/{g['name']}", float(np.mean(g["t"])), step)
            if np.isfinite(g["bias"]).all():
                writer.histogram(f"transform_bias/{g['name']}", histogram_buckets(g["bias"]),
                                 step)
        width = max(len(g["unit_mean"]) for g in gates)
        heat = np.full((len(gates), width), np.nan)
        for i, g in enumerate(gates):
            heat[i, : len(g["unit_mean"])] = g["unit_mean"]
        writer.image(
            "gates/mean_T_heatmap", png_of(plots.heatmap_rgb(heat)), step,
            description="Mean transform gate T on the sample batch. Rows: highway layers "
            "(first at the top); columns: units (conv: channels, averaged over positions); "
            "viridis, T = 0 dark to T = 1 yellow.",
        )
        self._writer.flush()
        self._step, self._last_gates, self._first = step, gates, first
        if self.gates_file is not None:
            self._write_gates_json(step, gates)

    def _write_gates_json(self, step: int, gates: list[dict[str, Any]]) -> None:
        header = {"layers": [g["name"] for g in gates],
                  "units": [len(g["unit_mean"]) for g in gates],
                  "examples": len(self._images)}
        entry = {
            "epoch": step,
            "mean_t": [round(float(np.mean(g["t"])), 6) for g in gates],
            "std_t": [round(float(np.std(g["t"])), 6) for g in gates],
            "transform_bias_mean": [
                round(float(np.mean(g["bias"])), 6) if np.isfinite(g["bias"]).all() else None
                for g in gates
            ],
        }
        previous = read_gate_history(self.gates_file) if self.gates_file.is_file() else None
        write_gate_history(self.gates_file, updated_history(previous, entry, header))

    def _write_fig2(self) -> None:
        labels = self._labels
        if labels is not None and labels.max() >= self.model.outputs[0].shape[-1]:
            labels = None  # not this model's classes
        first = self._first
        if first is None:
            with _strategy_scope(self.model):
                first = self._probe(self._images[:1], numpy=True)
        # T on the sample from the last summaries; the first example's inputs and outputs.
        stats = sample_statistics(
            self._layers, {g["name"]: g["t"] for g in self._last_gates}, first,
            example_label=None if labels is None else int(labels[0]))
        # Drawn with Pillow: Matplotlib's figure cost 0.5-1.2 s of every run's end.
        image = plots.fig2_rgb(stats, title=f"{self.model.name}, epoch {self._step}")
        self._writer.image(
            "gates/fig2", png_of(image), self._step,
            description="NIPS 2015 Fig. 2 on the sample batch: transform gate biases, "
            "mean T, T for one example and its block outputs (rows: highway layers, the "
            "first at the top; columns: units; each panel's colour bar with its two ends).",
        )
        self._writer.flush()

    # --- Keras hooks -------------------------------------------------------------------

    def on_train_begin(self, logs=None):
        if self._prepare() and self._iterations() == 0:  # the untrained net: epoch 0
            self._write(0)

    def on_epoch_end(self, epoch, logs=None):
        if self._prepare():
            self._write(epoch + 1)
            if self.final_epoch is not None and epoch + 1 >= self.final_epoch:
                self._write_fig2()

    def on_train_end(self, logs=None):
        if self.final_epoch is None and self._step is not None and self._writer is not None:
            self._write_fig2()


class WordGateSummaries(GateSummaries):
    """`GateSummaries` for a character-aware language model: the T of its embedder's highway
    layers (`zoo.analysis.tokens.embedder_gates`) on a fixed sample of words, each a row of
    character ids (by convention the validation text's first tokens, so frequent words count
    as often as the text has them). The same tags, heatmap and gates.json as an image run;
    no Fig. 2, which is drawn for images. Variants without a learned T (c_only, residual,
    plain, the static skips) get none, as a plain image net."""

    def __init__(self, log_dir: str | os.PathLike, words: np.ndarray,
                 gates_file: str | os.PathLike | None = "auto"):
        super().__init__(log_dir, words, examples=len(words), gates_file=gates_file)

    def _prepare(self) -> bool:
        from zoo.analysis.tokens import char_embedder, gate_of

        if self._probe is None:
            embedder = char_embedder(self.model)
            self._layers = [layer for layer in embedder.highways
                            if gate_of(layer.variant) == "T"]
            if not self._layers:
                return False
            self._probe = embedder
            self._images = np.asarray(self.sample_batch, np.int32)
        if self._writer is None:
            self._writer = EventWriter(self.log_dir)
        return True

    def _gates(self) -> tuple[list[dict[str, Any]], None]:
        from zoo.analysis.tokens import embedder_gates

        t = embedder_gates(self._probe, self._images)  # [words, layers, units]
        return [{"name": layer.name, "t": t[:, i], "unit_mean": t[:, i].mean(axis=0),
                 "bias": bias}
                for i, (layer, bias) in enumerate(zip(self._layers,
                                                      transform_biases(self._layers)))], None

    def _write_fig2(self) -> None:
        pass


class ProgressBar(keras.callbacks.ProgbarLogger):
    """Keras's progress bar, `async_safe`: where Keras runs the batch hooks in a thread pool
    (every batch hook of the run's callbacks says it may), the bar is updated under a lock
    and never goes back (a batch whose update comes after a later one's is not drawn)."""

    async_safe = True

    def __init__(self):
        super().__init__()
        self._drawing = threading.Lock()

    def _draw(self, hook, batch, logs):
        with self._drawing:
            if self.progbar is None or batch + 1 > self.seen:
                hook(batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        self._draw(super().on_train_batch_end, batch, logs)

    def on_test_batch_end(self, batch, logs=None):
        self._draw(super().on_test_batch_end, batch, logs)

    def on_predict_batch_end(self, batch, logs=None):
        self._draw(super().on_predict_batch_end, batch, logs)


class EpochClock(keras.callbacks.Callback):
    """Wall time of each epoch a run records, counted from the clock's creation (create it
    just before `train(callbacks=[clock])`: the first epoch then also holds building and
    tracing the model).

    An epoch's end is when `train` has written its history.json entry and checkpoint (the
    run's own callbacks come first); an epoch stopped by a non-finite loss is not recorded,
    as the run does not record it.
    """

    def __init__(self):
        super().__init__()
        self.start = time.perf_counter()
        self.ends: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        if not self.model.stop_training:  # the run stopped at a non-finite loss
            self.ends.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Wall time of each epoch; the first also holds building and tracing the model."""
        return list(np.diff([self.start, *self.ends]))
