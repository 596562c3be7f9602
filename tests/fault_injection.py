"""Runs `highway-zoo ARGS...` and SIGKILLs it at one phase boundary of training.

    python tests/fault_injection.py BOUNDARY -- train NAME ...

The kill is a real SIGKILL of this process, sent from inside it at the exact point named, so
a test can interrupt a run at every boundary in turn (a kill from outside, timed by watching
files, lands wherever the process happens to be). Boundaries:

    start-up                 run.json written, nothing trained yet
    mid-epoch:N              after training step N, which wrote no checkpoint
    after-step-checkpoint    right after a checkpoint taken within an epoch
    after-gate-summaries     an epoch's gate summaries written, its checkpoint not yet
    after-epoch-checkpoint:E right after the checkpoint at the end of epoch E
    during-final-save        the final weights written, metrics.json not yet
    finishing                the final files and metrics.json written, the checkpoint
                             removed, the run not yet marked finished
"""

import os
import signal
import sys


def _kill() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _after(owner, name: str, when=lambda *args, **kwargs: True) -> None:
    """Makes `owner.name` SIGKILL the process right after a call for which `when` holds."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        if when(*args, **kwargs):
            _kill()
        return result

    setattr(owner, name, wrapper)


def arm(boundary: str) -> None:
    import zoo
    from training import callbacks
    from training.checkpoints import Checkpoints, RunMonitor, trained_iterations
    from training.run_dir import RunDir

    kind, _, number = boundary.partition(":")

    def iterations(monitor_or_checkpoints, model=None, *rest, **kwargs):
        model = model if model is not None else monitor_or_checkpoints.model
        return trained_iterations(model)

    if kind == "start-up":
        _after(RunDir, "write_run")
    elif kind == "mid-epoch":
        _after(RunMonitor, "on_train_batch_end",
               lambda monitor, *a, **k: iterations(monitor) == int(number))
    elif kind == "after-step-checkpoint":
        _after(Checkpoints, "save",
               lambda checkpoints, model, it, *a: it % checkpoints.steps_per_epoch != 0)
    elif kind == "after-gate-summaries":
        _after(callbacks.GateSummaries, "on_epoch_end")
    elif kind == "after-epoch-checkpoint":
        _after(Checkpoints, "save",
               lambda checkpoints, model, it, *a: it == int(number) * checkpoints.steps_per_epoch)
    elif kind == "during-final-save":
        _after(zoo, "save")
    elif kind == "finishing":
        _after(Checkpoints, "remove")
    else:
        raise SystemExit(f"unknown boundary {boundary!r}")


if __name__ == "__main__":
    boundary, separator, *argv = sys.argv[1:]
    assert separator == "--", "usage: fault_injection.py BOUNDARY -- ARGS..."
    from highway_zoo import cli

    arm(boundary)
    sys.exit(cli.main(argv))
