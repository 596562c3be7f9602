"""Where a training run's time goes, phase by phase, recorded in its run.json ("timeline").

`train()` reads a clock at the ends of the phases it knows (the data loaded, the model built
and compiled, the first training step, each evaluation of the test split, the run's callbacks,
the final files); the callbacks of `Clock.callbacks()` give it the times inside `fit`. The
command line marks its own start (`mark("main")`, at the entry of `highway-zoo`'s `main`) and
the end of Keras's import (`mark("keras")`), from the process's start (`process_age`), so a
`highway-zoo train` run also records the phases before `train()`: the interpreter, Keras with
its backend, the other imports. Nothing is printed; a few clock readings cost microseconds.
`benchmarks.whole_process` turns the records into its breakdown.

The phases, in seconds (the keys of run.json's "timeline"["phases_s"], in the order they
happen; they add up to "process_s" for a command, to "train_s" for a call of `train()`):

    interpreter   the process's start to the command line's entry: Python, site, the CLI
    keras         parsing the command and importing Keras with its backend's framework
    imports       the command's own modules (zoo, training) up to `train()`
    data          reading the dataset
    build         the model built and compiled, the run directory, fit's set-up
    compile       the first training step (tracing and compiling on TensorFlow and JAX)
    training      the other steps, with each epoch's set-up
    evaluation    the test split evaluated after each epoch (its first compiles on JAX)
    callbacks     the run's callbacks at the start of training and at each epoch's end:
                  gate summaries (and the final epoch's Fig. 2), history.json, checkpoints
    saving        the final files (weights, model card, metrics.json)

A resumed run records the phases of the process that finished it. Linux only for the
phases before `train()` (`process_age` reads /proc; elsewhere they are left out).
"""

from __future__ import annotations

import os
import time
from typing import Any

# Marks of the command line, as the process's age in seconds: taken by the next Clock.
_marks: dict[str, float] = {}


def process_age() -> float | None:
    """Seconds since this process started (Linux: its start time in /proc/self/stat against
    CLOCK_BOOTTIME, to the kernel's clock tick, 10 ms); None where there is no /proc."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces), from field 3: starttime is 22.
    start_ticks = int(stat[stat.rindex(b")") + 2:].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")


def mark(name: str) -> None:
    """Notes the process's age now under `name` ("main": the command line's entry; "keras":
    Keras imported), for the run the command starts."""
    age = process_age()
    if age is not None:
        _marks[name] = age


class Clock:
    """The phases of one `train()`, from its call (`Clock()`) to `phases()`."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        # The command line's marks belong to the first run of the process only.
        self._marks, self._age = dict(_marks), process_age()
        _marks.clear()
        self._ends: dict[str, float] = {}  # phase -> when it ended (perf_counter)
        self._spent = {"evaluation": 0.0, "callbacks": 0.0}
        # The callbacks at the start of training that ran before the first step ended: they
        # lie inside "compile"'s interval and come off it, not off "training".
        self._callbacks_before_first_step = 0.0
        self._since: dict[str, float] = {}  # what is going on -> since when

    def lap(self, phase: str) -> None:
        """The phase `phase` ends now (the first time only)."""
        self._ends.setdefault(phase, time.perf_counter())

    def _begin(self, what: str) -> None:
        self._since[what] = time.perf_counter()

    def _end(self, what: str) -> None:
        if what in self._since:
            self._spent[what] += time.perf_counter() - self._since.pop(what)

    def _end_start_callbacks(self) -> None:
        self._end("callbacks")
        if "compile" not in self._ends:
            self._callbacks_before_first_step = self._spent["callbacks"]

    def callbacks(self) -> tuple[Any, Any]:
        """Two Keras callbacks timing what happens inside `fit`: put the first before the
        run's own callbacks and the second after them. The first fit's set-up ends "build"
        and its first batch "compile" (at the second callback, once the step's loss is
        there: it is the step's computation that ended); the test split's evaluations are
        summed, and so is the time spent in the callbacks between the two at the start of
        training and at each epoch's end. Their batch hook is `async_safe`: where Keras runs
        batch hooks in a thread pool, the steps still being computed when the test split's
        evaluation begins are waited for first and counted as training."""
        import keras

        def fit_end(logs=None):
            self._ends["fit"] = time.perf_counter()  # the last fit's end stays

        def test_begin(logs=None):
            optimizer = getattr(head.model, "optimizer", None)
            if optimizer is not None:  # the last step's result: the steps are done
                keras.ops.convert_to_numpy(optimizer.iterations)
            # The first step is done too, though its batch hook may not have run yet in
            # Keras's thread pool: the evaluation must not count twice (in "compile").
            self.lap("compile")
            self._begin("evaluation")

        head = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs=None: (self.lap("build"), self._begin("callbacks")),
            on_test_begin=test_begin,
            on_test_end=lambda logs=None: self._end("evaluation"),
            on_epoch_end=lambda epoch, logs=None: self._begin("callbacks"))
        tail = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs=None: self._end_start_callbacks(),
            on_train_batch_end=lambda batch, logs=None: self.lap("compile"),
            on_epoch_end=lambda epoch, logs=None: self._end("callbacks"),
            on_train_end=fit_end)
        tail.async_safe = True  # a clock reading; `lap` keeps the first
        return head, tail

    def phases(self) -> dict[str, Any]:
        """run.json's "timeline": {"phases_s": {phase: seconds}, "train_s": this `train()`
        so far, and for a command "process_s": the process's age now}. Phases that did not
        happen are left out (a run that only wrote its final files has data and build)."""
        now = time.perf_counter()
        phases: dict[str, float] = {}
        if "main" in self._marks and "keras" in self._marks and self._age is not None:
            phases.update(interpreter=self._marks["main"],
                          keras=self._marks["keras"] - self._marks["main"],
                          imports=self._age - self._marks["keras"])
        ends = self._ends
        phases["data"] = ends.get("data", self.started) - self.started
        last = ends.get("data", self.started)
        if "fit" in ends:
            phases["build"] = ends["build"] - last
            before = self._callbacks_before_first_step
            phases["compile"] = ends.get("compile", ends["build"]) - ends["build"] - before
            inside = ends["fit"] - ends.get("compile", ends["build"])
            phases["training"] = (inside - self._spent["evaluation"]
                                  - (self._spent["callbacks"] - before))
            phases.update(self._spent)
            phases["saving"] = now - ends["fit"]
        else:
            phases["build"] = now - last
        out: dict[str, Any] = {"phases_s": {k: round(v, 4) for k, v in phases.items()},
                               "train_s": round(now - self.started, 4)}
        if "interpreter" in phases:
            out["process_s"] = round(self._age + now - self.started, 4)
        return out
