"""The one door to other libraries' private code: every use of it in the packages is here.

A capability is a function named for what it gives. Each is checked against the versions of
its library it was tested on (`TESTED`); outside them it either raises `PrivateAPIError`,
one line that names the capability, the library, the installed version and the tested range,
or, where a public path exists, takes that path (`CAPABILITIES` says which) and warns once.

    keras                 defer_tensorflow_import, build_for_multi_worker,
                          seed_generator_states, optimizer_variable_index
    tensorflow            custom_gradient_registry
    tensorflow_datasets   downloads_refused
    python                exit_without_teardown

Nothing else in `layers`, `zoo`, `training` or `highway_zoo` imports `keras.src`,
`keras_tuner.src` or `jax._src` (tests/test_layout.py). Not reach-ins: the hooks that
keras.io's guide "Writing quantization-compatible layers" has a custom layer implement,
`_int8_call` and `_is_quantized` among them (layers/_highway.py). To support a new release
of a library: run tests/test_private_api.py (and the suite) on it, fix what broke here, and
widen its range in `TESTED` (Keras's is also pyproject.toml's pin).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import platform
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

# library -> (lowest tested version, first untested one)
TESTED = {
    "keras": ("3.15", "3.16"),
    "tensorflow": ("2.21", "2.22"),
    "tensorflow_datasets": ("4.9.10", "4.10"),
    "python": ("3.11", "3.14"),  # pyproject.toml's requires-python; each tested
}


@dataclasses.dataclass(frozen=True)
class Capability:
    library: str
    fallback: str | None  # the public path taken outside TESTED; None: PrivateAPIError


CAPABILITIES = {
    "defer_tensorflow_import": Capability(
        "keras", "Keras imports TensorFlow whenever it is installed (seconds and about "
        "0.5 GB more on JAX and PyTorch, the same results)"),
    "build_for_multi_worker": Capability("keras", None),
    "seed_generator_states": Capability("keras", None),
    "optimizer_variable_index": Capability("keras", None),
    "custom_gradient_registry": Capability(
        "tensorflow", "the graphs TensorFlow's gradient registry keeps are not released "
        "(memory grows with each model a process trains, the same results)"),
    "downloads_refused": Capability(
        "tensorflow_datasets", "TFDS's own downloader runs (offline, it retries for "
        "minutes before it fails)"),
    "exit_without_teardown": Capability(
        "python", "the interpreter's ordinary exit (about a second of teardown)"),
}


class PrivateAPIError(RuntimeError):
    """A private thing of another library is used outside the versions it was tested on."""


def installed(library: str) -> str:
    """The version of `library` this process runs (imported for it, but Python)."""
    if library == "python":
        return platform.python_version()
    return importlib.import_module(library).__version__


def _release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group().split(".")) if match else None


@functools.cache
def _in_range(library: str, version: str) -> bool:
    low, high = TESTED[library]
    release = _release(version)
    return release is not None and _release(low) <= release < _release(high)


_warned: set[str] = set()


def check(capability: str, version: str | None = None) -> bool:
    """Whether `capability` may use its library's private code: True for the installed
    version (or `version`) in the tested range. Outside it, False after a warning (once) for a
    capability with a public fallback; a PrivateAPIError for one without."""
    library, fallback = CAPABILITIES[capability].library, CAPABILITIES[capability].fallback
    version = version or installed(library)
    if _in_range(library, version):
        return True
    low, high = TESTED[library]
    found = (f"{capability}: {library} {version} is outside the versions its private API "
             f"was tested on ({library} >={low},<{high})")
    if fallback is None:
        raise PrivateAPIError(f"{found}. Install a tested version, or check "
                              f"training/runtime/private_api.py's {capability} on this one and "
                              "widen its range in TESTED.")
    if capability not in _warned:
        _warned.add(capability)
        warnings.warn(f"{found}: {fallback}.", RuntimeWarning, stacklevel=3)
    return False


# --- Keras ----------------------------------------------------------------------------------

# The name Keras gives a SeedGenerator's state variable (keras.random.SeedGenerator).
SEED_STATE_NAME = "seed_generator_state"


@functools.cache
def _available_once_imported() -> type:
    from keras.src.utils import module_utils

    class AvailableOnceImported(module_utils.LazyModule):
        @property
        def available(self) -> bool:
            return self.name in sys.modules

    return AvailableOnceImported


def defer_tensorflow_import() -> None:
    """Keras counts TensorFlow as available only once something has imported it (for JAX
    and PyTorch runs: training.runtime.tensorflow_on_demand says why). Keras asks its lazy module
    `keras.src.utils.module_utils.tensorflow`, whose class is replaced."""
    if check("defer_tensorflow_import"):
        from keras.src.utils import module_utils

        module_utils.tensorflow.__class__ = _available_once_imported()


def build_for_multi_worker(model: Any, data_spec: Any) -> None:
    """Builds `model`'s metrics and optimizer from `data_spec` (the first batch's shapes and
    dtypes) and keeps `fit` from building them again from a first batch all-reduced across
    workers, which MultiWorkerMirroredStrategy's collectives reject for a nested batch
    (keras-team/keras#20585). Call it inside the strategy's scope."""
    check("build_for_multi_worker")
    model._symbolic_build(data_batch=data_spec)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None


def seed_generator_states(model: Any) -> list[Any]:
    """The state variables of the Keras SeedGenerators in `model` (its dropout layers',
    those of the layers inside its layers too), in the order of `model.variables`."""
    check("seed_generator_states")
    return [v for v in model.variables if v.path.endswith(SEED_STATE_NAME)]


def optimizer_variable_index(optimizer: Any, variable: Any) -> int:
    """The index `optimizer` (built) gives `variable` among those it trains; on TensorFlow
    the replicas of a mirrored variable, which `update_step` receives, share it."""
    check("optimizer_variable_index")
    return optimizer._get_variable_index(variable)


# --- TensorFlow -----------------------------------------------------------------------------


def custom_gradient_registry() -> dict | None:
    """TensorFlow's gradient registry (name -> entry), where every `tf.custom_gradient` traced
    in graph mode registers its function; None without TensorFlow imported (or, outside the
    tested range, its public fallback: nothing is released)."""
    ops = sys.modules.get("tensorflow.python.framework.ops")
    if ops is None or not check("custom_gradient_registry"):
        return None
    return ops._gradient_registry._registry


# --- TensorFlow Datasets --------------------------------------------------------------------


@contextlib.contextmanager
def downloads_refused() -> Iterator[None]:
    """Inside the block, a TFDS download attempt fails at once with one line naming the URL,
    instead of retrying offline for minutes (TFDS's DownloadManager._download)."""
    if not check("downloads_refused"):
        yield
        return
    from tensorflow_datasets.core.download import download_manager

    def refuse(self: Any, resource: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"TFDS missed the seeded download cache and tried to download {resource.url}; "
            "highway-zoo never downloads (has this TFDS version changed its cache layout?)"
        )

    original = download_manager.DownloadManager._download
    download_manager.DownloadManager._download = refuse
    try:
        yield
    finally:
        download_manager.DownloadManager._download = original


# --- Python ---------------------------------------------------------------------------------


def exit_without_teardown(code: int) -> None:
    """Ends the process with `code` once logging is shut down, the atexit handlers have run
    and the output is flushed, skipping the interpreter's teardown of its modules and objects
    (`atexit._run_exitfuncs`, then `os._exit`). Outside the tested range it returns, and the
    caller exits as usual."""
    if not check("exit_without_teardown"):
        return
    import atexit
    import logging

    logging.shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
