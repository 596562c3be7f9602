"""`highway-zoo`: the command line.

    highway-zoo list [PATTERN]
    highway-zoo describe NAME [--json]
    highway-zoo train NAME [--dataset D] [--data-dir DIR] [--epochs N] [--batch-size N]
                      [--learning-rate LR] [--out RUN_DIR] [--seed S] [--depth N] ...
    highway-zoo demo [--depths 10,20,50] [--epochs N] [--data-dir DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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
        group.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)


def _overrides(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in OVERRIDE_FLAGS if getattr(args, k, None) is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="highway-zoo", description="Highway Networks model zoo (Keras 3)."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the registered architectures")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. '*cifar*'")

    p = sub.add_parser("describe", help="show an architecture's metadata")
    p.add_argument("name")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("train", help="train a zoo network with its recipe")
    p.add_argument("name")
    p.add_argument("--dataset", help="mnist, fashion_mnist, cifar10, cifar100 "
                   "(default: the architecture's own)")
    p.add_argument("--data-dir", help="directory holding the upstream dataset files")
    p.add_argument("--epochs", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--learning-rate", type=float)
    p.add_argument("--out", help="run directory (new or empty; default runs/NAME-TIME)")
    p.add_argument("--seed", type=int, default=0)
    _add_override_flags(p)

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
    p.add_argument("--transform-bias", type=float, help="highway nets' b_T (default -2)")
    return parser


def _print_models(pattern: str) -> None:
    import zoo

    names = zoo.list_models(pattern)
    if not names:
        raise ValueError(f"No architecture matches {pattern!r}; try `highway-zoo list`.")
    print(f"{'name':24s} {'params':>10s} {'paper acc':>9s}  {'tag':7s} dataset")
    for name in names:
        m = zoo.describe(name)
        acc = f"{m['paper_accuracy']:.2f}" if m["paper_accuracy"] else "-"
        print(f"{name:24s} {m['params']:>10,d} {acc:>9s}  {m['provenance']:7s} {m['dataset']}")


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
    args = build_parser().parse_args(argv)
    try:
        if args.command == "list":
            _print_models(args.pattern)
        elif args.command == "describe":
            _print_description(args.name, args.json)
        elif args.command == "train":
            from training.trainer import train

            metrics = train(
                args.name, dataset=args.dataset, data_dir=args.data_dir,
                epochs=args.epochs, batch_size=args.batch_size,
                learning_rate=args.learning_rate, out=args.out, seed=args.seed,
                **_overrides(args),
            )
            print(json.dumps(metrics, indent=2))
        elif args.command == "demo":
            from training.demo import demo

            extra = {} if args.transform_bias is None else {"transform_bias": args.transform_bias}
            demo(args.depths, init=args.init, epochs=args.epochs, data_dir=args.data_dir,
                 out=args.out, seed=args.seed, **extra)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"highway-zoo {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
