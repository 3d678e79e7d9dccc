"""Which dropouts a model applies in training, at which rates, and which elements they drop.

``dropout_sites(fn)`` calls ``fn`` (a model's ``apply``, traced or not: ``jax.eval_shape`` is
enough) under a Linen method interceptor and returns the set of ``(path, rate)`` of every
``Dropout`` module that drew a mask (called with ``deterministic=False`` and a rate above 0) and
every ``MultiHeadAttention`` that dropped its attention probabilities (path suffixed
``':probabilities'``). A test can then state the paper's list of dropout sites outright: a rate
wired to the wrong site, a site that lost its rate, or dropout in evaluation all show up, which
"training output differs from evaluation" alone does not catch.

``recording_drops(found)`` is a context under which every ``Dropout`` module that draws a mask
sends, each time the program runs, where its output is zero (a bool array shaped like it) to
``found[path]`` through ``jax.debug.callback``: the masks a train step really drew, whatever
jit, sharding, ``lax.scan`` over microbatches or autodiff sit in between. The callbacks are
placed when the function is traced, so a jitted function must be traced (first called) inside
the context; each of its later runs records again. Call ``jax.effects_barrier()`` before
reading ``found``.
"""

from __future__ import annotations

import contextlib
import functools

import flax.linen as nn
import jax
import numpy as np

from models.attention import MultiHeadAttention
from models.dropout import Dropout


def _draws_mask(module, args, kwargs) -> bool:
    """Whether this call of a Dropout module drops anything."""
    deterministic = kwargs["deterministic"] if "deterministic" in kwargs else args[1]
    return not deterministic and module.rate > 0


def dropout_sites(fn) -> set[tuple[str, float]]:
    found = set()

    def interceptor(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name == "__call__" and isinstance(module, Dropout):
            if _draws_mask(module, args, kwargs):
                found.add(("/".join(module.path), module.rate))
        elif context.method_name == "__call__" and isinstance(module, MultiHeadAttention):
            if not kwargs.get("deterministic", True) and module.dropout_rate > 0:
                found.add(("/".join(module.path) + ":probabilities", module.dropout_rate))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        fn()
    return found


def _record(found: dict, path: str, zeros) -> None:
    found.setdefault(path, []).append(np.asarray(zeros))


@contextlib.contextmanager
def recording_drops(found: dict[str, list[np.ndarray]]):
    def interceptor(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        module = context.module
        if (context.method_name == "__call__" and isinstance(module, Dropout)
                and _draws_mask(module, args, kwargs)):
            jax.debug.callback(functools.partial(_record, found, "/".join(module.path)), out == 0)
        return out

    with nn.intercept_methods(interceptor):
        yield found
