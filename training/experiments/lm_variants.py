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
    table.md                           per variant: highway layers, parameters, validation and
                                       test perplexity (mean ± std), the paper's number
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
from training.experiments.common import (
    _stats,
    claim_study_dir,
    code_version,
    load_mergeable,
    run_jobs,
)
from training.recipes import get_recipe, recipe_name
from training.run_dir import default_dir
from zoo.files import save_figure, write_text

PAPER_TABLE_1A = {"full": 79.09, "coupled": 79.13, "c_only": 79.15, "t_only": 82.94,
                  "residual": 91.32, "plain": 92.60}
_COLORS = {"coupled": "C0", "full": "C1", "c_only": "C2", "t_only": "C3", "residual": "C4",
           "plain": "C5", "rezero": "C6", "layerscale": "C7", "gru_gate": "C8",
           "laurel_rw": "C9", "laurel_lr": "k"}


def highway_layers(model: str, variant: str) -> int:
    """The model's highway layers; twice as many for Residual (the paper's 4 for 2); for a
    gated skip, the count whose parameters are closest to the model's coupled layers."""
    args = zoo.describe(model)["architecture_args"]
    layers = args["highway_layers"]
    if variant == "residual":
        return 2 * layers
    if variant in GATED_SKIPS:
        width = sum(args["filters"])
        ratio = layer_parameters("coupled", width) / layer_parameters(variant, width)
        return max(1, round(layers * ratio))
    return layers


def summarise(runs: Sequence[dict[str, Any]], variants: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        if not mine:
            continue
        # A diverged run stops early: NaN at its missing epochs.
        length = max(len(r["val_perplexity_curve"]) for r in mine)
        curves = np.array([r["val_perplexity_curve"] + [math.nan] * (length - len(
            r["val_perplexity_curve"])) for r in mine], dtype=float)
        rows.append({
            "variant": variant, "highway_layers": mine[0]["overrides"]["highway_layers"],
            "params": mine[0]["params"], "seeds": [r["seed"] for r in mine],
            "test_perplexity": _stats([r["test_perplexity"] for r in mine]),
            "val_perplexity": _stats([r["val_perplexity"] for r in mine]),
            "final_train_perplexity": _stats([r["final_train_perplexity"] for r in mine]),
            "tokens_per_second": _stats([r["tokens_per_second"] for r in mine]),
            "val_perplexity_curve_mean": np.nanmean(curves, axis=0).tolist(),
            "paper_test_perplexity": PAPER_TABLE_1A.get(variant),
        })
    return rows


def _cell(stats: dict[str, Any] | None) -> str:
    return "-" if stats is None else f"{stats['mean']:.1f} ± {stats['std']:.1f}"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| variant | highway layers | parameters | validation perplexity | test "
             "perplexity | paper (Table 1a, Large on PTB) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: r["test_perplexity"]["mean"]):
        paper = r["paper_test_perplexity"]
        lines.append(f"| {r['variant']} | {r['highway_layers']} | {r['params']:,} | "
                     f"{_cell(r['val_perplexity'])} | {_cell(r['test_perplexity'])} | "
                     f"{'-' if paper is None else f'{paper:.2f}'} |")
    return "\n".join(lines) + "\n"


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


def lm_variants_study(
    corpus: str | os.PathLike,
    *,
    model: str = "lstm_char_small_ptb",
    variants: Sequence[str] = ALL_VARIANTS,
    seeds: int | Sequence[int] = 2,
    epochs: int | None = None,
    max_train_tokens: int | None = None,
    recipe: str | None = None,
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
        out: output directory, new or empty (default `runs/lm-variants-<time>`), or an
            earlier run of the study with the same settings, which resumes.
        isolate: train each net in its own process.
    """
    from training.data.corpora import corpus_identity
    from training.data.text import load_corpus

    info = zoo.describe(model)
    if info["family"] != "char_lm":
        raise ValueError(f"{model} is not a language model; choose from "
                         f"{', '.join(zoo.list_models('lstm_char_*'))}.")
    unknown = [v for v in variants if v not in ALL_VARIANTS]
    if not variants or unknown or len(set(variants)) != len(variants):
        raise ValueError(f"variants must be distinct names from {', '.join(ALL_VARIANTS)}. "
                         f"Received: {list(variants)!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or len(set(seed_list)) != len(seed_list) or any(
            not isinstance(s, int) or s < 0 for s in seed_list):
        raise ValueError("seeds must be a positive count or a list of distinct seeds. "
                         f"Received: {seeds!r}")
    recipe_ = get_recipe(recipe_name(info["recipe"], recipe), epochs=epochs)
    text = load_corpus(corpus)  # the corpus checked (and its size known) before any folder
    corpus_record = {"directory": str(Path(corpus).resolve()), "name": text.name,
                     "train_tokens": int(text.train.words.size),
                     "valid_tokens": int(text.valid.words.size),
                     "test_tokens": int(text.test.words.size), "words": len(text.words),
                     "chars": len(text.chars), **corpus_identity(corpus)}
    if max_train_tokens is not None and (not isinstance(max_train_tokens, int)
                                         or max_train_tokens < 1):
        raise ValueError(f"max_train_tokens must be a positive integer. "
                         f"Received: {max_train_tokens!r}")
    settings = {"model": model, "variants": list(variants), "seeds": seed_list,
                "recipe": recipe_, "max_train_tokens": max_train_tokens,
                "code": code_version(),
                "residual_rule": "Residual with twice the model's highway layers (Greff et "
                                 "al.: four for Large's two)"}
    if set(variants) & set(GATED_SKIPS):
        settings["gated_skip_rule"] = ("each gated skip with the highway layers whose "
                                       "parameters are closest to the model's coupled layers")
    out = claim_study_dir(out or default_dir("lm-variants"),
                          {"corpus": corpus_record, **settings})
    print(f"Corpus: {corpus_record['directory']} ({corpus_record['train_tokens']:,} training "
          f"tokens, {corpus_record['words']:,} words)", flush=True)
    from zoo.char_lm import parameter_count

    args = info["architecture_args"]
    jobs = []
    for seed in seed_list:
        for variant in variants:
            layers = highway_layers(model, variant)
            overrides = {"variant": variant, "highway_layers": layers}
            jobs.append({
                "task": "language_model", "variant": variant, "seed": seed,
                "architecture": model, "overrides": overrides, "corpus": str(corpus),
                "epochs": recipe_["epochs"], "recipe": recipe_["name"],
                "max_train_tokens": max_train_tokens,
                "params": parameter_count(**{**args, **overrides,
                                             "classes": len(text.words),
                                             "char_vocab_size": len(text.chars)}),
                "run_dir": str(out / f"{variant}_seed{seed}"),
            })
    runs = run_jobs(jobs, None, isolate, lambda job: f"{job['variant']:8s} seed {job['seed']}")
    rows = summarise(runs, variants)
    table = format_table(rows)
    print()
    print(table)
    results = {"corpus": corpus_record, "settings": settings,
               "std": "population standard deviation over seeds (numpy.std, ddof=0)",
               "paper_table_1a": PAPER_TABLE_1A, "summary": rows, "runs": runs}
    write_text(out / "results.json", json.dumps(results, indent=1) + "\n", overwrite=True)
    write_text(out / "table.md", table, overwrite=True)
    n = len(seed_list)
    trained = min(corpus_record["train_tokens"], max_train_tokens or math.inf)
    plot(rows, runs, out / "perplexity.png",
         f"Highway variants in {model} on {text.name} ({trained:,} "
         f"training tokens, {recipe_['name']}, {recipe_['epochs']} epochs; {n} seed"
         f"{'s' if n > 1 else ''})")
    print(f"\nWrote {out}/results.json, table.md and perplexity.png")
    return results


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
    rows = summarise(runs, variants)
    settings = {**first["settings"], "variants": variants,
                "seeds": sorted({s for r in loaded for s in r["settings"]["seeds"]}),
                **{k: v for r in loaded for k, v in r["settings"].items()
                   if k.endswith("_rule")},
                "merged_from": [str(Path(s).resolve()) for s in studies]}
    results = {**{k: v for k, v in first.items() if k not in ("summary", "runs")},
               "settings": settings, "summary": rows, "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    table = format_table(rows)
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
        try:
            metrics = train_lm(job["architecture"], job["corpus"], out=run_dir.path,
                               epochs=job["epochs"], seed=job["seed"], recipe=job["recipe"],
                               max_train_tokens=job["max_train_tokens"], verbose=0,
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
