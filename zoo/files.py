"""Writing files so that a reader never sees half of one: what the zoo, the training runs,
the studies and the benchmarks all write through.

- `atomic_path(target)`: a temporary file beside `target`, renamed onto it on success; an
  existing `target` is refused unless `overwrite`.
- `write_text(target, text)`: a whole text file, atomically.
- `save_figure(fig, path)`: a matplotlib figure, atomically, then closed.
- `sha256_of(path)`: a file's sha256 (weights, corpora, checkpoints).
- `jsonable(value)`: NumPy values as JSON's (rounded floats, None for NaN and infinities).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yields a temporary path beside `target`; renames it onto `target` on success."""
    target = Path(target)
    if target.exists() and not overwrite:
        raise FileExistsError(
            f"{target} already exists; refusing to overwrite it. Choose another "
            "path or delete the file first."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Keep the suffix: Keras checks that weight files end in ".weights.h5".
    fd, tmp = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix="".join(target.suffixes), dir=target.parent
    )
    tmp = Path(tmp)
    try:  # from the file's creation on: an interrupt anywhere leaves no temporary file
        os.close(fd)
        # mkstemp makes the file private (0600); give it the mode a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(target: str | os.PathLike, text: str, overwrite: bool = False) -> None:
    with atomic_path(target, overwrite) as tmp:
        tmp.write_text(text, encoding="utf-8")


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_figure(fig, path: str | os.PathLike) -> None:
    """Writes a pyplot figure to `path` atomically (a temporary file of its own, then a
    rename; it replaces an earlier figure) and closes it: the figures of the analyses
    and of the experiments. Two processes may write the same figure at once (a shared study)."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, overwrite=True) as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)


def jsonable(value, digits: int = 6):
    """`value` with NumPy arrays, scalars and tuples made JSON's: floats rounded to `digits`,
    NaN and infinities None (JSON has neither)."""
    if isinstance(value, dict):
        return {k: jsonable(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, digits) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist(), digits)
    if isinstance(value, float | np.floating):
        return round(float(value), digits) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
