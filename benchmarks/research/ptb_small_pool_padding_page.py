"""Table and figure of the pooling ablation: Small Coupled with Kim's pooling (over every window
of the padded word, `--pool-padding`) against the study's Coupled run (the windows inside the
word only), seed 0, everything else the same.

    python -m benchmarks.research.ptb_small_pool_padding_page [--results DOCS_RESULTS]

Reads docs/results/language_model/ptb_small_pool_padding/coupled_pool_padding_seed0/
{run,history,metrics}.json (`highway-zoo train lstm_char_small_ptb --corpus PTB --variant
coupled --seed 0 --pool-padding`, commit 05113e7) and ../ptb_small/coupled_seed0/ (the study's
run, commit cc9716d; coupled_1epoch_check/ shows that 05113e7 repeats its first epoch bit for
bit) and writes table.md and perplexity.png beside the first.
"""

import json
from pathlib import Path

from benchmarks.research import results_dir
from zoo.files import save_figure

PAGE = Path("language_model", "ptb_small_pool_padding")
RUNS = {"windows inside the word (the zoo's default)": Path("..", "ptb_small", "coupled_seed0"),
        "every window of the padded word (Kim's, --pool-padding)":
            Path("coupled_pool_padding_seed0")}
KIM = 92.3  # Kim et al. 2016, Table 3, LSTM-Char-Small


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page = results_dir(argv, __doc__) / PAGE
    lines = ["| max-over-time pooling | validation, epoch 6 | validation, epoch 25 | "
             "test perplexity | above Kim's 92.3 |", "| --- | ---: | ---: | ---: | ---: |"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, run in RUNS.items():
        d = page / run
        history = json.loads((d / "history.json").read_text())
        test = json.loads((d / "metrics.json").read_text())["test_perplexity"]
        lines.append(f"| {label} | {history[5]['val_perplexity']:.1f} | "
                     f"{history[-1]['val_perplexity']:.2f} | {test:.2f} | {test - KIM:+.2f} |")
        ax.plot([e["epoch"] for e in history], [e["val_perplexity"] for e in history],
                marker="o", markersize=3, label=f"{label}: test {test:.2f}")
    (page / "table.md").write_text("\n".join(lines) + "\n")
    ax.set(yscale="log", xlabel="epoch", ylabel="validation perplexity",
           title="LSTM-Char-Small, Coupled, seed 0: how the character CNN pools")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, page / "perplexity.png")


if __name__ == "__main__":
    main()
