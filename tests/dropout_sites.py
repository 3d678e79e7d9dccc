"""Which dropouts a model applies in training, and at which rates.

``dropout_sites(fn)`` calls ``fn`` (a model's ``apply``, traced or not: ``jax.eval_shape`` is
enough) under a Linen method interceptor and returns the set of ``(path, rate)`` of every
``Dropout`` module that drew a mask (called with ``deterministic=False`` and a rate above 0) and
every ``MultiHeadAttention`` that dropped its attention probabilities (path suffixed
``':probabilities'``). A test can then state the paper's list of dropout sites outright: a rate
wired to the wrong site, a site that lost its rate, or dropout in evaluation all show up, which
"training output differs from evaluation" alone does not catch.
"""

from __future__ import annotations

import flax.linen as nn

from models.attention import MultiHeadAttention
from models.dropout import Dropout


def dropout_sites(fn) -> set[tuple[str, float]]:
    found = set()

    def interceptor(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name == "__call__" and isinstance(module, Dropout):
            deterministic = kwargs["deterministic"] if "deterministic" in kwargs else args[1]
            if not deterministic and module.rate > 0:
                found.add(("/".join(module.path), module.rate))
        elif context.method_name == "__call__" and isinstance(module, MultiHeadAttention):
            if not kwargs.get("deterministic", True) and module.dropout_rate > 0:
                found.add(("/".join(module.path) + ":probabilities", module.dropout_rate))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        fn()
    return found
