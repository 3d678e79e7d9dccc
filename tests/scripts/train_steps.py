"""Runs a few train steps of the ViT smoke config and saves losses and parameters to an .npz.

    python tests/scripts/train_steps.py OUT.npz [--config.KEY=VALUE ...] [--process I/N@HOST:PORT]
                                        [--workdir=DIR [--until=STEP]]

Used by tests that compare runs across device counts, meshes and processes; the device count
comes from XLA_FLAGS, set by the caller before this process starts (it must precede the jax
import). With --process, this is process I of N joined through the coordinator at HOST:PORT;
each process feeds its own slice of every batch, and process 0 writes OUT.npz. With --workdir,
the trainer's own loop runs instead (`Trainer.run`: checkpoints in DIR, resuming from the latest,
up to STEP or train.num_steps) and OUT.npz holds its final parameters (no losses), and each
process prints a JSON line: its index, the step it ended at and the signal that stopped it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import traverse_util  # noqa: E402

from train.config import apply_override, load_config_file  # noqa: E402
from train.trainer import Trainer  # noqa: E402

STEPS = 3


def main(out: str, args: list[str]) -> None:
    overrides = [a for a in args if a.startswith("--config.")]
    process = [a.split("=", 1)[1] for a in args if a.startswith("--process=")]
    if process:
        from train import distributed
        index_count, address = process[0].split("@")
        index, count = (int(x) for x in index_count.split("/"))
        distributed.initialize(address, count, index)
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(config, "data.augment", "none")
    for item in overrides:
        key, _, value = item[len("--config."):].partition("=")
        apply_override(config, key, value)
    workdir = [a.split("=", 1)[1] for a in args if a.startswith("--workdir=")]
    until = [int(a.split("=", 1)[1]) for a in args if a.startswith("--until=")]
    losses = []
    if workdir:
        trainer = Trainer(config, workdir[0])
        trainer.run(until_step=until[0] if until else None)
        state = trainer.final_state
        print(json.dumps({"process": jax.process_index(), "step": int(state.step),
                          "interrupted": trainer.interrupted}), flush=True)
    else:
        trainer = Trainer(config, "/nonexistent-workdir-unused")
        state = trainer.init_state()
        batches = trainer.task.train_iterator(
            batch_size=config.data.batch_size // jax.process_count(), seed=0,
            process_index=jax.process_index(), process_count=jax.process_count())
        for _ in range(STEPS):
            state, metrics = trainer.train_step(state, next(batches))
            total, count = jax.device_get(metrics["loss"])
            losses.append(total / count)
    from jax.experimental import multihost_utils
    params = multihost_utils.process_allgather(state.params, tiled=True)  # whole arrays, any mesh
    params = traverse_util.flatten_dict(params, sep="/")
    if jax.process_index() != 0:
        return
    np.savez(out, losses=np.array(losses), devices=jax.device_count(),
             **{f"param/{k}": np.asarray(v) for k, v in params.items()})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
