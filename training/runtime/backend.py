"""The process's Keras backend and the library versions a run records."""

from __future__ import annotations

import sys


def backend() -> str:
    """Keras's backend in this process: "tensorflow", "jax" or "torch"."""
    import keras  # here, not at the top: the command line's parsers read STRATEGIES

    return keras.backend.backend()



def versions() -> dict[str, str]:
    """The Keras backend and the versions a run records: Keras, the backend's library and
    TensorFlow (which reads the data on every backend)."""
    name = backend()
    import keras

    found = {"backend": name, "keras": keras.__version__}
    library = {"jax": "jax", "torch": "torch"}.get(name)
    if library is not None:
        found[library] = __import__(library).__version__
    if "tensorflow" in sys.modules:
        found["tensorflow"] = sys.modules["tensorflow"].__version__
    return found
