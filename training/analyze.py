"""`highway-zoo analyze` and `highway-zoo tensorboard`: what a trained highway net's gates do.

    highway-zoo analyze NAME --weights W [--dataset D] [--data-dir DIR] [--split train|test]
                        [--examples N] [--out DIR] [--classes 0,7] [--threshold PP]
                        [--example-index I] [--run RUN_DIR] [--batch-size N]
    highway-zoo tensorboard RUN_DIR [--port P] [--host H] [--print-command]

`analyze` writes the NIPS 2015 Figs. 2-4, the estimation error of Greff et al. 2017 §4.2 and,
for a run trained with the GateSummaries callback, the T-gate evolution (PNG and GIF), with
every number behind them in analysis.json (`zoo.analysis.analyze`). `tensorboard` starts
TensorBoard on a run's `RUN_DIR/tensorboard` (the GateSummaries log directory).

A run trained `--stacked` (one `HighwayStack`) is loaded stacked (its recorded overrides) and
analysed as it is, without converting it: its layers are named, numbered and measured as those
of the per-layer net (`highway_1`, ...; `zoo.analysis.highway_layers`).
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

TENSORBOARD_DIR = "tensorboard"
DEFAULT_EXAMPLES = 10000


def _classes(text: str) -> list[int]:
    try:
        classes = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--classes takes comma-separated class numbers, e.g. 0,7. Received: {text!r}"
        ) from None
    if not classes:
        raise argparse.ArgumentTypeError(f"--classes names no class. Received: {text!r}")
    return classes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer. Received: {text!r}")
    return value


def add_parsers(sub) -> None:
    """Adds the `analyze` and `tensorboard` subcommands to `highway-zoo`'s subparsers."""
    p = sub.add_parser(
        "analyze", help="gate analyses of a trained net: NIPS 2015 Figs. 2-4 and more",
        description="Writes PNGs and analysis.json: Fig. 2 (transform gate biases, mean T, "
        "T and block outputs for one example), Fig. 3 (per-class mean T minus mean T), "
        "Fig. 4 (error with each highway layer lesioned, T := 0) and the effective depth, "
        "the estimation error per block of each stage (Greff et al. 2017 §4.2) and, for a "
        "run with gates.json, the T-gate evolution over epochs (PNG and GIF). Conv layers "
        "are averaged over positions (a unit is a channel).",
    )
    p.add_argument("name", help="architecture name (highway-zoo list)")
    p.add_argument("--weights", required=True, help="a run directory of highway-zoo train, "
                   "a model directory, a .weights.h5 file (with its .sha256) or 'default'")
    p.add_argument("--dataset", help="mnist, fashion_mnist, cifar10, cifar100 (default: the "
                   "run's dataset, else the architecture's own)")
    p.add_argument("--data-dir", help="directory holding the upstream dataset files")
    p.add_argument("--split", choices=["train", "test"], default="train",
                   help="the examples analysed (default train, as in the paper)")
    p.add_argument("--examples", type=_positive, default=DEFAULT_EXAMPLES,
                   help=f"the first N examples of the split (default {DEFAULT_EXAMPLES})")
    p.add_argument("--out", help="output directory, new or empty (default: WEIGHTS/analysis "
                   "for a directory, else runs/analysis-NAME-TIME)")
    p.add_argument("--classes", type=_classes, help="classes drawn as Fig. 3 panels, e.g. "
                   "0,7 (default: the first ten)")
    p.add_argument("--threshold", type=float, default=1.0, metavar="PP",
                   help="a lesioned layer counts towards the effective depth when the error "
                   "rises by more than PP percentage points (default 1)")
    p.add_argument("--example-index", type=int, default=0,
                   help="the example shown in Fig. 2's single-example columns (default 0)")
    p.add_argument("--run", metavar="RUN_DIR", help="run directory whose gates.json to plot "
                   "(default: --weights, if it is a directory)")
    p.add_argument("--batch-size", type=_positive, default=500)
    p.add_argument("--routing", action="store_true",
                   help="instead of Figs. 2-4: per-example routing, every example's T pattern "
                   "clustered by k-means (k by silhouette) and compared with the classes "
                   "(routing.png, routing.json; zoo/analysis/routing.py)")
    p.add_argument("--max-clusters", type=_positive, default=12,
                   help="--routing tries k = 2 .. this (default 12)")

    p = sub.add_parser(
        "tensorboard", help="start TensorBoard on a run's gate summaries",
        description="Runs `tensorboard --logdir RUN_DIR/tensorboard --host 127.0.0.1 --port "
        "P` (the log directory of the GateSummaries callback).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--port", type=int, default=6006, help="default 6006")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--print-command", action="store_true",
                   help="print the command instead of running it")


def tensorboard_command(run_dir: str | Path, port: int = 6006,
                        host: str = "127.0.0.1") -> list[str]:
    """The command line that serves `run_dir`'s TensorBoard logs."""
    beside = Path(sys.executable).parent / "tensorboard"
    program = [str(beside)] if beside.is_file() else [sys.executable, "-m", "tensorboard.main"]
    return [*program, "--logdir", str(Path(run_dir) / TENSORBOARD_DIR), "--host", host,
            "--port", str(port)]


def _tensorboard(args: argparse.Namespace) -> int:
    command = tensorboard_command(args.run_dir, args.port, args.host)
    if args.print_command:
        print(shlex.join(command))
        return 0
    log_dir = Path(args.run_dir) / TENSORBOARD_DIR
    if not log_dir.is_dir():
        raise FileNotFoundError(
            f"No TensorBoard logs in {log_dir}. Runs write them there when trained with the "
            "GateSummaries callback (training/callbacks.py); check RUN_DIR."
        )
    print(f"TensorBoard for {args.run_dir}: http://{args.host}:{args.port}/ (Ctrl-C stops it)",
          flush=True)
    process = subprocess.Popen(command)
    try:
        return process.wait()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (training/cli.py): how a server is stopped
        return 0
    finally:
        if process.poll() is None:  # SIGTERM reached this process only: stop TensorBoard too
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def load_examples(split, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` (image, label) pairs of an unbatched split, as float32 and int64."""
    images, labels = next(iter(split.take(count).batch(count)))
    return np.asarray(images, np.float32), np.asarray(labels, np.int64)


def _default_dataset(name: str, weights: Path) -> str:
    import json

    import zoo

    run_file = weights / "run.json"
    if weights.is_dir() and run_file.is_file():
        dataset = json.loads(run_file.read_text(encoding="utf-8")).get("dataset") or {}
        if isinstance(dataset, dict) and dataset.get("name"):
            return dataset["name"]
    return zoo.describe(name)["dataset"]


def _analyze(args: argparse.Namespace) -> int:
    import zoo
    from training.data import load_dataset
    from zoo.analysis import analyze

    weights = Path(args.weights)
    if args.out:
        out = Path(args.out)
    elif weights.is_dir():
        out = weights / "analysis"
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"analysis-{args.name}-{stamp}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"Output directory {out} already exists and is not empty; refusing to overwrite "
            "an earlier analysis. Pass a new --out, or move the old one away."
        )
    dataset = args.dataset or _default_dataset(args.name, weights)
    data = load_dataset(dataset, args.data_dir)
    model = zoo.load(args.name, weights=args.weights)
    if tuple(model.inputs[0].shape[1:]) != tuple(data.image_shape):
        raise ValueError(
            f"{args.name} takes images of shape {tuple(model.inputs[0].shape[1:])}; dataset "
            f"{dataset!r} has {tuple(data.image_shape)}. Pass the --dataset it was trained on."
        )
    split = data.train if args.split == "train" else data.test
    available = data.num_train if args.split == "train" else data.num_test
    images, labels = load_examples(split, min(args.examples, available))
    if args.routing:
        return _routing(args, model, images, labels, out, dataset, data)
    run_dir = Path(args.run) if args.run else (weights if weights.is_dir() else None)
    report = analyze(
        model, images, labels, out, num_classes=data.num_classes, classes=args.classes,
        example_index=args.example_index, threshold=args.threshold / 100,
        batch_size=args.batch_size, run_dir=run_dir,
        describe={"architecture": args.name, "weights": str(args.weights), "dataset": dataset,
                  "data_source": data.source, "split": args.split},
    )
    fig2 = report["fig2"]
    fig4 = report["fig4"]
    print(f"{args.name} on {len(images)} {args.split} examples of {dataset}: "
          f"error {100 * fig4['baseline_error']:.2f}%, effective depth "
          f"{report['effective_depth']} of {len(report['layers'])} highway layers "
          f"(lesion raises the error by > {args.threshold:g} pp: "
          f"{', '.join(report['layers_that_matter']) or 'none'})")
    layer_t = [t for t in fig2["layer_mean_t"] if t is not None]
    if layer_t:
        print(f"mean T by layer: {min(layer_t):.3f} to {max(layer_t):.3f}, "
              f"overall {np.mean(layer_t):.3f}")
    for name in report["files"].values():
        print(out / name)
    return 0


def _routing(args, model, images, labels, out, dataset, data) -> int:
    from zoo.analysis.routing import routing_report

    if args.max_clusters < 2 or args.max_clusters >= len(images):
        raise ValueError(f"--max-clusters must lie in [2, {len(images) - 1}] for "
                         f"{len(images)} examples. Received: {args.max_clusters}")
    report = routing_report(
        model, images, labels, out, k_range=(2, args.max_clusters),
        num_classes=data.num_classes, batch_size=args.batch_size,
        describe={"architecture": args.name, "weights": str(args.weights), "dataset": dataset,
                  "data_source": data.source, "split": args.split},
    )
    pixels = report["pixel_baseline"]
    print(f"{args.name} on {len(images)} {args.split} examples of {dataset}: {report['k']} "
          f"route clusters (silhouette {report['silhouette']:.3f}), purity "
          f"{report['purity']:.3f}, NMI {report['nmi']:.3f} (at k = {data.num_classes}: "
          f"{report['nmi_at_classes']:.3f}; pixels: {pixels['nmi_at_classes']:.3f})")
    for name in report["files"].values():
        print(out / name)
    return 0


def run(args: argparse.Namespace) -> int:
    """Runs the `analyze` or `tensorboard` subcommand parsed by `add_parsers`."""
    if args.command == "tensorboard":
        return _tensorboard(args)
    return _analyze(args)
