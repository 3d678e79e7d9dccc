"""One train step of the ViT smoke config with dropout on a batch of identical images, recording
the dropout masks each row got; prints how many distinct masks each dropout site drew.

    python tests/scripts/dropout_masks.py [--config.KEY=VALUE ...]

The device count comes from XLA_FLAGS, set by the caller before this process starts. Prints one
JSON line: {"devices": N, "rows": rows of the batch, "distinct": {site: distinct row masks}}.
Run with data-parallel devices, the rows of every microbatch lie on different devices.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

import jax  # noqa: E402
import numpy as np  # noqa: E402
from dropout_sites import recording_drops  # noqa: E402

from train.config import apply_override, load_config_file  # noqa: E402
from train.trainer import Trainer  # noqa: E402


def smoke_trainer(overrides: dict, workdir: str | Path = "/nonexistent-workdir-unused") -> Trainer:
    """The ViT smoke config with dropout 0.1 on every sublayer output and the embeddings."""
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in {"model.dropout_rate": 0.1, "data.augment": "none", **overrides}.items():
        apply_override(config, key, str(value))
    return Trainer(config, workdir)


def identical_rows(trainer: Trainer) -> dict[str, np.ndarray]:
    """A training batch of config.data.batch_size copies of one image (and its label)."""
    rows = trainer.config.data.batch_size
    batch = next(trainer.task.train_iterator(batch_size=rows, seed=0, process_index=0,
                                             process_count=1))
    return {key: np.repeat(value[:1], rows, axis=0) for key, value in batch.items()}


def recorded_step(trainer: Trainer, state, batch, found: dict) -> tuple[dict, dict]:
    """(metrics, {site: bool [rows, ...] where its output is zero, one row per example}) of one
    `trainer.train_step`. `found` is the recording of this trainer's step function: the first
    call traces the step under `recording_drops(found)`, every later call records into it too."""
    found.clear()
    with recording_drops(found):
        _, metrics = trainer.train_step(state, batch)
    jax.effects_barrier()
    return jax.device_get(metrics), {site: np.concatenate(calls) for site, calls in found.items()}


def distinct_rows(masks: np.ndarray) -> int:
    return len({row.tobytes() for row in masks})


def main(args: list[str]) -> None:
    overrides = dict(a[len("--config."):].split("=", 1) for a in args if a.startswith("--config."))
    trainer = smoke_trainer(overrides)
    batch = identical_rows(trainer)
    _, masks = recorded_step(trainer, trainer.init_state(), batch, {})
    print(json.dumps({"devices": jax.device_count(), "rows": len(batch["label"]),
                      "distinct": {site: distinct_rows(m) for site, m in masks.items()}}))


if __name__ == "__main__":
    main(sys.argv[1:])
