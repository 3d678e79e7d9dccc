"""Which weights of a run's checkpoints a command reads: the trained parameters (`raw`), the
exponential moving average of them (`ema`) that a run with train.ema_decay > 0 checkpoints
beside them (train/trainer.py), or the average of its last train.average_checkpoints
checkpoints (`average`), the weights a finished run that averages reports its final eval of
(Vaswani et al. 2017, Sec. 6.1; train/checkpoint_averaging.py). Used by python -m
train.predict and python -m train.evaluate (`--weights`)."""

from __future__ import annotations

import os
from typing import Any, Callable

import jax
import numpy as np

from train import run_config, storage
from train.checkpoint_averaging import mean_in_float32, steps_to_average
from train.checkpointing import CheckpointError, checkpoint_steps, load_state

# which weights of a run: the trained ones, their moving average, its last checkpoints averaged
WEIGHTS = ("raw", "ema", "average")


def final_eval_weights(workdir: str | os.PathLike, config: dict) -> str:
    """The weights the run's final eval scored (`config`: its config): 'average' for a run with
    train.average_checkpoints > 0 that reached train.num_steps, else 'raw' (a run still
    training, or stopped early, has evaluated its raw weights only)."""
    train = config.get("train", {})
    if train.get("average_checkpoints", 0) < 1:
        return "raw"
    steps = checkpoint_steps(workdir)
    return "average" if steps and steps[-1] >= train.get("num_steps", 0) else "raw"


def averaged_steps(workdir: str | os.PathLike, step: int | None = None) -> list[int]:
    """The saved steps weights='average' averages: the last train.average_checkpoints up to
    `step` (default the latest; all of them when fewer are saved, as the trainer does).
    CheckpointError for a run that averages none, or an unsaved `step`."""
    config = run_config.read_resolved(storage.run_path(workdir) / run_config.RESOLVED_FILE)
    count = config.get("train", {}).get("average_checkpoints", 0)
    if count < 1:
        raise CheckpointError(f"the run in {workdir} averages no checkpoints "
                              "(train.average_checkpoints=0): use its raw weights "
                              "(--weights raw)")
    saved = checkpoint_steps(workdir)
    if step is not None and step not in saved:
        raise CheckpointError(f"no checkpoint of step {step} in {workdir} (saved steps: "
                              f"{saved})")
    steps = steps_to_average([s for s in saved if step is None or s <= step], count)
    if not steps:
        raise CheckpointError(f"no checkpoint in {workdir}: train the run first")
    return steps


def load_weights(workdir: str | os.PathLike, step: int | None = None, weights: str = "raw",
                 note: Callable[[str], None] | None = None) -> Any:
    """The parameters of a run's checkpoint (train/checkpointing.py `load_params`; default the
    latest step), or with weights='ema' the exponential moving average of them that a run with
    train.ema_decay > 0 checkpoints beside them (train/trainer.py), or with weights='average'
    the element-wise mean, summed in float32 and in the saved dtypes, of the checkpoints of
    `averaged_steps` (told to `note`), as the trainer's final eval averages them.
    CheckpointError naming the fix for a run that kept no such weights."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r} is not one of {list(WEIGHTS)}")
    if weights == "average":
        steps = averaged_steps(workdir, step)
        if note:
            note(f"weights: the average of the last {len(steps)} checkpoints, steps "
                 f"{', '.join(map(str, steps))}")
        mean = mean_in_float32(load_state(workdir, each)["params"] for each in steps)
        return jax.tree.map(np.asarray, mean)  # host arrays, as the other weights are
    state = load_state(workdir, step)
    if weights == "raw":
        return state["params"]
    averaged = state.get("ema_params")
    if not averaged:
        raise CheckpointError(f"the checkpoints of {workdir} hold no moving average of the "
                              "weights: the run trained with train.ema_decay=0; use the raw "
                              "weights (--weights raw)")
    return averaged
