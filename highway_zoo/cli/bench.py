"""`highway-zoo bench`: the benchmarks, which live in the repository's `benchmarks/` folder
(as keras-hub's and timm's do), not in the wheel. From a clone (`pip install -e .`) the
command finds them beside this package, wherever it is run; `python -m highway_zoo bench` run
in a clone's root finds them there too. Installed from the wheel alone, it says so in one line
and exits with status 2."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from highway_zoo.cli.args import add_list

NOT_INSTALLED = ("highway-zoo bench: error: the benchmarks are not installed with the package: "
                 "they live in the repository's benchmarks/ folder; run the command from a "
                 "clone of the repository (pip install -e . there)")


def _suite():
    """`benchmarks.suite`: from the checkout this package was installed from (an editable
    install), else wherever Python finds `benchmarks` (a clone's root as the working directory
    of `python -m highway_zoo`, or PYTHONPATH). Neither: the one-line refusal, exit status 2."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "benchmarks" / "suite.py").is_file() and str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        return importlib.import_module("benchmarks.suite")
    except ModuleNotFoundError as err:
        if err.name not in ("benchmarks", "benchmarks.suite"):
            raise
    print(NOT_INSTALLED, file=sys.stderr)
    raise SystemExit(2)


def _arguments(p) -> None:
    suite = _suite()
    p.description = ("Benchmarks: this project against NumPy, PyTorch and plain Keras; wide, "
                     "conv and serving speed. The quick set by default "
                     f"({suite.DURATION_QUICK}); --full for the set the README quotes "
                     f"({suite.DURATION_FULL}). They live in the repository's benchmarks/ "
                     "folder: run from a clone.")
    p.add_argument("--full", action="store_true",
                   help="the full set the README quotes (writes benchmarks/results)")
    p.add_argument("--gpu", action="store_true",
                   help="the set for a machine with a GPU (JAX and PyTorch; writes "
                   "benchmarks/results/gpu_*.json)")
    add_list(p, "--only", choices=suite.SCRIPTS,
             help="a subset of the benchmarks (default: all)")
    p.add_argument("--out", metavar="DIR", help="results directory (default ./bench_results "
                   "for the quick set, benchmarks/results for --full)")


def bench(args) -> int:
    return _suite().run(full=args.full, out_dir=args.out, only=args.only, gpu=args.gpu)


COMMANDS = {"bench": (_arguments, bench)}
