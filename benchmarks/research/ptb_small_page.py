"""Table and figure of the Table 1a study on the full PTB (LSTM-Char-Small), from its runs
finished so far.

    python -m benchmarks.research.ptb_small_page [--results DOCS_RESULTS]

Reads every study*.json and <variant>_seed<k>/result.json in docs/results/language_model/
ptb_small/ and writes
table.md and perplexity.png with the study's own summary, table and figure
(`training.experiments.lm_variants`), so the finished study's files will look the same.
The runs are copied from the studies' directories as each finishes: study.json's is seed 0 of
all six variants (`highway-zoo variants --corpus PTB --variants coupled full residual plain
t_only c_only --seeds 1`), study_seed1.json's adds seed 1 of Full and Residual (`--variants
full residual --seeds 2`, its seed-0 runs copied in from the first). Both ran from the commit
their files name, on the same corpus and recipe.
"""

import json
from pathlib import Path

from benchmarks.research import results_dir
from training.experiments.lm_variants import plot, variants_summary, variants_table

PAGE = Path("language_model", "ptb_small")


def main(argv: list[str] | None = None) -> None:
    page = results_dir(argv, __doc__) / PAGE
    studies = [json.loads(p.read_text()) for p in sorted(page.glob("study*.json"))]
    settings = studies[0]
    for other in studies[1:]:  # one table only for studies trained alike
        differ = [k for k in settings if k not in ("variants", "seeds")
                  and other.get(k) != settings[k]]
        if differ:
            raise SystemExit(f"The studies differ in {', '.join(differ)}: one table would mix "
                             "them.")
    planned = {(v, s) for study in studies for v in study["variants"] for s in study["seeds"]}
    runs = [json.loads(p.read_text()) for p in sorted(page.glob("*_seed*/result.json"))]
    variants = [v for v in dict.fromkeys(v for study in studies for v in study["variants"])
                if any(r["variant"] == v for r in runs)]
    summary = variants_summary(sorted(runs, key=lambda r: (r["seed"], r["variant"])),
                               variants)
    done = f"{len(runs)} of {len(planned)} runs"
    (page / "table.md").write_text(variants_table(summary) + f"\n{done} finished "
                                   f"(code {settings['code']['commit'][:7]}).\n")
    corpus, recipe = settings["corpus"], settings["recipe"]
    plot(summary, runs, page / "perplexity.png",
         f"Highway variants in {settings['model']} on the full PTB ({corpus['train_tokens']:,} "
         f"training tokens, {recipe['name']}, {recipe['epochs']} epochs; {done} finished)")


if __name__ == "__main__":
    main()
