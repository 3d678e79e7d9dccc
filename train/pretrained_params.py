"""Pretrained parameters put into a model's freshly initialised ones, inside a task's
`init_variables` (which the trainer traces into its sharded initialisation, train/trainer.py).

    params = put_pretrained(variables["params"], loaded, what="the pretrained encoder",
                            fresh=("head",))

Every leaf of the model's tree is replaced by the leaf at the same path of `loaded` (host NumPy),
cast to the model's dtype and kept in its logical-partitioning box, so the sharding rules still
see its axis names; the top-level subtrees named in `fresh` keep their initial values (a new
classifier). Anything else that does not match is a ConfigError that names every missing,
unexpected and mis-shaped parameter: a checkpoint never half-loads.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from train.config import ConfigError


def put_pretrained(current: Mapping[str, Any], loaded: Mapping[str, Any], *, what: str,
                   fresh: Iterable[str] = ()) -> dict[str, Any]:
    """`current` (boxed or plain leaves) with `loaded`'s values (module docstring). `what` heads
    the error: "<what> does not fit the model's parameters"."""
    fresh = set(fresh)
    current = traverse_util.flatten_dict(dict(current))
    loaded = traverse_util.flatten_dict(dict(loaded))
    wanted = {k: v for k, v in current.items() if k[0] not in fresh}
    problems = [f"missing {'/'.join(k)} {tuple(nn.meta.unbox(v).shape)}"
                for k, v in wanted.items() if k not in loaded]
    problems += [f"unexpected {'/'.join(k)} {np.shape(v)}" for k, v in loaded.items()
                 if k not in wanted]
    problems += [f"{'/'.join(k)}: pretrained {np.shape(loaded[k])}, model "
                 f"{tuple(nn.meta.unbox(v).shape)}" for k, v in wanted.items()
                 if k in loaded and np.shape(loaded[k]) != tuple(nn.meta.unbox(v).shape)]
    if problems:
        raise ConfigError(f"{what} does not fit the model's parameters ({len(problems)} "
                          "differences):\n  " + "\n  ".join(problems[:40]))

    def put(old, new):
        value = jnp.asarray(new, dtype=nn.meta.unbox(old).dtype)
        return old.replace_boxed(value) if isinstance(old, nn.meta.AxisMetadata) else value

    return traverse_util.unflatten_dict(
        {k: put(v, loaded[k]) if k in wanted else v for k, v in current.items()})
