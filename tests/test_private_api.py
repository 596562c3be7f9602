"""`training.runtime.private_api`, the one door to other libraries' private code: each
capability works on the installed libraries, whose versions are in the tested ranges, and a
version outside them gives one line (or, where a public path exists, a warning and that path)."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from training.runtime import private_api
from training.runtime.private_api import CAPABILITIES, TESTED, PrivateAPIError

ROOT = Path(__file__).resolve().parent.parent
RAISING = [name for name, c in CAPABILITIES.items() if c.fallback is None]
FALLING_BACK = [name for name, c in CAPABILITIES.items() if c.fallback is not None]


def _child(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env})


# -- the versions --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CAPABILITIES)
def test_the_installed_libraries_are_in_the_tested_ranges(name):
    assert private_api.check(name) is True


def test_kerass_tested_range_is_the_packages_pin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = next(d for d in project["dependencies"] if re.match(r"keras\b(?!-)", d))
    low, high = TESTED["keras"]
    assert pin == f"keras>={low},<{high}"


@pytest.mark.parametrize("name", RAISING)
@pytest.mark.parametrize("version", ["3.16.0", "3.14.2", "4.0.0rc1", "nightly"])
def test_an_untested_version_is_one_line_naming_capability_library_version_and_range(
        name, version):
    with pytest.raises(PrivateAPIError) as info:
        private_api.check(name, version=version)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{name}: keras {version} is outside ")
    assert "(keras >=3.15,<3.16)" in message


@pytest.mark.parametrize("version", ["3.15.0", "3.15.9", "3.15.1.dev20261201"])
def test_a_version_inside_the_range_passes(version):
    assert private_api.check("seed_generator_states", version=version)


@pytest.mark.parametrize("name", FALLING_BACK)
def test_an_untested_version_with_a_public_path_warns_once_and_takes_it(name, monkeypatch):
    monkeypatch.setattr(private_api, "_warned", set())
    library = CAPABILITIES[name].library
    low, high = TESTED[library]
    with pytest.warns(RuntimeWarning) as caught:
        assert private_api.check(name, version="99.1") is False
    (warning,) = caught
    message = str(warning.message)
    assert "\n" not in message and message.startswith(f"{name}: {library} 99.1 is outside ")
    assert f"({library} >={low},<{high})" in message
    assert message.endswith(f"{CAPABILITIES[name].fallback}.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert private_api.check(name, version="99.1") is False  # once


# -- Keras ---------------------------------------------------------------------------------------

# On JAX: Keras seeds and saves without TensorFlow, and seeds it once something imported it.
DEFERRED = """
import sys, keras
from training.runtime import private_api
private_api.defer_tensorflow_import()
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.save(sys.argv[1])
print("before", "tensorflow" in sys.modules)
import tensorflow as tf
keras.utils.set_random_seed(1)
a = tf.random.uniform([3]).numpy()
keras.utils.set_random_seed(1)
print("seeded", (a == tf.random.uniform([3]).numpy()).all())
"""


def test_keras_imports_tensorflow_only_once_something_has(tmp_path):
    done = _child(DEFERRED, str(tmp_path / "m.keras"), KERAS_BACKEND="jax")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "before False" in done.stdout and "seeded True" in done.stdout


def test_build_for_multi_worker_builds_optimizer_and_metrics_from_the_spec():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", metrics=["mae"])
    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 3), "float32"),
                                               np.ones((8, 2), "float32"))).batch(4)
    assert not model.optimizer.built
    private_api.build_for_multi_worker(model, data.element_spec)
    assert model.optimizer.built and model.optimizer.variables
    assert model.fit(data, epochs=1, verbose=0).history["mae"]


def test_seed_generator_states_are_the_dropout_layers_states():
    assert keras.random.SeedGenerator(0).state.path.endswith(private_api.SEED_STATE_NAME)
    first, second = keras.layers.Dropout(0.5), keras.layers.Dropout(0.5)
    model = keras.Sequential([keras.Input((4,)), first, keras.layers.Dense(3), second])
    states = private_api.seed_generator_states(model)
    assert [id(s) for s in states] == [id(first.seed_generator.state),
                                       id(second.seed_generator.state)]


def test_a_variable_and_its_tensorflow_variable_share_the_optimizers_index():
    kernel, bias = keras.Variable(np.ones((2, 2)), name="kernel"), keras.Variable(
        np.zeros(2), name="bias")
    optimizer = keras.optimizers.SGD()
    optimizer.build([kernel, bias])
    assert [private_api.optimizer_variable_index(optimizer, v) for v in (kernel, bias)] == [0, 1]
    assert private_api.optimizer_variable_index(optimizer, bias.value) == 1  # tf.Variable


# -- TensorFlow ----------------------------------------------------------------------------------


def test_the_gradient_registry_holds_a_traced_custom_gradient():
    registry = private_api.custom_gradient_registry()
    before = set(registry)

    @tf.custom_gradient
    def twice(x):
        return 2 * x, lambda dy: 2 * dy

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = twice(x)
        return tape.gradient(y, x)

    assert float(step(tf.constant(1.0))) == 2.0
    assert [n for n in set(registry) - before if n.startswith("CustomGradient-")]


# -- TensorFlow Datasets -------------------------------------------------------------------------


def test_a_download_attempt_is_refused_at_once_inside_the_block(tmp_path):
    from tensorflow_datasets.core.download import download_manager

    original = download_manager.DownloadManager._download
    manager = tfds.download.DownloadManager(download_dir=tmp_path)
    with (private_api.downloads_refused(),
          pytest.raises(RuntimeError, match=r"^TFDS missed the seeded download cache and "
                        r"tried to download https://example\.invalid/a\.tar\.gz; ")):
        manager.download("https://example.invalid/a.tar.gz")
    assert download_manager.DownloadManager._download is original
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing downloaded


# -- Python --------------------------------------------------------------------------------------

EXITING = """
import atexit, sys
from training.runtime import private_api
atexit.register(print, "handler ran", flush=True)

class Teardown:  # deleted when the interpreter tears its modules down
    def __del__(self):
        print("teardown ran", flush=True)

kept = Teardown()
{exit}(3)
print("not reached", flush=True)
"""


def _allowed_pythons() -> list[str]:
    """The minor versions pyproject.toml's requires-python allows: ">=3.11,<3.14"."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    low, high = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", spec).groups()
    return [f"3.{minor}" for minor in range(int(low), int(high))]


def test_pythons_tested_range_is_the_packages():
    """Every Python the package allows is in the door's tested range, and no other: no
    command warns on a Python pip installs it for."""
    allowed = _allowed_pythons()
    assert TESTED["python"] == (allowed[0], f"3.{int(allowed[-1].split('.')[1]) + 1}")


def _interpreter(version: str) -> str | None:
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    found = shutil.which(f"python{version}")
    return found if found and "shims" not in found else next(
        iter(sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python"))), found)


@pytest.mark.parametrize("version", _allowed_pythons())
def test_exit_without_teardown_runs_the_handlers_and_skips_the_teardown(version):
    """On each Python the package allows (the door's module needs only the standard library,
    so any interpreter of that version runs it)."""
    python = _interpreter(version)
    assert private_api._in_range("python", f"{version}.0")  # what the door trusts, at least
    if python is None:  # no interpreter of that version to run it here: the range is checked
        return

    def child(code):
        return subprocess.run([python, "-c", "import sys; sys.path.insert(0, '.')\n" + code],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)

    assert child("import sys; print(sys.version_info[:2])").stdout.strip() == str(
        tuple(map(int, version.split("."))))
    fast = child(EXITING.format(exit="private_api.exit_without_teardown"))
    assert (fast.returncode, fast.stdout, fast.stderr) == (3, "handler ran\n", ""), fast.stderr
    ordinary = child(EXITING.format(exit="sys.exit"))  # what the fast exit leaves out
    assert (ordinary.returncode, ordinary.stdout) == (3, "handler ran\nteardown ran\n")
