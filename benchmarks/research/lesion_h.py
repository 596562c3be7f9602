"""Does the perplexity need H? Each run's test perplexity (Kim's, the test text read as one
stream) with its weights as trained, and again with H silenced in every highway layer
(`zoo.analysis.h_silenced`: b_H set to -1e4, so that H = ReLU(W x + b_H) is 0 for every word
and the layer's output is its carry path alone, C·x (the gated variants), x (Residual) or 0
(Plain)). The test of the reading on token_gates.md ("what passes"): where H gives a few per
cent of the output, silencing it should cost little.

    python -m benchmarks.research.lesion_h PTB_DIR RUN_DIR [RUN_DIR ...] [--out DIR]

Writes lesion_h.json and lesion_h.md in docs/results/token_gates/ (`--out`), a run at a time
(a run already in lesion_h.json is kept, so the script resumes).
"""

import argparse
import json
from pathlib import Path

from benchmarks.research import RESULTS

OUT = RESULTS / "token_gates"


def measure(run: Path, corpus: str) -> dict:
    """One run directory's test perplexity, intact and with H silenced."""
    import zoo
    from training.experiments.pretrain import run_settings, stored_test_perplexity
    from zoo.analysis import h_silenced

    record = json.loads((run / "run.json").read_text())
    settings = run_settings(record["architecture"], record, corpus)
    model = zoo.load(str(run))
    intact = stored_test_perplexity(settings, model)
    with h_silenced(model):
        silenced = stored_test_perplexity(settings, model)
    return {"run": run.name, "architecture": record["architecture"],
            "variant": record["overrides"].get("variant", "coupled"),
            "recorded": json.loads((run / "metrics.json").read_text())["test_perplexity"],
            "intact": intact, "h_silenced": silenced}


def table(results: list[dict]) -> str:
    lines = ["| run | variant | test perplexity | with H silenced | change |",
             "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['run']} | {r['variant']} | {r['intact']:.2f} | {r['h_silenced']:.2f} | "
              f"{r['h_silenced'] - r['intact']:+.2f} |" for r in results]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from zoo.files import write_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="the prepared PTB (highway-zoo prepare-text)")
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"where lesion_h.json and .md go (default {OUT})")
    args = parser.parse_args(argv)
    found = args.out / "lesion_h.json"
    results = json.loads(found.read_text()) if found.is_file() else []
    for run in args.runs:
        if any(r["run"] == run.name for r in results):
            continue
        results.append(measure(run, args.corpus))
        print(json.dumps(results[-1]), flush=True)
        write_text(found, json.dumps(results, indent=1) + "\n", overwrite=True)
        write_text(args.out / "lesion_h.md", table(results), overwrite=True)


if __name__ == "__main__":
    main()
