"""pytest plugin for the mutation runs: mutmut's trampolines keep the signature they wrap.

mutmut 3.8 replaces each mutated function by a trampoline `(*args, **kwargs)` made with
`functools.wraps`. Keras reads a layer constructor's arguments with `inspect.getfullargspec`,
which does not follow `__wrapped__`, so every layer built from a mutated module failed
(`IndexError` in keras/src/ops/operation.py). Both `inspect.signature` and `getfullargspec`
honour `__signature__`, which this sets on constructors only: `functools.wraps` copies it
with `__dict__`, and Keras wraps a layer's bound `build` that way, where a signature that still
names `self` breaks Keras's check of `build`'s arguments. Loaded with `-p keep_signatures`
(layers.cfg) before the tests import the mutated code.
"""

import inspect

from mutmut.mutation import trampoline

_wrap_in_trampoline = trampoline.wrap_in_trampoline


def _wrap_keeping_signature(mutants_dict, is_classmethod=False):
    decorate = _wrap_in_trampoline(mutants_dict, is_classmethod)

    def mutmut_mutated(function):
        wrapper = decorate(function)
        if function.__name__ == "__init__":
            wrapper.__signature__ = inspect.signature(function)
        return wrapper

    return mutmut_mutated


trampoline.wrap_in_trampoline = _wrap_keeping_signature
