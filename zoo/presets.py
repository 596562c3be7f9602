"""Presets: a self-describing directory per trained model, as keras-hub's presets.

`zoo.save(model, "my-model/")` writes::

    model.weights.h5          the weights (Keras format)
    model.weights.h5.sha256   their sha256, in the `sha256sum -c` format
    README.md                 the model card: what it is, how to load it, what it scored
    model.json                architecture, overrides, weights sha256, metadata, metrics

and `zoo.load("my-model/")` loads it with no name (keras-hub's `from_preset(local_dir)`).
Every file is written atomically and `model.json` last, so a directory is a preset only once
it is complete. Run directories (`highway-zoo train --out`) and the tuner's `best_model` are
written by `save` too, so they are presets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zoo.files import write_text
from zoo.weights import MODEL_FILE, WEIGHTS_FILE, save_weights

CARD_FILE = "README.md"

# Metrics a card shows, in order, with their labels (the trainer's metrics.json names).
_METRICS = {
    "test_accuracy": "test accuracy",
    "test_loss": "test loss",
    "val_accuracy": "test accuracy (tuner objective)",
    "val_loss": "test loss (tuner objective)",
    "accuracy": "training accuracy (tuner objective)",
    "loss": "training loss (tuner objective)",
    "final_train_accuracy": "final training accuracy",
    "final_train_loss": "final training loss",
    "epochs": "epochs",
    "train_seconds": "training time (s)",
}
# A language model's (training.language_model's metrics.json): val_* is the validation split.
_LM_METRICS = {
    "test_perplexity": "test perplexity",
    "val_perplexity": "validation perplexity",
    "test_loss": "test loss (nats per word)",
    "val_loss": "validation loss (nats per word)",
    "final_train_perplexity": "final training perplexity",
    "epochs": "epochs",
    "train_seconds": "training time (s)",
}


def save(
    model,
    directory: str | os.PathLike,
    extra: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> Path:
    """Saves a zoo model to `directory` as a preset that `zoo.load(directory)` reads.

    Args:
        model: a zoo model (`zoo.load(...)`).
        directory: created if missing; existing weights there are never overwritten.
        extra: more fields for `model.json`.
        metrics: what was measured for these weights (e.g. `test_accuracy`), shown on the
            model card and kept in `model.json`.
        training: how they were made (`dataset`, `recipe`, `seed`, `command`, ...), likewise.

    Returns:
        The directory.
    """
    if not all(hasattr(model, a) for a in ("architecture", "overrides", "metadata")):
        raise ValueError(
            "zoo.save saves a zoo model (one that zoo.load returned), whose architecture it "
            f"records. Received: a {type(model).__name__}. Save any other Keras model with "
            "model.save('model.keras'), or zoo.save the zoo model inside it.")
    from zoo.model import quantized_layers

    if quantized_layers(model):
        raise ValueError(
            "zoo.save writes float presets; this model is quantized (zoo.quantize): save it "
            "with model.save('model.keras'), which keras.saving.load_model reads back in int8, "
            "or save the float model and quantize after loading.")
    directory = Path(directory)
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:  # a language model's tokenizer travels with its weights
        extra = {"vocabulary": tokenizer.get_config(), **(extra or {})}
    digest = save_weights(model, directory / WEIGHTS_FILE)
    record = {
        "architecture": model.architecture,
        "overrides": model.overrides,
        "sha256": digest,
        "metadata": model.metadata,
        "metrics": dict(metrics or {}),
        "training": dict(training or {}),
        **(extra or {}),
    }
    write_text(directory / CARD_FILE, model_card(record, directory), overwrite=True)
    write_text(directory / MODEL_FILE, json.dumps(record, indent=2, default=str) + "\n")
    return directory


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def model_card(record: dict[str, Any], directory: Path) -> str:
    """The preset's README.md, from its `model.json` record."""
    meta = record.get("metadata", {})
    name = record["architecture"]
    overrides = record.get("overrides") or {}
    language_model = meta.get("family") == "char_lm"
    args = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
    lines = [
        f"# {directory.resolve().name}: `{name}`" + (f" ({args})" if args else ""),
        "",
        meta.get("description", ""),
        "",
        "## Use",
        "",
        *(_language_model_use(record, directory) if language_model else _image_use(record,
                                                                                    directory)),
        "",
        "## Measured",
        "",
    ]
    metrics = record.get("metrics") or {}
    labels = _LM_METRICS if language_model else _METRICS
    shown = [(label, metrics[key]) for key, label in labels.items() if key in metrics]
    if shown:
        lines += ["| measure | value |", "| --- | ---: |"]
        lines += [f"| {label} | {_value(value)} |" for label, value in shown]
    else:
        lines.append("Nothing was measured for these weights when they were saved.")
    training = record.get("training") or {}
    if training:
        lines += ["", "## Training", ""]
        lines += [f"- {key}: {_value(value)}" for key, value in training.items()]
    lines += [
        "",
        "## Architecture",
        "",
        f"- `{name}`, family `{meta.get('family')}`, {meta.get('params', '?'):,} parameters"
        if isinstance(meta.get("params"), int)
        else f"- `{name}`, family `{meta.get('family')}`",
        f"- Paper: {meta.get('paper', '-')}",
        f"- Provenance: {meta.get('provenance', '-')} ({meta.get('provenance_meaning', '')})",
    ]
    if meta.get("reconstructed"):
        lines.append(f"- Reconstructed: {meta['reconstructed']}")
    lines += [
        "",
        "## Files",
        "",
        f"- `{WEIGHTS_FILE}`: sha256 `{record['sha256']}` (checked before loading)",
        f"- `{MODEL_FILE}`: architecture, overrides, metadata, metrics",
        "",
    ]
    return "\n".join(lines)


def _image_use(record: dict[str, Any], directory: Path) -> list[str]:
    meta, overrides = record.get("metadata", {}), record.get("overrides") or {}
    return [
        "```python",
        "import zoo",
        f"model = zoo.load({str(directory)!r})                      # as saved",
        f"model = zoo.load({str(directory)!r}, classes=5)           # fine-tune: a new classifier",
        f"features = zoo.load({str(directory)!r}, include_top=False)  # the body's features",
        "```",
        "",
        f"Input: raw pixel values 0-255, shape {tuple(meta.get('input_shape', ()))} "
        f"({meta.get('preprocessing', 'preprocessing inside the model')}). "
        + _image_output(meta, overrides),
    ]


def _image_output(meta: dict[str, Any], overrides: dict[str, Any]) -> str:
    if overrides.get("include_top", True):
        return (f"Output: class probabilities over {meta.get('classes')} classes "
                "(layer `predictions`).")
    stages = meta.get("feature_stages")
    if stages:
        listed = ", ".join(f"`{s['name']}` {tuple(s['shape'])}" for s in stages)
        return (f"Output: a dict of one feature per stage ({listed}; `feature_stages` in "
                "`model.json`'s metadata gives each one's layer and stride).")
    return f"Output: the body's features, {meta.get('features', {}).get('description', '')}"


def _language_model_use(record: dict[str, Any], directory: Path) -> list[str]:
    """A language model reads words spelled as character ids and predicts the next word."""
    meta, overrides = record.get("metadata", {}), record.get("overrides") or {}
    vocabulary = record.get("vocabulary")
    words = (f"{len(vocabulary['words']):,} words and {len(vocabulary['chars'])} characters "
             "in `model.json` (`vocabulary`)" if vocabulary else
             "no vocabulary recorded: the word and character ids are unknown")
    output = ("logits (layer `logits`)" if overrides.get("classifier_activation") is None
              else f"{overrides['classifier_activation']} (layer `predictions`)")
    return [
        "```python",
        "import zoo",
        f"model = zoo.load({str(directory)!r})                       # as saved, stateless",
        f"features = zoo.load({str(directory)!r}, include_top=False)  # the embedder's features",
        f"zoo.export({str(directory)!r})  # a SavedModel that takes words (docs/guide/export.md)",
        "```",
        "",
        f"Input: words as character ids, shape {tuple(meta.get('input_shape', ()))} per "
        f"sequence ({meta.get('preprocessing', '')}; training.data.text spells them); "
        f"vocabulary: {words}. "
        + (f"Output: the next word's {output} at every position."
           if overrides.get("include_top", True)
           else f"Output: {meta.get('features', {}).get('description', '')}"),
    ]
