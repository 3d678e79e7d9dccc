"""Checkpoint averaging: the parameters of a run's last N checkpoints, averaged element-wise.

Vaswani et al. 2017, Sec. 6.1: "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals. For the big models,
we averaged the last 20 checkpoints." The average of nearby points of the end of training is a
cheap ensemble in weight space: it smooths the noise of the last updates (Polyak averaging,
taken at a few points only).

`train.average_checkpoints = N` (0: off) makes the trainer, once the run reaches
train.num_steps and its last checkpoint is written, evaluate (and decode, for BLEU) the average
of the parameters of the last N checkpoints in the workdir instead of the final parameters; the
eval record says how many it averaged (`averaged_checkpoints`). The checkpoints are the ones
the run wrote every train.checkpoint_every steps, plus the final one, whatever sessions wrote
them: the trainer then keeps checkpoints on that interval (train/checkpointing.py
LatestOnInterval), so one written at a stop is dropped once a later one is written, and a
resumed run averages the same steps as an uninterrupted one. train.keep_checkpoints must keep
at least N. The optimizer state is not averaged (nothing trains from the average).

Each checkpoint is restored in turn into the run's shardings and added to a float32 running
sum, so the memory needed is two train states, whatever N.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp

from train.checkpoint_damage import CheckpointError
from train.distributed import together


def steps_to_average(saved_steps: list[int], count: int) -> list[int]:
    """The last `count` of a run's saved steps (all of them when fewer are saved)."""
    if count < 1:
        raise ValueError(f"count={count} must be >= 1")
    return sorted(saved_steps)[-count:]


def average_params(checkpointer, abstract_state: Any, steps: list[int],
                   warn: Callable[[str], None] = print) -> Any:
    """The element-wise mean of the parameters saved at `steps` by `checkpointer`
    (train/checkpointing.py), in the shardings and dtypes of `abstract_state.params`: each
    checkpoint restored into `abstract_state` in turn, summed in float32, divided by
    len(steps). Several processes first agree that they average the same steps (a stale
    listing on one would not), and a read that fails on any stops them all (CheckpointError or
    its subclass; StoppedBySignal for a signal)."""
    if not steps:
        raise ValueError("no checkpoint to average")
    checkpointer.check_same_steps(steps)  # else processes would average different steps

    def read(step: int) -> Any:
        # A read failing on one process (its share of the arrays) stops all, naming it: the
        # others would wait in the final eval's collectives.
        with together(f"reading checkpoint {step} to average it", (CheckpointError,)):
            return checkpointer.restore(abstract_state, step, warn)[0].params

    return mean_in_float32((read(step) for step in steps), abstract_state.params)


def mean_in_float32(trees: Iterable[Any], like: Any = None) -> Any:
    """The element-wise mean of parameter trees read one at a time (a float32 running sum, so
    one tree in memory beside it), in the dtypes of `like` (default the last tree's)."""
    total, count = None, 0
    for tree in trees:
        tree32 = jax.tree.map(lambda x: jnp.asarray(x).astype(jnp.float32), tree)
        total = tree32 if total is None else jax.tree.map(jnp.add, total, tree32)
        count, last = count + 1, tree
    if not count:
        raise ValueError("no parameters to average")
    return jax.tree.map(lambda s, x: (s / count).astype(x.dtype), total,
                        last if like is None else like)
