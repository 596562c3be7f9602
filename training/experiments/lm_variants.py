"""Greff et al. 2017's Table 1a where the paper ran it: the highway variants in a character-aware
language model (Kim et al. 2016), each net trained with Kim's recipe on one corpus.

The paper swapped the two highway layers of LSTM-Char-Large for each variant and reported test
perplexity on the Penn Treebank: Full 79.09, Coupled 79.13, C-only 79.15, T-only 82.94,
Residual 91.32 (four layers, "to match computation"), Plain 92.60. Here any zoo language model
(`lstm_char_small_ptb` on a CPU) takes the variants; Residual gets twice the model's highway
layers, as the paper gave it four for two. Everything else (recipe, seeds, corpus, budget) is
the same for every variant.

Writes, under `out`::

    study.json                         the settings (a rerun resumes only these)
    <variant>_seed<s>/                 a run directory per net (training.language_model) with
                                       its result.json once finished
    results.json                       settings, every run, mean and std over seeds
    table.md                           per variant: highway layers, parameters, seeds,
                                       validation and test perplexity (mean ± std over two
                                       seeds or more), the paper's number
    perplexity.png                     validation perplexity per epoch and test perplexity, by
                                       variant
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import zoo
from layers.variants import ALL_VARIANTS, GATED_SKIPS
from layers.variants import parameter_count as layer_parameters
from training.experiments.study import (
    STD_NOTE,
    Study,
    code_version,
    format_table,
    load_mergeable,
    mean_std,
    run_study,
    summarise,
)
from training.recipes import get_recipe, recipe_name
from zoo.files import save_figure, write_text

PAPER_TABLE_1A = {"full": 79.09, "coupled": 79.13, "c_only": 79.15, "t_only": 82.94,
                  "residual": 91.32, "plain": 92.60}
_COLORS = {"coupled": "C0", "full": "C1", "c_only": "C2", "t_only": "C3", "residual": "C4",
           "plain": "C5", "rezero": "C6", "layerscale": "C7", "gru_gate": "C8",
           "laurel_rw": "C9", "laurel_lr": "k"}


def highway_layers(model: str, variant: str) -> int:
    """The model's highway layers; twice as many for Residual (the paper's 4 for 2); one for
    Plain (the paper's Plain row is "a single plain layer", Greff et al. §5.2: Kim et al.'s
    net with one MLP layer, 92.6 for Large); for a gated skip, the count whose parameters are
    closest to the model's coupled layers."""
    args = zoo.describe(model)["architecture_args"]
    layers = args["highway_layers"]
    if variant == "residual":
        return 2 * layers
    if variant == "plain":
        return 1
    if variant in GATED_SKIPS:
        width = sum(args["filters"])
        ratio = layer_parameters("coupled", width) / layer_parameters(variant, width)
        return max(1, round(layers * ratio))
    return layers


SUMMARISED = ("test_perplexity", "val_perplexity", "final_train_perplexity",
              "tokens_per_second")


def variants_summary(runs: Sequence[dict[str, Any]],
                     variants: Sequence[str]) -> list[dict[str, Any]]:
    """Per variant (in the order of `variants`): its layers, parameters, and the mean and std
    over seeds of its perplexities."""
    groups = {g["variant"]: g for g in summarise(runs, ("variant",), SUMMARISED,
                                                 ("val_perplexity_curve",))}
    return [{
        "variant": variant, "highway_layers": g["runs"][0]["overrides"]["highway_layers"],
        "params": g["runs"][0]["params"], "seeds": [r["seed"] for r in g["runs"]],
        **{key: g[key] for key in SUMMARISED},
        # A diverged run stops early: NaN at its missing epochs.
        "val_perplexity_curve_mean": np.nanmean(g["val_perplexity_curve"], axis=0).tolist(),
        "paper_test_perplexity": PAPER_TABLE_1A.get(variant),
    } for variant in variants if (g := groups.get(variant))]


def variants_table(rows: Sequence[dict[str, Any]]) -> str:
    def cell(stats):
        # One seed has no spread to show: "± 0.0" would claim one.
        return f"{stats['mean']:.2f}" if stats["n"] == 1 else mean_std(stats, ".1f")

    return format_table(
        ["variant", "highway layers", "parameters", "seeds", "validation perplexity",
         "test perplexity", "paper (Table 1a, Large on PTB)"],
        [[r["variant"], r["highway_layers"], f"{r['params']:,}", len(r["seeds"]),
          cell(r["val_perplexity"]), cell(r["test_perplexity"]),
          "-" if (paper := r["paper_test_perplexity"]) is None else f"{paper:.2f}"]
         for r in sorted(rows, key=lambda r: r["test_perplexity"]["mean"])],
        ["---", "---:", "---:", "---:", "---:", "---:", "---:"]) + "\n"


def plot(rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]], path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, final) = plt.subplots(1, 2, figsize=(11, 4.6))
    for run in runs:
        epochs = np.arange(1, len(run["val_perplexity_curve"]) + 1)
        curves.plot(epochs, run["val_perplexity_curve"], color=_COLORS[run["variant"]],
                    alpha=0.8, lw=1.2, label=run["variant"] if run["seed"] == runs[0]["seed"]
                    else None)
    curves.set(xlabel="epoch", ylabel="validation perplexity", yscale="log",
               title="validation perplexity per epoch (a line per seed)")
    curves.legend(fontsize=8)
    order = sorted(rows, key=lambda r: r["test_perplexity"]["mean"])
    for i, r in enumerate(order):
        values = r["test_perplexity"]["values"]
        final.scatter([i] * len(values), values, color=_COLORS[r["variant"]], zorder=3)
        final.errorbar(i, r["test_perplexity"]["mean"], yerr=r["test_perplexity"]["std"],
                       fmt="_", color="k", capsize=6, zorder=2)
    final.set_xticks(range(len(order)), [r["variant"] for r in order], rotation=35,
                     ha="right")
    final.set(ylabel="test perplexity", title="test perplexity (dots: seeds; bar: mean ± std)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


class LMVariantsStudy(Study):
    """The language-model variants study as a `training.experiments.study.Study`: see
    `lm_variants_study`."""

    name, figure_file = "lm-variants", "perplexity.png"

    def __init__(self, corpus, *, model, variants, seeds, epochs, max_train_tokens, recipe,
                 checkpoint_every=None):
        from training.data.corpora import corpus_identity
        from training.data.text import load_corpus
        from training.run_core import check_checkpoint_every

        self.info = info = zoo.describe(model)
        if info["family"] != "char_lm":
            raise ValueError(f"{model} is not a language model; choose from "
                             f"{', '.join(zoo.list_models('lstm_char_*'))}.")
        unknown = [v for v in variants if v not in ALL_VARIANTS]
        if not variants or unknown or len(set(variants)) != len(variants):
            raise ValueError(f"variants must be distinct names from {', '.join(ALL_VARIANTS)}. "
                             f"Received: {list(variants)!r}")
        self.seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or any(
                not isinstance(s, int) or s < 0 for s in self.seeds):
            raise ValueError("seeds must be a positive count or a list of distinct seeds. "
                             f"Received: {seeds!r}")
        self.recipe = get_recipe(recipe_name(info["recipe"], recipe), epochs=epochs)
        # The corpus checked (and its size known) before any folder.
        self.text = text = load_corpus(corpus)
        self.corpus_record = {
            "directory": str(Path(corpus).resolve()), "name": text.name,
            "train_tokens": int(text.train.words.size),
            "valid_tokens": int(text.valid.words.size), "test_tokens": int(text.test.words.size),
            "words": len(text.words), "chars": len(text.chars), **corpus_identity(corpus)}
        if max_train_tokens is not None and (not isinstance(max_train_tokens, int)
                                             or max_train_tokens < 1):
            raise ValueError(f"max_train_tokens must be a positive integer. "
                             f"Received: {max_train_tokens!r}")
        self.corpus, self.model, self.variants = corpus, model, variants
        self.max_train_tokens = max_train_tokens
        self.checkpoint_every = check_checkpoint_every(checkpoint_every)
        self.settings_ = {
            "model": model, "variants": list(variants), "seeds": self.seeds,
            "recipe": self.recipe, "max_train_tokens": max_train_tokens, "code": code_version(),
            "residual_rule": "Residual with twice the model's highway layers (Greff et "
                             "al.: four for Large's two)"}
        if "plain" in variants:
            self.settings_["plain_rule"] = ("Plain with one layer (Greff et al. §5.2: \"a single "
                                            "plain layer\", Kim et al.'s one MLP layer)")
        if set(variants) & set(GATED_SKIPS):
            self.settings_["gated_skip_rule"] = (
                "each gated skip with the highway layers whose parameters are closest to the "
                "model's coupled layers")

    def settings(self) -> dict[str, Any]:
        return {"corpus": self.corpus_record, **self.settings_}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        from zoo.char_lm import parameter_count

        record = self.corpus_record
        # After the claim's line: what the study trains on.
        print(f"Corpus: {record['directory']} ({record['train_tokens']:,} training "
              f"tokens, {record['words']:,} words)", flush=True)
        args = self.info["architecture_args"]
        jobs = []
        for seed in self.seeds:
            for variant in self.variants:
                overrides = {"variant": variant,
                             "highway_layers": highway_layers(self.model, variant)}
                jobs.append({
                    "task": "language_model", "variant": variant, "seed": seed,
                    "architecture": self.model, "overrides": overrides,
                    "corpus": str(self.corpus), "epochs": self.recipe["epochs"],
                    "recipe": self.recipe["name"], "max_train_tokens": self.max_train_tokens,
                    "checkpoint_every": self.checkpoint_every,
                    "params": parameter_count(**{**args, **overrides,
                                                 "classes": len(self.text.words),
                                                 "char_vocab_size": len(self.text.chars)}),
                    "run_dir": str(out / f"{variant}_seed{seed}"),
                })
        return jobs

    def label(self, job: dict[str, Any]) -> str:
        return f"{job['variant']:8s} seed {job['seed']}"

    @staticmethod
    def run_one(job: dict[str, Any], data: Any = None) -> dict[str, Any]:
        return train_one(job)

    @staticmethod
    def progress(result: dict[str, Any]) -> str:
        return progress(result)

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return variants_summary(runs, self.variants)

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return variants_table(summary)

    def results(self, runs, summary) -> dict[str, Any]:
        return {"corpus": self.corpus_record, "settings": self.settings_, "std": STD_NOTE,
                "paper_table_1a": PAPER_TABLE_1A, "summary": summary, "runs": runs}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        n, recipe = len(self.seeds), self.recipe
        trained = min(self.corpus_record["train_tokens"], self.max_train_tokens or math.inf)
        plot(results["summary"], results["runs"], out / self.figure_file,
             f"Highway variants in {self.model} on {self.text.name} ({trained:,} "
             f"training tokens, {recipe['name']}, {recipe['epochs']} epochs; {n} seed"
             f"{'s' if n > 1 else ''})")


def lm_variants_study(
    corpus: str | os.PathLike,
    *,
    model: str = "lstm_char_small_ptb",
    variants: Sequence[str] = ALL_VARIANTS,
    seeds: int | Sequence[int] = 2,
    epochs: int | None = None,
    max_train_tokens: int | None = None,
    recipe: str | None = None,
    checkpoint_every: int | None = None,
    out: str | os.PathLike | None = None,
    isolate: bool = True,
) -> dict[str, Any]:
    """Trains `model` with each highway variant and seed on `corpus`; writes runs, JSON,
    table and figure. Run again with the same settings, it resumes (finished runs kept, an
    interrupted one from its last epoch).

    Args:
        corpus: a Mikolov-format directory (`highway-zoo prepare-text`).
        model: a zoo language model.
        variants: names from `layers.variants.ALL_VARIANTS`.
        seeds: how many seeds (0, 1, ...), or the seeds themselves.
        epochs: default: the recipe's (Kim's 25).
        max_train_tokens: train on the first N tokens of the training split only.
        recipe: "paper" (default), "quick" or a recipe name.
        checkpoint_every: also checkpoint each run every N steps (default: at each epoch's
            end only). Not a setting: a resumed run repeats the uninterrupted one bit for
            bit however often it was checkpointed.
        out: output directory, new or empty (default `runs/lm-variants-<time>`), or an
            earlier run of the study with the same settings, which resumes.
        isolate: train each net in its own process.
    """
    study = LMVariantsStudy(corpus, model=model, variants=variants, seeds=seeds, epochs=epochs,
                            max_train_tokens=max_train_tokens, recipe=recipe,
                            checkpoint_every=checkpoint_every)
    return run_study(study, out, isolate)


def merge_studies(studies: Sequence[str | os.PathLike], out: str | os.PathLike
                  ) -> dict[str, Any]:
    """One table and figure from language-model studies of different variants on the same
    corpus, model and recipe (e.g. Greff's six and the gated skips): their results.json read,
    checked to agree (`common.load_mergeable`), and written together to `out` (new or
    empty)."""
    def differences(first, other):
        def corpus(result):  # where it lay is no difference
            return {k: v for k, v in result["corpus"].items() if k != "directory"}

        return (["corpus"] if corpus(other) != corpus(first) else []) + [
            k for k in ("model", "max_train_tokens")
            if other["settings"][k] != first["settings"][k]]

    loaded, variants, out = load_mergeable(studies, out, differences,
                                           "corpus, model and recipe")
    first = loaded[0]
    variants = sorted(variants, key=ALL_VARIANTS.index)
    runs = [run for result in loaded for run in result["runs"]]
    rows = variants_summary(runs, variants)
    settings = {**first["settings"], "variants": variants,
                "seeds": sorted({s for r in loaded for s in r["settings"]["seeds"]}),
                **{k: v for r in loaded for k, v in r["settings"].items()
                   if k.endswith("_rule")},
                "merged_from": [str(Path(s).resolve()) for s in studies]}
    results = {**{k: v for k, v in first.items() if k not in ("summary", "runs")},
               "settings": settings, "summary": rows, "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    table = variants_table(rows)
    write_text(out / "table.md", table)
    recipe = first["settings"]["recipe"]
    plot(rows, runs, out / "perplexity.png",
         f"Highway variants and gated skips in {settings['model']} on "
         f"{first['corpus']['name']} ({recipe['name']}, {recipe['epochs']} epochs; "
         f"{len(settings['seeds'])} seeds)")
    print(table)
    print(f"Wrote {out}/results.json, table.md and perplexity.png")
    return results


def train_one(job: dict[str, Any]) -> dict[str, Any]:
    """One net of the study in this process: its metrics and per-epoch curves."""
    from training.language_model import train_lm
    from training.run_dir import FINISHED, NON_FINITE, RunDir

    run_dir = RunDir(job["run_dir"])
    if run_dir.status == FINISHED:  # stopped after the run, before its result.json
        metrics = run_dir.read_metrics()
    elif run_dir.status == NON_FINITE:  # likewise, after the run diverged
        metrics = _diverged(run_dir.read_run()["failure"]["message"])
    else:
        try:  # a line an epoch (minutes to hours): the study's output shows how far it is
            metrics = train_lm(job["architecture"], job["corpus"], out=run_dir.path,
                               epochs=job["epochs"], seed=job["seed"], recipe=job["recipe"],
                               max_train_tokens=job["max_train_tokens"], verbose=2,
                               checkpoint_every=job.get("checkpoint_every"),
                               **job["overrides"])
        except FloatingPointError as err:  # NonFiniteLossError: the study goes on
            metrics = _diverged(str(err))
    history = run_dir.read_history()
    return {
        **{k: v for k, v in metrics.items() if k != "run_dir"},
        "val_perplexity_curve": [e["val_perplexity"] for e in history],
        "train_perplexity_curve": [e["perplexity"] for e in history],
        "learning_rate_curve": [e["learning_rate"] for e in history],
        "seconds_per_epoch": float(np.median([e["seconds"] for e in history]))
        if history else None,
    }


def _diverged(message: str) -> dict[str, Any]:
    return {"failed": message, "tokens_per_second": math.nan,
            **dict.fromkeys(("test_perplexity", "val_perplexity", "final_train_perplexity"),
                            math.inf)}


def progress(result: dict[str, Any]) -> str:
    parts = [f"test perplexity {result['test_perplexity']:.1f}",
             f"validation {result['val_perplexity']:.1f}",
             f"{result['tokens_per_second']:,.0f} tokens/s"]
    if result.get("peak_rss_mb") is not None:
        parts.append(f"peak RSS {result['peak_rss_mb']:.0f} MB")
    return ", ".join(parts) if math.isfinite(result["test_perplexity"]) else "diverged"
