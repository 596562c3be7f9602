"""`train_lm()`: a character-aware language model on a Mikolov-format corpus, Kim et al.'s way.

Kim et al. (yoonkim/lstm-char-cnn, main.lua) train on contiguous BPTT batches: the training
text as one token stream cut into `batch_size` rows, read `bptt_steps` words at a time, the
LSTM states carried from each batch to the next (a stateful LSTM, reset at each epoch), plain
SGD at 1.0 with the global gradient norm clipped at 5, the rate halved after an epoch whose
validation perplexity improved by less than 1 (from the third epoch on, as main.lua checks).
Perplexity is exp of the mean cross-entropy per token, the metric everywhere here.

The run directory is the image trainer's (`training.run_dir`), with perplexities::

    run.json          command, versions, seed, recipe, corpus, model metadata, status
    history.json      per epoch: loss, perplexity, val_loss, val_perplexity (the validation
                      split), learning_rate, seconds, tokens_per_second
    checkpoint/       the latest epoch's model and optimizer state while the run is going
    tensorboard/      perplexities, losses and the learning rate per epoch
    model.json, model.weights.h5(.sha256), README.md
                      the trained net as a preset: `zoo.load(RUN_DIR)` gives it stateless
                      (any batch, any length), with its vocabularies in model.json
    metrics.json      test and validation perplexity

Runs resume at epoch granularity: killed mid-epoch, the same call goes on from the last
finished epoch (weights, optimizer state, learning rate, history); dropout is reseeded from
(seed, epoch) at each epoch, so a resumed run repeats the uninterrupted one.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np

import zoo
from training.data.text import Corpus, bptt_batches, load_corpus
from training.recipes import get_recipe, recipe_name
from training.run_dir import FINISHED, NON_FINITE, RUNNING, RunDir
from training.runtime import backend as runtime_backend
from training.runtime import distribute, private_api, tensorflow_on_demand
from training.summaries import EventWriter
from zoo.char_lm import set_trained_weights, trained_weights
from zoo.files import atomic_path, write_text

tensorflow_on_demand.install()

CHECKPOINT_STATE = "latest.json"

__all__ = ["LanguageModelSettings", "next_learning_rate", "perplexity", "settle", "train_lm"]


def perplexity(loss: float) -> float:
    """exp(mean cross-entropy per token, in nats); inf past float range."""
    return math.exp(loss) if loss < 700 else math.inf


def next_learning_rate(recipe: dict[str, Any], val_perplexities: list[float],
                       learning_rate: float) -> float:
    """Kim's rule (main.lua, `decay_when`): from the third epoch on, the rate times
    `lr_plateau_decay` after an epoch whose validation perplexity improved on the previous
    epoch's by less than `lr_plateau_min_improvement`."""
    decay = recipe["lr_plateau_decay"]
    if decay is None or len(val_perplexities) < 3:
        return learning_rate
    improvement = val_perplexities[-2] - val_perplexities[-1]
    return learning_rate * decay if improvement < recipe["lr_plateau_min_improvement"] \
        else learning_rate


def _now() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")


class LanguageModelSettings:
    """What a language-model run trains and how, settled before it touches a directory."""

    def __init__(self, name: str, corpus: Corpus, recipe: dict[str, Any], seed: int,
                 overrides: dict[str, Any], max_train_tokens: int | None,
                 weights: dict[str, str] | None = None):
        self.name, self.corpus, self.recipe, self.seed = name, corpus, recipe, seed
        self.weights = weights  # fine-tuning: {"source": the run directory, "sha256": ...}
        self.overrides = overrides  # the stateless model's; training adds state and batch
        self.max_train_tokens = max_train_tokens
        self._files = None
        steps, batch = recipe["bptt_steps"], recipe["batch_size"]
        train = corpus.train
        if max_train_tokens is not None:
            train = type(train)(words=train.words[:max_train_tokens],
                                chars=train.chars[:max_train_tokens])
        self.train = bptt_batches(train, batch, steps)
        self.valid = bptt_batches(corpus.valid, batch, steps)
        self.test = bptt_batches(corpus.test, batch, steps)

    @property
    def config(self) -> dict[str, Any]:
        """What a resume must match (training.run_dir.run_config)."""
        config = {
            "architecture": self.name,
            "overrides": self.overrides,
            "recipe": self.recipe,
            "seed": self.seed,
            "dataset": self.corpus_record,
        }
        if self.weights is not None:
            config["initial_weights"] = self.weights
        return config

    @property
    def corpus_record(self) -> dict[str, Any]:
        c = self.corpus
        if self._files is None:  # hashed once: the record is read several times
            from training.data.corpora import corpus_identity

            self._files = corpus_identity(c.directory)
        return {
            "name": c.name, "source": str(c.directory), **self._files,
            "num_train": int(self.train[1].size), "num_valid": int(self.valid[1].size),
            "num_test": int(self.test[1].size), "words": len(c.words), "chars": len(c.chars),
            "max_word_length": c.max_word_length, "max_train_tokens": self.max_train_tokens,
        }

    def training_overrides(self) -> dict[str, Any]:
        return {**self.overrides, "stateful": True, "batch_size": self.recipe["batch_size"]}


def settle(name: str, corpus: str | os.PathLike | Corpus, *, recipe: str | None = None,
           epochs: int | None = None, batch_size: int | None = None,
           learning_rate: float | None = None, recipe_overrides: dict | None = None,
           seed: int = 0, max_train_tokens: int | None = None,
           weights: str | os.PathLike | None = None,
           **overrides: Any) -> LanguageModelSettings:
    """Checks everything a run needs (recipe, corpus, overrides) and reads the corpus."""
    start, vocabulary = None, None
    if weights is not None:  # fine-tuning: the run's net, read with the run's vocabulary
        name, overrides, vocabulary, start = _fine_tuning(name, weights, overrides)
    info = zoo.describe(name)
    if info["family"] != "char_lm":
        raise ValueError(f"{name} is not a language model (family {info['family']!r}); "
                         "train it with `highway-zoo train` on an image dataset.")
    recipe_ = get_recipe(recipe_name(info["recipe"], recipe), recipe_overrides, epochs=epochs,
                         batch_size=batch_size, learning_rate=learning_rate)
    if recipe_["bptt_steps"] is None:
        raise ValueError(f"Recipe {recipe_['name']!r} has no bptt_steps: a language model "
                         "trains on batches of that many time steps. Pass --bptt-steps.")
    if recipe_["augmentation"] != "none":
        raise ValueError("augmentation applies to images; a language model takes none.")
    if max_train_tokens is not None and (not isinstance(max_train_tokens, int)
                                         or max_train_tokens < 1):
        raise ValueError(f"max_train_tokens must be a positive integer. "
                         f"Received: {max_train_tokens!r}")
    zoo.registry.get(name).resolve(overrides)  # the registry's own message for a bad one
    if "input_shape" in overrides:
        limit = tuple(overrides["input_shape"])[1]
    else:
        limit = None
    if isinstance(corpus, Corpus) and vocabulary is not None:
        corpus = corpus.directory
    if not isinstance(corpus, Corpus):
        corpus = load_corpus(corpus, max_word_length=limit, vocabulary=vocabulary)
    elif limit is not None and corpus.max_word_length > limit:
        raise ValueError(f"The corpus has words of {corpus.max_word_length - 2} characters; "
                         f"input_shape allows {limit - 2}. Raise input_shape[1].")
    for key, value in (("classes", len(corpus.words)), ("char_vocab_size", len(corpus.chars))):
        if key in overrides and overrides[key] != value:
            raise ValueError(f"{key}={overrides[key]} but the corpus {corpus.directory} has "
                             f"{value}: leave {key} out, it follows the corpus.")
    # Like `classes` for an image dataset: the vocabularies and word length follow the corpus.
    overrides = {
        **overrides,
        "input_shape": [None, limit or corpus.max_word_length],
        "classes": len(corpus.words),
        "char_vocab_size": len(corpus.chars),
    }
    zoo.registry.get(name).resolve(overrides)  # every override checked before any work
    return LanguageModelSettings(name, corpus, recipe_, seed, overrides, max_train_tokens,
                                 start)


def _fine_tuning(name: str, weights, overrides: dict[str, Any]):
    """(name, overrides, vocabulary, weights record) to go on training a finished run: its
    architecture and overrides (only the dropout may change), its words and characters."""
    from zoo.weights import read_model_dir, verify

    weights_path, record = read_model_dir(weights)
    if record.get("architecture") != name:
        raise ValueError(f"{weights} holds {record.get('architecture')!r}, not {name!r}: "
                         "fine-tune it under its own name.")
    vocabulary = record.get("vocabulary")
    if vocabulary is None:
        raise ValueError(f"{weights} records no vocabulary (it is not a run of train_lm): "
                         "its word and character ids would mean nothing on another text.")
    recorded = dict(record.get("overrides") or {})
    changed = sorted(k for k in overrides if k != "dropout" and overrides[k] != recorded.get(k))
    if changed:
        raise ValueError(f"Fine-tuning keeps the trained net: {', '.join(changed)} cannot "
                         f"change (only dropout can). {weights} was trained with {recorded}.")
    return (name, {**recorded, **overrides}, vocabulary,
            {"source": str(Path(weights).resolve()), "sha256": verify(weights_path)})


def train_lm(name: str, corpus: str | os.PathLike | Corpus, *, out: str | os.PathLike | None = None,
             verbose: int = 1, tensorboard: bool = True, **kwargs: Any) -> dict[str, Any]:
    """Trains language model `name` on a Mikolov-format corpus; writes (or resumes) a run.

    Args:
        name: a language model of the zoo (`zoo.list_models("lstm_char_*")`).
        corpus: a directory of `train.txt`, `valid.txt`, `test.txt` (or `ptb.*.txt`), or a
            `training.data.text.Corpus`.
        out: the run directory (default `runs/<name>-<time>`): new, empty, or an interrupted
            run of the same configuration, which resumes.
        verbose: 1 prints one line per epoch; 0 nothing.
        tensorboard: write per-epoch scalars to `out/tensorboard`.
        **kwargs: `recipe`, `epochs`, `batch_size`, `learning_rate`, `recipe_overrides`,
            `seed`, `max_train_tokens` (train on the first N tokens only), `weights` (a
            finished run directory of the same architecture: fine-tune it on `corpus`, read
            with the run's vocabulary; its overrides are kept, only `dropout` may change),
            and architecture overrides (`variant="t_only"`, `highway_layers=4`, `dropout`,
            ...).

    Returns:
        The final metrics (test and validation perplexity), with `run_dir`.
    """
    settings = settle(name, corpus, **kwargs)
    base = RunDir(out) if out is not None else RunDir.default(name)
    base.inspect(settings.config)  # refuse before touching anything
    with base.locked():
        previous = base.inspect(settings.config)
        if previous is not None:
            base.remove_temporary_files()
        return _train_in(settings, base, previous, verbose, tensorboard)


def _reset_states(model: keras.Model) -> None:
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_state()


def _reseed_dropout(model: keras.Model, seed: int, epoch: int) -> None:
    """Each epoch's dropout masks from (seed, epoch): a resumed run draws what the
    uninterrupted one drew (the seed generators' states are not in the checkpoint)."""
    generators = private_api.seed_generator_states(model)
    for i, state in enumerate(generators):
        state.assign(np.array([(seed * 1_000_003 + epoch * 7_919 + i) % 2**31, 0],
                              dtype=state.dtype))


@keras.saving.register_keras_serializable(package="highway_zoo")
class TimeSummedCrossentropy(keras.losses.Loss):
    """Cross-entropy summed over the time steps of a sequence, averaged over the batch.

    Kim et al.'s gradient (main.lua `feval`): each step's batch-mean NLL is back-propagated
    and the gradients are summed over the `bptt_steps` steps (only the printed loss is divided
    by them), and then clipped to norm 5. A mean over the steps instead would make every update
    35 times smaller before clipping, and the nets learn several times slower at lr 1 (measured
    on the tests' small corpus: stuck near the unigram perplexity after 300 steps). The
    perplexity is exp(loss / steps).
    """

    def __init__(self, from_logits: bool = True, name="time_summed_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        per_step = keras.losses.sparse_categorical_crossentropy(
            y_true, y_pred, from_logits=self.from_logits)
        # Per step times the step count: Keras's mean over (batch, steps) then equals the sum
        # over steps of the batch mean, and the shape still fits the words' mask.
        return per_step * keras.ops.cast(keras.ops.shape(per_step)[-1], per_step.dtype)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}


def _compiled(settings: LanguageModelSettings) -> keras.Model:
    keras.utils.set_random_seed(settings.seed)
    weights = settings.weights and settings.weights["source"]
    model = zoo.load(settings.name, weights=weights, **settings.training_overrides())
    recipe = settings.recipe
    clip = {"global_clipnorm": recipe["global_clipnorm"]} if recipe["global_clipnorm"] else {}
    model.compile(
        optimizer=keras.optimizers.SGD(recipe["learning_rate"], momentum=recipe["momentum"],
                                       nesterov=recipe["nesterov"], **clip),
        loss=TimeSummedCrossentropy(
            from_logits=model.metadata["architecture_args"].get("classifier_activation") is None),
    )
    return model


def _evaluate(model: keras.Model, batches, batch_size: int) -> float:
    """Mean cross-entropy per token over contiguous batches, states carried."""
    _reset_states(model)
    loss = model.evaluate(*batches, batch_size=batch_size, verbose=0)
    _reset_states(model)
    return float(loss) / batches[1].shape[1]


STREAM_CHUNK = 1_000  # steps per call when a split is read as one stream


def stream_loss(settings: LanguageModelSettings, weights: list[np.ndarray],
                split: str = "test") -> float:
    """Mean cross-entropy per token of `split` read as one stream, Kim's test perplexity
    (main.lua, `eval_split(3)`): from the text's start, states carried through it all, every
    token after the first predicted, by the net of the last epoch (no truncation into rows)."""
    model = zoo.load(settings.name, stateful=True, batch_size=1, **settings.overrides)
    set_trained_weights(model, weights)
    text = settings.corpus.split(split)
    probabilities = settings.overrides.get("classifier_activation") == "softmax"
    total, count = 0.0, len(text.words) - 1
    for start in range(0, count, STREAM_CHUNK):
        end = min(start + STREAM_CHUNK, count)
        logits = np.asarray(model.predict_on_batch(text.chars[None, start:end]),
                            np.float64)[0]
        if probabilities:  # log-probabilities are logits that are already normalised
            logits = np.log(np.maximum(logits, np.finfo(np.float64).tiny))
        top = logits.max(axis=-1)
        log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=-1))
        total += float((log_z - logits[np.arange(end - start), text.words[start + 1:end + 1]]
                        ).sum())
    return total / count


class _Checkpoint:
    """The latest finished epoch: `epoch-<k>.keras` (model and optimizer) and latest.json
    (epoch, learning rate), written in that order, each whole (a kill leaves the previous)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def latest(self) -> dict[str, Any] | None:
        path = self.directory / CHECKPOINT_STATE
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def save(self, model: keras.Model, epoch: int, learning_rate: float, seconds: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"epoch-{epoch}.keras"
        with atomic_path(self.directory / name, overwrite=True) as tmp:
            model.save(tmp)
        previous = self.latest()
        write_text(self.directory / CHECKPOINT_STATE, json.dumps({
            "epoch": epoch, "learning_rate": learning_rate, "file": name,
            "train_seconds": seconds}) + "\n", overwrite=True)
        if previous and previous["file"] != name:
            (self.directory / previous["file"]).unlink(missing_ok=True)

    def restore(self, state: dict[str, Any]) -> keras.Model:
        import layers.carried_state_lstm  # noqa: F401  (registers the stateful LSTM)
        import zoo.model  # noqa: F401  (registers HighwayZooModel for load_model)

        return keras.saving.load_model(self.directory / state["file"])

    def remove(self) -> None:
        if self.directory.is_dir():
            for path in self.directory.iterdir():
                path.unlink()
            self.directory.rmdir()


def _scalars(directory: Path, epoch: int, values: dict[str, float]) -> None:
    with EventWriter(directory) as writer:  # tf.summary's format, without TensorFlow
        for key, value in values.items():
            if value is not None and math.isfinite(value):
                writer.scalar(key, value, step=epoch + 1)


def _train_in(settings: LanguageModelSettings, run_dir: RunDir, previous: dict | None,
              verbose: int, tensorboard: bool) -> dict[str, Any]:
    recipe, batch = settings.recipe, settings.recipe["batch_size"]
    checkpoint = _Checkpoint(run_dir.checkpoint_dir)
    run = previous or {
        "command": sys.argv, **settings.config,
        "versions": {"python": platform.python_version(), **runtime_backend.versions()},
        "started": _now(),
    }
    run.update(status=RUNNING, task="language_model",
               steps_per_epoch=len(settings.train[0]) // batch)
    run_dir.write_run(run)

    state = checkpoint.latest() if previous is not None else None
    if state is not None:
        model = checkpoint.restore(state)
        start, lr, seconds_before = state["epoch"] + 1, state["learning_rate"], \
            state["train_seconds"]
        history = [e for e in run_dir.read_history() if e["epoch"] <= state["epoch"]]
        print(f"Resuming the interrupted run in {run_dir} after epoch {start} of "
              f"{recipe['epochs']} (learning rate {lr:g}).", flush=True)
        run.setdefault("resumed", []).append({"at": _now(), "command": sys.argv,
                                              "epoch": start, "backend": distribute.backend()})
    else:
        model = _compiled(settings)
        start, lr, seconds_before, history = 0, recipe["learning_rate"], 0.0, []
    run["metadata"] = model.metadata
    run_dir.write_run(run)

    x, y = settings.train
    tokens = int(y.size)
    train_seconds = seconds_before
    for epoch in range(start, recipe["epochs"]):
        model.optimizer.learning_rate.assign(lr)
        _reseed_dropout(model, settings.seed, epoch)
        _reset_states(model)
        began = time.perf_counter()
        fit = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
        seconds = time.perf_counter() - began
        train_seconds += seconds
        loss = float(fit.history["loss"][-1]) / recipe["bptt_steps"]  # per token
        if not math.isfinite(loss):
            message = f"non-finite training loss ({loss}) in epoch {epoch + 1}"
            run.update(status=NON_FINITE, failure={"epoch": epoch, "message": message},
                       failed=_now())
            run_dir.write_run(run)
            from training.trainer import NonFiniteLossError

            raise NonFiniteLossError(message)
        val_loss = _evaluate(model, settings.valid, batch)
        entry = {
            "epoch": epoch, "loss": loss, "perplexity": perplexity(loss),
            "val_loss": val_loss, "val_perplexity": perplexity(val_loss),
            "learning_rate": lr, "seconds": round(seconds, 2),
            "tokens_per_second": round(tokens / seconds, 1),
        }
        history.append(entry)
        lr = next_learning_rate(recipe, [e["val_perplexity"] for e in history], lr)
        checkpoint.save(model, epoch, lr, train_seconds)
        run_dir.write_history(history)
        if tensorboard:
            _scalars(run_dir.tensorboard_dir, epoch, {
                "perplexity": entry["perplexity"], "val_perplexity": entry["val_perplexity"],
                "loss": loss, "val_loss": val_loss, "learning_rate": entry["learning_rate"],
                "tokens_per_second": entry["tokens_per_second"]})
        if verbose:
            print(f"epoch {epoch + 1}/{recipe['epochs']}: perplexity {entry['perplexity']:.1f}"
                  f", validation {entry['val_perplexity']:.1f}, learning rate "
                  f"{entry['learning_rate']:g}, {entry['tokens_per_second']:,.0f} tokens/s",
                  flush=True)

    test_loss = stream_loss(settings, trained_weights(model))
    last = history[-1]
    metrics = {
        "test_perplexity": perplexity(test_loss), "test_loss": test_loss,
        "test_evaluation": "one stream from the split's start, states carried (Kim's)",
        "val_perplexity": last["val_perplexity"], "val_loss": last["val_loss"],
        "final_train_perplexity": last["perplexity"], "final_train_loss": last["loss"],
        "train_seconds": round(train_seconds, 2), "epochs": recipe["epochs"],
        "tokens_per_second": float(np.median([e["tokens_per_second"] for e in history])),
    }
    for name in ("model.weights.h5", "model.weights.h5.sha256", "model.json", "README.md",
                 "metrics.json"):
        (run_dir.path / name).unlink(missing_ok=True)  # of this run, killed finishing
    stateless = zoo.load(settings.name, **settings.overrides)
    set_trained_weights(stateless, trained_weights(model))
    corpus = settings.corpus
    zoo.save(stateless, run_dir.path, metrics=metrics, extra={
        "vocabulary": {"words": list(corpus.words), "chars": list(corpus.chars)}},
        training={
            "dataset": f"{corpus.name} ({settings.corpus_record['num_train']} training "
                       f"tokens; {corpus.directory})",
            "recipe": recipe["name"], "seed": settings.seed, "command": " ".join(run["command"]),
        })
    run_dir.write_metrics(metrics)
    checkpoint.remove()
    run.update(status=FINISHED, finished=_now())
    run_dir.write_run(run)
    if verbose:
        print(f"Test perplexity {metrics['test_perplexity']:.2f} (validation "
              f"{metrics['val_perplexity']:.2f}); wrote {run_dir}", flush=True)
    return {**metrics, "run_dir": str(run_dir)}
