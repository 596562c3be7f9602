"""Table and figure of LSTM-Char-Large's six Table 1a variants, first epochs on one GPU.

    python -m benchmarks.research.ptb_large_gpu_8epochs_page [--results DOCS_RESULTS]

Reads docs/results/language_model/ptb_large_gpu_8epochs/runs/<variant>/{run,history}.json
(copied from the run directories of `highway-zoo train lstm_char_large_ptb --corpus PTB
--variant V --seed 0`, Residual with `--highway-layers 4`) and writes table.md and
perplexity.png in that folder.
"""

import json
from pathlib import Path

from benchmarks.research import results_dir

PAGE = Path("language_model", "ptb_large_gpu_8epochs")
VARIANTS = ("full", "coupled", "c_only", "t_only", "residual", "plain")
PAPER = {"full": 79.09, "coupled": 79.13, "c_only": 79.15, "t_only": 82.94, "residual": 91.32,
         "plain": 92.60}  # Greff et al. 2017, Table 1a: test perplexity after 25 epochs
SHOWN = (1, 2, 4, 8)


def trained_params(run: dict) -> int:
    """The run's net's parameters, counted on its stateless form (the records of these runs
    counted the stateful net's carried LSTM states too, which are no parameters)."""
    import zoo

    overrides = {k: v for k, v in run["overrides"].items() if k not in ("stateful", "batch_size")}
    return zoo.load(run["architecture"], **overrides).count_params()


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page = results_dir(argv, __doc__) / PAGE
    runs = {v: (json.loads((page / "runs" / v / "run.json").read_text()),
                json.loads((page / "runs" / v / "history.json").read_text())) for v in VARIANTS}
    lines = ["| variant | highway layers | parameters | "
             + " | ".join(f"validation, epoch {e}" for e in SHOWN)
             + " | learning rate, epoch 8 | paper (test, 25 epochs) |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in SHOWN) + " | ---: | ---: |"]
    for v, (run, history) in runs.items():
        val = {e["epoch"]: e["val_perplexity"] for e in history}
        lines.append(f"| {v} | {run['overrides'].get('highway_layers', 2)} | "
                     f"{trained_params(run):,} | "
                     + " | ".join(f"{val[e]:.1f}" for e in SHOWN)
                     + f" | {history[-1]['learning_rate']:g} | {PAPER[v]:.2f} |")
    (page / "table.md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for v, (_, history) in runs.items():
        ax.plot([e["epoch"] for e in history], [e["val_perplexity"] for e in history],
                marker="o", label=v)
    ax.set(yscale="log", xlabel="epoch", ylabel="validation perplexity",
           title="LSTM-Char-Large on PTB, first 8 of 25 epochs (one H200, JAX)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(page / "perplexity.png", dpi=110)


if __name__ == "__main__":
    main()
