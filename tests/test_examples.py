"""Every Python example of the README and the documentation site runs as written: each block
alone, in a fresh process, in an empty directory (what a reader who copies it gets). The
generated model cards' examples are run for a model with shipped weights and one without."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
CARDS = ("highway_fc10_mnist", "highway_a_cifar10")


def _blocks(name: str, text: str):
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield pytest.param(match.group(1), id=f"{name}:{line}")


def _examples():
    pages = [ROOT / "README.md"] + sorted(
        p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
    for page in pages:
        yield from _blocks(str(page.relative_to(ROOT)), page.read_text())


EXAMPLES = list(_examples())


def _run(code: str, where: Path) -> None:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(ROOT)}
    (where / "example.py").write_text(code)
    out = subprocess.run([sys.executable, "example.py"], cwd=where, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"the example failed:\n{code}\n{out.stderr[-3000:]}"


def test_there_are_examples_in_the_readme_and_the_guide():
    ids = [p.id for p in EXAMPLES]
    assert sum(i.startswith("README.md") for i in ids) == 3
    assert sum(i.startswith("docs/guide/") for i in ids) >= 8


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs_as_written(code, tmp_path):
    _run(code, tmp_path)


@pytest.mark.parametrize("name", CARDS)
def test_a_model_cards_examples_run_as_written(name, tmp_path):
    import site_pages  # docs/_hooks/

    import zoo

    card = site_pages.model_card(zoo.describe(name))
    blocks = [b.values[0] for b in _blocks(name, card)]
    assert blocks
    for code in blocks:
        _run(code, tmp_path)
