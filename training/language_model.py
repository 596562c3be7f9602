"""`train_lm()`: a character-aware language model on a Mikolov-format corpus, Kim et al.'s way.

Kim et al. (yoonkim/lstm-char-cnn, main.lua) train on contiguous BPTT batches: the training
text as one token stream cut into `batch_size` rows, read `bptt_steps` words at a time, the
LSTM states carried from each batch to the next (a stateful LSTM, reset at each epoch), plain
SGD at 1.0 with the global gradient norm clipped at 5, the rate halved after an epoch whose
validation perplexity improved by less than 1 (from the third epoch on, as main.lua checks).
Perplexity is exp of the mean cross-entropy per token, the metric everywhere here.

A run is a task of the run core (`LanguageModelTask`, `training.run_core`), as an image
run is: its directory, checkpoints, resumption, timeline and progress are the image runs'.
Stateful BPTT (`ResetStates`), dropout reseeded per epoch (`ReseedDropout`), Kim's rule
(`KimPlateau`) and the per-token logs (`PerTokenLogs`) are Keras callbacks around a plain
`fit` per epoch (in order, `shuffle=False`), as keras-hub trains its `CausalLM`. The run
directory, with perplexities::

    run.json          command, versions, seed, recipe, corpus, model metadata, status,
                      timeline
    history.json      per epoch (from 1): loss, perplexity, val_loss, val_perplexity (the
                      validation split), learning_rate, seconds, tokens_per_second
    checkpoint/       the latest checkpoint while the run is going (`training.checkpoints`:
                      weights, carried LSTM states, dropout seeds, optimizer state)
    tensorboard/      perplexities, losses and the learning rate per epoch; the
                      embedder's transform gates on the validation text's first
                      `GATE_SAMPLE_WORDS` words (`training.callbacks.WordGateSummaries`)
    gates.json        those gates' mean, std and b_T by epoch (variants with a learned T)
    model.json, model.weights.h5(.sha256), README.md
                      the trained net as a preset: `zoo.load(RUN_DIR)` gives it stateless
                      (any batch, any length), with its vocabularies in model.json
    metrics.json      test and validation perplexity

An interrupted run resumes from its latest checkpoint (each epoch's end, and every
`checkpoint_every` steps) and repeats the uninterrupted one bit for bit. A run interrupted
under an earlier version (`checkpoint/epoch-<k>.keras` and latest.json) resumes too: its
checkpoint becomes a current one (`LanguageModelTask.upgrade`).
"""

from __future__ import annotations

import json
import math
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import keras
import numpy as np

import zoo
from training import timeline
from training.callbacks import WordGateSummaries
from training.checkpoints import Checkpoints, trained_iterations
from training.data.text import Corpus, bptt_batches, load_corpus
from training.recipes import IMAGE_DEFAULTS, get_recipe, recipe_name
from training.run_core import RunSettings, Task, check_checkpoint_every, run
from training.run_dir import RunDir, RunDirError
from training.runtime import distribute, private_api, tensorflow_on_demand
from training.summaries import EventWriter
from zoo.char_lm import set_trained_weights, trained_weights

tensorflow_on_demand.install()

# The words WordGateSummaries reads the gates on: the validation text's first ones.
GATE_SAMPLE_WORDS = 1000

__all__ = ["KimPlateau", "LanguageModelSettings", "LanguageModelTask", "PerTokenLogs",
           "ReseedDropout", "ResetStates", "epoch_learning_rate", "next_learning_rate",
           "perplexity", "settle", "train_lm"]


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
    image_fields = [k for k, v in IMAGE_DEFAULTS.items() if recipe_[k] != v]
    if image_fields:
        raise ValueError(f"{', '.join(image_fields)} apply to image classifiers; a language "
                         "model's rate follows its validation perplexity: leave them out.")
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
             verbose: int = 1, tensorboard: bool = True, gate_summaries: bool = True,
             **kwargs: Any) -> dict[str, Any]:
    """Trains language model `name` on a Mikolov-format corpus; writes (or resumes) a run.

    Args:
        name: a language model of the zoo (`zoo.list_models("lstm_char_*")`).
        corpus: a directory of `train.txt`, `valid.txt`, `test.txt` (or `ptb.*.txt`), or a
            `training.data.text.Corpus`.
        out: the run directory (default `runs/<name>-<time>`): new, empty, or an interrupted
            run of the same configuration, which resumes.
        verbose: Keras's progress: 1 a bar (each epoch's line with its perplexities), 2 one
            line per epoch, 0 none; the test perplexity is printed unless 0.
        tensorboard: write per-epoch scalars to `out/tensorboard`.
        gate_summaries: with `tensorboard`, also the embedder's transform gates on the
            validation text's first words, and gates.json (`WordGateSummaries`).
        **kwargs: `recipe`, `epochs`, `batch_size`, `learning_rate`, `recipe_overrides`,
            `seed`, `max_train_tokens` (train on the first N tokens only),
            `checkpoint_every` (also checkpoint every N steps), `weights` (a
            finished run directory of the same architecture: fine-tune it on `corpus`, read
            with the run's vocabulary; its overrides are kept, only `dropout` may change),
            and architecture overrides (`variant="t_only"`, `highway_layers=4`, `dropout`,
            ...).

    Returns:
        The final metrics (test and validation perplexity), with `run_dir`.
    """
    clock = timeline.Clock()
    checkpoint_every = check_checkpoint_every(kwargs.pop("checkpoint_every", None))
    settings = settle(name, corpus, **kwargs)
    clock.lap("data")
    base = RunDir(out) if out is not None else RunDir.default(name)
    task = LanguageModelTask(settings, base, verbose=verbose, tensorboard=tensorboard,
                             gate_summaries=gate_summaries, checkpoint_every=checkpoint_every)
    metrics = run(task, base, clock)
    if verbose:
        print(f"Test perplexity {metrics['test_perplexity']:.2f} (validation "
              f"{metrics['val_perplexity']:.2f}); wrote {base}", flush=True)
    return metrics


def _reset_states(model: keras.Model) -> None:
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_state()


def _reseed_dropout(model: keras.Model, seed: int, epoch: int) -> None:
    """Each epoch's dropout masks from (seed, epoch), whichever process trains it."""
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


def compiled_model(settings: LanguageModelSettings) -> keras.Model:
    """The run's net, seeded, loaded and compiled with its recipe (SGD, Kim's clip, the
    time-summed loss), as the run trains it."""
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


class LanguageModelTask(Task):
    """Kim's training as a run of the core (`training.run_core`): contiguous BPTT batches
    in order, the LSTM states carried from batch to batch and reset at each epoch's start
    and around each validation, dropout reseeded per epoch, Kim's plateau rule, the
    validation split's perplexity each epoch and the test text's, read as one stream, at
    the end."""

    def __init__(self, lm: LanguageModelSettings, run_dir: RunDir, *, verbose: int | str = 1,
                 tensorboard: bool = True, gate_summaries: bool = True,
                 checkpoint_every: int | None = None):
        self.lm = lm
        self.gate_summaries = tensorboard and gate_summaries
        strategy = distribute.make_strategy("default")  # one device
        scalars = (EpochScalars(run_dir.tensorboard_dir),) if tensorboard else ()
        self.settings = RunSettings(
            config=lm.config, strategy=strategy, strategy_name="default",
            role=distribute.role(strategy),
            steps_per_epoch=len(lm.train[0]) // lm.recipe["batch_size"],
            checkpoint_every=checkpoint_every, verbose=verbose, callbacks=scalars)
        self.validation_data = lm.valid

    def compile(self) -> keras.Model:
        return compiled_model(self.lm)

    def record(self, model: keras.Model) -> dict[str, Any]:
        return {"task": "language_model", "metadata": model.metadata}

    def batches(self, epoch: int, skip: int) -> dict[str, Any]:
        x, y = self.lm.train
        batch = self.lm.recipe["batch_size"]
        return {"x": x[skip * batch:], "y": y[skip * batch:], "batch_size": batch}

    def callbacks(self, run_dir: RunDir, history: list[dict]) -> list[keras.callbacks.Callback]:
        recipe, steps = self.lm.recipe, self.settings.steps_per_epoch
        callbacks = [ResetStates(steps), ReseedDropout(self.lm.seed, steps),
                     KimPlateau(recipe, history),
                     PerTokenLogs(recipe["bptt_steps"], recipe["batch_size"])]
        if self.gate_summaries:  # before the checkpoint: an epoch saved has its summaries
            callbacks.append(WordGateSummaries(
                run_dir.tensorboard_dir, self.lm.corpus.valid.chars[:GATE_SAMPLE_WORDS]))
        return callbacks

    def history_entry(self, epoch: int, logs: dict[str, float]) -> dict[str, Any]:
        return {"epoch": epoch + 1, **logs}  # from 1, as every run's history.json

    def final_metrics(self, model: keras.Model, history: list[dict],
                      train_seconds: float) -> dict[str, Any]:
        test_loss = stream_loss(self.lm, trained_weights(model))
        last = history[-1]
        return {
            "test_perplexity": perplexity(test_loss), "test_loss": test_loss,
            "test_evaluation": "one stream from the split's start, states carried (Kim's)",
            "val_perplexity": last["val_perplexity"], "val_loss": last["val_loss"],
            "final_train_perplexity": last["perplexity"], "final_train_loss": last["loss"],
            "train_seconds": round(train_seconds, 2), "epochs": self.lm.recipe["epochs"],
            "tokens_per_second": float(np.median([e["tokens_per_second"] for e in history])),
        }

    def save(self, model: keras.Model, run_dir: RunDir, metrics: dict[str, Any],
             run: dict[str, Any]) -> None:
        """The net as a preset: stateless (any batch, any length), with its vocabularies."""
        lm, corpus = self.lm, self.lm.corpus
        stateless = zoo.load(lm.name, **lm.overrides)
        set_trained_weights(stateless, trained_weights(model))
        zoo.save(stateless, run_dir.path, metrics=metrics, extra={
            "vocabulary": corpus.tokenizer.get_config()},
            training={
                "dataset": f"{corpus.name} ({lm.corpus_record['num_train']} training "
                           f"tokens; {corpus.directory})",
                "recipe": lm.recipe["name"], "seed": lm.seed,
                "command": " ".join(run["command"]),
            })

    def upgrade(self, run_dir: RunDir, model: keras.Model, checkpoints: Checkpoints) -> None:
        """An earlier version's checkpoint (`epoch-<k>.keras`, the model and optimizer after
        epoch k, and latest.json) becomes a current one of the same state."""
        pointer = run_dir.checkpoint_dir / LEGACY_POINTER
        if not pointer.is_file() or checkpoints.latest() is not None:
            return
        state = json.loads(pointer.read_text(encoding="utf-8"))
        path = run_dir.checkpoint_dir / state["file"]
        iterations = (state["epoch"] + 1) * self.settings.steps_per_epoch
        try:
            _assign_legacy(model, path)
            if trained_iterations(model) != iterations:
                raise ValueError(f"it holds iteration {trained_iterations(model)}, not "
                                 f"{iterations} (the end of epoch {state['epoch'] + 1})")
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
            raise RunDirError(
                f"{path}, an earlier version's checkpoint, cannot be resumed "
                f"({type(err).__name__}: {' '.join(str(err).split())}); it is kept: delete "
                f"{run_dir.checkpoint_dir} to train the run again from epoch 1, or choose a "
                "new --out.") from None
        checkpoints.save(model, iterations, state.get("train_seconds", 0.0))
        path.unlink()
        pointer.unlink()


LEGACY_POINTER = "latest.json"


def _assign_legacy(model: keras.Model, path: Path) -> None:
    """Assigns the weights and optimizer state of an earlier version's `.keras` checkpoint
    (the same stateful net) to the compiled `model`."""
    import layers.carried_state_lstm  # noqa: F401  (registers the stateful LSTM)
    import zoo.model  # noqa: F401  (registers HighwayZooModel for load_model)

    old = keras.saving.load_model(path)
    model.set_weights(old.get_weights())
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    new_state, old_state = model.optimizer.variables, old.optimizer.variables
    if [tuple(v.shape) for v in new_state] != [tuple(v.shape) for v in old_state]:
        raise ValueError("its optimizer state does not fit this run's optimizer")
    for variable, value in zip(new_state, old_state):
        variable.assign(value)


def _epoch_starts(model: keras.Model, steps_per_epoch: int) -> bool:
    """Whether the epoch beginning now starts from its first batch (not resumed mid-epoch
    from a checkpoint, which holds the states and seeds of its step)."""
    return trained_iterations(model) % steps_per_epoch == 0


class ResetStates(keras.callbacks.Callback):
    """Stateful BPTT: the LSTM states from zero at each epoch's start and around each
    validation (the validation split read from its start, training resumed from zero)."""

    def __init__(self, steps_per_epoch: int):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        if _epoch_starts(self.model, self.steps_per_epoch):
            _reset_states(self.model)

    def on_test_begin(self, logs=None):
        _reset_states(self.model)

    def on_test_end(self, logs=None):
        _reset_states(self.model)


class ReseedDropout(keras.callbacks.Callback):
    """Each epoch's dropout masks from (seed, epoch): any process that trains the epoch from
    its start draws the same masks."""

    def __init__(self, seed: int, steps_per_epoch: int):
        super().__init__()
        self.seed, self.steps_per_epoch = seed, steps_per_epoch

    def on_epoch_begin(self, epoch, logs=None):
        if _epoch_starts(self.model, self.steps_per_epoch):
            _reseed_dropout(self.model, self.seed, epoch)


def epoch_learning_rate(recipe: dict[str, Any], history: list[dict]) -> float:
    """The learning rate of the epoch after `history` (the run's entries so far): Kim's rule
    applied to the last epoch's rate."""
    if not history:
        return recipe["learning_rate"]
    return next_learning_rate(recipe, [e["val_perplexity"] for e in history],
                              history[-1]["learning_rate"])


class KimPlateau(keras.callbacks.Callback):
    """Kim's plateau rule (`next_learning_rate`): each epoch's rate set at its start from the
    run's history so far (so a resumed run sets the rates the uninterrupted one set), and put
    in the epoch's logs, as Keras's ReduceLROnPlateau puts it there."""

    def __init__(self, recipe: dict[str, Any], history: list[dict]):
        super().__init__()
        self.recipe, self.history = recipe, history
        self.rate = recipe["learning_rate"]

    def on_epoch_begin(self, epoch, logs=None):
        self.rate = epoch_learning_rate(self.recipe, self.history)
        self.model.optimizer.learning_rate.assign(self.rate)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = self.rate


class PerTokenLogs(keras.callbacks.Callback):
    """An epoch's logs as a language model's history has them: the losses per token (Keras's
    are summed over the BPTT steps, `TimeSummedCrossentropy`), their perplexities, the
    learning rate, and the epoch's training seconds and tokens per second."""

    async_safe = True  # its batch hook only rewrites the batch's own logs

    def __init__(self, bptt_steps: int, batch_size: int):
        super().__init__()
        self.bptt_steps, self.step_tokens = bptt_steps, bptt_steps * batch_size
        self._seconds = None

    def on_train_batch_end(self, batch, logs=None):
        if logs and "loss" in logs:  # the progress bar shows the loss per token too
            logs["loss"] = float(logs["loss"]) / self.bptt_steps

    def on_epoch_begin(self, epoch, logs=None):
        self._began, self._seconds = time.perf_counter(), None
        self._first = trained_iterations(self.model)

    def on_test_begin(self, logs=None):
        if self._seconds is None:  # the epoch's training ends where its validation begins
            self._seconds = time.perf_counter() - self._began
            self._steps = trained_iterations(self.model) - self._first

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self._seconds is None:
            return
        loss = float(logs["loss"]) / self.bptt_steps
        val_loss = float(logs["val_loss"]) / self.bptt_steps
        rate, seconds = logs.get("learning_rate"), self._seconds
        tokens = self._steps * self.step_tokens
        logs.clear()
        logs.update(loss=loss, perplexity=perplexity(loss), val_loss=val_loss,
                    val_perplexity=perplexity(val_loss), learning_rate=rate,
                    seconds=round(seconds, 2), tokens_per_second=round(tokens / seconds, 1))


SCALARS = ("perplexity", "val_perplexity", "loss", "val_loss", "learning_rate",
           "tokens_per_second")


class EpochScalars(keras.callbacks.Callback):
    """Each epoch's perplexities, losses, learning rate and speed in TensorBoard."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = directory

    def on_epoch_end(self, epoch, logs=None):
        if not self.model.stop_training:  # a non-finite loss stopped the run
            _scalars(self.directory, epoch, {k: (logs or {}).get(k) for k in SCALARS})


def _scalars(directory: Path, epoch: int, values: dict[str, float]) -> None:
    with EventWriter(directory) as writer:  # tf.summary's format, without TensorFlow
        for key, value in values.items():
            if value is not None and math.isfinite(value):
                writer.scalar(key, value, step=epoch + 1)
