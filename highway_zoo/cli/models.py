"""`highway-zoo list` and `highway-zoo describe`: the registry, without Keras or TensorFlow."""

from __future__ import annotations

import json
from typing import Any


def _list_arguments(p) -> None:
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. '*cifar*' "
                   "(default: all)")
    p.add_argument("--pretrained", action="store_true",
                   help="only architectures with shipped weights (weights='default'; "
                        "`describe NAME` lists their tags)")


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


def _headline(pretrained: dict[str, Any]) -> str:
    """A shipped record's number as `list` shows it: accuracy in percent, or 'ppl N'."""
    if "test_accuracy" in pretrained:
        return f"{100 * pretrained['test_accuracy']:.2f}"
    if "test_perplexity" in pretrained:
        return f"ppl {pretrained['test_perplexity']:.1f}"
    return "-"


def list_models(args) -> None:
    import zoo

    names = zoo.list_models(args.pattern, pretrained=args.pretrained)
    if not names:
        raise ValueError(f"No architecture matches {args.pattern!r}; try `highway-zoo list`.")
    # Both accuracies in percent: the paper's, and that of the default shipped weights (if
    # any); a language model's test perplexity ("ppl"); then how many weights tags it ships.
    print(f"{'name':30s} {'params':>10s} {'paper acc %':>11s} {'shipped acc %':>13s} "
          f"{'tags':>4s}  {'provenance':10s} dataset")
    for name in names:
        m = zoo.describe(name)
        paper = f"{m['paper_accuracy']:.2f}" if m.get("paper_accuracy") else (
            f"ppl {m['paper_perplexity']:.1f}" if m.get("paper_perplexity") else "-")
        shipped = m.get("pretrained") or {}
        tags = str(len(m.get("pretrained_tags") or {}) or "-")
        tag, _ = shipped_caveat(shipped)  # a test set that is not the paper's
        where = "MNIST sample, not the full MNIST" if tag == "sample" else tag
        note = f"  (shipped acc: {where})" if tag else ""
        print(f"{name:30s} {m['params']:>10,d} {paper:>11s} {_headline(shipped):>13s} "
              f"{tags:>4s}  {m.get('provenance', '-'):10s} {m.get('dataset', '-')}{note}")


def _describe_arguments(p) -> None:
    p.add_argument("name", help="architecture name (highway-zoo list)")
    p.add_argument("--json", action="store_true", help="print JSON")


def describe(args) -> None:
    import zoo

    meta = zoo.describe(args.name)
    if args.json:
        print(json.dumps(meta, indent=2, default=str))
        return
    tags = meta.pop("pretrained_tags", None) or {}
    default = meta.pop("pretrained_tag", None)
    for key, value in meta.items():
        if key == "pretrained" and value:  # every tag is listed below
            value = (f"{default}: {_number(value)} (the default of {len(tags)} "
                     f"tag{'s' if len(tags) > 1 else ''}, listed below)")
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key:22s} {value}")
    if tags:
        print(tag_table(tags, default))


def _number(entry: dict[str, Any]) -> str:
    """A shipped record's headline number in words: 'test accuracy 78.83 %'."""
    if "test_accuracy" in entry:
        return f"test accuracy {100 * entry['test_accuracy']:.2f} %"
    if "test_perplexity" in entry:
        return f"test perplexity {entry['test_perplexity']:.2f}"
    return "-"


def tag_table(tags: dict[str, dict[str, Any]], default: str | None) -> str:
    """`describe`'s table of an architecture's weights tags: each one's number, recipe, data,
    precision and epochs, the default marked with '*'."""
    from zoo.pretrained import data_name

    rows = [("tag", "test number", "recipe", "data", "precision", "epochs")]
    for tag, entry in tags.items():
        rows.append((tag, _number(entry), (entry.get("recipe") or {}).get("name", "-"),
                     data_name(entry.get("dataset") or {}), entry.get("precision", "-"),
                     str(entry.get("epochs", "-"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["weights tags (zoo.load(NAME, weights=TAG); * marks the default, "
             "weights=\"default\")"]
    for row, tag in zip(rows, [None, *tags]):
        mark = "*" if tag is not None and tag == default else " "
        lines.append(f"  {mark} " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths))
                     .rstrip())
    return "\n".join(lines)


COMMANDS = {"list": (_list_arguments, list_models), "describe": (_describe_arguments, describe)}
