"""The models table: one CSV row per registered model, its size, cost, paper and speed.

    python -m benchmarks.models_table [--models PATTERNS [--keep]] [--batch-size 128]
        [--large-batch-size 32] [--steps 10] [--max-seconds 20] [--repeats 1] [--out FILE]

timm's results/*.csv, for this zoo: every model of `zoo.list_models()` (or those `--models`
names: names or fnmatch patterns, comma-separated) is built in its own fresh process and
measured there; the rows are written, in the registry's order, to `models.csv` beside the
JSON (`--out`, default benchmarks/results/models_table.json), which holds the machine,
the date, the settings, the load averages and every run. Nothing in the CSV is typed by hand:
the registry (`zoo.describe`) gives the family, dataset and the paper's number, the shipped
weights' records (each family's presets.json, written when the weights were trained) their
test accuracy, and the built model its parameters, FLOPs and speed. The docs' models table is made
from the committed CSV when the site is built (`docs/_hooks/site_pages.py`, `models_index`).

`--keep` (with `--models`) measures only those models and keeps every other registered
model's runs from the JSON already at `--out`: a new registration gets its row without
re-measuring the rest (an hour on the shared machine). It refuses, before measuring anything,
a JSON measured with other settings or on another machine, and a registered model in neither
(measure it too); the kept models' rows are rebuilt from the registry and their kept runs, so
their registry facts (shipped weights, the paper's number) are today's. Every run records the
date it was measured (`date`), and the JSON lists the models `measured` by this invocation and
those `kept`.

Why benchmarks/results/ and not a top-level results/ as in timm (issue 30): every
other benchmark writes its JSON there, the suite (`highway-zoo bench --full`) writes there,
the site copies that directory's files beside the benchmarks page, and a quick run
(`highway-zoo bench`) writes to ./bench_results/ instead, so it never replaces the committed
table; a second results directory would split them.

The columns (`COLUMNS`, also in the JSON):

- model, family, dataset: the registry's;
- input_shape: the input one sample has, as measured (`28x28x1`; a language model's
  sequence is the recipe's BPTT length, 35 words of 21 characters: `35x21`); sample: `image`
  or `35-word sequence`, the unit of the FLOPs and the speeds;
- param_count: the built model's `count_params()` (exact, not millions);
- gflops_per_sample: one sample's forward pass, counted as `bench.conv.forward_flops` counts
  (2 x kernel size x output positions, summed over every layer with a kernel: Conv2D, Dense,
  HighwayConv2D, HighwayDense, a BNHighwayBlock's convolutions, an LSTM's kernel and
  recurrent kernel per step; batch norm, activations, pooling, embeddings' look-ups and the
  gates' products not counted), the character CNN's convolutions over every window of a
  word (`forward_flops` below);
- paper_metric, paper_value, paper_source: the number the paper reports for this exact net
  (the registry's `paper_accuracy` (%), `paper_top5_error` (%) or `paper_perplexity`, named
  without `paper_`) and the registry's `paper` field (paper, section, table); empty where the
  paper gives none (Fashion-MNIST, the FC nets of Fig. 1, which plots training loss);
- weights: `shipped` (`zoo.load(name, weights="default")`) or `none`;
- top1, top1_eval: the shipped weights' test accuracy in % as the index records it, and the
  test set it was measured on (a lossy copy such as CIFAR-10's JPEGs says so); empty
  without weights;
- batch_size, train_samples_per_sec, infer_samples_per_sec: random inputs of the model's own
  shape (raw pixel values; character ids), `train_on_batch` with Nesterov SGD (lr 0.01,
  momentum 0.9; the loss from logits where the model outputs logits), then
  `predict_on_batch`, at the same batch size: `--batch-size` (128), `--large-batch-size` (32)
  for inputs of 224 x 224 pixels or more, and a language model's recipe batch (20
  sequences); after one untimed call of each (tracing), `--steps` timed calls, fewer (at least
  one) once they add up to `--max-seconds` (an ImageNet net's step takes seconds here); the
  median call, over `--repeats` interleaved repeats the median again. On TensorFlow, the
  default backend (`KERAS_BACKEND` picks another).

The speeds are the machine's: the committed table was measured on a 2-core machine shared
with other work, so they are noisy; the JSON records the load averages (`os.getloadavg()`)
before and after the run and at the start of every measurement.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import conv, driver

MODULE = "benchmarks.models_table"
RESULTS = Path(__file__).resolve().parent / "results" / "models_table.json"
CSV_NAME = "models.csv"

# Column -> what it holds (the JSON carries this too; the docs and the tests read it).
COLUMNS = {
    "model": "the registered name (zoo.list_models())",
    "family": "the builder family (zoo.describe(name)['family'])",
    "dataset": "the dataset it is registered for",
    "input_shape": "one sample's input as measured, e.g. 28x28x1; a language model's sequence "
                   "of words x characters",
    "sample": "the unit of the FLOPs and speeds: image, or a language model's sequence",
    "param_count": "parameters of the built model (count_params(), exact)",
    "gflops_per_sample": "forward GFLOPs of one sample (2 x kernel size x output positions "
                         "over the layers with a kernel, as bench.conv.forward_flops)",
    "paper_metric": "what the paper reports for this net: accuracy (%), top5_error (%) or "
                    "perplexity; empty where it reports none",
    "paper_value": "the paper's number (the registry's paper_<metric>)",
    "paper_source": "the paper, section and table (the registry's 'paper')",
    "weights": "shipped (zoo.load(name, weights='default')) or none",
    "top1": "the shipped weights' test accuracy, %, as their preset's weights record has it",
    "top1_eval": "the test set top1 was measured on, and the recipe if not the paper's",
    "batch_size": "the batch size of the timed training and inference calls",
    "train_samples_per_sec": "training samples/s on this machine's CPU (train_on_batch)",
    "infer_samples_per_sec": "inference samples/s on this machine's CPU (predict_on_batch)",
}
# The registry's paper numbers, one per model: metadata key -> paper_metric.
PAPER_KEYS = {"paper_accuracy": "accuracy", "paper_top5_error": "top5_error",
              "paper_perplexity": "perplexity"}
LARGE_PIXELS = 224 * 224  # inputs this size or larger are measured at --large-batch-size


# -- what the registry and the index say ------------------------------------------------------


def paper_number(meta: dict) -> tuple[str, float | None, str]:
    """(metric, value, source) of the paper's one number for this net; ('', None, '') where
    the registry has none. A per-variant table (Table 1a's perplexities) is other nets'."""
    found = [(metric, meta[key]) for key, metric in PAPER_KEYS.items()
             if meta.get(key) is not None]
    if not found:
        return "", None, ""
    if len(found) > 1:  # a second number would need a column of its own
        raise ValueError(f"{meta['name']} has {len(found)} paper numbers ({found}); the table "
                         "has one paper_value column")
    metric, value = found[0]
    return metric, value, str(meta.get("paper") or "")


def shipped_accuracy(meta: dict) -> tuple[float | None, str]:
    """(test accuracy %, the test set) of the shipped weights, from the index; (None, '')."""
    shipped = meta.get("pretrained") or {}
    accuracy = shipped.get("test_accuracy")
    if accuracy is None:
        return None, ""
    data = shipped.get("dataset") or {}
    count = data.get("num_test")
    where = f"{data.get('name', meta.get('dataset'))} test" + (
        f", {count:,} examples" if isinstance(count, int) else "")
    source = str(data.get("source", "")).lower()
    if "sample" in source:
        where += " (the test part of a 5,000-digit sample, not the full MNIST)"
    elif "lossy" in source:
        where += " (a JPEG copy, lossy: close to the paper's test images, not equal to them)"
    recipe = shipped.get("recipe") or {}
    if recipe.get("paper_recipe"):
        where += f"; trained with {recipe['name']}, not the paper's {recipe['paper_recipe']}"
    return round(100 * accuracy, 2), where


def sample_input(meta: dict) -> tuple[list[int], str]:
    """The input shape one sample is measured at, and what a sample is. A sequence model
    (first dimension None) gets its recipe's BPTT length."""
    shape = list(meta["input_shape"])
    if shape[0] is None:
        steps = meta["recipe_settings"]["bptt_steps"]
        return [steps, *shape[1:]], f"{steps}-word sequence"
    return shape, "image"


def batch_size(meta: dict, small: int, large: int) -> int:
    """`small`, `large` for ImageNet-sized inputs, a sequence model's recipe batch."""
    if meta["input_shape"][0] is None:
        return int(meta["recipe_settings"]["batch_size"])
    return large if math.prod(meta["input_shape"][:2]) >= LARGE_PIXELS else small


def select(patterns: list[str]) -> list[str]:
    """The registered names that `patterns` (names or fnmatch patterns) give, in the registry's
    order; an unknown name, or a pattern matching none, raises ValueError in one line listing
    every registered name."""
    import zoo

    names = zoo.list_models()
    missing = [p for p in patterns if not fnmatch.filter(names, p)]
    if missing:
        raise ValueError(f"no registered model {', '.join(repr(p) for p in missing)}; "
                         f"registered: {', '.join(names)}")
    return [n for n in names if any(fnmatch.fnmatch(n, p) for p in patterns)]


# -- one measurement, in its own process -------------------------------------------------------


def forward_flops(model) -> int:
    """One sample's forward FLOPs: `bench.conv.forward_flops`, plus the character CNN's
    convolutions over all their windows (`forward_flops` counts one window per word: the
    embedder's output has one position per word, its convolutions `chars - k + 1` each)."""
    from layers import CharCNNEmbedder

    total = conv.forward_flops(model)
    for layer in model.layers:
        if isinstance(layer, CharCNNEmbedder):
            words = math.prod(layer.output.shape[1:-1])
            chars = layer.input.shape[-1]
            for w in layer.weights:
                if w.name.endswith("kernel") and len(w.shape) == 3:  # (k, embedding, filters)
                    total += 2 * math.prod(w.shape) * words * (chars - w.shape[0])
    return total


def measure(name: str, batch_size: int, steps: int, max_seconds: float | None = None) -> dict:
    """Runs in a fresh process: builds `name`, counts it, times training then inference."""
    import keras
    import numpy as np

    import zoo

    load = os.getloadavg()
    meta = zoo.describe(name)
    shape, _ = sample_input(meta)
    started = time.perf_counter()
    model = zoo.load(name, input_shape=tuple(shape)) if shape != meta["input_shape"] else (
        zoo.load(name))
    build_s = time.perf_counter() - started
    rng = np.random.default_rng(0)
    if "int" in str(model.inputs[0].dtype):  # character ids, 0 the padding
        vocab = meta["architecture_args"]["char_vocab_size"]
        x = rng.integers(1, vocab, (batch_size, *shape)).astype("int32")
    else:
        x = rng.uniform(0, 255, (batch_size, *shape)).astype("float32")
    y = rng.integers(0, model.output_shape[-1], (batch_size, *model.output_shape[1:-1]))
    # zoo.heads.classifier: a model ending in its "logits" layer outputs logits.
    from_logits = model.layers[-1].name == "logits"
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits))

    def calls(fn) -> list[float]:
        """`steps` timed calls, fewer (at least one) once they add up to `max_seconds`."""
        times = []
        while len(times) < steps and (not times or not max_seconds or sum(times) < max_seconds):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times

    start = time.perf_counter()
    model.train_on_batch(x, y)  # traces
    first = time.perf_counter() - start
    train = calls(lambda: model.train_on_batch(x, y))
    model.predict_on_batch(x)
    infer = calls(lambda: model.predict_on_batch(x))
    return {"model": name, "backend": keras.backend.backend(), "load_average": list(load),
            "param_count": model.count_params(), "forward_flops": forward_flops(model),
            "input_shape": list(shape), "batch_size": batch_size, "build_s": build_s,
            "first_train_step_s": first, "train_step_s": train, "infer_step_s": infer,
            "train_samples_per_sec": batch_size / statistics.median(train),
            "infer_samples_per_sec": batch_size / statistics.median(infer)}


# -- the table ---------------------------------------------------------------------------------


def row(meta: dict, runs: list[dict]) -> dict:
    """One CSV row: the registry's and the index's facts, the runs' counts and median speeds."""
    metric, value, source = paper_number(meta)
    top1, evaluated = shipped_accuracy(meta)
    shape, sample = sample_input(meta)
    return {
        "model": meta["name"], "family": meta["family"], "dataset": meta["dataset"],
        "input_shape": "x".join(map(str, shape)), "sample": sample,
        "param_count": runs[0]["param_count"],
        "gflops_per_sample": repr(runs[0]["forward_flops"] / 1e9),  # shortest exact float
        "paper_metric": metric, "paper_value": "" if value is None else value,
        "paper_source": source, "weights": "shipped" if meta.get("pretrained") else "none",
        "top1": "" if top1 is None else top1, "top1_eval": evaluated,
        "batch_size": runs[0]["batch_size"],
        "train_samples_per_sec": round(driver.median_of(runs, "train_samples_per_sec"), 2),
        "infer_samples_per_sec": round(driver.median_of(runs, "infer_samples_per_sec"), 2),
    }


def to_csv(rows: list[dict]) -> str:
    """The rows as CSV text, `COLUMNS` in order, a header first."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_csv(path: str | Path) -> list[dict]:
    """A models table as written: one dict per row, every value a string."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict]) -> None:
    """The CSV via a temporary file and a rename, as `driver.write_results` writes the JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(to_csv(rows), encoding="utf-8")
    os.replace(tmp, path)
    print(f"Wrote {path}")


# -- the command line --------------------------------------------------------------------------


def _patterns(text: str) -> list[str]:
    """--models: names or fnmatch patterns, comma-separated; each must match a model."""
    try:
        return select([p for p in text.split(",") if p.strip()] or [text])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def parser() -> argparse.ArgumentParser:
    p = driver.parser(MODULE, __doc__, RESULTS)
    p.add_argument("--models", type=_patterns, default=None,
                   help="names or fnmatch patterns, comma-separated (default: every "
                   "registered model)")
    p.add_argument("--batch-size", type=int, default=128, help="batch size of the models "
                   "below 224 x 224 pixels (a language model uses its recipe's)")
    p.add_argument("--large-batch-size", type=int, default=32,
                   help="batch size of the models of 224 x 224 pixels or more")
    p.add_argument("--steps", type=int, default=10, help="timed training (and inference) calls")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="stop timing training (inference) once its calls add up to this many "
                   "seconds, after at least one")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--keep", action="store_true",
                   help="measure only --models and keep every other registered model's runs "
                   "from --out's JSON (same settings and machine), so a new registration gets "
                   "its row without re-measuring the rest")
    p.add_argument("--facts-only", action="store_true",
                   help="measure nothing: rewrite the CSV from --out's JSON runs and the "
                   "registry as it is now (after weights ship or a paper number changes)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds one model's process may take before the run fails")
    return p


# The settings a kept run must share with the new ones (`--keep`).
SETTINGS = ("batch_size", "large_batch_size", "steps", "max_seconds", "repeats")


def kept_runs(out: Path, measured: list[str], settings: dict) -> tuple[dict, dict]:
    """(model -> its runs, the earlier JSON) for `--keep`: every registered model not in
    `measured`, from the JSON at `out`, each run dated (a run without a `date` is the file's).
    Raises ValueError in one line where the file is missing, was measured with other settings
    or on another machine, or lacks a registered model that is not measured now."""
    import zoo

    if not Path(out).is_file():
        raise ValueError(f"--keep keeps the runs of {out}, which does not exist; measure every "
                         "model (leave out --keep)")
    earlier = json.loads(Path(out).read_text(encoding="utf-8"))
    differ = {k: (earlier.get("settings", {}).get(k), settings[k]) for k in SETTINGS
              if earlier.get("settings", {}).get(k) != settings[k]}
    if differ:
        raise ValueError(f"--keep: {out} was measured with other settings ("
                         + ", ".join(f"{k} {old} there, {new} now" for k, (old, new)
                                     in differ.items())
                         + "); pass the same settings or measure every model")
    if earlier.get("machine") != driver.machine():
        raise ValueError(f"--keep: {out} was measured on {earlier.get('machine')!r}, this is "
                         f"{driver.machine()!r}; speeds from two machines make no one table: "
                         "measure every model here")
    wanted = [n for n in zoo.list_models() if n not in measured]
    missing = [n for n in wanted if n not in earlier.get("runs", {})]
    if missing:
        raise ValueError(f"--keep: {out} has no run of {', '.join(missing)}; add them to "
                         "--models")
    runs = {n: [{"date": earlier.get("date"), **r} for r in earlier["runs"][n]] for n in wanted}
    return runs, earlier


def rewrite_facts(out: Path) -> list[dict]:
    """The CSV next to `out` rewritten from the runs `out` records (the speeds as measured)
    and the registry's facts as they are now (weights, accuracies, paper numbers)."""
    import zoo

    if not Path(out).is_file():
        raise ValueError(f"--facts-only rewrites the CSV from {out}, which does not exist; "
                         "measure the models first")
    runs = json.loads(Path(out).read_text(encoding="utf-8"))["runs"]
    if missing := [n for n in zoo.list_models() if n not in runs]:
        raise ValueError(f"--facts-only: {out} has no run of {', '.join(missing)}; measure "
                         "them with --models ... --keep")
    rows = [row(zoo.describe(n), runs[n]) for n in zoo.list_models()]
    write_csv(Path(out).with_name(CSV_NAME), rows)
    return rows


def run(args: argparse.Namespace) -> int:
    import zoo

    if args.facts_only:
        try:
            rows = rewrite_facts(args.out)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        print(f"Rewrote {Path(args.out).with_name(CSV_NAME)}: {len(rows)} rows, speeds as "
              "measured")
        return 0
    if args.keep and not args.models:
        print("--keep keeps every model but those --models names: pass --models",
              file=sys.stderr)
        return 2
    names = args.models or zoo.list_models()
    settings = {"batch_size": args.batch_size, "large_batch_size": args.large_batch_size,
                "steps": args.steps, "max_seconds": args.max_seconds, "repeats": args.repeats}
    kept, earlier = {}, {}
    if args.keep:
        try:
            kept, earlier = kept_runs(args.out, names, settings)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
    if (load := os.getloadavg()[0]) > 0.5 * (os.cpu_count() or 1):
        # The 2026-11-26 table was measured at loads of 6-16 on 2 cores: 10-20x below `fit`.
        print(f"warning: the machine is busy (load average {load:.1f} on {os.cpu_count()} "
              "cores): the speeds will be far below an idle machine's; measure on an idle one",
              file=sys.stderr)
    metas = {name: zoo.describe(name) for name in names}
    plan = [(name, batch_size(metas[name], args.batch_size, args.large_batch_size))
            for name in names]
    load_before = os.getloadavg()
    started = time.perf_counter()
    runs = driver.interleaved(
        plan, args.repeats,
        lambda key: driver.run_child(MODULE, {
            "name": key[0], "batch_size": key[1], "steps": args.steps,
            "max_seconds": args.max_seconds}, timeout=args.timeout),
        describe=lambda key, run: (
            f"{key[0]} (batch {key[1]}): train {run['train_samples_per_sec']:.1f}/s, "
            f"inference {run['infer_samples_per_sec']:.1f}/s, load {run['load_average'][0]:.1f}"))
    today = time.strftime("%Y-%m-%d")
    every = {name: [{**r, "date": today} for r in runs[(name, batch)]] for name, batch in plan}
    backend = every[names[0]][0]["backend"]
    if kept and earlier.get("backend") != backend:
        print(f"--keep: {args.out} was measured on {earlier.get('backend')}, these on "
              f"{backend}; nothing written: measure every model on one backend",
              file=sys.stderr)
        return 2
    every.update(kept)
    order = [n for n in zoo.list_models() if n in every]
    metas.update({name: zoo.describe(name) for name in kept})
    rows = [row(metas[name], every[name]) for name in order]
    print()
    print(driver.table(
        ["model", "params", "GFLOPs", "batch", "train/s", "infer/s"],
        [":---", *["---:"] * 5],
        [[r["model"], f"{r['param_count']:,}", f"{float(r['gflops_per_sample']):.3g}",
          r["batch_size"], r["train_samples_per_sec"], r["infer_samples_per_sec"]]
         for r in rows]))
    csv_path = Path(args.out).with_name(CSV_NAME)
    write_csv(csv_path, rows)
    driver.write_results(args.out, {
        "csv": CSV_NAME,
        "backend": backend,
        "settings": {**settings, "optimizer": "SGD(0.01, momentum=0.9, nesterov=True)",
                     "inputs": "random: raw pixel values 0-255, or character ids"},
        "load_average": {"before": list(load_before), "after": list(os.getloadavg()),
                         "cores": os.cpu_count()},
        "total_s": round(time.perf_counter() - started, 1),
        "measured": names,
        "kept": list(kept),
        "columns": COLUMNS,
        "runs": {name: every[name] for name in order},
    })
    return 0


def main(argv: list[str] | None = None) -> int:
    return driver.main(parser(), argv, measure, run)


if __name__ == "__main__":
    sys.exit(main())
