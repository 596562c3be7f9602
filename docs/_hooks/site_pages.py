"""The documentation site's generated pages: a card per registered model, the models index and
the command-line reference, written from the registry (`zoo.list_models`, `zoo.describe`), the
pretrained index and the parsers (`highway_zoo.cli.build_parser`), so a new registration gets
its page with no edit to the site.

Pure text in, Markdown out; no Keras is imported. The site's MkDocs hook beside it
(`docs/_hooks/generate.py`) calls these functions at build time; like the hook, this module is
the repository's, not the wheel's (the command line's `highway-zoo list` needs only
`highway_zoo.cli.models.shipped_caveat`, which the cards share). A card is robust to metadata
it does not know: every `paper_*` number is shown with its name, other keys are listed as they
are, and missing ones are left out.
"""

from __future__ import annotations

import collections
import json
import re
import statistics
from typing import Any

from highway_zoo.cli.models import shipped_caveat

# Keys a card shows in its own sections; any other key of `zoo.describe` goes under "More".
_SHOWN = {
    "name", "family", "input_shape", "classes", "description", "paper", "params",
    "paper_params", "paper_metric", "default_transform_bias", "preprocessing", "provenance",
    "reconstructed", "provenance_meaning", "dataset", "recipe", "recipe_settings", "pretrained",
    "pretrained_tag", "pretrained_tags",
    "architecture_args", "overridable", "features", "feature_stages", "params_formula",
    "gated_skip", "not_in_any_paper", "weights_note",
}

# BibTeX of the papers the registry cites, by the author and year its `paper` field starts with.
CITATIONS = {
    r"Srivastava.*2015": """@inproceedings{srivastava2015training,
  title     = {Training Very Deep Networks},
  author    = {Srivastava, Rupesh Kumar and Greff, Klaus and Schmidhuber, J{\\"u}rgen},
  booktitle = {Advances in Neural Information Processing Systems 28 (NIPS 2015)},
  year      = {2015},
  note      = {arXiv:1507.06228}
}""",
    r"Greff.*2017": """@inproceedings{greff2017highway,
  title     = {Highway and Residual Networks learn Unrolled Iterative Estimation},
  author    = {Greff, Klaus and Srivastava, Rupesh Kumar and Schmidhuber, J{\\"u}rgen},
  booktitle = {International Conference on Learning Representations (ICLR 2017)},
  year      = {2017},
  note      = {arXiv:1612.07771}
}""",
    r"Kim.*2016": """@inproceedings{kim2016character,
  title     = {Character-Aware Neural Language Models},
  author    = {Kim, Yoon and Jernite, Yacine and Sontag, David and Rush, Alexander M.},
  booktitle = {Proceedings of the AAAI Conference on Artificial Intelligence (AAAI 2016)},
  year      = {2016},
  note      = {arXiv:1508.06615}
}""",
    r"Bachlechner.*2020": """@inproceedings{bachlechner2021rezero,
  title     = {ReZero is All You Need: Fast Convergence at Large Depth},
  author    = {Bachlechner, Thomas and Majumder, Bodhisattwa Prasad and Mao, Huanru Henry and
               Cottrell, Garrison W. and McAuley, Julian},
  booktitle = {Proceedings of the Thirty-Seventh Conference on Uncertainty in Artificial
               Intelligence (UAI 2021)},
  year      = {2021},
  note      = {arXiv:2003.04887 (2020)}
}""",
    r"Touvron.*2021": """@inproceedings{touvron2021cait,
  title     = {Going Deeper with Image Transformers},
  author    = {Touvron, Hugo and Cord, Matthieu and Sablayrolles, Alexandre and
               Synnaeve, Gabriel and J{\\'e}gou, Herv{\\'e}},
  booktitle = {IEEE/CVF International Conference on Computer Vision (ICCV 2021)},
  year      = {2021},
  note      = {arXiv:2103.17239}
}""",
    r"He.*2016|ResNet": """@inproceedings{he2016deep,
  title     = {Deep Residual Learning for Image Recognition},
  author    = {He, Kaiming and Zhang, Xiangyu and Ren, Shaoqing and Sun, Jian},
  booktitle = {IEEE Conference on Computer Vision and Pattern Recognition (CVPR 2016)},
  year      = {2016}
}""",
}


def shape(value: Any) -> str:
    """A shape as Python writes it: `(28, 28, 1)`, `(None, 21)`, `(50,)`; '-' if unknown."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        items = ["None" if v is None else str(v) for v in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return str(value)


def _number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):  # e.g. Table 1a's perplexity per variant
        return ", ".join(f"{k} {_number(v)}" for k, v in value.items())
    return str(value)


def paper_numbers(meta: dict[str, Any]) -> dict[str, Any]:
    """The paper's reported numbers of a model: every `paper_*` key but the parameter count
    and the metric's description, with a value."""
    return {k: v for k, v in meta.items() if k.startswith("paper_")
            and k not in ("paper_params", "paper_metric") and v not in (None, "")}


def _label(key: str) -> str:
    return key.removeprefix("paper_").replace("_", " ")


def _written(examples: list[dict[str, Any]]) -> list[str]:
    """A shipped language model's texts (`model.generate`), with the call that writes each."""
    if not examples:
        return []
    out = ["What it writes (`model.generate`, read from a sentence's start; `<unk>` is PTB's "
           "rare word, `N` its number):", ""]
    for example in examples:
        arguments = ", ".join(f"{k}={v!r}" for k, v in example.items()
                              if k not in ("prompt", "text"))
        out += [f"- `model.generate({example['prompt']!r}, {arguments})`: "
                f"\"{example['text']}\""]
    return out + [""]


def citation(paper: str) -> str:
    """BibTeX entries for the papers a `paper` field names (empty when none is known)."""
    return "\n\n".join(bib for pattern, bib in CITATIONS.items() if re.search(pattern, paper))


def _table(rows: list[tuple[str, str]]) -> str:
    return "\n".join(["| | |", "| --- | --- |"]
                     + [f"| {k} | {v} |" for k, v in rows if v not in (None, "")])


def _code(text: str) -> str:
    return f"`{text}`"


def stages_table(stages: list[dict[str, Any]]) -> str:
    """`describe(name)["feature_stages"]` as a table, the middle elided past eight rows (an
    FC net's hidden layers, alike but for their names)."""
    def row(stage):
        stride = "-" if stage.get("stride") is None else str(stage["stride"])
        return (f"| `{stage['name']}` | `{stage['layer']}` | {stride} | "
                f"`{shape(stage.get('shape'))}` |")

    rows = [row(stage) for stage in stages]
    if len(rows) > 8:
        rows = [*rows[:3], f"| ... | {len(rows) - 5} more | | |", *rows[-2:]]
    return "\n".join(["| stage | layer | stride | shape |", "| --- | --- | ---: | --- |", *rows])


def _glance(meta: dict[str, Any]) -> list[str]:
    """The card's first section: what the model is, in one table, and its feature stages."""
    features = meta.get("features") or {}
    out = ["## At a glance", "", _table([
        ("family", _code(meta["family"]) if meta.get("family") else ""),
        ("dataset", _code(meta["dataset"]) if meta.get("dataset") else ""),
        ("parameters (computed from the built model)", _number(meta.get("params"))),
        ("parameters by formula", meta.get("params_formula") or ""),
        ("parameters (the paper's)", _number(meta.get("paper_params"))),
        ("input shape", _code(shape(meta.get("input_shape")))),
        ("classes", _number(meta.get("classes"))),
        ("features (`include_top=False`)",
         _code(shape(features.get("shape"))) if features.get("shape") is not None else ""),
        ("pooled features (`pooling='avg'`)", _code(shape(features["pooled_shape"]))
         if features.get("pooled_shape") is not None else ""),
        ("initial transform-gate bias b_T", _number(meta.get("default_transform_bias"))),
        ("preprocessing (inside the model)", meta.get("preprocessing") or ""),
        ("paper recipe", _code(meta["recipe"]) if meta.get("recipe") else ""),
    ]), ""]
    if features.get("description"):
        out += [features["description"], ""]
    stages = meta.get("feature_stages")
    if stages:
        out += ["Feature stages (`include_top=False, feature_stages=\"all\"` or a list of "
                "names): a dict of one output per stage"
                + (", named by keras-hub's pyramid levels (`P` and log2 of the stride)."
                   if stages[0].get("stride") is not None else ", named by layer."),
                "", stages_table(stages), ""]
    return out


def _origin(meta: dict[str, Any]) -> list[str]:
    """Where the architecture comes from: the paper, the provenance, what is reconstructed, the
    skip form of a gated-skip net."""
    out = ["## Where it comes from", "", f"**Paper:** {meta.get('paper') or '-'}", ""]
    if meta.get("provenance"):
        meaning = meta.get("provenance_meaning") or ""
        out += [f"**Provenance:** `{meta['provenance']}`" + (f": {meaning}." if meaning else ""),
                ""]
    if meta.get("reconstructed"):
        out += [f"**What is reconstructed:** {meta['reconstructed']}", ""]
    skip = meta.get("gated_skip")
    if skip:
        arxiv = skip.get("arxiv")
        out += ["### The skip form", "", _table([
            ("form", _code(skip["form"]) + " (`variant=`, `layers.variants.GATED_SKIPS`)"
             if skip.get("form") else ""),
            ("formula", skip.get("formula") or ""),
            ("paper", (skip.get("paper") or "") + (
                f" ([arXiv {arxiv}](https://arxiv.org/abs/{arxiv}))" if arxiv else "")),
            ("initialisation", skip.get("initialisation") or ""),
            ("parameters per layer", skip.get("parameters_per_layer") or ""),
        ]), ""]
    if meta.get("not_in_any_paper"):
        out += [f"**What no paper has:** {meta['not_in_any_paper']}", ""]
    return out


def _paper_section(meta: dict[str, Any]) -> list[str]:
    numbers, metric = paper_numbers(meta), meta.get("paper_metric") or ""
    out = ["## The paper's numbers", ""]
    if not numbers:
        return out + ["The paper reports no number for this exact network"
                      + (f" ({metric})." if metric else "."), ""]
    if metric:
        out += [f"Metric: {metric}.", ""]
    out += ["| reported | value |", "| --- | ---: |"]
    return out + [f"| {_label(k)} | {_number(v)} |" for k, v in numbers.items()] + [""]


def _source(text: str) -> str:
    """A dataset's source without the local path it was read from (where a user keeps the
    data is theirs to choose)."""
    return re.sub(r"\s*\bat /\S*|^/\S*$", "", text).strip()


def _score(pretrained: dict[str, Any]) -> tuple[str, str]:
    """The shipped weights' headline number: a language model's perplexity, else accuracy."""
    if "test_perplexity" in pretrained:
        return ("test perplexity", f"{pretrained['test_perplexity']:.2f} "
                f"({pretrained.get('test_evaluation', '')}; validation "
                f"{pretrained['val_perplexity']:.2f})")
    accuracy, (_, note) = pretrained.get("test_accuracy"), shipped_caveat(pretrained)
    shown = f"{accuracy:.4f}" if isinstance(accuracy, (int, float)) else _number(accuracy)
    return "test accuracy", shown + (f" ({note})" if note else "")


_LIBRARIES = {"keras": "Keras", "tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch",
              "python": "Python", "numpy": "NumPy"}


def _shipped_rows(pretrained: dict[str, Any]) -> list[tuple[str, str]]:
    """The shipped weights' table: their score, data, recipe, how they were trained, the file."""
    recipe, dataset = pretrained.get("recipe") or {}, pretrained.get("dataset") or {}
    source = _source(str(dataset.get("source", "")))
    versions = ", ".join(f"Keras's {v} backend" if k == "backend" else
                         f"{_LIBRARIES.get(k, k)} {v}"
                         for k, v in (pretrained.get("versions") or {}).items())
    seconds = pretrained.get("train_seconds")
    # The device kind tells a user what the training time means; the host's name does not.
    device = next((f" on a {kind}" for kind in ("GPU", "TPU", "CPU")
                   if kind in str(pretrained.get("machine", ""))), "")
    vocabulary = pretrained.get("vocabulary")
    return [
        _score(pretrained),
        ("trained and tested on", f"{dataset.get('name', '')}: "
         f"{_number(dataset.get('num_train'))} / {_number(dataset.get('num_test'))} examples"
         + (f" ({source})" if source else "") if dataset else ""),
        ("recipe", f"`{recipe.get('name', '')}`: {recipe.get('source', '')}" if recipe else ""),
        ("epochs", _number(pretrained.get("epochs"))),
        ("settings it was trained with", _code(json.dumps(pretrained["training_overrides"]))
         if pretrained.get("training_overrides") else ""),
        ("command", _code(pretrained["command"]) if pretrained.get("command") else ""),
        ("trained", ", ".join(part for part in (
            pretrained.get("date", ""), versions,
            f"{seconds:,.0f} s of training{device}" if isinstance(seconds, (int, float))
            else "") if part)),
        ("stored as", f"{pretrained['stored_dtype']}, half the bytes of float32 (Keras casts "
         "each array to float32 on loading); the run's own float32 weights: test perplexity "
         f"{pretrained['run_test_perplexity']:.2f}" if pretrained.get("stored_dtype") else ""),
        ("precision", f"{pretrained['precision']} (the Keras dtype policy it trained in; the "
         "weights load as float32 variables)" if pretrained.get("precision") else ""),
        ("file", _code(pretrained.get("file", "")) + (
            f" ({pretrained['bytes'] / 1e6:,.1f} MB)" if pretrained.get("bytes") else "")),
        ("sha256", _code(pretrained.get("sha256", ""))),
        ("vocabulary", f"{_code(vocabulary['file'])}: {vocabulary['words']:,} words, "
         f"{vocabulary['chars']} characters (sha256 {_code(vocabulary['sha256'])})"
         if vocabulary else ""),
    ]


def _headline(entry: dict[str, Any]) -> str:
    """A shipped record's number for the tags table: test accuracy or perplexity."""
    if "test_perplexity" in entry:
        return f"perplexity {entry['test_perplexity']:.2f}"
    accuracy = entry.get("test_accuracy")
    return f"{accuracy:.4f}" if isinstance(accuracy, (int, float)) else "-"


def tags_table(tags: dict[str, dict[str, Any]], default: str | None) -> str:
    """An architecture's weights tags, one row each: its test number, recipe, data,
    precision, epochs, and which one `weights="default"` loads."""
    from zoo.pretrained import data_name

    rows = ["| tag | test number | recipe | data | precision | epochs | default |",
            "| --- | ---: | --- | --- | --- | ---: | --- |"]
    for tag, entry in tags.items():
        tag_note, _ = shipped_caveat(entry)
        rows.append(
            f"| `{tag}` | {_headline(entry)}{f' ({tag_note})' if tag_note else ''} | "
            f"`{(entry.get('recipe') or {}).get('name', '-')}` | "
            f"`{data_name(entry.get('dataset') or {})}` | {entry.get('precision', '-')} | "
            f"{_number(entry.get('epochs'))} | {'yes' if tag == default else ''} |")
    return "\n".join(rows)


def _shipped(meta: dict[str, Any]) -> list[str]:
    pretrained = meta.get("pretrained")
    out = ["## Shipped weights", ""]
    if not pretrained:
        return out + ["None: this architecture ships without weights (`weights=None` builds it "
                      "with fresh ones; train it with `highway-zoo train " + meta["name"]
                      + "`).", ""]
    default = meta.get("pretrained_tag")
    tags = meta.get("pretrained_tags") or {default or "default": pretrained}
    count = f"{len(tags)} tags, each" if len(tags) > 1 else "1 tag,"
    out += [f"{count} named RECIPE.DATA.PRECISION (the recipe, the data it was trained "
            f"and tested on, the dtype policy it trained in): `zoo.load(\"{meta['name']}\", "
            f"weights=TAG)` loads one, `weights=\"default\"` the default"
            + (f", `{default}`" if default else "") + ".", "", tags_table(tags, default), ""]
    for tag, entry in tags.items():
        out += [f"### `{tag}`" + (" (the default)" if tag == default else ""), "",
                _table(_shipped_rows(entry)), ""] + _written(entry.get("examples") or [])
    return out


def _usage(meta: dict[str, Any]) -> list[str]:
    """How to load it, fine-tune it and train it."""
    name = meta["name"]
    weights = ', weights="default"' if meta.get("pretrained") else ""
    features = meta.get("features") or {}
    out = ["## Load it", "", "```python", "import zoo", "", f'model = zoo.load("{name}"{weights})']
    if meta.get("pretrained_tag"):
        out += [f'model = zoo.load("{name}", weights="{meta["pretrained_tag"]}")  # by its tag']
    out += ["```", ""]
    overridable = meta.get("overridable") or []
    top = [k for k in ("include_top", "pooling", "classes") if k in overridable]
    if top:
        out += ["Fine-tune it: a fresh classifier for your classes on the loaded body, or the "
                "body alone as a feature extractor:", "", "```python", "import zoo", ""]
        if "classes" in top:
            out += [f'model = zoo.load("{name}"{weights}, classes=5)']
        if "include_top" in top:
            pooling = ', pooling="avg"' if features.get("pooled_shape") is not None else ""
            out += [f'features = zoo.load("{name}"{weights}, include_top=False{pooling})']
        if meta.get("feature_stages"):
            out += [f'stages = zoo.load("{name}"{weights}, include_top=False, '
                    'feature_stages="all")']
        out += ["```", ""]
    if overridable:
        out += ["Arguments it takes: " + ", ".join(f"`{k}`" for k in overridable) +
                " (`zoo.describe(name)[\"overridable\"]`).", ""]
    return out + ["From the command line:", "", "```bash", f"highway-zoo describe {name}",
                  f"highway-zoo train {name} --recipe quick --out runs/{name}", "```", ""]


def _details(meta: dict[str, Any]) -> list[str]:
    """The recipe's settings, the builder's arguments, any metadata the card does not know,
    and the BibTeX."""
    out = []
    settings = meta.get("recipe_settings") or {}
    if settings:
        out += [f"## The recipe `{meta.get('recipe', '')}`", "", "| setting | value |",
                "| --- | --- |"]
        out += [f"| {k} | {_code(json.dumps(v)) if not isinstance(v, str) else v} |"
                for k, v in settings.items()] + [""]
    args = meta.get("architecture_args") or {}
    if args:
        out += ["## Builder arguments", "", "```json", json.dumps(args, indent=2), "```", ""]
    more = {k: v for k, v in meta.items() if k not in _SHOWN and not k.startswith("paper_")}
    if more:
        out += ["## More", "", "| key | value |", "| --- | --- |"]
        out += [f"| `{k}` | {_code(json.dumps(v, default=str))} |" for k, v in more.items()]
        out += [""]
    paper = str(meta.get("paper") or "")
    bib = citation(paper)
    return out + ["## Cite", ""] + (["```bibtex", bib, "```", ""] if bib else [paper or "-", ""])


def model_card(meta: dict[str, Any]) -> str:
    """A model's page, from `zoo.describe(name)`: what the model is, where it comes from, the
    paper's and the shipped weights' numbers, how to use it, its recipe. The registry's
    `weights_note` (why a model ships no weights) is not shown: it speaks of how the zoo was
    made, not of the model."""
    out = [f"# {meta['name']}", "", meta.get("description", "") or "", ""]
    for section in (_glance, _origin, _paper_section, _shipped, _usage, _details):
        out += section(meta)
    return "\n".join(out)


def _paper_number(meta: dict[str, Any]) -> str:
    numbers = paper_numbers(meta)
    return ", ".join(f"{_label(k)} {_number(v)}" for k, v in numbers.items()) or "-"


def _columns(meta: dict[str, Any]) -> str:
    """Dataset, parameters, the paper's number and the shipped accuracy: one table row's."""
    pretrained = meta.get("pretrained") or {}
    accuracy = pretrained.get("test_accuracy")
    shipped = f"{accuracy:.4f}" if isinstance(accuracy, (int, float)) else "-"
    if "test_perplexity" in pretrained:  # a language model
        shipped = f"perplexity {pretrained['test_perplexity']:.2f}"
    tag, _ = shipped_caveat(pretrained)
    if tag:
        shipped += f" ({tag})"
    return (f"{meta.get('dataset', '-')} | {_number(meta.get('params'))} | "
            f"{_paper_number(meta)} | {shipped}")


def readme_models_table(metas: list[dict[str, Any]]) -> str:
    """The README's table of models: the site index's columns without links, provenance and
    family (tests/test_site_pages.py checks that the README holds it as generated)."""
    rows = ["| name | dataset | parameters | paper's number | shipped test accuracy |",
            "| --- | --- | ---: | --- | ---: |"]
    return "\n".join(rows + [f"| `{meta['name']}` | {_columns(meta)} |" for meta in metas])


def _measured_columns(row: dict[str, str] | None, meta: dict[str, Any]) -> list[str]:
    """A models-table row's cells (`bench.models_table`'s CSV): dataset, parameters, the paper's
    number, the shipped accuracy, then GFLOPs, batch and speeds; '-' where the CSV has none."""
    if row is None:
        return ["-"] * 8
    paper = (f"{row['paper_metric'].replace('_', ' ')} {row['paper_value']}"
             if row["paper_metric"] else "-")
    shipped = "-"
    perplexity = (meta.get("pretrained") or {}).get("test_perplexity")
    if perplexity is not None:  # a language model's score is no accuracy
        shipped = f"perplexity {perplexity:.2f}"
    if row["top1"]:  # the CSV says where it was measured, the index how it was trained
        tag, _ = shipped_caveat({"dataset": {"source": row["top1_eval"]},
                                 "recipe": (meta.get("pretrained") or {}).get("recipe")})
        shipped = f"{float(row['top1']):.2f}" + (f" ({tag})" if tag else "")
    return [row["dataset"], f"{int(row['param_count']):,}", paper, shipped,
            f"{float(row['gflops_per_sample']):.3g}", row["batch_size"],
            f"{float(row['train_samples_per_sec']):,.1f}",
            f"{float(row['infer_samples_per_sec']):,.1f}"]


def _measured_note(run: dict[str, Any]) -> str:
    """Where and when the table's speeds were measured, and how busy the machine was: the load
    averages before and after the run and, in the middle, the median over the measurements."""
    load = run.get("load_average") or {}
    before, after = (load.get("before") or [None])[0], (load.get("after") or [None])[0]
    during = [r["load_average"][0] for runs in (run.get("runs") or {}).values() for r in runs
              if r.get("load_average")]
    cores = load.get("cores")
    settings = run.get("settings") or {}
    # A table partly kept from an earlier run (`--keep`): each run carries its own date.
    dates = collections.Counter(runs[0].get("date", run.get("date", "?"))
                                for runs in (run.get("runs") or {}).values() if runs)
    when = run.get("date", "?") if len(dates) <= 1 else " and ".join(
        f"{date} ({count} model{'s' if count > 1 else ''})" for date, count in sorted(
            dates.items()))
    text = (f"Measured {when} on {run.get('machine', '?')}, Keras on "
            f"{run.get('backend', '?')}: random inputs, `train_on_batch` (Nesterov SGD) and "
            f"`predict_on_batch` at the batch size shown, the median of at most "
            f"{settings.get('steps', '?')} timed calls (at most "
            f"{settings.get('max_seconds', '?'):g} s of them) after one untimed call.")
    if before is None or after is None or not during or not cores:
        return text
    middle = statistics.median(during)
    last = "the run"
    if run.get("kept"):  # `--keep`: the load before and after is the last run's
        last = (f"the last run ({len(run.get('measured') or [])} models; the other "
                f"{len(run['kept'])} kept from an earlier one)")
    text += (f" Load average (1 minute) {before:.1f} before {last}, {middle:.1f} at the start "
             f"of a model's measurement (median over all), {after:.1f} after it, on {cores} "
             f"cores; a measurement keeps about {cores} busy itself")
    # Well above what the measurement itself runs: other work shared the cores.
    return text + (": the cores were shared with other work, so the speeds are noisy; compare "
                   "them only roughly." if middle > 1.5 * cores else ".")


def models_index(metas: list[dict[str, Any]], table: list[dict[str, str]] | None = None,
                 run: dict[str, Any] | None = None) -> str:
    """The table of every model, filterable by an fnmatch pattern as `zoo.list_models` is.

    With `table`, the rows of `bench.models_table`'s CSV (and `run`, its JSON), the numbers
    come from the CSV (parameters, FLOPs, the paper's number, the shipped accuracy, speeds);
    without it, from the registry (`metas`, `zoo.describe`) and the pretrained index."""
    measured = {row["model"]: row for row in table} if table is not None else None
    out = [
        "# Models", "",
        "Every registered architecture, generated from the registry (`zoo.list_models()`, "
        "`zoo.describe(name)`) and the shipped weights' index"
        + (", its numbers from the models table, `benchmarks/results/models.csv` "
           "([download](../results/data/bench/models.csv)), which `python -m "
           "benchmarks.models_table` writes (timm's results CSV; its columns: "
           "[the benchmarks page](../results/benchmarks.md#the-models-table-python-m-"
           "benchmarksmodels_table))" if measured is not None else "")
        + ". Filter the table with a pattern "
        "as `zoo.list_models(pattern)` takes it (`*cifar*`, `highway_fc*_mnist`); "
        "`pretrained` keeps those with shipped weights.", "",
        '<div class="model-filter" markdown>',
        '<input id="model-filter" type="search" placeholder="pattern, e.g. *cifar*" '
        'aria-label="filter the models">',
        '<label><input id="model-filter-pretrained" type="checkbox"> pretrained</label>',
        '<span id="model-filter-count"></span>',
        "</div>", "",
    ]
    # model_filter.js reads the name from the first cell and the shipped accuracy from the
    # fifth: the measured columns come after them.
    if measured is None:
        out += ["| name | dataset | parameters | paper's number | shipped test accuracy | "
                "provenance | family |",
                "| --- | --- | ---: | --- | ---: | --- | --- |"]
    else:
        out += ["| name | dataset | parameters | paper's number | shipped test accuracy % | "
                "GFLOPs per sample | batch | training samples/s | inference samples/s | "
                "provenance | family |",
                "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    flagged = set()  # the caveats of shipped accuracies not comparable with the paper's
    for meta in metas:
        cells = (_columns(meta) if measured is None
                 else " | ".join(_measured_columns(measured.get(meta["name"]), meta)))
        tags = shipped_caveat(meta.get("pretrained") or {})[0]
        flagged |= set(tags.split(", ")) if tags else set()
        out.append(f"| [`{meta['name']}`]({meta['name']}.md) | {cells} | "
                   f"{meta.get('provenance', '-')} | `{meta.get('family', '-')}` |")
    out += [""]
    if measured is not None:
        samples = sorted({row["sample"] for row in table}, key=lambda s: s != "image")
        kinds = " or ".join(("an " if s[0] in "aeiou" else "a ") + s for s in samples)
        out += [f"A sample is {kinds} (a language model's: its recipe's BPTT length); "
                "GFLOPs are one sample's "
                "forward pass. The paper's accuracy and top-5 error are in %.", ""]
        if run:
            out += [_measured_note(run), ""]
    if "sample" in flagged:
        out += ["\"(sample)\": measured on the 1,000 test digits of the 5,000-digit MNIST "
                "sample that installs offline here, not on the full MNIST the paper's number "
                "is for.", ""]
    if "JPEG copy" in flagged:
        out += ["\"(JPEG copy)\": measured on CIFAR-10 (JPEG copy), the full 10,000 test "
                "images re-encoded as JPEG of quality about 75 (30.5 dB PSNR against the "
                "original pixels): close to the paper's test set, not equal to it.", ""]
    if any(tag.startswith("recipe ") for tag in flagged):
        out += ["\"(recipe NAME)\": trained with a recipe other than the paper's (a shorter "
                "schedule or another optimiser; the model's card says which), so the number is "
                "that recipe's, not the paper's recipe's.", ""]
    out += ["Provenance: **CODE** read from the authors' released files; **DERIVED** follows "
            "from the authors' code or the paper by arithmetic; **RECON** reconstructed to fit "
            "the published layer and parameter counts; **COMBINED** a later paper's skip form "
            "(ReZero, LayerScale) in one of these nets, a combination no paper trains "
            "([where the architectures come from](../about/architectures.md)).", ""]
    return "\n".join(out)


# What every command shares; the options themselves come from the parsers below it.
_CLI_CONVENTIONS = [
    "- `--out DIR` is where a command writes, never overwritten: an interrupted `train`, "
    "`tune`, `fig1`, `sweep`, `bias-study` or `variants` resumes there when run again with the "
    "same options.",
    "- `--weights` is any weights source: the shipped `default`, a run or preset directory, a "
    "`.weights.h5` file. b_T is `--transform-bias`; `--data-dir` holds the upstream dataset "
    "files; `--corpus DIR` a text in Mikolov's format (`prepare-text` writes one).",
    "- Lists are read one way: `--depths 10,20,50` or `--depths 10 20 50`; a list starting "
    "with a negative number as `--transform-bias -1 -2` or `--transform-bias=-1,-2`.",
    "- A mistake you can fix (an unknown name, an override a family lacks, a weights file "
    "whose sha256 does not match, a malformed dataset file, an existing run or version) is one "
    "line on stderr and exit status 2; a run that fails on its own (a non-finite loss) exits "
    "with 1, Ctrl-C or SIGTERM with 130 or 143.",
]


def cli_reference() -> str:
    """The command-line reference: the commands with their one-line help, the conventions
    they share, then every command's `--help`, from the parsers themselves."""
    from highway_zoo.cli import COMMANDS, LIGHT, build_parser, command_parser

    parser = build_parser()
    out = ["# The command line", "",
           "`highway-zoo` (in `.venv/bin/`; `python -m highway_zoo` is the same command). "
           "This page is generated from the parsers (`highway_zoo.cli.build_parser`): each "
           "section is what `highway-zoo COMMAND --help` prints.", "",
           "| command | what it does |", "| --- | --- |"]
    out += [f"| [`{name}`](#{name}) | {summary} |" for name, (_, summary) in COMMANDS.items()]
    light = ", ".join(f"`{name}`" for name in LIGHT)
    out += ["", "## Conventions", "", *_CLI_CONVENTIONS,
            f"- `--help`, `--version`, {light} import neither Keras nor TensorFlow and answer "
            "at once; the other commands import Keras and its backend first, with "
            "TensorFlow's C++ start-up lines kept off the terminal.", "",
            "## `highway-zoo`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for command in COMMANDS:
        out += [f"## `{command}`", "", "```text",
                command_parser(command).format_help().rstrip(), "```", ""]
    return "\n".join(out)
