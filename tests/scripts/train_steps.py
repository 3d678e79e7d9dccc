"""Runs a few train steps of the ViT smoke config and saves losses and parameters to an .npz.

    python tests/scripts/train_steps.py OUT.npz [--config.KEY=VALUE ...]

Used by tests that compare runs across device counts and meshes; the device count comes from
XLA_FLAGS, set by the caller before this process starts (it must precede the jax import).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import traverse_util  # noqa: E402

from train.config import apply_override, load_config_file  # noqa: E402
from train.trainer import Trainer  # noqa: E402

STEPS = 3


def main(out: str, overrides: list[str]) -> None:
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(config, "data.augment", "none")
    for item in overrides:
        key, _, value = item[len("--config."):].partition("=")
        apply_override(config, key, value)
    trainer = Trainer(config, "/nonexistent-workdir-unused")
    state = trainer.init_state()
    batches = trainer.task.train_iterator(batch_size=config.data.batch_size, seed=0,
                                          process_index=0, process_count=1)
    losses = []
    for _ in range(STEPS):
        state, metrics = trainer.train_step(state, next(batches))
        total, count = jax.device_get(metrics["loss"])
        losses.append(total / count)
    params = traverse_util.flatten_dict(jax.device_get(state.params), sep="/")
    np.savez(out, losses=np.array(losses), devices=jax.device_count(),
             **{f"param/{k}": np.asarray(v) for k, v in params.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
