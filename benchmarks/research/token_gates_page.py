"""Tables and figures of the per-token gates of Small's variants on the full PTB, from the
analyses in docs/results/token_gates/ (each made by `highway-zoo analyze lstm_char_small_ptb
--weights RUN --corpus PTB_DIR --split test --out DIR [--gate C|share]`, the commands on
token_gates.md).

    python -m benchmarks.research.token_gates_page [--results DOCS_RESULTS]

Writes, in that folder, ptb_small_variants.md and .png (the gates) and ptb_small_share.md and
.png (what they do: the transform path's share of each word's output, and how often H is
silent, for all six variants of Table 1a, the shipped nets and Large); a run not analysed yet
is left out.
"""

import json
from pathlib import Path

import numpy as np

from benchmarks.research import results_dir
from zoo.files import save_figure

PAGE = Path("token_gates")
RECORDS = Path("language_model")  # the runs' records, beside PAGE
# (directory, column, colour): the Table 1a study's runs, seed 0, then the shipped net.
RUNS = [
    ("ptb_coupled_seed0", "Coupled, T", "C0"),
    ("ptb_full_seed0", "Full, T", "C1"),
    ("ptb_full_seed0_carry_gate", "Full, C", "C1"),
    ("ptb_t_only_seed0", "T-only, T", "C3"),
    ("ptb_c_only_seed0", "C-only, C", "C2"),
    ("ptb_shipped_small", "shipped Coupled (Kim's pooling), T", "k"),
]


# (directory of the share analysis, column, colour, the run's gate analyses, its record)
SHARE_RUNS = [
    ("ptb_full_seed0_share", "Full", "C1", ("ptb_full_seed0", "ptb_full_seed0_carry_gate"),
     "ptb_small/full_seed0"),
    ("ptb_c_only_seed0_share", "C-only", "C2", ("ptb_c_only_seed0",), "ptb_small/c_only_seed0"),
    ("ptb_coupled_seed0_share", "Coupled", "C0", ("ptb_coupled_seed0",),
     "ptb_small/coupled_seed0"),
    ("ptb_plain_seed0_share", "Plain", "C5", (), "ptb_small/plain_seed0"),
    ("ptb_t_only_seed0_share", "T-only", "C3", ("ptb_t_only_seed0",), "ptb_small/t_only_seed0"),
    ("ptb_residual_seed0_share", "Residual (layer 1 → 2)", "C4", (), "ptb_small/residual_seed0"),
    ("ptb_shipped_small_share", "shipped Small (Coupled, Kim's pooling)", "k",
     ("ptb_shipped_small",), "ptb_small_pool_padding/coupled_pool_padding_seed0"),
    ("ptb_large_coupled_seed0_share", "shipped Large (Coupled; layer 1 → 2)", "0.5",
     ("ptb_large_coupled_seed0",), "ptb_large_gpu_25epochs/coupled_seed0"),
]


def _group(report, grouping, name):
    return next(g["mean"][0] for g in report[grouping] if g["group"] == name)


def _layers(values, form="{:.3f}"):
    """One cell: a value per highway layer, first to last."""
    return " → ".join(form.format(v) for v in values)


def _by(grouping, *names):
    return lambda r, _: " / ".join(
        _layers(next(g["mean"] for g in r[grouping] if g["group"] == n)) for n in names)


def _perplexity(record: Path):
    """The run's test perplexity, as trained (float32), from its record's folder."""
    metrics = record / "metrics.json"
    return f"{json.loads(metrics.read_text())['test_perplexity']:.2f}" if metrics.is_file() else "–"


SHARE_ROWS = [
    ("test perplexity (seed 0)", lambda r, run: _perplexity(run["record"])),
    ("the gates it learns, mean over tokens", lambda r, run: ", ".join(
        f"{gate['gate']} " + _layers(gate["overall"]["mean"]) for gate in run["gates"])
     or "none"),
    ("**transform path's share of the output**, mean over tokens",
     lambda r, _: "**" + _layers(r["overall"]["mean"]) + "**"),
    ("at initialisation", lambda r, _: _layers(r["initial"]["mean"])),
    ("H silent (ReLU 0), of (token, unit) pairs",
     lambda r, _: _layers(r["silent_h"]["tokens"], "{:.1%}")),
    ("at initialisation ", lambda r, _: _layers(r["initial"]["silent_h"]["tokens"], "{:.1%}")),
    ("tokens with H silent on every unit",
     lambda r, _: _layers(r["silent_h"]["tokens_all_silent"], "{:.1%}")),
    ("units of H silent for every word",
     lambda r, _: _layers(r["silent_h"]["units_never_firing"], "{}")
     + f" of {r['silent_h']['units']}"),
    ("share: `<unk>` / number (`N`)", _by("by_class", "<unk>", "number")),
    ("share: function words / content words", _by("by_class", "function word", "content word")),
    ("share: words seen 1,000+ times / 10-99 times", _by("by_frequency", "1000+", "10-99")),
    ("share: 2 characters / 10 characters", _by("by_length", "2", "10")),
]


def share_page(here: Path) -> None:
    """ptb_small_share.md and .png, in `here` (docs/results/token_gates/)."""
    found = []
    for name, column, colour, gate_runs, record in SHARE_RUNS:
        if (here / name / "tokens.json").is_file():
            gates = [json.loads((here / run / "tokens.json").read_text()) for run in gate_runs]
            found.append({"column": column, "colour": colour, "gates": gates,
                          "record": here.parent / RECORDS / record,
                          "report": json.loads((here / name / "tokens.json").read_text())})
    if not found:
        return
    lines = ["| per test token | " + " | ".join(run["column"] for run in found) + " |",
             "| --- | " + " | ".join("---:" for _ in found) + " |"]
    lines += [f"| {label} | " + " | ".join(cell(run["report"], run) for run in found) + " |"
              for label, cell in SHARE_ROWS]
    (here / "ptb_small_share.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_length, by_frequency) = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    for run in found:
        report = run["report"]
        for layer in range(len(report["layers"])):
            label = run["column"].split(" (")[0] + (f", layer {layer + 1}"
                                                    if len(report["layers"]) > 1 else "")
            style = {"color": run["colour"], "marker": "o", "markersize": 3, "label": label,
                     "linestyle": ":" if layer else "-"}
            lengths = [g for g in report["by_length"] if g["tokens"] >= 100]
            by_length.plot([int(g["group"]) for g in lengths],
                           [g["mean"][layer] for g in lengths], **style)
            bins = report["by_frequency"]
            by_frequency.plot(np.arange(len(bins)), [g["mean"][layer] for g in bins], **style)
            by_frequency.set_xticks(np.arange(len(bins)), [g["group"] for g in bins])
    by_length.set(xlabel="characters of the word (groups of 100+ tokens)",
                  ylabel="transform path's share of the output", ylim=(0, 1.5))
    by_length.set_yscale("symlog", linthresh=0.01)  # the shares span 0.001 to 1
    by_frequency.set(xlabel="the word's count in PTB's training text")
    by_frequency.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle("What the gates do, after 25 epochs on the full PTB: Σ|T·H| / Σ(|T·H| + |C·x|) "
                 "per test token (0: the input alone passes; 1: H alone)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, here / "ptb_small_share.png")
    plt.close(fig)


ROWS = [
    ("mean over all tokens", lambda r: f"{r['overall']['mean'][0]:.3f}"),
    ("at initialisation", lambda r: f"{r['initial']['mean'][0]:.3f}"),
    ("std over tokens", lambda r: f"{r['spread']['std'][0]:.3f}"),
    ("units with mean > 0.5 (of 525)", lambda r: f"{r['spread']['units_over_half'][0]}"),
    ("gate bias: mean (min, max); initial ±2", lambda r: "{:+.2f} ({:+.2f}, {:+.2f})".format(
        *(r["parameters"][k][0] for k in ("bias_mean", "bias_min", "bias_max")))),
    ("gate kernel, mean absolute weight (initial 0.025)",
     lambda r: f"{r['parameters']['kernel_mean_abs'][0]:.3f}"),
    ("`<unk>` / number (`N`)", lambda r: f"{_group(r, 'by_class', '<unk>'):.3f} / "
                                         f"{_group(r, 'by_class', 'number'):.3f}"),
    ("`<eos>`", lambda r: f"{_group(r, 'by_class', '<eos>'):.3f}"),
    ("function words / content words",
     lambda r: f"{_group(r, 'by_class', 'function word'):.3f} / "
               f"{_group(r, 'by_class', 'content word'):.3f}"),
    ("words seen 1,000+ times / 10-99 times",
     lambda r: f"{_group(r, 'by_frequency', '1000+'):.3f} / "
               f"{_group(r, 'by_frequency', '10-99'):.3f}"),
    ("2 characters / 10 characters", lambda r: f"{_group(r, 'by_length', '2'):.3f} / "
                                               f"{_group(r, 'by_length', '10'):.3f}"),
]


def variants_page(here: Path) -> None:
    """ptb_small_variants.md and .png, in `here` (docs/results/token_gates/)."""
    found = [(column, colour, json.loads((here / name / "tokens.json").read_text()))
             for name, column, colour in RUNS if (here / name / "tokens.json").is_file()]
    lines = ["| mean gate per token | " + " | ".join(c for c, _, _ in found) + " |",
             "| --- | " + " | ".join("---:" for _ in found) + " |"]
    lines += [f"| {label} | " + " | ".join(cell(r) for _, _, r in found) + " |"
              for label, cell in ROWS]
    (here / "ptb_small_variants.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_length, by_frequency) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for column, colour, report in found:
        style = {"color": colour, "marker": "o", "markersize": 3, "label": column,
                 "linestyle": "--" if column.endswith("C") else "-"}
        lengths = [g for g in report["by_length"] if g["tokens"] >= 100]
        by_length.plot([int(g["group"]) for g in lengths], [g["mean"][0] for g in lengths], **style)
        bins = report["by_frequency"]
        by_frequency.plot(np.arange(len(bins)), [g["mean"][0] for g in bins], **style)
        by_frequency.set_xticks(np.arange(len(bins)), [g["group"] for g in bins])
    by_length.set(xlabel="characters of the word (groups of 100+ tokens)",
                  ylabel="mean gate over units and tokens", ylim=(0, 1))
    by_frequency.set(xlabel="the word's count in PTB's training text")
    by_frequency.legend(fontsize=8)
    fig.suptitle("Small's gated variants after 25 epochs on the full PTB: the gate per test "
                 "token (T: solid, H's share; C: dashed, the input's)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, here / "ptb_small_variants.png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    here = results_dir(argv, __doc__) / PAGE
    variants_page(here)
    share_page(here)


if __name__ == "__main__":
    main()
