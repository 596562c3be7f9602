"""Table and figure of the LSTM-states check: the first steps, states carried or reset.

    python -m benchmarks.research.lm_states_page [--results DOCS_RESULTS]

Reads every `*_seed<N>.json` that `python -m benchmarks.research.lm_states` wrote into
docs/results/language_model/large_states/ and writes table.md (each run's last reading and its
validation perplexity) and states.png there: per step, the training loss per word, the first
LSTM's cell states (root mean square), the embedder's output (root mean square) and its offset
ratio (root mean square over its spread across words), one line per run.
"""

import json
from pathlib import Path

from benchmarks.research import results_dir

PAGE = Path("language_model", "large_states")
PANELS = (("loss_per_token", "training loss per word", "linear"),
          ("cell_rms", "first LSTM's cell state, rms", "log"),
          ("embedder_rms", "embedder's output, rms", "log"),
          ("offset_ratio", "embedder: rms / spread across words", "log"))


def _net(result: dict) -> str:
    layers = result["highway_layers"]
    return f"{result['variant']} ({layers} layer{'' if layers == 1 else 's'})"


def _label(result: dict) -> str:
    return f"{_net(result)}, states {result['states']}, seed {result['seed']}"


def _value(reading: dict, key: str):
    value = reading[key]
    return value[0] if isinstance(value, list) else value


def main(argv: list[str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page = results_dir(argv, __doc__) / PAGE
    results = [json.loads(path.read_text()) for path in sorted(page.glob("*_seed*.json"))]
    if not results:
        raise SystemExit(f"No lm_states results in {page}: run benchmarks.research.lm_states "
                         "with --out there first.")
    lines = ["| variant (highway layers) | states | seed | steps | loss per word, last 25 steps "
             "| first LSTM's cell rms | embedder rms | embedder rms / spread "
             "| validation perplexity |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        last = r["readings"][-1]
        lines.append(f"| {_net(r)} | {r['states']} | {r['seed']} | {r['steps']} | "
                     f"{last['loss_per_token']:.3f} | {last['cell_rms'][0]:.3g} | "
                     f"{last['embedder_rms']:.2g} | "
                     f"{last['offset_ratio']:.3g} | {r['validation_perplexity']:.1f} |")
    (page / "table.md").write_text("\n".join(lines) + "\n")

    fig, axes = plt.subplots(1, len(PANELS), figsize=(17, 3.8))
    for ax, (key, title, scale) in zip(axes, PANELS):
        for r in results:
            points = [(x["step"], _value(x, key)) for x in r["readings"]
                      if _value(x, key) not in (None, 0)]
            ax.plot(*zip(*points), marker="o", markersize=3, label=_label(r))
        ax.set(title=title, xlabel="step", yscale=scale)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{results[0]['model']} on PTB: the first steps of Kim's recipe "
                 f"({results[0]['backend']}, {results[0]['machine']})")
    fig.tight_layout()
    fig.savefig(page / "states.png", dpi=110)


if __name__ == "__main__":
    main()
