"""`highway-zoo`: the command line. It parses, then calls the library.

Each command lives in one module of this package (`models`: list, describe; `data`:
prepare-text, prepare-images; `train`; `serving`: export, predict, generate; `analysis`:
analyze, tensorboard; `tune`; `experiments`: demo, sweep, bias-study, variants, fig1,
nips-table, transfer, pretrain; `bench`) whose `COMMANDS` maps each command name to a
function that adds its arguments and a function that runs it. A command's module is imported
only when that command runs (as pip does), so `--help`, `list` and `describe` import neither
Keras nor TensorFlow and answer at once.

Errors: a mistake the user can fix is one line on stderr and exit status 2 (1 for a run that
failed on its own, 130 / 143 for Ctrl-C / SIGTERM); a bug keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import glob
import importlib
import os
import signal
import sys
import tempfile
import threading

from highway_zoo import __version__
from highway_zoo.cli.args import ArgumentParser

# name: (module of this package, one-line help). The order is the order of `highway-zoo --help`.
COMMANDS = {
    "list": ("models", "list the registered architectures"),
    "describe": ("models", "show an architecture's metadata"),
    "prepare-text": ("data", "prepare a text corpus (Shakespeare, PTB's valid/test) in "
                     "Mikolov's format for the language models"),
    "prepare-images": ("data", "prepare MNIST or CIFAR-10 from the official archives or an "
                       "image folder (PNG, JPEG) for --data-dir"),
    "train": ("train", "train a zoo network with its recipe (resumable)"),
    "demo": ("experiments", "the main job: highway vs plain nets by depth on MNIST"),
    "sweep": ("experiments", "NIPS 2015 Fig. 1 with one recipe: training loss of plain "
              "and highway nets by depth, over seeds"),
    "bias-study": ("experiments", "final training loss of deep highway FC nets against "
                   "the transform-gate bias b_T"),
    "variants": ("experiments", "Greff et al. 2017 Table 1a: the highway variants by "
                 "depth, at equal width and matched parameters"),
    "fig1": ("experiments", "NIPS 2015 Fig. 1 by the paper's protocol: a random search "
             "per (plain | highway) x depth"),
    "nips-table": ("experiments", "NIPS 2015 Tables 1-3 point by point: the conv nets with "
                   "their released solvers on the paper's data, over seeds (resumable)"),
    "transfer": ("experiments", "transfer learning: a Fashion-MNIST body fine-tuned on MNIST "
                 "against training from scratch"),
    "pretrain": ("experiments", "make the weights shipped with the zoo's families (maintainers)"),
    "tune": ("tune", "hyperparameter search (the NIPS 2015 random search) with "
             "KerasTuner"),
    "analyze": ("analysis", "gate analyses of a trained net: NIPS 2015 Figs. 2-4, "
                "routing and more"),
    "tensorboard": ("analysis", "start TensorBoard on a run's gate summaries"),
    "export": ("serving", "write a SavedModel for TF Serving (or a .tflite)"),
    "predict": ("serving", "classify images with an exported SavedModel"),
    "generate": ("serving", "write text after a prompt with a language model"),
    "bench": ("bench", "benchmarks: against NumPy, PyTorch and plain Keras; wide, conv "
              "and serving speed"),
}
# Commands that need no TensorFlow.
LIGHT = ("list", "describe", "prepare-text", "prepare-images")
# Commands that pick up where they stopped when run again with the same arguments.
RESUMABLE = {"train": "the run resumes from its last checkpoint",
             "nips-table": "finished runs are kept, an interrupted one resumes",
             "tune": "finished trials are kept", "fig1": "finished trials are kept"}


def build_parser(command: str | None = None) -> ArgumentParser:
    """The parser; only `command`'s own arguments are added (its module imported)."""
    return _parsers(command)[0]


def command_parser(command: str) -> ArgumentParser:
    """`command`'s own parser, with its arguments: what `highway-zoo COMMAND --help` prints."""
    return _parsers(command)[1]


def _parsers(command: str | None) -> tuple[ArgumentParser, ArgumentParser | None]:
    parser = ArgumentParser(prog="highway-zoo",
                            description="Highway Networks model zoo (Keras 3).")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    own = None
    for name, (module, summary) in COMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")
        if name == command:
            add_arguments, run = importlib.import_module(f"{__name__}.{module}").COMMANDS[name]
            add_arguments(p)
            p.set_defaults(call=run)
            own = p
    return parser, own


def _command(argv: list[str]) -> str | None:
    """The command named in `argv` (its first word that is one), if any."""
    return next((word for word in argv if word in COMMANDS), None)


def import_backend_quietly() -> None:
    """Imports Keras, and TensorFlow when Keras runs on it, with TensorFlow's C++ start-up
    notices (absl's pre-init warning, oneDNN, "Could not find cuda drivers") kept off the
    terminal; they are shown if the import fails. On JAX and PyTorch TensorFlow is not
    imported: the data held in memory needs none (a command that does need it, such as
    `export`, imports it then).

    Later C++ logs go by TF_CPP_MIN_LOG_LEVEL (unless the user set it): 2 hides information
    and warnings; on a machine with no NVIDIA device, 3, because the one C++ error TensorFlow
    logs there is "failed call to cuInit" (a real error still raises a Python exception)."""
    if "keras" in sys.modules and "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL",
                          "2" if glob.glob("/dev/nvidia[0-9]*") else "3")
    with tempfile.TemporaryFile() as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            import keras

            if keras.backend.backend() == "tensorflow":
                import tensorflow  # noqa: F401
            else:
                from training.runtime import tensorflow_on_demand

                tensorflow_on_demand.install()
        except BaseException:
            os.dup2(saved, 2)
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: the `finally` blocks run, temporary files go."""


@contextlib.contextmanager
def _sigterm_interrupts():
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals
        return

    def interrupt(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _one_line(err: BaseException) -> str:
    """The error's message on one line, with what to do for the usual OS errors."""
    if isinstance(err, OSError) and err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = f" {err.filename}" if err.filename else ""
        return (f"cannot write{where}: {err.strerror}. Choose a location you can write to, or "
                "make it writable.")
    if isinstance(err, OSError) and err.errno == errno.ENOSPC and type(err) is OSError:
        where = f" writing {err.filename}" if err.filename else ""
        return f"no space left on the device{where}. Free some space and run the command again."
    return " ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _exit_code(err: Exception) -> int | None:
    """The exit status for an error a user can cause or fix; None for a bug (traceback)."""
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        if isinstance(err, tf.errors.UnavailableError):  # multi-worker: a peer went away
            return 1
    if "training.run_core" in sys.modules:
        from training.run_core import NonFiniteLossError

        if isinstance(err, NonFiniteLossError):
            return 1
    if "benchmarks.driver" in sys.modules:
        from benchmarks.driver import MeasurementFailed

        if isinstance(err, MeasurementFailed):
            return 1
    return 2 if isinstance(err, (ValueError, OSError)) else None


def _message(err: Exception) -> str:
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        if isinstance(err, tf.errors.UnavailableError):
            return ("another worker stopped; see its output, fix the cause and start all "
                    f"workers again with the same command. ({_one_line(err)})")
    return _one_line(err)


def threads_to_wait_for() -> list[threading.Thread]:
    """The running threads but the main one that the interpreter waits for at its exit: those
    that are not daemons."""
    return [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon]


@contextlib.contextmanager
def _imports_kept_out_of_collections(process: bool):
    """Python's cyclic garbage collector off while Keras and its backend import, and what they
    left frozen after (`gc.freeze`), in a process that runs one command (`process`).

    The imports create hundreds of thousands of objects that live as long as the process and
    hold almost no garbage, and every full collection walks all of them again: on JAX five
    during the import (0.04-0.18 s each, growing with it) and one more during a training run's
    first step (0.2 s); TensorFlow's import makes more. Frozen, they are left out of every later
    collection; the garbage the command makes is collected as before
    (benchmarks.whole_process: the "keras" and "compile" phases)."""
    if not process:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def run() -> None:
    """The process's entry point (`highway-zoo`, `python -m highway_zoo`): `main()`, then
    the exit. Once a command that imported Keras has finished, every file it wrote is complete
    and closed, and the interpreter's teardown of Keras's and its backend's objects and modules
    is all that is left: 0.9-1.4 s of a training run's wall time (benchmarks.whole_process, the
    "exit" phase). So the process flushes its output, runs the atexit handlers (temporary
    directories, JAX's own clean-up) and ends there
    (`training.runtime.private_api.exit_without_teardown`), unless a thread the interpreter
    would wait for (not a daemon) is still running."""
    code = main()
    if "keras" in sys.modules and not threads_to_wait_for():
        from training.runtime import private_api

        private_api.exit_without_teardown(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    """Runs a command; an error the user can cause or fix is one line on stderr and exit
    status 2 (1 for a run that failed on its own, 128 + signal for an interrupt); a bug
    keeps its traceback."""
    from training import timeline

    # The process runs this command (not a caller's `main(argv)`): a run's phases in its
    # run.json count from the process's start.
    process = argv is None
    if process:
        timeline.mark("main")
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command(argv)
    # The parsers import no Keras: `--help` and usage errors answer before TensorFlow loads.
    args = build_parser(command).parse_args(argv)
    prog = f"highway-zoo {args.command}"
    if args.command not in LIGHT:
        from training.runtime import jax_cache

        jax_cache.use_by_default()  # before JAX is imported: it reads its environment then
        try:
            with _imports_kept_out_of_collections(process):
                import_backend_quietly()  # before the command's function imports them
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] != "tensorflow":
                raise
            # Keras falls back to TensorFlow when no backend is named (a GPU machine with JAX
            # and PyTorch only, say).
            print(f"{prog}: error: Keras's backend is TensorFlow (KERAS_BACKEND is "
                  f"{os.environ.get('KERAS_BACKEND', 'unset')}), which is not installed: "
                  "install the project (pip install highway-zoo) or set KERAS_BACKEND=jax "
                  "or torch", file=sys.stderr)
            return 2
        if process:
            timeline.mark("keras")
    try:
        with _sigterm_interrupts():
            return args.call(args) or 0
    except KeyboardInterrupt as interrupt:
        then = RESUMABLE.get(args.command)
        hint = f"; run the same command again to resume ({then})" if then else ""
        print(f"{prog}: interrupted{hint}.", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)
    except Exception as err:
        code = _exit_code(err)
        if code is None:
            raise
        print(f"{prog}: error: {_message(err)}", file=sys.stderr)
        return code
