"""The variants study: which part of the highway layer matters (Greff et al. 2017, Table 1a),
and the gated skips that came after it.

Fully connected tanh nets of the depth study's layout (a plain stem layer, `depth - 1` layers of
one variant, softmax) are trained with one recipe and budget (the sweep's: adam_fc, 12 epochs,
seed init) at several depths and seeds, for the six variants of y = H·T + x·C:

    coupled   C = 1 - T            full      T and C learned
    c_only    T = 1, C learned     t_only    T learned, C = 1
    residual  T = C = 1            plain     T = 1, C = 0 (y = H: no skip at all)

and the five gated skips of `layers.variants.GATED_SKIPS` (rezero, layerscale, gru_gate,
laurel_rw, laurel_lr, each with its paper's initialisation), each at two widths:

- "equal": every variant 50 units wide (the highway FC nets' width), so the gated variants
  have 2-3 times the parameters of residual and plain, and gru_gate 3.5 times coupled's.
- "matched": each variant's width chosen so that one of its hidden layers has about as many
  parameters as a coupled layer of width 50 (2 · (50² + 50) = 5,100): the width w whose
  `layers.variants.parameter_count(variant, w)` is closest to 5,100 (n · (w² + w) for a
  variant learning n branches): 50 for coupled, c_only and t_only, 41 for full, 71 for
  residual, plain, rezero and laurel_rw (the paper's 71-unit plain nets), 70 for layerscale,
  64 for laurel_lr and 27 for gru_gate. Greff et al. matched by depth instead (four residual
  layers for two highway layers); here depth is the variable studied, so width takes up the
  difference. A net whose width is the same in both modes is trained once and reported in
  both.

Writes, under `out`::

    study.json                             the settings (a rerun resumes only these)
    <variant>_w<width>_depth<d>_seed<s>/   a run directory per net (training.trainer) with
                                           its result.json once finished
    results.json                           settings, every run, mean and std over seeds
    table.md                               per mode, depth and variant: width, parameters,
                                           final training loss, test accuracy (mean ± std)
    variants.png                           final training loss and test accuracy by depth,
                                           per variant, one column per mode
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from layers.variants import ALL_VARIANTS, LEARNED_BRANCHES
from layers.variants import parameter_count as layer_parameters
from training.experiments.fc import INITS, FCStudy, subset
from training.experiments.study import (
    STD_NOTE,
    format_table,
    load_mergeable,
    mean_std,
    run_study,
)
from training.recipes import get_recipe
from zoo.files import save_figure, write_text

if TYPE_CHECKING:
    from training.data import Dataset

WIDTH = 50
MODES = ("equal", "matched")
ARCHITECTURE = "highway_fc10_mnist"  # its family builds every variant, stacked or not
_MARKERS = {"coupled": "o", "full": "D", "c_only": "^", "t_only": "v", "residual": "s",
            "plain": "x", "rezero": "P", "layerscale": "*", "gru_gate": "h", "laurel_rw": "<",
            "laurel_lr": ">"}
# Greff's gates solid, the ungated skips dashed, the later gated skips dash-dotted.
_LINES = {**dict.fromkeys(("residual", "plain"), "--"), **dict.fromkeys(
    ("rezero", "layerscale", "gru_gate", "laurel_rw", "laurel_lr"), "-.")}


def matched_width(variant: str, width: int = WIDTH, reference: str = "coupled") -> int:
    """The width whose hidden layer of `variant` has the parameter count closest to a
    `reference` layer of `width` (the smaller width on a tie)."""
    target = layer_parameters(reference, width)
    return min(range(1, 4 * width + 1),
               key=lambda w: (abs(layer_parameters(variant, w) - target), w))


def parameter_count(variant: str, depth: int, width: int, inputs: int = 784,
                    classes: int = 10) -> int:
    """Parameters of the FC net: stem Dense, `depth - 1` hidden layers, softmax."""
    hidden = layer_parameters(variant, width)
    return inputs * width + width + (depth - 1) * hidden + width * classes + classes


def widths(variant: str, modes: Sequence[str], width: int = WIDTH) -> dict[str, int]:
    return {mode: width if mode == "equal" else matched_width(variant, width) for mode in modes}


def _positive(label: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 1):
        raise ValueError(f"{label} must be a positive integer. Received: {value!r}")


def _check(variants, depths, seeds, modes, max_train_examples, max_test_examples) -> list[int]:
    unknown = [v for v in variants if v not in ALL_VARIANTS]
    if not variants or unknown or len(set(variants)) != len(variants):
        raise ValueError(f"variants must be distinct names from {', '.join(ALL_VARIANTS)}. "
                         f"Received: {list(variants)!r}")
    if not depths or any(not isinstance(d, int) or d < 2 for d in depths) \
            or len(set(depths)) != len(depths):
        raise ValueError(f"depths must be distinct integers >= 2. Received: {list(depths)!r}")
    bad = [m for m in modes if m not in MODES]
    if not modes or bad or len(set(modes)) != len(modes):
        raise ValueError(f"widths must be distinct names from {', '.join(MODES)}. "
                         f"Received: {list(modes)!r}")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise ValueError("seeds must be a positive count or a list of distinct seeds. "
                         f"Received: {seeds!r}")
    _positive("max_train_examples", max_train_examples)
    _positive("max_test_examples", max_test_examples)
    return seed_list


def _series(variant: str, width: int) -> str:
    return f"{variant} w={width}"


def _loss_cell(stats: dict[str, Any] | None) -> str:
    # Losses span 1e-4 .. 2.3: three significant digits, not three decimals.
    return mean_std(stats, ".3g", ".2g")


def variants_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown: per mode, one row per depth and variant."""
    lines = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        lines += [f"**{mode} {'width' if mode == 'equal' else 'parameters'}**", "", format_table(
            ["depth", "variant", "width", "parameters", "final training loss", "test accuracy"],
            [[r["depth"], r["variant"], r["width"], f"{r['params']:,}",
              _loss_cell(r["final_train_loss"]), mean_std(r["test_accuracy"])]
             for r in rows if r["mode"] == mode],
            ["---:", ":---", "---:", "---:", "---:", "---:"]), ""]
    return "\n".join(lines).rstrip() + "\n"


def plot(rows: Sequence[dict[str, Any]], path: Path, title: str) -> None:
    """Final training loss (top, log) and test accuracy (bottom) against depth, a line per
    variant with ± std bars, a column per width mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r["mode"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    depths = sorted({r["depth"] for r in rows})
    colours = {v: plt.get_cmap("tab10")(i) if i < 10 else "k"
               for i, v in enumerate(ALL_VARIANTS)}
    fig, axes = plt.subplots(2, len(modes), figsize=(5.5 * len(modes), 8), squeeze=False,
                             sharex=True)
    for col, mode in enumerate(modes):
        for variant in variants:
            mine = sorted((r for r in rows if r["mode"] == mode and r["variant"] == variant),
                          key=lambda r: r["depth"])
            if not mine:
                continue
            x = [r["depth"] for r in mine]
            label = variant if mode == "equal" else f"{variant} (w={mine[0]['width']})"
            for row, key in enumerate(("final_train_loss", "test_accuracy")):
                axes[row, col].errorbar(
                    x, [r[key]["mean"] for r in mine], yerr=[r[key]["std"] for r in mine],
                    marker=_MARKERS.get(variant, "o"), capsize=3, color=colours[variant],
                    label=label, ls=_LINES.get(variant, "-"),
                )
        top, bottom = axes[0, col], axes[1, col]
        top.set(title=f"{mode} {'width (50 units)' if mode == 'equal' else 'parameters per layer'}",
                ylabel="final training loss", yscale="log")
        top.axhline(math.log(10), color="grey", lw=0.8, ls=":")
        bottom.set(xlabel="depth (layers)", ylabel="test accuracy", xscale="log", ylim=(0, 1),
                   # explicit: a study of one depth leaves log autoscaling nothing to span
                   xlim=(min(depths) / 1.3, max(depths) * 1.3))
        bottom.set_xticks(depths, [str(d) for d in depths])
        bottom.minorticks_off()
        top.legend(fontsize=8 if len(variants) <= 6 else 7,  # eleven forms: two columns
                   ncol=1 if len(variants) <= 6 else 2)
        for ax in (top, bottom):
            ax.grid(alpha=0.3, which="both")
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


class VariantsStudy(FCStudy):
    """The variants study as a `training.experiments.study.Study`: see `variants_study`."""

    name, figure_file = "variants", "variants.png"

    def __init__(self, variants, depths, seeds, *, modes, dataset, data_dir, max_train_examples,
                 max_test_examples, activation, transform_bias, init, epochs, learning_rate,
                 recipe, stacked, isolate):
        self.seeds = _check(variants, depths, seeds, modes, max_train_examples,
                            max_test_examples)
        if activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be tanh or relu. Received: {activation!r}")
        if init not in INITS:
            raise ValueError(f"Unknown init {init!r}; choose from {', '.join(INITS)}.")
        if not math.isfinite(transform_bias):
            raise ValueError(
                f"transform_bias must be a finite number. Received: {transform_bias!r}")
        # Imported here: the image datasets import TensorFlow, which `variants --help` (this
        # module's MODES) does without.
        from training.data import Dataset, load_dataset

        self.loaded = isinstance(dataset, Dataset)
        if self.loaded and isolate:
            raise ValueError("A loaded Dataset is trained in this process: pass isolate=False, "
                             "or a dataset name.")
        self.recipe = get_recipe(recipe, epochs=epochs, learning_rate=learning_rate)
        self.data = dataset if self.loaded else subset(
            load_dataset(dataset, data_dir), max_train_examples, max_test_examples)
        data = self.data
        self.inputs = int(np.prod(data.image_shape))
        print(f"Data: {data.source} ({data.num_train} training, {data.num_test} test examples)")
        self.data_record = {"source": data.source, "name": data.name,
                            "num_train": data.num_train, "num_test": data.num_test}
        self.variants, self.depths, self.modes = variants, depths, modes
        self.dataset, self.data_dir = dataset, data_dir
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
        self.activation, self.transform_bias, self.init = activation, transform_bias, init
        self.learning_rate, self.recipe_name, self.stacked = learning_rate, recipe, stacked
        self.settings_ = {
            "variants": list(variants), "depths": list(depths), "seeds": self.seeds,
            "modes": list(modes), "activation": activation, "transform_bias": transform_bias,
            "carry_bias": 2.0, "init": init, "kernel_initializer": INITS[init],
            "recipe": self.recipe, "stacked": stacked, "isolate": isolate,
            "matched_widths": {v: matched_width(v) for v in variants},
            "matching_rule": "per hidden layer: layers.variants.parameter_count(variant, w) "
                             f"closest to a coupled layer of width {WIDTH} "
                             f"(2·({WIDTH}² + {WIDTH}) parameters)",
            # The gated skips at their layers' defaults, each its paper's initialisation.
            "gated_skip_init": {"rezero": "alpha = 0", "layerscale": "lambda = 1e-5",
                                "gru_gate": "b_g = 2.0", "laurel_rw": "alpha = beta = 1",
                                "laurel_lr": "B = 0, rank = width // 8"},
        }

    def settings(self) -> dict[str, Any]:
        return {"data": self.data_record, **self.settings_}

    def jobs(self, out: Path) -> list[dict[str, Any]]:
        configs = {(v, w) for v in self.variants for w in widths(v, self.modes).values()}
        return [self._job(out, variant, width, depth, seed)
                for seed in self.seeds for depth in self.depths for variant in self.variants
                for width in sorted({w for v, w in configs if v == variant})]

    def _job(self, out: Path, variant: str, width: int, depth: int,
             seed: int) -> dict[str, Any]:
        classes = self.data.num_classes
        overrides = {
            "depth": depth, "width": width, "variant": variant,
            "activation": self.activation, "kernel_initializer": INITS[self.init],
            "transform_bias": self.transform_bias, "stacked": self.stacked, "classes": classes,
            # Not read by this study: saves each epoch's pass over the probe batch.
            "gate_summaries": False,
        }
        return {
            "variant": variant, "kind": variant, "width": width,
            "series": _series(variant, width), "depth": depth, "seed": seed,
            "transform_bias": self.transform_bias if "t" in LEARNED_BRANCHES[variant]
            else None,
            "params": parameter_count(variant, depth, width, self.inputs, classes),
            "architecture": ARCHITECTURE, "overrides": overrides,
            "epochs": self.recipe["epochs"], "recipe": self.recipe_name,
            "learning_rate": self.recipe["learning_rate"],
            "run_dir": str(out / f"{variant}_w{width}_depth{depth}_seed{seed}"),
            "dataset": None if self.loaded else self.dataset,
            "data_dir": None if self.data_dir is None else str(self.data_dir),
            "max_train_examples": self.max_train_examples,
            "max_test_examples": self.max_test_examples,
        }

    def label(self, job: dict[str, Any]) -> str:
        return (f"{job['variant']:8s} width {job['width']:3d} depth {job['depth']:4d} "
                f"seed {job['seed']}")

    def summary(self, runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Per mode, depth and variant: the series' mean and std over seeds."""
        by_series = {(s["series"], s["depth"]): s for s in super().summary(runs)}
        rows = []
        for mode in self.modes:
            for depth in self.depths:
                for variant in self.variants:
                    width = widths(variant, [mode])[mode]
                    s = by_series[(_series(variant, width), depth)]
                    rows.append({
                        "mode": mode, "variant": variant, "width": width, "depth": depth,
                        "params": parameter_count(variant, depth, width, self.inputs,
                                                  self.data.num_classes),
                        **{k: s[k] for k in ("seeds", "test_accuracy", "final_train_loss",
                                             "seconds_per_epoch", "loss_curve_mean",
                                             "loss_curve_std")},
                    })
        return rows

    def table(self, summary: Sequence[dict[str, Any]]) -> str:
        return variants_table(summary)

    def results(self, runs, summary) -> dict[str, Any]:
        return {"data": self.data_record, "settings": self.settings_, "std": STD_NOTE,
                "summary": summary, "runs": runs}

    def figure(self, results: dict[str, Any], out: Path) -> None:
        n, data = len(self.seeds), self.data
        rate = "" if self.learning_rate is None else f" at learning rate {self.learning_rate:g}"
        plot(results["summary"], out / self.figure_file,
             f"Highway variants, {self.activation} FC nets on {data.name}\n({data.num_train} "
             f"training examples, {self.recipe_name}{rate}, {self.recipe['epochs']} epochs; "
             f"mean ± std over {n} seed{'s' if n > 1 else ''})")


def variants_study(
    variants: Sequence[str] = ALL_VARIANTS,
    depths: Sequence[int] = (10, 20, 50, 100),
    seeds: int | Sequence[int] = 3,
    *,
    modes: Sequence[str] = MODES,
    dataset: str | Dataset = "mnist",
    data_dir: str | os.PathLike | None = None,
    max_train_examples: int | None = None,
    max_test_examples: int | None = None,
    activation: str = "tanh",
    transform_bias: float = -2.0,
    init: str = "seed",
    epochs: int | None = None,
    learning_rate: float | None = None,
    recipe: str = "adam_fc",
    stacked: bool = True,
    out: str | os.PathLike | None = None,
    isolate: bool = True,
) -> dict[str, Any]:
    """Trains every variant at every depth, width mode and seed; writes runs, JSON, table, PNG.

    Args:
        variants: names from `layers.variants.ALL_VARIANTS` (Greff's six, then the gated
            skips).
        depths: network depths (the plain stem layer plus `depth - 1` variant layers).
        seeds: how many seeds (0, 1, ...), or the seeds themselves.
        modes: "equal" (every variant 50 wide) and/or "matched" (`matched_width`).
        dataset: "mnist" (offline: the 4,000/1,000 sample), "fashion_mnist", or a loaded
            `training.data.Dataset` (trained in this process).
        max_train_examples, max_test_examples: the first N examples of each split only.
        activation: of every layer ("tanh" or "relu").
        transform_bias: b_T of the variants with a transform gate; the carry gate's b_C is
            the layers' default +2 (C starts open as much as 1 - T does).
        init: kernel initialisation, a `training.experiments.fc.INITS` name.
        epochs: default: the recipe's (adam_fc: 12).
        learning_rate: the recipe's base rate replaced (default: the recipe's, adam_fc 5e-3).
        recipe: the optimiser budget, the same for every net.
        stacked: every net's hidden layers as one `HighwayStack` (same function, faster).
        out: output directory, new or empty (default `runs/variants-<time>`), or that of
            an earlier run of the study with the same settings, which is resumed.
        isolate: train each net in its own process (its own peak memory and CPU time).
    """
    study = VariantsStudy(
        variants, depths, seeds, modes=modes, dataset=dataset, data_dir=data_dir,
        max_train_examples=max_train_examples, max_test_examples=max_test_examples,
        activation=activation, transform_bias=transform_bias, init=init, epochs=epochs,
        learning_rate=learning_rate, recipe=recipe, stacked=stacked, isolate=isolate)
    return run_study(study, out, isolate)


# Settings two studies must share for their rows to stand in one table.
_SHARED = ("activation", "transform_bias", "carry_bias", "init", "kernel_initializer", "stacked")


def merge_studies(studies: Sequence[str | os.PathLike], out: str | os.PathLike) -> dict[str, Any]:
    """One table and figure from studies of different variants on the same data and recipe
    (e.g. Greff's six, run earlier, and the gated skips run later): their results.json read,
    checked to agree (`common.load_mergeable`), and written together to `out` (new or
    empty) as results.json, table.md and variants.png."""
    def differences(first, other):
        return (["data"] if other["data"] != first["data"] else []) + [
            k for k in _SHARED if other["settings"].get(k) != first["settings"].get(k)]

    loaded, variants, out = load_mergeable(studies, out, differences, "data and recipe")
    first = loaded[0]
    order = {v: i for i, v in enumerate(ALL_VARIANTS)}
    rows = sorted((row for result in loaded for row in result["summary"]),
                  key=lambda r: (MODES.index(r["mode"]), r["depth"], order[r["variant"]]))
    settings = {**first["settings"],
                "variants": sorted(variants, key=order.__getitem__),
                "depths": sorted({d for r in loaded for d in r["settings"]["depths"]}),
                "seeds": sorted({s for r in loaded for s in r["settings"]["seeds"]}),
                "modes": [m for m in MODES if any(m in r["settings"]["modes"] for r in loaded)],
                "matched_widths": {k: v for r in loaded
                                   for k, v in r["settings"]["matched_widths"].items()},
                "merged_from": [str(Path(s).resolve()) for s in studies]}
    results = {"data": first["data"], "settings": settings, "std": first["std"],
               "summary": rows, "runs": [run for r in loaded for run in r["runs"]]}
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    table = variants_table(rows)
    write_text(out / "table.md", table)
    seeds = {len(r["seeds"]) for r in rows}
    recipe = first["settings"]["recipe"]
    plot(rows, out / "variants.png",
         f"Highway variants and gated skips, {settings['activation']} FC nets on "
         f"{first['data']['name']}\n({first['data']['num_train']} training examples, "
         f"{recipe['name']}, {recipe['epochs']} epochs; mean ± std over "
         f"{'/'.join(map(str, sorted(seeds)))} seeds)")
    print(table)
    print(f"Wrote {out}/results.json, table.md and variants.png")
    return results
