"""The research scripts behind the result pages: each rebuilds a page's table and figure from
the run records committed under docs/results/, or measures what a page quotes. They are the
repository's, not the wheel's, beside the benchmarks; tests/test_research_scripts.py runs each
on tiny data it writes.

    python -m benchmarks.research.ptb_small_page               # language_model/ptb_small/
    python -m benchmarks.research.ptb_small_pool_padding_page  # .../ptb_small_pool_padding/
    python -m benchmarks.research.ptb_large_gpu_8epochs_page   # .../ptb_large_gpu_8epochs/
    python -m benchmarks.research.ptb_large_gpu_25epochs_page  # .../ptb_large_gpu_25epochs/
    python -m benchmarks.research.token_gates_page             # token_gates/ptb_small_*
    python -m benchmarks.research.lesion_h PTB_DIR RUN_DIR ... # token_gates/lesion_h.*
    python -m benchmarks.research.float16_check RUN_DIR PTB_DIR OUT_DIR
    python -m benchmarks.research.embedding_spread PTB_DIR VARIANT [--steps 100]
    python -m benchmarks.research.lm_states PTB_DIR --states carried|reset --out FILE.json
    python -m benchmarks.research.lm_states_page               # language_model/large_states/
    python -m benchmarks.research.fig1_gates STUDY --out FILE # fig1/full_mnist/gates.json
    benchmarks/research/gpu_large.sh                            # one GPU lease: Large, 25 epochs
    benchmarks/research/gpu_nips_table.sh                       # one GPU lease: Highway B, resumed
    (both source device_env.sh: the carried wheels and the JAX backend)

The page scripts write into docs/results/ (`--results DIR`: another copy of that tree).
"""

from __future__ import annotations

import argparse
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def results_dir(argv: list[str] | None, doc: str | None) -> Path:
    """The `--results DIR` of a page script's command line: the tree of docs/results/ it reads
    and writes (default: the repository's)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help=f"the result pages' folder (default {RESULTS})")
    return parser.parse_args(argv).results
