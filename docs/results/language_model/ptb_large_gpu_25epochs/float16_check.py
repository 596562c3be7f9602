"""A finished run's test perplexity with its weights stored as float16, and the next-word
probabilities after the reference sentence, float32 and float16 (float16_check.json). Run
where the run's float32 weights are: for Large, on the GPU machine beside the training
(gpu_large.sh); for Small, here.

    python float16_check.py RUN_DIR PTB_DIR OUT_DIR
"""
import json
import sys
from pathlib import Path

import zoo
from training.experiments.pretrain import (
                                           REFERENCE_SENTENCE,
                                           float16_copy,
                                           next_words,
                                           run_settings,
                                           stored_test_perplexity,
)

run, corpus, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
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
