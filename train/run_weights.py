"""Which weights of a run's checkpoint a command reads: the trained parameters (`raw`) or the
exponential moving average of them (`ema`) that a run with train.ema_decay > 0 checkpoints
beside them (train/trainer.py). Used by python -m train.predict and python -m train.evaluate
(`--weights`)."""

from __future__ import annotations

import os
from typing import Any

from train.checkpointing import CheckpointError, load_state

WEIGHTS = ("raw", "ema")  # which weights of a checkpoint: the trained ones or their average


def load_weights(workdir: str | os.PathLike, step: int | None = None,
                 weights: str = "raw") -> Any:
    """The parameters of a run's checkpoint (train/checkpointing.py `load_params`), or with weights='ema' the
    exponential moving average of them that a run with train.ema_decay > 0 checkpoints beside
    them (train/trainer.py). CheckpointError naming the fix for a run that kept none."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r} is not one of {list(WEIGHTS)}")
    state = load_state(workdir, step)
    if weights == "raw":
        return state["params"]
    averaged = state.get("ema_params")
    if not averaged:
        raise CheckpointError(f"the checkpoints of {workdir} hold no moving average of the "
                              "weights: the run trained with train.ema_decay=0; use the raw "
                              "weights (--weights raw)")
    return averaged
