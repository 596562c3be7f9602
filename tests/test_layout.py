"""The packages import one way, as docs/about/development.md draws it:
layers <- zoo <- training <- benchmarks <- highway_zoo (the repository's benchmarks, out of the
wheel, use the library and never the command line; `highway-zoo bench` runs them from a clone).
A lower package importing a higher one (even inside a function, or under `if TYPE_CHECKING:`
for annotations) fails here."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["layers", "zoo", "training", "benchmarks", "highway_zoo"]


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", ORDER[:-1])
def test_a_package_imports_none_above_it(package):
    above = set(ORDER[ORDER.index(package) + 1:])
    wrong = {str(path.relative_to(ROOT)): sorted(_imported_packages(path) & above)
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_the_check_sees_an_import_inside_a_function_and_for_annotations(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import training\n"
                      "def f():\n    from highway_zoo.cli import main\n")
    assert _imported_packages(module) == {"typing", "training", "highway_zoo"}


# Other libraries' private modules; only the door (training/runtime/private_api.py) may
# import them.
PRIVATE_MODULES = ("keras.src", "keras_tuner.src", "jax._src")
DOOR = ROOT / "training" / "runtime" / "private_api.py"


def _private_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names for private in PRIVATE_MODULES
                     if f"{name}.".startswith(f"{private}."))
    return found


def test_no_module_but_the_door_imports_another_librarys_private_modules():
    wrong = {str(path.relative_to(ROOT)): sorted(_private_imports(path))
             for package in ORDER for path in sorted((ROOT / package).rglob("*.py"))
             if path != DOOR}
    assert {path: names for path, names in wrong.items() if names} == {}
    assert _private_imports(DOOR)  # the door is where they are


def test_the_private_import_check_sees_every_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import keras.src.utils\nfrom jax import _src\n"
                      "from keras_tuner.src.distribute import utils\nimport keras\n"
                      "from keras import layers\nimport jax._srcs\n")
    assert _private_imports(module) == {"keras.src.utils", "jax._src",
                                        "keras_tuner.src.distribute.utils"}


def _module_imports(package_dir: Path, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of `package_dir` (dotted from `root`) with the modules of the same package
    it imports anywhere in its file (TYPE_CHECKING blocks aside)."""
    modules = {".".join(p.relative_to(root).with_suffix("").parts): p
               for p in sorted(package_dir.rglob("*.py")) if p.stem != "__init__"}
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for statement in block.body for node in ast.walk(statement)}
        names = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)  # and `from package import module` the module:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[module] = {name for name in names if name in modules and name != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: every module that reaches itself, with the modules on its way."""
    def reach(start):
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        return seen

    reached = {module: reach(module) for module in graph}
    circles = {frozenset(m for m in reached[module] if module in reached[m])
               for module in graph if module in reached[module]}
    return sorted(sorted(circle) for circle in circles)


@pytest.mark.parametrize("package", ORDER)
def test_no_package_imports_in_a_circle(package):
    assert _circles(_module_imports(ROOT / package)) == []


def test_the_circle_check_sees_a_circle_through_a_function(tmp_path):
    package = tmp_path / "training" / "experiments"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from training.experiments.b import f\n")
    (package / "b.py").write_text("def f():\n    from training.experiments import a\n")
    (package / "c.py").write_text("import training.experiments.a\n"
                                  "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from training.experiments import d\n")
    (package / "d.py").write_text("from training.experiments.c import x\n")
    assert _circles(_module_imports(package, tmp_path)) == [
        ["training.experiments.a", "training.experiments.b"]]


# --- a model family is one folder (docs/about/development.md) -----------------------------

FAMILY_FILES = {"__init__.py", "builders.py", "presets.json"}


def _families() -> list[Path]:
    return sorted(path.parent for path in (ROOT / "zoo").glob("*/presets.json"))


def test_every_family_is_a_folder_of_builders_presets_and_weights():
    import zoo
    from zoo import registry

    families = _families()
    assert [f.name for f in families] == ["bn_cifar_nets", "char_lm", "conv_nets", "fc_nets",
                                          "imagenet_nets"]
    tree = ast.parse((ROOT / "zoo" / "__init__.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "zoo" for alias in node.names}
    defined = set()
    for family in families:
        assert FAMILY_FILES <= {p.name for p in family.iterdir()}, family
        assert family.name in imported, f"zoo/__init__.py does not import {family.name}"
        presets = registry.read_presets(family / "presets.json")
        # Written as every writer writes it: a shipped weight changes only its record.
        assert (family / "presets.json").read_text(encoding="utf-8") == \
            registry.presets_text(presets)
        builders = ast.parse((family / "builders.py").read_text(encoding="utf-8"))
        registered = {node.args[0].value for node in ast.walk(builders)
                      if isinstance(node, ast.Call) and getattr(node.func, "id", None)
                      == "register_family"}
        named = set()
        for name, preset in presets.items():
            assert preset["builder"] in registered, (name, preset["builder"])
            assert registry.preset_file(name) == family / "presets.json"
            tags = (preset.get("weights") or {}).get("tags") or {}  # every tag's files
            for part in [*tags.values(), *(e["vocabulary"] for e in tags.values()
                                           if "vocabulary" in e)]:
                assert (family / "weights" / part["file"]).is_file(), (name, part["file"])
                named.add(part["file"])
        shipped = {p.name for p in (family / "weights").glob("*")} \
            if (family / "weights").is_dir() else set()
        assert shipped == named, f"{family.name}/weights holds files no preset names"
        defined |= set(presets)
    assert defined == set(zoo.list_models())  # every architecture is a preset


def test_no_module_registers_an_architecture_in_code():
    """The facts are data: architectures come from presets.json only (registry.py's
    `register_presets` calls `register`)."""
    calls = {str(path.relative_to(ROOT)) for package in ORDER
             for path in sorted((ROOT / package).rglob("*.py"))
             if path != ROOT / "zoo" / "registry.py"
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register"
             or isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "register"
             and getattr(node.func.value, "id", None) == "registry"}
    assert calls == set()
