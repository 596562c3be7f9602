"""Table and figure of the per-token gates of Small's gated variants on the full PTB, from the
analyses beside this file (each made by `highway-zoo analyze lstm_char_small_ptb --weights RUN
--corpus PTB_DIR --split test --out DIR [--gate C]`, the commands on token_gates.md).

    python docs/results/token_gates/make_ptb_small_page.py

Writes ptb_small_variants.md and ptb_small_variants.png; a run not analysed yet is left out.
"""

import json
from pathlib import Path

import numpy as np

from zoo.files import save_figure

HERE = Path(__file__).resolve().parent
# (directory, column, colour): the Table 1a study's runs, seed 0, then the shipped net.
RUNS = [
    ("ptb_coupled_seed0", "Coupled, T", "C0"),
    ("ptb_full_seed0", "Full, T", "C1"),
    ("ptb_full_seed0_carry_gate", "Full, C", "C1"),
    ("ptb_t_only_seed0", "T-only, T", "C3"),
    ("ptb_c_only_seed0", "C-only, C", "C2"),
    ("ptb_shipped_small", "shipped Coupled (Kim's pooling), T", "k"),
]


def _group(report, grouping, name):
    return next(g["mean"][0] for g in report[grouping] if g["group"] == name)


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


def main() -> None:
    found = [(column, colour, json.loads((HERE / name / "tokens.json").read_text()))
             for name, column, colour in RUNS if (HERE / name / "tokens.json").is_file()]
    lines = ["| mean gate per token | " + " | ".join(c for c, _, _ in found) + " |",
             "| --- | " + " | ".join("---:" for _ in found) + " |"]
    lines += [f"| {label} | " + " | ".join(cell(r) for _, _, r in found) + " |"
              for label, cell in ROWS]
    (HERE / "ptb_small_variants.md").write_text("\n".join(lines) + "\n")

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
    save_figure(fig, HERE / "ptb_small_variants.png")
    plt.close(fig)


if __name__ == "__main__":
    main()
