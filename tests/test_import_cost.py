"""The registry costs no Keras: `import zoo`, `zoo.list_models` and `zoo.describe` (what
`highway-zoo list` and `describe` run) import neither TensorFlow nor Keras, and the lazy
names (`zoo.load`, ...) still work afterwards in the same process."""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("tensorflow", "keras")

# Prints the heavy modules imported by the registry path, then builds a network through the
# lazy `zoo.load` and saves it as a `.keras` file for the next check.
REGISTRY_THEN_LOAD = """
import json, sys
import zoo
names = zoo.list_models()
described = [zoo.describe(n) for n in names]
zoo.list_models(pretrained=True)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps({{"heavy": heavy, "names": len(names),
                  "features": described[0]["features"]["shape"]}}), flush=True)
model = zoo.load("highway_fc10_mnist")
model.save(sys.argv[1])
print(json.dumps({{"params": model.count_params(), "class": type(model).__name__,
                  "lazy_module": zoo.weights.__name__}}), flush=True)
"""

# `import keras` and `import zoo`, in either order: Keras's own loader reads a zoo `.keras`
# file without custom_objects.
LOAD_FILE = """
import json, sys
import {first}
import {second}
model = keras.saving.load_model(sys.argv[1])
print(json.dumps({{"class": type(model).__name__, "params": model.count_params()}}))
"""


def _run(code, *args):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def registry_then_load(tmp_path_factory):
    path = tmp_path_factory.mktemp("import_cost") / "fc10.keras"
    return path, _run(REGISTRY_THEN_LOAD.format(heavy=set(HEAVY)), path)


def test_list_and_describe_import_no_tensorflow_and_no_keras(registry_then_load):
    _, (registry, _) = registry_then_load
    assert registry["names"] > 20
    assert registry["features"]  # describe's features: arithmetic, no model built
    assert registry["heavy"] == [], (
        "import zoo / list_models / describe imported " + ", ".join(registry["heavy"])
    )


def test_lazy_load_builds_after_the_registry_in_the_same_process(registry_then_load):
    _, (_, loaded) = registry_then_load
    assert loaded == {"params": 85_660, "class": "HighwayZooModel",
                      "lazy_module": "zoo.weights"}


@pytest.mark.parametrize("first, second", [("keras", "zoo"), ("zoo", "keras")])
def test_a_zoo_keras_file_loads_whichever_of_keras_and_zoo_is_imported_first(
        registry_then_load, first, second):
    path, _ = registry_then_load
    assert _run(LOAD_FILE.format(first=first, second=second), path) == [
        {"class": "HighwayZooModel", "params": 85_660}]


# --- layers -------------------------------------------------------------------------

# `import layers` reads the variant names without Keras; a class asked for imports it, and a
# `.keras` file of a plain Keras model with highway layers is written for the next check.
LAYERS_LAZY_THEN_SAVE = """
import json, sys
import layers
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
print(json.dumps({"heavy": heavy, "variants": list(layers.VARIANTS)}), flush=True)
import keras
model = keras.Sequential([keras.Input((3,)), layers.HighwayDense(variant="full"),
                          layers.HighwayStack(depth=2)])
model.save(sys.argv[1])
print(json.dumps({"classes": [type(layer).__name__ for layer in model.layers]}), flush=True)
"""

# `import keras` and `import layers`, in either order: the classes are registered, and
# Keras's own loader reads the file without custom_objects.
LOAD_LAYERS = """
import json, sys
import {first}
import {second}
model = keras.saving.load_model(sys.argv[1])
print(json.dumps({{"classes": [type(layer).__name__ for layer in model.layers],
                   "variant": model.layers[0].variant}}))
"""


def test_import_layers_reads_the_variants_without_keras_and_classes_load_on_use(tmp_path):
    path = tmp_path / "plain.keras"
    names, built = _run(LAYERS_LAZY_THEN_SAVE, path)
    assert names == {"heavy": [], "variants": ["coupled", "full", "c_only", "t_only",
                                               "residual", "plain"]}
    assert built == {"classes": ["HighwayDense", "HighwayStack"]}
    for first, second in [("keras", "layers"), ("layers", "keras")]:
        assert _run(LOAD_LAYERS.format(first=first, second=second), path) == [
            {"classes": ["HighwayDense", "HighwayStack"], "variant": "full"}], (first, second)


# --- the command line ------------------------------------------------------------------

# Runs the command line in this process and prints the heavy modules it imported.
CLI_MODULES = """
import json, sys
from highway_zoo.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize("argv", [["list"], ["list", "--pretrained"],
                                  ["describe", "highway_b_cifar10"],
                                  ["describe", "resnet50_imagenet", "--json"]])
def test_list_and_describe_import_no_tensorflow(argv):
    proc = subprocess.run([sys.executable, "-c", CLI_MODULES, *argv], capture_output=True,
                          text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}
    assert proc.stderr == ""


def test_help_imports_no_tensorflow():
    proc = subprocess.run([sys.executable, "-c", CLI_MODULES.replace(
        "code = main(sys.argv[1:])", "try:\n    main(['--help'])\nexcept SystemExit as e:\n"
        "    code = e.code")], capture_output=True, text=True, check=True)
    assert "train" in proc.stdout and "describe" in proc.stdout
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"code": 0, "heavy": []}


def test_a_training_command_prints_no_tensorflow_chatter(tmp_path):
    """`highway-zoo train` on a machine without a GPU: stderr holds the user's warning (the
    offline MNIST sample) once, and none of TensorFlow's C++ start-up lines. The process ends
    without the interpreter's teardown (`highway_zoo.cli.run`): its printed metrics, its run
    directory and its temporary directory's clean-up (an atexit handler) are complete."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    proc = subprocess.run(
        [sys.executable, "-m", "highway_zoo", "train", "highway_fc10_mnist", "--recipe", "quick",
         "--epochs", "1", "--depth", "2", "--data-dir", str(tmp_path),
         "--out", str(tmp_path / "run"), "--verbose", "0", "--no-gate-summaries"],
        capture_output=True, text=True, env=env, check=True)
    for chatter in ("oneDNN", "cuda", "cuInit", "absl", "I0000", "E0000", "W0000"):
        assert chatter not in proc.stderr, proc.stderr
    assert proc.stderr.count("OfflineFallbackWarning") == 1, proc.stderr
    printed = json.loads(proc.stdout[proc.stdout.index("{"):])  # the metrics, flushed whole
    assert printed["run_dir"] == str(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_fast_exit_waits_only_for_threads_the_interpreter_would_wait_for():
    """`highway_zoo.cli.run` skips the teardown unless a non-daemon thread still runs: a
    daemon does not hold the exit up."""
    import threading

    from highway_zoo.cli import threads_to_wait_for

    release = threading.Event()
    daemon = threading.Thread(target=release.wait, daemon=True)
    other = threading.Thread(target=release.wait)
    daemon.start()
    try:
        assert daemon not in threads_to_wait_for()
        other.start()
        assert other in threads_to_wait_for()
    finally:
        release.set()
        daemon.join()
        other.join()
    assert other not in threads_to_wait_for()


# `highway-zoo train` with a name that is not registered: it fails (exit status 2) after
# importing Keras, which is all this looks at.
GC_AROUND_THE_IMPORT = """
import gc, json, sys
import highway_zoo.cli as cli
seen = {}
import_backend = cli.import_backend_quietly
def spy():
    seen["collecting"] = gc.isenabled()
    import_backend()
cli.import_backend_quietly = spy
caller, command = sys.argv[1], sys.argv[2:]
sys.argv = ["highway-zoo", *command]
code = cli.main() if caller == "process" else cli.main(command)
print(json.dumps({"code": code, "collecting_during_import": seen["collecting"],
                  "collecting_after": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


@pytest.mark.parametrize("caller", ["process", "library"])
def test_the_process_imports_keras_with_no_collections_and_freezes_what_it_imported(caller):
    """A process running one command (`main()` with no argv) imports Keras and its backend
    with the cyclic garbage collector off, then freezes what the import made (no later full
    collection walks it) and collects again; a library caller's `main(argv)` leaves the
    collector alone."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", GC_AROUND_THE_IMPORT, caller, "train",
                           "no_such_net"],
                          capture_output=True, text=True, env=env, timeout=600)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 2 and "no_such_net" in proc.stderr
    assert result["collecting_after"]
    if caller == "process":
        assert not result["collecting_during_import"]
        assert result["frozen"] > 100_000  # Keras's and its backend's objects
    else:
        assert result["collecting_during_import"]
        assert result["frozen"] == 0


# Keras imported by the zoo itself, on a class's first use or by a class module imported by its
# path: every class is registered all the same (none is asked of a half-imported module).
REGISTERED_AFTER = """
import json
{code}
import keras
print(json.dumps({{"registered": sorted(k for k in keras.saving.get_custom_objects()
                                        if k.startswith("highway_zoo>"))}}))
"""
LAYER_CLASSES = sorted(f"highway_zoo>{name}" for name in (
    "BNHighwayBlock", "CaffeImageNetPreprocessing", "CharCNNEmbedder",
    "GlobalContrastNormalization", "HighwayConv2D", "HighwayDense", "HighwayStack"))


@pytest.mark.parametrize("code, extra", [
    ("import layers; layers.BNHighwayBlock", []),
    ("from layers import HighwayStack", []),
    ("import layers.highway_dense", []),
    ("import zoo; zoo.HighwayZooModel", ["highway_zoo>HighwayZooModel"]),
    ("import zoo.model", ["highway_zoo>HighwayZooModel"]),
])
def test_every_class_is_registered_when_the_zoo_imports_keras_itself(code, extra):
    registered = _run(REGISTERED_AFTER.format(code=code))[0]["registered"]
    assert set(LAYER_CLASSES + extra) <= set(registered), registered
