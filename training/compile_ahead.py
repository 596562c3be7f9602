"""`CompileAhead`: on JAX, the steps a run needs later compile on a second thread while the
first batches train.

Keras compiles its train step at the first batch of each input shape, and its test step at
the first evaluation. An epoch whose examples do not divide by the batch size ends in a
smaller batch, a second shape: the headline run (4,000 examples in batches of 128) compiles
its train step twice and its test step once, each in turn on the main thread, in the middle of
the first epoch (first run: 1.6-1.9 s for each train step, 0.5 s for the test step, on the
2-core machine of docs/results/benchmarks.md). This callback lowers the later ones when
training begins and has XLA compile them on a thread of their own, while the main thread
compiles and trains the first shape; when their batches come, Keras finds them compiled.

The steps are the functions Keras itself compiles, `jax.jit(model.train_step,
donate_argnums=0)` and the same of `test_step`, set as the model's `train_function` and
`test_function` (Keras keeps a model's step functions from one `fit` to the next): the
computations, and so the results, are the same. Lowering (tracing the step) stays on the main
thread, as Keras does it; only XLA's compilation, which releases Python's lock, runs beside
it. With JAX's compilation cache warm (`training.jax_cache`), the thread loads them from the
cache instead.

It applies to a model compiled for XLA (`jit_compile`, not `run_eagerly`) with one step per
execution and no `keras.distribution` (whose steps Keras compiles with shardings), on the JAX
backend; elsewhere it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np


def _shapes(batch: Any) -> tuple:
    return tuple(np.shape(part) for part in keras.tree.flatten(batch))


def one_per_shape(batches: Sequence[Any], but: Any = None) -> list[Any]:
    """The first batch of each shape among `batches`, leaving out `but`'s shape."""
    seen = set() if but is None else {_shapes(but)}
    kept = []
    for batch in batches:
        shapes = _shapes(batch)
        if shapes not in seen:
            seen.add(shapes)
            kept.append(batch)
    return kept


def applies(model: keras.Model) -> bool:
    """Whether `CompileAhead` does anything for `model` (compiled) on this backend."""
    if keras.backend.backend() != "jax" or keras.distribution.distribution() is not None:
        return False
    return (model.jit_compile and not model.run_eagerly and model.steps_per_execution == 1
            and not keras.config.is_nnx_enabled())


class CompileAhead(keras.callbacks.Callback):
    """Compiles the model's train step for `train_batches` and its test step for
    `test_batches` on a second thread, as the first `fit` begins (JAX; see the module).

    Args:
        train_batches: one batch of each training shape that the first step does not
            compile (`for_data` finds them).
        test_batches: one batch of each shape of the test split.
    """

    def __init__(self, train_batches: Sequence[Any], test_batches: Sequence[Any]):
        super().__init__()
        self.train_batches, self.test_batches = list(train_batches), list(test_batches)
        self.thread: threading.Thread | None = None

    @classmethod
    def for_data(cls, first_fit: keras.utils.PyDataset, epoch: keras.utils.PyDataset,
                 test: keras.utils.PyDataset) -> CompileAhead:
        """For a run whose first `fit` trains on `first_fit`, whose epochs are batched as
        `epoch` and which is evaluated on `test`: the steps of the shapes of `epoch`'s first
        and last batch but `first_fit`'s first, and of `test`'s first and last batch."""
        def ends(batches):
            return [batches[0], batches[len(batches) - 1]] if len(batches) else []

        first = first_fit[0] if len(first_fit) else None
        return cls(one_per_shape(ends(epoch), but=first), one_per_shape(ends(test)))

    def on_train_begin(self, logs=None):
        if self.thread is not None or not applies(self.model):  # the first fit only
            return
        import jax

        model = self.model
        train_step = jax.jit(model.train_step, donate_argnums=0)
        test_step = jax.jit(model.test_step, donate_argnums=0)
        # As Keras's own step functions with one step per execution.
        model.train_function = lambda state, iterator: train_step(state, next(iterator))
        model.test_function = lambda state, iterator: test_step(state, next(iterator))

        def values(variables):
            return [v.value for v in variables]

        trainable, non_trainable, metrics = (values(model.trainable_variables),
                                             values(model.non_trainable_variables),
                                             values(model.metrics_variables))
        state = (trainable, non_trainable, values(model.optimizer.variables), metrics)
        lowered = [train_step.lower(state, batch) for batch in self.train_batches]
        lowered += [test_step.lower((trainable, non_trainable, metrics), batch)
                    for batch in self.test_batches]
        self.thread = threading.Thread(target=_compile, args=(lowered,), name="compile-ahead",
                                       daemon=True)
        self.thread.start()


def _compile(lowered: list[Any]) -> None:
    for computation in lowered:
        try:
            computation.compile()
        except Exception:  # noqa: BLE001 - Keras compiles it again when its batch comes,
            pass  # and the error shows there, on the main thread
