"""Table and figure of the Table 1a study on the full PTB (LSTM-Char-Small), from its runs
finished so far.

    python docs/results/language_model/ptb_small/make_page.py

Reads study.json and every <variant>_seed<k>/result.json beside this file (copied from the
study's directory as each run finishes: `highway-zoo variants --corpus PTB --variants coupled
full residual plain t_only c_only --seeds 1`, commit in study.json) and writes table.md and
perplexity.png with the study's own summary, table and figure
(`training.experiments.lm_variants`), so the finished study's files will look the same.
"""

import json
from pathlib import Path

from training.experiments.lm_variants import plot, variants_summary, variants_table

HERE = Path(__file__).resolve().parent


def main() -> None:
    settings = json.loads((HERE / "study.json").read_text())
    runs = [json.loads(p.read_text()) for p in sorted(HERE.glob("*_seed*/result.json"))]
    variants = [v for v in settings["variants"] if any(r["variant"] == v for r in runs)]
    summary = variants_summary(sorted(runs, key=lambda r: (r["seed"], r["variant"])),
                               variants)
    done = f"{len(runs)} of {len(settings['variants']) * len(settings['seeds'])} runs"
    (HERE / "table.md").write_text(variants_table(summary) + f"\n{done} finished "
                                   f"(code {settings['code']['commit'][:7]}).\n")
    corpus, recipe = settings["corpus"], settings["recipe"]
    plot(summary, runs, HERE / "perplexity.png",
         f"Highway variants in {settings['model']} on the full PTB ({corpus['train_tokens']:,} "
         f"training tokens, {recipe['name']}, {recipe['epochs']} epochs; {done} finished)")


if __name__ == "__main__":
    main()
