"""Does the perplexity need H? Each run's test perplexity (Kim's, the test text read as one
stream) with its weights as trained, and again with H silenced in every highway layer: b_H set
to -1e4, so that H = ReLU(W x + b_H) is 0 for every word and the layer's output is its carry
path alone, C·x (the gated variants), x (Residual) or 0 (Plain). The test of the reading on
token_gates.md ("what passes"): where H gives a few per cent of the output, silencing it
should cost little.

    python docs/results/token_gates/lesion_h.py PTB_DIR RUN_DIR [RUN_DIR ...]

Writes lesion_h.json and lesion_h.md beside this file, a run at a time (a run already in
lesion_h.json is kept, so the script resumes).
"""

import json
import sys
from pathlib import Path

import numpy as np

import zoo
from training.experiments.pretrain import run_settings, stored_test_perplexity
from zoo.analysis.tokens import char_embedder
from zoo.files import write_text

HERE = Path(__file__).resolve().parent
OUT = HERE / "lesion_h.json"
SILENT = -1e4  # far below any W x: |x| < 1 (tanh), |W| ~ 0.1-0.3, 525 to 1,100 inputs


def silence_h(model) -> None:
    """b_H = SILENT in every highway layer of the model's embedder (b_H: the bias's first
    slice, `zoo.analysis.tokens._gate_weights`)."""
    for layer in char_embedder(model).highways:
        bias = np.asarray(layer.bias).copy()
        bias[:layer.kernel.shape[0]] = SILENT
        layer.bias.assign(bias)


def measure(run: Path, corpus: str) -> dict:
    record = json.loads((run / "run.json").read_text())
    settings = run_settings(record["architecture"], record, corpus)
    model = zoo.load(str(run))
    intact = stored_test_perplexity(settings, model)
    silence_h(model)
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


def main() -> None:
    corpus, runs = sys.argv[1], [Path(p) for p in sys.argv[2:]]
    results = json.loads(OUT.read_text()) if OUT.is_file() else []
    for run in runs:
        if any(r["run"] == run.name for r in results):
            continue
        results.append(measure(run, corpus))
        print(json.dumps(results[-1]), flush=True)
        write_text(OUT, json.dumps(results, indent=1) + "\n", overwrite=True)
        write_text(HERE / "lesion_h.md", table(results), overwrite=True)


if __name__ == "__main__":
    main()
