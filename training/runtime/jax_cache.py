"""JAX's persistent compilation cache, as every `highway-zoo` command uses it.

A command run again loads the train step an earlier run compiled instead of compiling it anew
(seconds of every run's start on JAX; bench.headline's `highway_zoo_jax_cached` row). Every
compilation is cached, however short. Compiled code is keyed by the computation, the JAX
version and the device, so results do not change. No JAX import here: the settings are
environment variables, which child processes (a sweep's runs, a benchmark's measurements)
inherit or are given.
"""

from __future__ import annotations

import os
import sys


def default_directory() -> str:
    """$XDG_CACHE_HOME/highway-zoo/jax, ~/.cache by default."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache_home, "highway-zoo", "jax")


def environment(directory: str | None) -> dict[str, str]:
    """The environment variables that put JAX's cache in `directory` (None: no cache)."""
    if directory is None:
        return {"JAX_COMPILATION_CACHE_DIR": ""}  # empty: JAX builds no cache
    return {"JAX_COMPILATION_CACHE_DIR": directory,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def use_by_default() -> None:
    """Turns the cache on in `default_directory()` unless JAX_COMPILATION_CACHE_DIR is set
    (empty turns it off), for this process and the processes it starts."""
    for name, value in environment(default_directory()).items():
        os.environ.setdefault(name, value)
    if "jax" in sys.modules:  # imported already: JAX read its environment then
        import jax

        jax.config.update("jax_compilation_cache_dir",
                          os.environ["JAX_COMPILATION_CACHE_DIR"] or None)
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
