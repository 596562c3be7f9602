"""Table and figure of LSTM-Char-Large's Coupled and Full runs, all 25 epochs on one GPU,
with the other four variants' first 8 epochs (../ptb_large_gpu_8epochs) beside them.

    python -m benchmarks.research.ptb_large_gpu_25epochs_page [--results DOCS_RESULTS]

Reads docs/results/language_model/ptb_large_gpu_25epochs/<variant>_seed0/
{run,history,metrics}.json (copied from the run directories of `highway-zoo train
lstm_char_large_ptb --corpus PTB --variant V --seed 0`, made by benchmarks/research/
gpu_large.sh at the commit in commit.txt on the machine in machine.txt) and writes table.md
and perplexity.png in that folder.
"""

import json
from pathlib import Path

from benchmarks.research import ptb_large_gpu_8epochs_page, results_dir
from benchmarks.research.ptb_large_gpu_8epochs_page import PAPER, trained_params

PAGE = Path("language_model", "ptb_large_gpu_25epochs")
KIM = {"coupled": 78.9}  # Kim et al. 2016, Table 3: LSTM-Char-Large (its highway is Coupled)


def _read(directory: Path, name: str) -> dict | list:
    return json.loads((directory / name).read_text())


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = results_dir(argv, __doc__)
    page, first_epochs = results / PAGE, results / ptb_large_gpu_8epochs_page.PAGE / "runs"
    runs = {p.name.split("_seed")[0]: p for p in sorted(page.glob("*_seed0"))}
    lines = ["| variant | parameters | validation, epoch 8 | validation, epoch 25 | "
             "test perplexity | Kim et al. | paper's Table 1a | tokens/s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for v, d in runs.items():
        run, history, metrics = (_read(d, f) for f in ("run.json", "history.json",
                                                       "metrics.json"))
        kim = f"{KIM[v]:.1f}" if v in KIM else ""
        lines.append(f"| {v} | {trained_params(run):,} | "
                     f"{history[7]['val_perplexity']:.1f} | {history[-1]['val_perplexity']:.2f}"
                     f" | **{metrics['test_perplexity']:.2f}** | {kim} | {PAPER[v]:.2f} | "
                     f"{metrics['tokens_per_second']:,.0f} |")
    (page / "table.md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(6.8, 4.4))
    for v, d in runs.items():
        history = _read(d, "history.json")
        ax.plot([e["epoch"] for e in history], [e["val_perplexity"] for e in history],
                marker="o", markersize=3, label=f"{v} (25 epochs)")
    for v in ("c_only", "t_only", "residual", "plain"):
        history = _read(first_epochs / v, "history.json")
        ax.plot([e["epoch"] for e in history], [e["val_perplexity"] for e in history],
                linestyle="--", alpha=0.6, label=f"{v} (first 8)")
    ax.set(yscale="log", xlabel="epoch", ylabel="validation perplexity",
           title="LSTM-Char-Large on PTB, seed 0 (one H200, JAX)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(page / "perplexity.png", dpi=110)


if __name__ == "__main__":
    main()
