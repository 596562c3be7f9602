"""The package's one version, its entry points and the wheel's contents as configured (the built
wheel itself is checked by .ci/wheel_check, outside the checkout)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import highway_zoo

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_source():
    assert re.fullmatch(r"\d+\.\d+\.\d+", highway_zoo.__version__)
    project = PYPROJECT["project"]
    assert project["dynamic"] == ["version"] and "version" not in project
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "highway_zoo.__version__"}
    assert importlib.metadata.version("highway-zoo") == highway_zoo.__version__
    assert f"## {highway_zoo.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_python_m_highway_zoo_is_the_console_script():
    assert PYPROJECT["project"]["scripts"] == {"highway-zoo": "highway_zoo.cli:run"}
    out = subprocess.run([sys.executable, "-m", "highway_zoo", "--version"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout == f"highway-zoo {highway_zoo.__version__}\n"
    assert "tensorflow" not in out.stderr.lower()
    bad = subprocess.run([sys.executable, "-m", "highway_zoo", "nope"], cwd=ROOT,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_every_package_of_the_tree_is_found_and_no_generic_top_level_name():
    from setuptools import find_namespace_packages

    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    found = set(find_namespace_packages(str(ROOT), include=find["include"],
                                        exclude=find["exclude"]))
    with_code = {str(p.parent.relative_to(ROOT)).replace("/", ".")
                 for top in ("highway_zoo", "layers", "zoo", "training")
                 for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts}
    assert with_code <= found, with_code - found
    assert {name.split(".")[0] for name in found} == {"highway_zoo", "layers", "zoo", "training"}
    assert not (ROOT / "cli").exists() and not (ROOT / "bench").exists()
    # The benchmarks and the site's generator are the repository's, out of the wheel.
    assert (ROOT / "benchmarks" / "suite.py").is_file()
    assert not any(name.startswith("benchmarks") for name in found)
    assert not list((ROOT / "highway_zoo").rglob("bench/*.py"))
    assert not list((ROOT / "highway_zoo").rglob("site_pages.py"))
