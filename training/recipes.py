"""Recipes of `zoo.RECIPES` made real: their schema, validation, overrides and CLI flags.

- `FIELDS` is the schema of a recipe's training settings: one entry per field, from which
  the CLI derives one flag each (`add_recipe_flags`), so a new field is one line here.
- `get_recipe(name, overrides)` returns a checked copy with overrides applied;
  `recipe_name(architecture_recipe, "paper" | "quick" | NAME)` picks one.

This module imports no Keras, so the CLI can build its flags before TensorFlow loads; what
turns a recipe into Keras objects (optimizers, schedules, weight decay) is
`training.optimizers`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from zoo.recipes import QUICK_RECIPES, RECIPES

# The names `training.data.augment.get` implements; listed here, where the recipe field and its
# CLI flag offer them, so that building the flags needs no TensorFlow.
AUGMENTATIONS = ("none", "pad_crop_flip", "pad4_crop_flip", "random_resized_crop_flip")
LR_SCHEDULES = ("multistep", "cosine")

def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A CLI parser that also accepts "none" (the field switched off)."""

    def parser(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    parser.__name__ = getattr(parse, "__name__", "value")
    return parser


def _epoch_list(text: str) -> list[float]:
    """ "100,200" -> [100, 200]; "" or "none" -> [] (a constant rate)."""
    if text.strip().lower() in ("", "none"):
        return []
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated epochs, e.g. 100,200. Received: {text!r}"
        ) from None
    return [int(v) if v.is_integer() else v for v in values]


@dataclasses.dataclass(frozen=True)
class Field:
    """One training setting of a recipe and its command-line flag."""

    name: str
    parse: Callable[[str], Any]  # the flag's text -> value (bool fields: on/off flags)
    help: str
    flag: str | None = None  # default: --name-with-dashes
    choices: tuple[str, ...] | None = None

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


FIELDS: tuple[Field, ...] = (
    Field("optimizer", str, "sgd (Caffe-style momentum SGD; switching to it starts from "
          "momentum 0, no Nesterov) or adam", choices=("sgd", "adam")),
    Field("learning_rate", float, "base learning rate; NOT scaled with the number of replicas"),
    Field("momentum", _optional(float), "SGD momentum"),
    Field("nesterov", bool, "Nesterov momentum (SGD)"),
    Field("lr_boundaries_epochs", _epoch_list,
          "epochs at which the rate is multiplied by --lr-decay, e.g. 200,300,350 "
          "('none': constant)", flag="--lr-boundaries"),
    Field("lr_decay", _optional(float), "factor applied at each boundary (Caffe's gamma)"),
    Field("batch_size", int, "GLOBAL batch size, split evenly over all replicas"),
    Field("epochs", int, "training epochs"),
    Field("weight_decay", float,
          "Caffe weight decay wd (wd*w added to the gradient = L2(wd/2) on kernels, "
          "biases excluded); 0 for none"),
    Field("classifier_weight_decay_mult", float,
          "weight-decay multiplier of the classifier kernel (Caffe decay_mult)"),
    Field("bias_lr_mult", float, "learning-rate multiplier of biases (Caffe lr_mult; SGD only)"),
    Field("global_clipnorm", _optional(float), "clip the global gradient norm ('none': off)"),
    Field("augmentation", str, "training-time augmentation", choices=AUGMENTATIONS),
    Field("lr_schedule", str,
          "multistep: the base rate times --lr-decay at each of --lr-boundaries (Caffe's); "
          "cosine: a linear warm-up from 0 over --warmup-epochs, then a cosine decay to 0 at "
          "the last epoch", choices=LR_SCHEDULES),
    Field("warmup_epochs", float, "cosine schedule: epochs of linear warm-up (0: none)"),
    Field("label_smoothing", float,
          "image classifiers: the cross-entropy's target puts 1 - s on the label and s/K on "
          "each of the K classes (0: none)"),
    Field("ema_momentum", _optional(float),
          "image classifiers, SGD: keep an exponential moving average of the weights "
          "(this momentum per step); it is what each epoch's test pass evaluates and what the "
          "run saves ('none': off)"),
    # Language models (training.language_model) only:
    Field("lr_plateau_decay", _optional(float),
          "language models: multiply the rate by this after an epoch whose validation "
          "perplexity improved by less than --lr-plateau-min-improvement ('none': off)"),
    Field("lr_plateau_min_improvement", float,
          "language models: the validation-perplexity improvement below which the rate decays"),
    Field("bptt_steps", _optional(int),
          "language models: time steps per batch (truncated backpropagation through time)"),
)
FIELD_NAMES = tuple(f.name for f in FIELDS)
# Fields the image recipes leave out: their values there.
LANGUAGE_MODEL_DEFAULTS = {"lr_plateau_decay": None, "lr_plateau_min_improvement": 1.0,
                           "bptt_steps": None}
LANGUAGE_MODEL_FIELDS = tuple(LANGUAGE_MODEL_DEFAULTS)
# Fields the language models and the papers' recipes leave out: their values there (a run
# recorded before a field existed had this value).
IMAGE_DEFAULTS = {"lr_schedule": "multistep", "warmup_epochs": 0, "label_smoothing": 0.0,
                  "ema_momentum": None}
FIELD_DEFAULTS = {**LANGUAGE_MODEL_DEFAULTS, **IMAGE_DEFAULTS}
# Descriptive keys a recipe may carry besides its settings.
INFO_KEYS = ("source", "purpose", "paper_recipe", "authors_seed")


def recipe_name(architecture_recipe: str, recipe: str | None = None) -> str:
    """The recipe to train with: "paper" (or None) is the architecture's own,
    "quick" its quick version, anything else a `zoo.RECIPES` name."""
    if recipe in (None, "paper"):
        return architecture_recipe
    if recipe == "quick":
        if architecture_recipe in QUICK_RECIPES:
            return QUICK_RECIPES[architecture_recipe]
        raise ValueError(f"Recipe {architecture_recipe!r} has no quick version.")
    if recipe not in RECIPES:
        raise ValueError(
            f"Unknown recipe {recipe!r}; use 'paper', 'quick' or one of: "
            f"{', '.join(sorted(RECIPES))}."
        )
    return recipe


# What switching the optimizer does to the settings it does not give (--optimizer).
_OPTIMIZER_DEFAULTS = {
    "sgd": {"momentum": 0.0, "nesterov": False},
    "adam": {"momentum": None, "nesterov": None, "bias_lr_mult": 1.0},
}


def get_recipe(
    name: str, overrides: dict[str, Any] | None = None, **more: Any
) -> dict[str, Any]:
    """A checked copy of recipe `name` with overrides applied.

    Args:
        name: a `zoo.RECIPES` name.
        overrides: field -> value, applied as given (None switches an optional field
            such as `global_clipnorm` off).
        **more: field -> value, applied unless None (None means "not given", as for
            `train(epochs=None)`).

    Raises:
        ValueError: an unknown recipe or field, or a value out of range; the message
            names the field and what it accepts.
    """
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}.")
    more = {k: v for k, v in more.items() if v is not None}
    clash = sorted(k for k in more if k in (overrides or {}) and overrides[k] != more[k])
    if clash:
        raise ValueError(
            f"{clash[0]} is given twice with different values: {more[clash[0]]!r} and "
            f"{overrides[clash[0]]!r} in the recipe overrides. Give it once."
        )
    given = {**(overrides or {}), **more}
    unknown = sorted(set(given) - set(FIELD_NAMES))
    if unknown:
        raise ValueError(
            f"Recipe field {unknown[0]!r} cannot be overridden; choose from "
            f"{', '.join(FIELD_NAMES)}."
        )
    recipe = {**FIELD_DEFAULTS, **RECIPES[name], "name": name}
    if given.get("optimizer", recipe["optimizer"]) != recipe["optimizer"]:
        # Settings of the recipe's optimizer that mean nothing to the new one.
        recipe.update(_OPTIMIZER_DEFAULTS[given["optimizer"]])
    recipe.update(given)
    if isinstance(recipe["lr_boundaries_epochs"], tuple):
        recipe["lr_boundaries_epochs"] = list(recipe["lr_boundaries_epochs"])
    check_recipe(recipe)
    return recipe


def _fail(recipe: dict[str, Any], key: str, expected: str) -> None:
    raise ValueError(
        f"Recipe {recipe.get('name', '?')!r}: {key} must be {expected}. "
        f"Received: {key}={recipe.get(key)!r}"
    )


def _number_checker(recipe: dict[str, Any]) -> Callable[..., None]:
    """`number(key, low, open_low=False, high=inf)`: fails unless recipe[key] is a finite
    number in the range."""

    def number(key: str, low: float, *, open_low: bool = False, high: float = math.inf):
        value = recipe[key]
        ok = (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and (value > low if open_low else value >= low)
            and value <= high
        )
        if not ok:
            bound = f"> {low}" if open_low else f">= {low}"
            if high < math.inf:
                bound += f" and <= {high}"
            _fail(recipe, key, f"a finite number {bound}")

    return number


def check_recipe(recipe: dict[str, Any]) -> None:
    """Raises ValueError naming the first setting of `recipe` that is missing or invalid."""
    missing = [f for f in FIELD_NAMES if f not in recipe]
    if missing:
        raise ValueError(f"Recipe {recipe.get('name', '?')!r} lacks {', '.join(missing)}.")

    number = _number_checker(recipe)
    for f in FIELDS:
        if f.choices and recipe[f.name] not in f.choices:
            _fail(recipe, f.name, f"one of {', '.join(f.choices)}")
    number("learning_rate", 0, open_low=True)
    for key in ("epochs", "batch_size"):
        if not isinstance(recipe[key], int) or isinstance(recipe[key], bool) or recipe[key] < 1:
            raise ValueError(f"{key} must be positive. Received: {key}={recipe[key]!r}")
    number("weight_decay", 0)
    number("classifier_weight_decay_mult", 0)
    number("bias_lr_mult", 0, open_low=True)
    if recipe["global_clipnorm"] is not None:
        number("global_clipnorm", 0, open_low=True)
    _check_modern_fields(recipe)
    boundaries = recipe["lr_boundaries_epochs"] or []
    if any(not isinstance(b, (int, float)) or b <= 0 for b in boundaries) or any(
        a >= b for a, b in zip(boundaries, boundaries[1:])
    ):
        _fail(recipe, "lr_boundaries_epochs", "increasing positive epochs")
    if boundaries:
        number("lr_decay", 0, open_low=True)
    if recipe["lr_plateau_decay"] is not None:
        number("lr_plateau_decay", 0, open_low=True, high=1)
    number("lr_plateau_min_improvement", 0)
    steps = recipe["bptt_steps"]
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        _fail(recipe, "bptt_steps", "a positive integer (or none)")
    if recipe["optimizer"] == "sgd":
        number("momentum", 0, high=1)
        if not isinstance(recipe["nesterov"], bool):
            _fail(recipe, "nesterov", "true or false for SGD")
    else:
        for key in ("momentum", "nesterov"):
            if recipe[key] not in (None, False):
                _fail(recipe, key, f"unset (None) with optimizer {recipe['optimizer']!r}")
        if recipe["bias_lr_mult"] != 1:
            _fail(
                recipe, "bias_lr_mult",
                "1 with Adam: Adam divides each gradient by its own running scale, so "
                "Caffe's lr_mult (a gradient scale under SGD) does not apply",
            )


def _check_modern_fields(recipe: dict[str, Any]) -> None:
    """The warm-up and cosine schedule, label smoothing and the weight average."""
    number = _number_checker(recipe)
    if recipe["lr_schedule"] == "cosine" and recipe["lr_boundaries_epochs"]:
        _fail(recipe, "lr_boundaries_epochs",
              "empty ('none') with lr_schedule cosine, which decays smoothly to zero")
    number("warmup_epochs", 0)
    if recipe["warmup_epochs"] and recipe["lr_schedule"] != "cosine":
        _fail(recipe, "warmup_epochs", "0 unless lr_schedule is cosine")
    if recipe["warmup_epochs"] >= recipe["epochs"]:
        _fail(recipe, "warmup_epochs", f"fewer than the {recipe['epochs']} epochs")
    number("label_smoothing", 0, high=0.999)
    if recipe["ema_momentum"] is not None:
        number("ema_momentum", 0, open_low=True, high=0.999999)
        if recipe["optimizer"] != "sgd":
            _fail(recipe, "ema_momentum", "none with optimizer adam (the weight average is "
                  "kept by the SGD optimizer)")


def add_recipe_flags(parser: argparse.ArgumentParser) -> None:
    """Adds one flag per recipe field (`FIELDS`); a flag not given keeps the recipe's value."""
    group = parser.add_argument_group(
        "recipe overrides (default: the recipe's value; `highway-zoo describe NAME` shows it)"
    )
    for f in FIELDS:
        kwargs = dict(dest=f"recipe_{f.name}", default=argparse.SUPPRESS, help=f.help)
        if f.parse is bool:
            group.add_argument(f.option, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            metavar = None if f.choices else f.option.lstrip("-").replace("-", "_").upper()
            group.add_argument(f.option, type=f.parse, choices=f.choices, metavar=metavar,
                               **kwargs)


def recipe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe fields given on the command line ("none" kept as an explicit None)."""
    return {f.name: getattr(args, f"recipe_{f.name}") for f in FIELDS
            if hasattr(args, f"recipe_{f.name}")}
