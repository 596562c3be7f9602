"""A finished run's test perplexity with its weights stored as float16, and the next-word
probabilities after the reference sentence, float32 and float16 (float16_check.json). Run
where the run's float32 weights are: for Large, on the GPU machine beside the training
(benchmarks/research/gpu_large.sh); for Small, here.

    python -m benchmarks.research.float16_check RUN_DIR PTB_DIR OUT_DIR

Writes OUT_DIR/<architecture>.weights.h5 (the float16 copy) and OUT_DIR/float16_check.json
(the float16 perplexity last: the file is written once before it, in case it runs out of
time). The committed checks: docs/results/language_model/*/coupled*_seed0/float16_check.json.
"""

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    import zoo
    from training.experiments.pretrain import (
        REFERENCE_SENTENCE,
        float16_copy,
        next_words,
        run_settings,
        stored_test_perplexity,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished language-model run directory")
    parser.add_argument("corpus", help="its prepared corpus (highway-zoo prepare-text)")
    parser.add_argument("out", type=Path, help="where the float16 file and the JSON go")
    args = parser.parse_args(argv)
    run, corpus, out = args.run, args.corpus, args.out
    record = json.loads((run / "run.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    model = zoo.load(str(run))
    result = {"float32": {"test_perplexity": metrics["test_perplexity"],
                          "next_words": next_words(model, REFERENCE_SENTENCE)}}
    f16 = out / f"{record['architecture']}.weights.h5"
    float16_copy(run / "model.weights.h5", f16)
    print("float16 file", f16.stat().st_size, flush=True)
    model.load_weights(f16)
    result["float16"] = {"next_words": next_words(model, REFERENCE_SENTENCE)}
    (out / "float16_check.json").write_text(json.dumps(result, indent=1))
    result["float16"]["test_perplexity"] = stored_test_perplexity(
        run_settings(record["architecture"], record, corpus), model)
    (out / "float16_check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
