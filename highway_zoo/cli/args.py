"""What every command's parser shares: one-line usage errors, numbers, lists and common flags.

Lists are read one way everywhere: `--depths 10,20,50` or `--depths 10 20 50`, and repeating
the flag adds to the list. Negative numbers: `--transform-bias -1 -2` or `--transform-bias=-1,-2`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (what was wrong and where to look)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def finite(text: str) -> float:
    """A finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number. Received: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number. Received: {text!r}")
    return value


def rates(text: str) -> float | list[float]:
    """One finite number, or a comma-separated list of them (the builder checks the range)."""
    values = [finite(part) for part in text.split(",")]
    return values[0] if len(values) == 1 else values


def positive(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer. Received: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer. Received: {text!r}")
    return value


# The Keras dtype policies a run can train in (`zoo.load(name, dtype=...)` takes any).
DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def dtype_policy(text: str) -> str | None:
    """A Keras dtype policy of `DTYPE_POLICIES`; None for float32, the default, so that a run
    started without the flag resumes with it."""
    if text not in DTYPE_POLICIES:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(DTYPE_POLICIES)}. Received: {text!r}")
    return None if text == "float32" else text


def depth(text: str) -> int:
    """A network depth: an integer >= 2."""
    value = positive(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"depths must be integers >= 2. Received: {text!r}")
    return value


class _ListAction(argparse.Action):
    """Collects comma- and space-separated items from every use of the flag, in order."""

    def __init__(self, *args, item: Callable[[str], Any] = str,
                 allowed: Sequence | None = None, **kwargs):
        self.item, self.allowed = item, allowed
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest)
        items = [] if current is self.default else list(current)
        for value in values:
            for part in (p.strip() for p in value.split(",")):
                if not part:
                    continue
                try:
                    item = self.item(part)
                except (argparse.ArgumentTypeError, ValueError) as err:
                    raise argparse.ArgumentError(self, f"{err} (a list: a,b,c)") from None
                if self.allowed is not None and item not in self.allowed:
                    raise argparse.ArgumentError(
                        self, f"invalid choice: {item!r} (choose from "
                        f"{', '.join(map(str, self.allowed))})")
                items.append(item)
        if not items:
            raise argparse.ArgumentError(self, "expected at least one value")
        setattr(namespace, self.dest, items)


def add_list(parser, flag: str, *, help: str, item: Callable[[str], Any] = str,
             default: Sequence | None = None, choices: Sequence | None = None,
             metavar: str | None = None) -> None:
    """A list flag (`flag a,b,c` or `flag a b c`); its help names the choices and default."""
    notes = []
    if choices is not None:
        notes.append(f"from {', '.join(map(str, choices))}")
    if default is not None:
        notes.append(f"default {','.join(map(str, default))}")
    parser.add_argument(
        flag, nargs="+", action=_ListAction, item=item, allowed=choices,
        default=None if default is None else list(default),
        help=f"{help} ({'; '.join(notes)})" if notes else help,
        metavar=metavar or flag.lstrip("-").upper().replace("-", "_"),
    )


# --- Flags that mean the same in every command ---------------------------------------


def add_dataset(parser, default: str = "the architecture's own") -> None:
    parser.add_argument("--dataset", help="mnist, fashion_mnist, cifar10, cifar100 or "
                        f"imagenet2012 (default: {default})")


def add_data_dir(parser) -> None:
    parser.add_argument("--data-dir", metavar="DIR",
                        help="directory holding the upstream dataset files (training/data.py)")


def add_out(parser, what: str, default: str, resumable: bool = False) -> None:
    resume = ("; run the same command again to resume it, or start it again while it runs "
              "to share its runs" if resumable else "")
    parser.add_argument("--out", metavar="DIR",
                        help=f"{what}: new, or empty (default {default}){resume}")


def add_seed(parser) -> None:
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the weights, the data order and augmentation (default 0)")


def add_seeds(parser, default: int) -> None:
    parser.add_argument("--seeds", type=positive, default=default,
                        help=f"how many seeds, 0..N-1 (default {default})")


def add_epochs(parser, default: int | None = None) -> None:
    parser.add_argument("--epochs", type=positive, default=default,
                        help="epochs per net (default: "
                        + ("the recipe's" if default is None else str(default)) + ")")


def add_init(parser) -> None:
    from training.experiments.fc import INITS

    parser.add_argument("--init", choices=tuple(INITS), default="seed",
                        help="kernel initialisation: seed (default; the seed write-up's "
                        "uniform +-1/sqrt(fan_in)) or glorot (the paper's)")


def add_activation(parser, default: str = "tanh") -> None:
    parser.add_argument("--activation", choices=("tanh", "relu"), default=default,
                        help=f"the nets' activation (default {default})")


def add_checkpoint_every(parser, whose: str = "") -> None:
    parser.add_argument("--checkpoint-every", type=positive, metavar="STEPS",
                        help=f"also checkpoint{whose} every STEPS steps (default: at each "
                        "epoch's end only), so that a stopped run loses at most STEPS steps")


def add_in_process(parser) -> None:
    parser.add_argument("--in-process", action="store_true",
                        help="train every net in this process (faster; no per-run peak "
                        "memory or CPU time)")


def add_subset(parser) -> None:
    parser.add_argument("--max-train-examples", type=positive, metavar="N",
                        help="train on the first N training examples only")
    parser.add_argument("--max-test-examples", type=positive, metavar="N",
                        help="test on the first N test examples only")
