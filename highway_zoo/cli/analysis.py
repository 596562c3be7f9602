"""`highway-zoo analyze` and `highway-zoo tensorboard`: what a trained net's gates do."""

from __future__ import annotations

from highway_zoo.cli.args import add_data_dir, add_dataset, add_list, finite, positive


def _analyze_arguments(p) -> None:
    from training.analyze import DEFAULT_EXAMPLES

    p.description = (
        "Writes PNGs and analysis.json: Fig. 2 (transform gate biases, mean T, T and block "
        "outputs for one example), Fig. 3 (per-class mean T minus mean T), Fig. 4 (error with "
        "each highway layer lesioned, T := 0) and the effective depth, the estimation error "
        "per block of each stage (Greff et al. 2017 §4.2) and, for a run with gates.json, the "
        "T-gate evolution over epochs (PNG and GIF). Conv layers are averaged over positions "
        "(a unit is a channel). With --routing: per-example routing instead. With --corpus, "
        "for a character-aware language model: T per token of a text, by word frequency, "
        "length and class. A gru_gate net's T is its update gate z; a net of rezero, "
        "layerscale, laurel_rw or laurel_lr scales every example alike (no routing): its "
        "learned skip scales per layer instead (skip_scales.json, skip_scales.png).")
    p.add_argument("name", help="architecture name (highway-zoo list)")
    p.add_argument("--weights", required=True, help="a run directory of highway-zoo train, "
                   "a model directory, a .weights.h5 file (with its .sha256) or 'default'")
    add_dataset(p, default="the run's dataset, else the architecture's own")
    add_data_dir(p)
    p.add_argument("--split", choices=["train", "valid", "test"],
                   help="the examples analysed (default train, as in the paper; with "
                   "--corpus, the corpus's split, default test; valid is a corpus's only)")
    p.add_argument("--examples", type=positive, default=DEFAULT_EXAMPLES,
                   help=f"the first N examples of the split (default {DEFAULT_EXAMPLES})")
    p.add_argument("--out", metavar="DIR", help="output directory, new or empty (default: "
                   "WEIGHTS/analysis for a directory, else runs/analysis-NAME-TIME)")
    add_list(p, "--classes", item=int, help="classes drawn as Fig. 3 panels, e.g. 0,7 "
             "(default: the first ten)")
    p.add_argument("--threshold", type=finite, default=1.0, metavar="PP",
                   help="a lesioned layer counts towards the effective depth when the error "
                   "rises by more than PP percentage points (default 1)")
    p.add_argument("--example-index", type=int, default=0,
                   help="the example shown in Fig. 2's single-example columns (default 0)")
    p.add_argument("--run", metavar="RUN_DIR", help="run directory whose gates.json to plot "
                   "(default: --weights, if it is a directory)")
    p.add_argument("--batch-size", type=positive, default=500,
                   help="examples per forward pass (default 500)")
    p.add_argument("--routing", action="store_true",
                   help="instead of Figs. 2-4: per-example routing, every example's T pattern "
                   "clustered by k-means (k by silhouette) and compared with the classes "
                   "(routing.png, routing.json; zoo/analysis/routing.py)")
    p.add_argument("--max-clusters", type=positive, default=12,
                   help="--routing tries k = 2 .. this (default 12)")
    p.add_argument("--corpus", metavar="DIR", help="for a character-aware language model "
                   "(lstm_char_*), instead of the image analyses: per-token gate activity on "
                   "the Mikolov-format corpus in DIR, by word frequency, length and class "
                   "(tokens.png, tokens.json, tokens.md; zoo/analysis/tokens.py)")
    p.add_argument("--gate", choices=["T", "C", "share"], help="with --corpus, the gate "
                   "measured: default T, or C for c_only; full learns both, each on its own. "
                   "share: what the gates do, the transform path's share of a word's "
                   "output, Σ|T·H| / Σ(|T·H| + |C·x|), and how often H is 0; for every variant of "
                   "Greff et al.'s six")


def analyze(args) -> None:
    from training.analyze import analyze_tokens, analyze_weights

    if args.corpus is not None:
        if args.routing:
            raise ValueError("--routing clusters images; with --corpus the analysis is per "
                             "token. Drop one of them.")
        analyze_tokens(args.name, args.weights, args.corpus, split=args.split or "test",
                       out=args.out, batch_size=args.batch_size, gate=args.gate)
        return
    if args.gate is not None:
        raise ValueError("--gate picks the gate measured per token, with --corpus; the image "
                         "analyses read T. Drop --gate, or add --corpus.")
    analyze_weights(
        args.name, args.weights, dataset=args.dataset, data_dir=args.data_dir,
        split=args.split or "train", examples=args.examples, out=args.out, classes=args.classes,
        threshold=args.threshold / 100, example_index=args.example_index, run=args.run,
        batch_size=args.batch_size, routing=args.routing, max_clusters=args.max_clusters,
    )


def _port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the system picks a free one)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer. Received: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535. Received: {text!r}")
    return value


def _tensorboard_arguments(p) -> None:
    p.description = ("Runs `tensorboard --logdir RUN_DIR/tensorboard --host 127.0.0.1 --port "
                     "P` (the log directory of the GateSummaries callback).")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of highway-zoo train")
    p.add_argument("--port", type=_port, default=6006,
                   help="default 6006; 0: a free port, which TensorBoard prints")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--print-command", action="store_true",
                   help="print the command instead of running it")


def tensorboard(args) -> int:
    from training.analyze import serve_tensorboard

    return serve_tensorboard(args.run_dir, args.port, args.host, args.print_command)


COMMANDS = {"analyze": (_analyze_arguments, analyze),
            "tensorboard": (_tensorboard_arguments, tensorboard)}
