"""`highway-zoo`: the command line.

    highway-zoo list [PATTERN]
    highway-zoo describe NAME [--json]
    highway-zoo train NAME [--dataset D] [--data-dir DIR] [--out RUN_DIR] [--seed S]
                      [--recipe paper|quick|NAME] [--epochs N] [--batch-size N] ...
                      [--strategy default|mirrored|multiworker] [--cpu-devices N]
                      [--checkpoint-every STEPS] [--depth N] ...
    highway-zoo demo [--depths 10,20,50] [--epochs N] [--data-dir DIR] [--out DIR]
    highway-zoo sweep [--depths 10,20,50,100] [--kinds highway,plain] [--seeds N] ...
    highway-zoo variants [--variants coupled,...,plain] [--depths 10,20,50,100] [--seeds N] ...
    highway-zoo fig1 [--depths 10,20,50,100] [--kinds plain,highway] [--trials 100] [--epochs N]
    highway-zoo export NAME [--weights W | --run RUN_DIR | --random-weights] [--version N] ...
    highway-zoo predict --model-dir exported/NAME/VERSION IMAGE...
    highway-zoo analyze NAME --weights W [--dataset D] [--examples N] [--out DIR] ...
    highway-zoo tensorboard RUN_DIR [--port P] [--print-command]
    highway-zoo tune NAME [--tuner random|bayesian|hyperband] [--max-trials N] [--epochs N]
                     [--objective val_accuracy|...] [--dir DIR] [--bias-range LOW,HIGH] ...
    highway-zoo bias-study [--depths 50,100] [--biases -1,-2,-4] [--epochs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# CLI flags that become architecture overrides (dest -> override name).
OVERRIDE_FLAGS = {
    "depth": int,
    "width": int,
    "transform_bias": float,
    "activation": str,
    "variant": str,
    "classes": int,
}


# Commands that pick up where they stopped when run again with the same arguments.
RESUMABLE = {"train": "the run resumes from its last checkpoint",
             "tune": "finished trials are kept", "fig1": "finished trials are kept"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (what was wrong and where to look)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the `finally` blocks run, temporary files go."""


@contextlib.contextmanager
def _sigterm_interrupts():
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals
        return

    def interrupt(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number. Received: {text!r}")
    return value


def _one_line(err: BaseException) -> str:
    """The error's message on one line, with what to do for the usual OS errors."""
    if isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = f" {err.filename}" if err.filename else ""
        return (f"cannot write{where}: {err.strerror}. Choose a location you can write to, or "
                "make it writable.")
    if isinstance(err, OSError) and err.errno == errno.ENOSPC and type(err) is OSError:
        where = f" writing {err.filename}" if err.filename else ""
        return f"no space left on the device{where}. Free some space and run the command again."
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _exit_code(err: Exception) -> int | None:
    """The exit status for an error a user can cause or fix; None for a bug (traceback)."""
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        if isinstance(err, tf.errors.UnavailableError):  # multi-worker: a peer went away
            return 1
    if "training.trainer" in sys.modules:
        from training.trainer import NonFiniteLossError

        if isinstance(err, NonFiniteLossError):
            return 1
    if "bench._common" in sys.modules:
        from bench._common import MeasurementFailed

        if isinstance(err, MeasurementFailed):
            return 1
    return 2 if isinstance(err, (ValueError, OSError)) else None


def _message(err: Exception) -> str:
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        if isinstance(err, tf.errors.UnavailableError):
            return ("another worker stopped; see its output, fix the cause and start all "
                    f"workers again with the same command. ({_one_line(err)})")
    return _one_line(err)


def _depths(text: str) -> list[int]:
    try:
        depths = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--depths takes comma-separated integers, e.g. 10,20,50. Received: {text!r}"
        ) from None
    if not depths or min(depths) < 2:
        raise argparse.ArgumentTypeError(f"depths must be integers >= 2. Received: {text!r}")
    return depths


def _add_override_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("architecture overrides (what the family allows)")
    for name, kind in OVERRIDE_FLAGS.items():
        kind = _finite if kind is float else kind
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)
    group.add_argument("--stacked", action="store_const", const=True, default=None,
                       help="highway FC nets: keep the highway layers as one HighwayStack "
                       "(stacked weights, one scan): start-up independent of depth")


def _overrides(args: argparse.Namespace) -> dict:
    names = (*OVERRIDE_FLAGS, "stacked")
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def _add_train_parser(sub) -> None:
    from training.distribute import STRATEGIES
    from training.recipes import add_recipe_flags

    p = sub.add_parser(
        "train", help="train a zoo network with its recipe",
        description="Trains a zoo network with its paper recipe (or --recipe quick), "
        "writing a run directory that resumes after an interruption: run the same command "
        "again. --batch-size is the GLOBAL batch, split over all replicas; the learning "
        "rate is not scaled with the number of replicas.",
    )
    p.add_argument("name")
    p.add_argument("--dataset", help="mnist, fashion_mnist, cifar10, cifar100 "
                   "(default: the architecture's own)")
    p.add_argument("--data-dir", help="directory holding the upstream dataset files")
    p.add_argument("--out", help="run directory: new, empty, or an interrupted run of the "
                   "same configuration, which is resumed (default runs/NAME-TIME)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipe", default="paper", help="paper (default: the architecture's "
                   "recipe), quick (a few minutes on a CPU) or a recipe name")
    p.add_argument("--checkpoint-every", type=int, metavar="STEPS",
                   help="also checkpoint every STEPS steps (default: every epoch only)")
    p.add_argument("--no-gate-summaries", dest="gate_summaries", action="store_false",
                   help="do not write the transform gates' TensorBoard summaries and "
                   "gates.json each epoch")
    p.add_argument("--strategy", choices=STRATEGIES, default="default",
                   help="default (one device), mirrored (all local GPUs, or the logical "
                   "CPU devices of --cpu-devices) or multiworker (TF_CONFIG; see "
                   "training/distribute.py)")
    p.add_argument("--verbose", choices=["auto", "0", "1", "2"], default="auto",
                   help="Keras progress: 1 a bar, 2 one line per epoch, 0 none")
    p.add_argument("--cpu-devices", type=int, metavar="N",
                   help="split the host CPU into N logical devices (for --strategy mirrored "
                   "without GPUs)")
    add_recipe_flags(p)
    _add_override_flags(p)


def _train(args: argparse.Namespace) -> int:
    from training import distribute
    from training.recipes import recipe_overrides

    if args.cpu_devices is not None:
        distribute.set_cpu_devices(args.cpu_devices)  # before anything starts TensorFlow
    from training.trainer import train

    metrics = train(
        args.name, dataset=args.dataset, data_dir=args.data_dir, out=args.out,
        seed=args.seed, recipe=args.recipe, recipe_overrides=recipe_overrides(args),
        strategy=args.strategy, checkpoint_every=args.checkpoint_every,
        gate_summaries=args.gate_summaries,
        verbose=args.verbose if args.verbose == "auto" else int(args.verbose),
        **_overrides(args),
    )
    print(json.dumps(metrics, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="highway-zoo", description="Highway Networks model zoo (Keras 3)."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the registered architectures")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. '*cifar*'")
    p.add_argument("--pretrained", action="store_true",
                   help="only architectures with shipped weights (weights='default')")

    p = sub.add_parser("describe", help="show an architecture's metadata")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print JSON")

    _add_train_parser(sub)
    from training import predict as serving_cli

    serving_cli.add_parsers(sub)  # export, predict
    from training import analyze as analyze_cli

    analyze_cli.add_parsers(sub)  # analyze, tensorboard
    from training import tuning as tuning_cli

    tuning_cli.add_parsers(sub)  # tune, bias-study
    from training import variants as variants_cli

    variants_cli.add_parsers(sub)  # variants
    from training import fig1 as fig1_cli

    fig1_cli.add_parsers(sub)  # fig1

    p = sub.add_parser("demo", help="the main job: highway vs plain nets by depth on MNIST")
    p.add_argument("--depths", type=_depths, default=[10, 20, 50],
                   help="comma-separated depths (default 10,20,50)")
    p.add_argument("--init", choices=["seed", "glorot"], default="seed",
                   help="kernel initialisation: the seed write-up's uniform "
                   "+-1/sqrt(fan_in) (default) or the paper's Glorot")
    p.add_argument("--epochs", type=int, help="default: the recipe's 12")
    p.add_argument("--data-dir", help="directory holding the upstream MNIST files")
    p.add_argument("--out", help="output directory (new or empty; default runs/demo-TIME)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--transform-bias", type=_finite, help="highway nets' b_T (default -2)")

    p = sub.add_parser("sweep", help="NIPS 2015 Fig. 1: training loss of plain and highway "
                       "nets by depth, over seeds")
    p.add_argument("--depths", type=_depths, default=[10, 20, 50, 100],
                   help="comma-separated depths (default 10,20,50,100)")
    p.add_argument("--kinds", default="highway,plain", help="highway,plain (default) or one")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds 0..N-1 (default 1)")
    p.add_argument("--activation", default="tanh", help="tanh (default) or relu")
    p.add_argument("--transform-bias", type=_finite, action="append",
                   help="highway nets' b_T (default -2); repeat for one series per value")
    p.add_argument("--init", default="seed", help="kernel initialisation: seed (default, "
                   "uniform +-1/sqrt(fan_in)) or glorot (the paper's)")
    p.add_argument("--epochs", type=int, help="default: the recipe's 12")
    p.add_argument("--data-dir", help="directory holding the upstream MNIST files")
    p.add_argument("--out", help="output directory (new or empty; default runs/sweep-TIME)")
    p.add_argument("--in-process", action="store_true",
                   help="train every net in this process (faster; no per-run peak memory "
                   "or CPU time)")

    p = sub.add_parser("bench", help="benchmarks: this project against NumPy, PyTorch and "
                       "plain Keras; wide, conv and serving speed (quick set by default)")
    p.add_argument("--full", action="store_true",
                   help="the full set the README quotes (about an hour; writes bench/results)")
    p.add_argument("--only", type=lambda s: [n for n in s.split(",") if n],
                   help="comma-separated subset: headline,wide,conv,serving")
    p.add_argument("--out", help="results directory (default ./bench_results for the quick "
                   "set, bench/results for --full)")
    return parser


def _print_models(pattern: str, pretrained: bool = False) -> None:
    import zoo

    names = zoo.list_models(pattern, pretrained=pretrained)
    if not names:
        raise ValueError(f"No architecture matches {pattern!r}; try `highway-zoo list`.")
    print(f"{'name':30s} {'params':>10s} {'paper acc':>9s} {'weights':>8s}  {'tag':7s} dataset")
    for name in names:
        m = zoo.describe(name)
        acc = f"{m['paper_accuracy']:.2f}" if m["paper_accuracy"] else "-"
        # The test accuracy of the shipped weights (weights="default"), if any.
        ours = f"{m['pretrained']['test_accuracy']:.4f}" if m["pretrained"] else "-"
        print(f"{name:30s} {m['params']:>10,d} {acc:>9s} {ours:>8s}  {m['provenance']:7s} "
              f"{m['dataset']}")


def _print_description(name: str, as_json: bool) -> None:
    import zoo

    meta = zoo.describe(name)
    if as_json:
        print(json.dumps(meta, indent=2, default=str))
        return
    for key, value in meta.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key:22s} {value}")


def main(argv: list[str] | None = None) -> int:
    """Runs a command; an error the user can cause or fix is one line on stderr and exit
    status 2 (1 for a run that failed on its own, 128 + signal for an interrupt); a bug
    keeps its traceback."""
    args = build_parser().parse_args(argv)
    prog = f"highway-zoo {args.command}"
    try:
        with _sigterm_interrupts():
            return _run(args) or 0
    except KeyboardInterrupt as interrupt:
        then = RESUMABLE.get(args.command)
        hint = f"; run the same command again to resume ({then})" if then else ""
        print(f"{prog}: interrupted{hint}.", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
    except Exception as err:
        code = _exit_code(err)
        if code is None:
            raise
        print(f"{prog}: error: {_message(err)}", file=sys.stderr)
        return code


def _run(args: argparse.Namespace) -> int | None:
    """Dispatches the parsed command."""
    if args.command == "list":
        _print_models(args.pattern, args.pretrained)
    elif args.command == "describe":
        _print_description(args.name, args.json)
    elif args.command == "train":
        return _train(args)
    elif args.command in ("export", "predict"):
        from training import predict as serving_cli

        return serving_cli.run(args)
    elif args.command in ("analyze", "tensorboard"):
        from training import analyze as analyze_cli

        return analyze_cli.run(args)
    elif args.command in ("tune", "bias-study"):
        from training import tuning as tuning_cli

        return tuning_cli.run(args)
    elif args.command == "variants":
        from training import variants as variants_cli

        return variants_cli.run(args)
    elif args.command == "fig1":
        from training import fig1 as fig1_cli

        return fig1_cli.run(args)
    elif args.command == "demo":
        from training.demo import demo

        extra = {} if args.transform_bias is None else {"transform_bias": args.transform_bias}
        demo(args.depths, init=args.init, epochs=args.epochs, data_dir=args.data_dir,
             out=args.out, seed=args.seed, **extra)
    elif args.command == "sweep":
        from training.sweep import sweep

        sweep(args.depths, [k for k in args.kinds.split(",") if k], args.seeds,
              activation=args.activation, transform_bias=args.transform_bias or -2.0,
              init=args.init, epochs=args.epochs, data_dir=args.data_dir, out=args.out,
              isolate=not args.in_process)
    elif args.command == "bench":
        from bench.suite import run as run_benchmarks

        return run_benchmarks(full=args.full, out_dir=args.out, only=args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
