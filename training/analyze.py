"""What a trained highway net's gates do, from its weights: analyses and TensorBoard.

`analyze_weights` (`highway-zoo analyze`) writes the NIPS 2015 Figs. 2-4, the estimation error
of Greff et al. 2017 §4.2 and, for a run trained with the GateSummaries callback, the T-gate
evolution (PNG and GIF), with every number behind them in analysis.json
(`zoo.analysis.analyze`). `serve_tensorboard` (`highway-zoo tensorboard`) starts TensorBoard on
a run's `RUN_DIR/tensorboard` (the GateSummaries log directory).

A run trained `--stacked` (one `HighwayStack`) is loaded stacked (its recorded overrides) and
analysed as it is, without converting it: its layers are named, numbered and measured as those
of the per-layer net (`highway_1`, ...; `zoo.analysis.highway_layers`).

The gated skips: a gru_gate net is analysed as any other, its T being GTrXL's update gate z. A
net of a static skip (rezero, layerscale, laurel_rw, laurel_lr) scales every example alike:
`analyze_weights` writes its learned skip scales instead (skip_scales.json and .png,
`zoo.analysis.skips`) and prints the one line `layers.variants.no_routing` says; asked for
routing (or, for a language model, per-token gates) it refuses with that line (a ValueError:
the command's one-line error, exit status 2).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from training.run_dir import TENSORBOARD_DIR, RunDir, default_dir

DEFAULT_EXAMPLES = 10000


def tensorboard_command(run_dir: str | Path, port: int = 6006,
                        host: str = "127.0.0.1") -> list[str]:
    """The command line that serves `run_dir`'s TensorBoard logs."""
    beside = Path(sys.executable).parent / "tensorboard"
    program = [str(beside)] if beside.is_file() else [sys.executable, "-m", "tensorboard.main"]
    return [*program, "--logdir", str(Path(run_dir) / TENSORBOARD_DIR), "--host", host,
            "--port", str(port)]


def serve_tensorboard(run_dir: str | Path, port: int = 6006, host: str = "127.0.0.1",
                      print_command: bool = False) -> int:
    """Serves `run_dir`'s gate summaries with TensorBoard until Ctrl-C (or prints the
    command); TensorBoard's exit status."""
    command = tensorboard_command(run_dir, port, host)
    if print_command:
        print(shlex.join(command))
        return 0
    log_dir = Path(run_dir) / TENSORBOARD_DIR
    if not log_dir.is_dir():
        raise FileNotFoundError(
            f"No TensorBoard logs in {log_dir}. Runs write them there when trained with the "
            "GateSummaries callback (training/callbacks.py); check RUN_DIR."
        )
    where = f"http://{host}:{port}/" if port else "a free port, which TensorBoard prints"
    print(f"TensorBoard for {run_dir}: {where} (Ctrl-C stops it)", flush=True)
    process = subprocess.Popen(command)
    try:
        return process.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cli/__init__.py): how a server is stopped
        return 0
    finally:
        if process.poll() is None:  # SIGTERM reached this process only: stop TensorBoard too
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _default_dataset(name: str, weights: Path) -> str:
    import json

    import zoo

    run_file = RunDir(weights).run_file
    if weights.is_dir() and run_file.is_file():
        dataset = json.loads(run_file.read_text(encoding="utf-8")).get("dataset") or {}
        if isinstance(dataset, dict) and dataset.get("name"):
            return dataset["name"]
    return zoo.describe(name)["dataset"]


def _output_dir(name: str, source: Path, out: str | Path | None) -> Path:
    """`out`, else WEIGHTS/analysis for a directory, else runs/analysis-NAME-TIME; refused
    when it holds an earlier analysis."""
    if out:
        out = Path(out)
    elif source.is_dir():
        out = source / "analysis"
    else:
        out = default_dir(f"analysis-{name}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"Output directory {out} already exists and is not empty; refusing to overwrite "
            "an earlier analysis. Pass a new --out, or move the old one away."
        )
    return out


def analyze_weights(
    name: str,
    weights: str | Path,
    *,
    dataset: str | None = None,
    data_dir: str | Path | None = None,
    split: str = "train",
    examples: int = DEFAULT_EXAMPLES,
    out: str | Path | None = None,
    classes: list[int] | None = None,
    threshold: float = 0.01,
    example_index: int = 0,
    run: str | Path | None = None,
    batch_size: int = 500,
    routing: bool = False,
    max_clusters: int = 12,
) -> dict:
    """Gate analyses of zoo net `name` with `weights` (`highway-zoo analyze`): NIPS 2015
    Figs. 2-4 and more into `out` (default WEIGHTS/analysis for a directory, else
    runs/analysis-NAME-TIME), or with `routing=True` the per-example routing report.
    `threshold` is an error increase as a fraction, as in `zoo.analysis` (0.01: one
    percentage point). Prints a summary; returns the report."""
    import zoo
    from training.data import first_examples, load_dataset
    from zoo.analysis import analyze

    if split not in ("train", "test"):
        raise ValueError(f"An image dataset has a train and a test split; --split {split} "
                         "applies to a text corpus (--corpus).")
    if zoo.describe(name)["family"] == "char_lm":
        raise ValueError(f"{name} is a language model: its gates are analysed per token of a "
                         "text; pass --corpus DIR (the corpus it was trained on).")
    source = Path(weights)
    out = _output_dir(name, source, out)
    model = zoo.load(name, weights=weights)
    if _static_skips(model):
        return _skip_scales(name, weights, routing, model, out)
    dataset = dataset or _default_dataset(name, source)
    data = load_dataset(dataset, data_dir)
    if tuple(model.inputs[0].shape[1:]) != tuple(data.image_shape):
        raise ValueError(
            f"{name} takes images of shape {tuple(model.inputs[0].shape[1:])}; dataset "
            f"{dataset!r} has {tuple(data.image_shape)}. Pass the --dataset it was trained on."
        )
    examples_of = data.train if split == "train" else data.test
    available = data.num_train if split == "train" else data.num_test
    images, labels = first_examples(examples_of, min(examples, available))
    if routing:
        return _routing(name, weights, split, max_clusters, batch_size, model, images,
                        labels, out, dataset, data)
    run_dir = Path(run) if run else (source if source.is_dir() else None)
    report = analyze(
        model, images, labels, out, num_classes=data.num_classes, classes=classes,
        example_index=example_index, threshold=threshold,
        batch_size=batch_size, run_dir=run_dir,
        describe={"architecture": name, "weights": str(weights), "dataset": dataset,
                  "data_source": data.source, "split": split},
    )
    fig2 = report["fig2"]
    fig4 = report["fig4"]
    print(f"{name} on {len(images)} {split} examples of {dataset}: "
          f"error {100 * fig4['baseline_error']:.2f}%, effective depth "
          f"{report['effective_depth']} of {len(report['layers'])} highway layers "
          f"(lesion raises the error by > {100 * threshold:g} pp: "
          f"{', '.join(report['layers_that_matter']) or 'none'})")
    layer_t = [t for t in fig2["layer_mean_t"] if t is not None]
    if layer_t:
        print(f"mean T by layer: {min(layer_t):.3f} to {max(layer_t):.3f}, "
              f"overall {np.mean(layer_t):.3f}")
    for name in report["files"].values():
        print(out / name)
    return report


def _static_skips(model) -> list:
    """The model's static-skip layers when it has no gate to analyse (else [])."""
    from zoo.analysis.gates import highway_layers, skip_layers

    return [] if highway_layers(model) else skip_layers(model)


def _skip_scales(name, weights, routing, model, out) -> dict:
    """A net of a static skip: its skip scales (refused for --routing), and the one line."""
    from layers.variants import no_routing
    from zoo.analysis.skips import skip_report

    line = no_routing(_static_skips(model)[0].variant)
    if routing:
        raise ValueError(f"{line}.")
    report = skip_report(model, out, describe={"architecture": name, "weights": str(weights)})
    print(f"{name}: {line}; its learned skip scales per layer:")
    for file in report["files"].values():
        print(out / file)
    return report


def _routing(name, weights, split, max_clusters, batch_size, model, images, labels, out,
             dataset, data) -> dict:
    from zoo.analysis.routing import routing_report

    if max_clusters < 2 or max_clusters >= len(images):
        raise ValueError(f"--max-clusters must lie in [2, {len(images) - 1}] for "
                         f"{len(images)} examples. Received: {max_clusters}")
    report = routing_report(
        model, images, labels, out, k_range=(2, max_clusters),
        num_classes=data.num_classes, batch_size=batch_size,
        describe={"architecture": name, "weights": str(weights), "dataset": dataset,
                  "data_source": data.source, "split": split},
    )
    pixels = report["pixel_baseline"]
    print(f"{name} on {len(images)} {split} examples of {dataset}: {report['k']} "
          f"route clusters (silhouette {report['silhouette']:.3f}), purity "
          f"{report['purity']:.3f}, NMI {report['nmi']:.3f} (at k = {data.num_classes}: "
          f"{report['nmi_at_classes']:.3f}; pixels: {pixels['nmi_at_classes']:.3f})")
    for name in report["files"].values():
        print(out / name)
    return report


def analyze_tokens(name: str, weights: str | Path, corpus: str | Path, *, split: str = "test",
                   out: str | Path | None = None, batch_size: int = 500,
                   seed: int = 0, gate: str | None = None) -> dict:
    """Per-token gate activity of language model `name` with `weights` on `corpus`'s `split`
    (`highway-zoo analyze NAME --weights RUN_DIR --corpus DIR`): tokens.png, tokens.json and
    tokens.md into `out` (default as `analyze_weights`'s), with the same architecture freshly
    initialised (seed `seed`) as the reference for how far training moved the gates; `gate`
    "T" or "C" (default: the variant's, `zoo.analysis.tokens.gate_of`), or "share" (the
    transform path's share of the output, `zoo.analysis.tokens.SHARE`). Prints a summary;
    returns the report."""
    import keras

    import zoo
    from training.data.text import load_corpus, split_files
    from zoo.analysis.tokens import token_report
    from zoo.weights import read_model_dir

    family = zoo.describe(name)["family"]
    if family != "char_lm":
        raise ValueError(f"--corpus analyses a character-aware language model's gates per "
                         f"token; {name} is not one (family {family!r}). Use an lstm_char_* "
                         "model, or drop --corpus for the image analyses.")
    split_files(corpus)  # a missing corpus is refused before the model loads
    source = Path(weights)
    out = _output_dir(name, source, out)
    model = zoo.load(name, weights=weights)
    text = load_corpus(corpus, max_word_length=int(model.inputs[0].shape[-1]))
    if source.is_dir():
        trained_on = (read_model_dir(source)[1].get("vocabulary") or {}).get("chars")
        if trained_on is not None and list(trained_on) != list(text.chars):
            raise ValueError(
                f"{source} was trained on another character vocabulary ({len(trained_on)} "
                f"characters) than the corpus {corpus} has ({len(text.chars)}): its character "
                "ids would be misread. Give the corpus it was trained on.")
    keras.utils.set_random_seed(seed)
    initial = zoo.load(name, **model.overrides)
    report = token_report(
        model, text, out, split, gate=gate, batch_size=batch_size, initial=initial,
        describe={"architecture": name, "weights": str(weights), "corpus": str(corpus),
                  "initial_seed": seed})
    gate = report["gate"]
    classes = ", ".join(f"{g['group']} {np.mean(g['mean']):.4f}" for g in report["by_class"])
    print(f"{name} on {report['tokens']:,} {split} tokens of {text.name} ({report['types']:,} "
          f"word types): mean {gate} {np.mean(report['overall']['mean']):.4f} (at "
          f"initialisation {np.mean(report['initial']['mean']):.4f}); by class: {classes}")
    for file in report["files"].values():
        print(out / file)
    return report
