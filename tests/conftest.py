"""Shared test set-up: quiet TensorFlow, the TensorFlow backend, no network, no home writes,
and nothing of the suite's left in the temporary directory.

Everything a test process writes outside `tmp_path` goes into one directory of the run's own,
`highway-zoo-tests-*`, removed at the end: each process's Keras cache (pretrained weights are
fetched into KERAS_HOME) and its TMPDIR, where TensorFlow's autograph writes its
`__autograph_generated_file*.py`, TensorBoard its `.tensorboard-info` and the subprocesses the
tests start (they inherit TMPDIR) whatever they write there. pytest's own `tmp_path`
directories stay where pytest keeps them (PYTEST_DEBUG_TEMPROOT: the system's temporary
directory), under its retention policy (pytest.ini).
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Never let a test reach TFDS's download servers (they retry for minutes offline).
os.environ.setdefault("TFDS_DATA_DIR", "/nonexistent-tfds-data-dir-for-tests")

# The first process of a run (pytest itself, or pytest-xdist's controller) makes the run's
# directory; its workers inherit the environment and make theirs inside it.
RUN_DIR_VARIABLE = "HIGHWAY_ZOO_TEST_RUN_DIR"
SYSTEM_TMP_VARIABLE = "HIGHWAY_ZOO_TEST_SYSTEM_TMP"
if RUN_DIR_VARIABLE not in os.environ:
    os.environ[SYSTEM_TMP_VARIABLE] = tempfile.gettempdir()
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    os.environ[RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix="highway-zoo-tests-")
    atexit.register(shutil.rmtree, os.environ[RUN_DIR_VARIABLE], ignore_errors=True)
SYSTEM_TMP = Path(os.environ[SYSTEM_TMP_VARIABLE])
RUN_DIR = Path(os.environ[RUN_DIR_VARIABLE])
PROCESS_DIR = Path(tempfile.mkdtemp(
    prefix=f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-", dir=RUN_DIR))
os.environ["KERAS_HOME"] = str(PROCESS_DIR / "keras-home")
PROCESS_TMP = PROCESS_DIR / "tmp"
PROCESS_TMP.mkdir()
os.environ["TMPDIR"] = str(PROCESS_TMP)
tempfile.tempdir = str(PROCESS_TMP)

# What libraries write into our TMPDIR and remove themselves at their exit (autograph's files
# through atexit, TensorBoard's info files) or leave empty (TFDS's DatasetInfo reads GCS
# metadata through a `tmp*tfds` directory it never removes): not the tests' leftovers.
# torchinductor_*: `import keras` on the torch backend (the backend tests' subprocesses).
FOREIGN = ("__autograph_generated_file*.py", ".tensorboard-info", "tmp*tfds", "torchinductor_*")
# The kinds of file the suite wrote into the system's temporary directory before it had a
# directory of its own (those of other programs running meanwhile look the same).
OURS = ("highway-zoo-keras-home-*", "__autograph_generated_file*.py", ".tensorboard-info")


def _leftovers(directory: Path, allowed: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        if any(path.match(pattern) for pattern in allowed):
            if path.is_dir() and any(path.iterdir()):  # e.g. a TensorBoard still serving
                found.extend(str(p) for p in sorted(path.iterdir()))
            continue
        found.append(str(path) + ("/" if path.is_dir() else ""))
    return found


def _ours_in_system_tmp() -> set[str]:
    return {str(path) for pattern in OURS for path in SYSTEM_TMP.glob(pattern)}


@pytest.fixture(scope="session", autouse=True)
def leaves_nothing_behind():
    """At the end of a test process: its temporary directory holds nothing the tests left
    (a test writes into `tmp_path`, or removes what it makes); then it is removed."""
    yield
    left = _leftovers(PROCESS_TMP, FOREIGN)
    shutil.rmtree(PROCESS_DIR, ignore_errors=True)
    if left:
        pytest.fail(f"The tests left {len(left)} file(s) in their temporary directory: "
                    + ", ".join(left[:10]), pytrace=False)


def pytest_sessionstart(session):
    session.config.stash[_BEFORE] = _ours_in_system_tmp()


def pytest_terminal_summary(terminalreporter, config):
    """Reports files of the suite's kind that appeared in the system's temporary directory
    during the run: written past TMPDIR by the suite, or by another program meanwhile (so a
    report, not a failure)."""
    if _BEFORE not in config.stash or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    appeared = sorted(_ours_in_system_tmp() - config.stash[_BEFORE])
    if appeared:
        terminalreporter.write_sep("-", f"{len(appeared)} file(s) of the suite's kind "
                                   f"appeared in {SYSTEM_TMP} during the run", yellow=True)
        for path in appeared[:20]:
            terminalreporter.write_line(path)


_BEFORE = pytest.StashKey[set]()
