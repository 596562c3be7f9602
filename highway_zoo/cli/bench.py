"""`highway-zoo bench`: the benchmarks in bench/ (the one package above training)."""

from __future__ import annotations

from highway_zoo.cli.args import add_list


def _arguments(p) -> None:
    from highway_zoo.bench.suite import DURATION_FULL, DURATION_QUICK, SCRIPTS

    p.description = ("Benchmarks: this project against NumPy, PyTorch and plain Keras; wide, "
                     "conv and serving speed. The quick set by default "
                     f"({DURATION_QUICK}); --full for the set the README quotes "
                     f"({DURATION_FULL}).")
    p.add_argument("--full", action="store_true",
                   help="the full set the README quotes (writes bench/results)")
    p.add_argument("--gpu", action="store_true",
                   help="the set for a machine with a GPU (JAX and PyTorch; writes "
                   "bench/results/gpu_*.json)")
    add_list(p, "--only", choices=SCRIPTS,
             help="a subset of the benchmarks (default: all)")
    p.add_argument("--out", metavar="DIR", help="results directory (default ./bench_results "
                   "for the quick set, bench/results for --full)")


def bench(args) -> int:
    from highway_zoo.bench.suite import run

    return run(full=args.full, out_dir=args.out, only=args.only, gpu=args.gpu)


COMMANDS = {"bench": (_arguments, bench)}
