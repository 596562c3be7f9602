"""`highway-zoo list` and `highway-zoo describe`: the registry, without Keras or TensorFlow."""

from __future__ import annotations

import json
from typing import Any


def _list_arguments(p) -> None:
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. '*cifar*' "
                   "(default: all)")
    p.add_argument("--pretrained", action="store_true",
                   help="only architectures with shipped weights (weights='default')")


# (what the data's source says, the tag beside the number, the note): test sets that are
# not the paper's, each said wherever the shipped accuracy is shown.
_CAVEATS = (
    ("sample", "sample", "measured on the 1,000-digit test part of the 5,000-digit MNIST sample "
     "they were trained on: not comparable with the paper's full-MNIST figure"),
    ("lossy", "JPEG copy", "measured on a JPEG copy of the paper's test images (re-encoded, "
     "lossy): close to the paper's data, not equal to it"),
)


def shipped_caveat(pretrained: dict[str, Any]) -> tuple[str, str]:
    """(tag, note) on why the shipped weights' accuracy is not comparable with the paper's:
    measured on a test set that is not the paper's (the MNIST sample, a JPEG copy), or trained
    with a recipe that is not the paper's (a shorter schedule, another optimiser); ("", "")
    otherwise. Several are joined by ", " and "; ". The command line, the models table and the
    site's cards say the same."""
    source = str(pretrained.get("dataset", {}).get("source", "")).lower()
    found = [(tag, note) for word, tag, note in _CAVEATS if word in source][:1]
    recipe = pretrained.get("recipe") or {}
    if recipe.get("paper_recipe"):
        found.append((f"recipe {recipe['name']}",
                      f"trained with {recipe['name']}, not the paper's recipe "
                      f"({recipe['paper_recipe']}): {recipe.get('source', '')}; the number is "
                      f"that recipe's"))
    return (", ".join(tag for tag, _ in found), "; ".join(note for _, note in found))


def list_models(args) -> None:
    import zoo

    names = zoo.list_models(args.pattern, pretrained=args.pretrained)
    if not names:
        raise ValueError(f"No architecture matches {args.pattern!r}; try `highway-zoo list`.")
    # Both accuracies in percent: the paper's, and that of the shipped weights (if any); a
    # language model's test perplexity ("ppl").
    print(f"{'name':30s} {'params':>10s} {'paper acc %':>11s} {'shipped acc %':>13s}  "
          f"{'tag':7s} dataset")
    for name in names:
        m = zoo.describe(name)
        paper = f"{m['paper_accuracy']:.2f}" if m.get("paper_accuracy") else (
            f"ppl {m['paper_perplexity']:.1f}" if m.get("paper_perplexity") else "-")
        shipped = m.get("pretrained") or {}
        ours = (f"{100 * shipped['test_accuracy']:.2f}" if "test_accuracy" in shipped else
                f"ppl {shipped['test_perplexity']:.1f}" if "test_perplexity" in shipped else "-")
        tag, _ = shipped_caveat(shipped)  # a test set that is not the paper's
        where = "MNIST sample, not the full MNIST" if tag == "sample" else tag
        note = f"  (shipped acc: {where})" if tag else ""
        print(f"{name:30s} {m['params']:>10,d} {paper:>11s} {ours:>13s}  "
              f"{m.get('provenance', '-'):7s} {m.get('dataset', '-')}{note}")


def _describe_arguments(p) -> None:
    p.add_argument("name", help="architecture name (highway-zoo list)")
    p.add_argument("--json", action="store_true", help="print JSON")


def describe(args) -> None:
    import zoo

    meta = zoo.describe(args.name)
    if args.json:
        print(json.dumps(meta, indent=2, default=str))
        return
    for key, value in meta.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key:22s} {value}")


COMMANDS = {"list": (_list_arguments, list_models), "describe": (_describe_arguments, describe)}
