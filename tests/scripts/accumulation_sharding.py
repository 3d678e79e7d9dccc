"""Compiles the ViT smoke train step with gradient accumulation on every visible device (mesh
data=N) and prints, as one JSON line, the collectives of the compiled step and how far its
gradient is from the same step without accumulation.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/scripts/accumulation_sharding.py K

The caller sets the device count (it must precede the jax import).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from train import partitioning  # noqa: E402
from train.config import apply_override, load_config_file  # noqa: E402
from train.trainer import Trainer  # noqa: E402

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce", "reduce-scatter")


def trainer_with(accum: int, batch_size: int) -> Trainer:
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in {"data.augment": "none", "optimizer.clip_norm": "0.0",
                       "mesh.data": str(jax.device_count()), "data.batch_size": str(batch_size),
                       "train.grad_accum_steps": str(accum)}.items():
        apply_override(config, key, value)
    return Trainer(config, "/nonexistent-workdir-unused")


def gradient(state, b1: float):
    (adam,) = [n for n in jax.tree.leaves(state.opt_state,
                                          is_leaf=lambda n: isinstance(n, optax.ScaleByAdamState))
               if isinstance(n, optax.ScaleByAdamState)]
    return [np.asarray(m) / (1.0 - b1) for m in jax.tree.leaves(jax.device_get(adam.mu))]


def main(accum: int) -> None:
    report = {"devices": jax.device_count()}
    batch_size = 4 * accum * jax.device_count()  # 4 rows of each microbatch per device
    grads = {}
    for k in (1, accum):
        trainer = trainer_with(k, batch_size)
        state = trainer.init_state()
        batch = next(trainer.task.train_iterator(batch_size=batch_size, seed=0, process_index=0,
                                                 process_count=1))
        batch = {name: v for name, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}
        if k == accum:
            with trainer._context():
                placed = partitioning.global_batch(batch, trainer.mesh)
                hlo = trainer._train_step.lower(state, placed, trainer.frozen).compile().as_text()
            report["collectives"] = {name: len(re.findall(rf"\b{name}(?:-start)?\(", hlo))
                                     for name in COLLECTIVES}
        state, _ = trainer.train_step(state, batch)
        grads[k] = gradient(state, trainer.config.optimizer.b1)
    biggest = max(float(np.max(np.abs(g))) for g in grads[1])
    report["max_gradient_difference"] = max(
        float(np.max(np.abs(a - b))) for a, b in zip(grads[accum], grads[1])) / biggest
    print(json.dumps(report))


if __name__ == "__main__":
    main(int(sys.argv[1]))
