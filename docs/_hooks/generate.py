"""MkDocs hook: the site's generated pages, and the checks that make a strict build fail.

- models/index.md and models/<name>.md for every registered architecture (site_pages.py
  beside this hook, from zoo.list_models / zoo.describe and the presets' weights records), and
  one nav entry each: a new registration gets its page and its place in the menu;
- reference/cli.md from the parsers; reference/api/<package>.md, one mkdocstrings entry per
  public name (`__all__`, or the public names a module defines), at the module defining it;
- results/data/bench/*.json and models.csv: the benchmarks' committed results, beside the page
  quoting them; the models index's numbers come from models.csv (benchmarks.models_table), and a
  registry that differs from its rows is a warning;
- a public name without a docstring is a warning, which `mkdocs build --strict` turns into a
  failed build.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
# MkDocs puts this hook's folder on sys.path while it loads the hook, and only then: what is
# imported from the repository (site_pages beside this file, the checkout's packages and its
# benchmarks/, neither of which the wheel installs) is imported here, at load time.
sys.path.insert(0, str(ROOT))
import site_pages  # noqa: E402

from benchmarks import models_table  # noqa: E402

log = logging.getLogger("mkdocs.plugins.highway_zoo")
BENCH = ROOT / "benchmarks" / "results"

# The API reference: page -> (title, modules documented on it, in order).
API = {
    "layers": ("Layers", ["layers"]),
    "zoo": ("The zoo", ["zoo"]),
    "analysis": ("Analyses", ["zoo.analysis"]),
    "export": ("Export and serving", ["zoo.serving.saved_model", "zoo.quantization",
                                      "zoo.serving.client",
                                      "zoo.serving.tflite", "zoo.serving.onnx",
                                      "zoo.serving.language_model"]),
    "training": ("Training", ["training", "training.data", "training.run_dir"]),
    "tuning": ("Tuning", ["training.tuning"]),
    "highway_zoo": ("The command line", ["highway_zoo", "highway_zoo.cli"]),
}


def _public(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return sorted(n for n, v in vars(module).items() if not n.startswith("_")
                  and (inspect.isfunction(v) or inspect.isclass(v))
                  and getattr(v, "__module__", None) == module.__name__)


def _api_page(title: str, modules: list[str]) -> str:
    out = [f"# {title}", ""]
    for name in modules:
        module = importlib.import_module(name)
        out += [f"## `{name}`", "", f"::: {name}", "    options:", "      members: false",
                "      show_root_heading: false", "      show_root_toc_entry: false", ""]
        for public in _public(module):
            obj = getattr(module, public)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants are described in their module's docstring
            home = f"{obj.__module__}.{obj.__qualname__}"
            if not inspect.getdoc(obj):
                log.warning("API reference: %s.%s (%s) has no docstring", name, public, home)
            out += [f"::: {home}", "    options:", "      show_root_heading: true",
                    '      heading_level: 3', ""]
    return "\n".join(out)


def on_config(config):
    import zoo

    names = zoo.list_models()
    nav = config["nav"]
    for i, entry in enumerate(nav):
        if isinstance(entry, dict) and "Models" in entry:
            nav[i] = {"Models": ["models/index.md"] + [{n: f"models/{n}.md"} for n in names]}
    return config


def _models_table(metas) -> tuple[list[dict], dict]:
    """The committed models table (bench.models_table's CSV and JSON); a model registered
    since it was written, or one it has that is no longer registered, is a warning (a failed
    strict build) naming the command that rewrites it."""
    rows = models_table.read_csv(BENCH / models_table.CSV_NAME)
    run = json.loads(models_table.RESULTS.read_text(encoding="utf-8"))
    registered, tabled = [m["name"] for m in metas], [r["model"] for r in rows]
    if registered != tabled:
        log.warning("benchmarks/results/models.csv is not the registry's: missing %s, "
                    "not registered %s; rewrite it with python -m benchmarks.models_table",
                    sorted(set(registered) - set(tabled)) or "none",
                    sorted(set(tabled) - set(registered)) or "none")
    return rows, run


def on_files(files, config):
    import zoo

    metas = [zoo.describe(name) for name in zoo.list_models()]
    generated = {"models/index.md": site_pages.models_index(metas, *_models_table(metas)),
                 "reference/cli.md": site_pages.cli_reference()}
    generated.update({f"models/{m['name']}.md": site_pages.model_card(m) for m in metas})
    generated.update({f"reference/api/{page}.md": _api_page(title, modules)
                      for page, (title, modules) in API.items()})
    for path in sorted(BENCH.glob("*.json")) + [BENCH / models_table.CSV_NAME]:
        generated[f"results/data/bench/{path.name}"] = path.read_bytes()
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    return files
