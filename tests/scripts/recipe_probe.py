"""tests/scripts/recipe_run.py, and what the run's train state and batches looked like, for the
recipes' end-to-end tests to assert on:

    python tests/scripts/recipe_probe.py NUM_EXAMPLES --config ... --workdir ... [--config.K=V]

Prints recipe_run's {"code": N} line, then one more JSON line, {"probe": {...}}:
  params   each parameter of the trained state (the Trainer's final_state) by its path: its
           global shape, its sharding's PartitionSpec (a list: null, an axis name or a list of
           them per dimension) and the shape of the shard on the first device
  steps    for each train step, each field of the batch handed to the jitted train step: its
           global shape, PartitionSpec and per-device shard shape
  reads    for each TFDS split string the run read, the (split, index, seed) of each mock
           example read through it (tests/tfds_mock.py READS)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))         # recipe_run
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # tests/ (tfds_mock)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the repository

import recipe_run  # noqa: E402
import tfds_mock  # noqa: E402


def _spec(sharding) -> list:
    return [list(axis) if isinstance(axis, tuple) else axis for axis in sharding.spec]


def _array(value) -> dict:
    return {"shape": list(value.shape), "spec": _spec(value.sharding),
            "device_shape": list(value.addressable_shards[0].data.shape)}


def main(num_examples: int, argv: list[str]) -> None:
    import jax

    from train.trainer import Trainer

    trainers, steps = [], []
    init = Trainer.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        trainers.append(self)
        step_fn = self._train_step

        def train_step(state, batch, *rest):
            steps.append({name: _array(value) for name, value in batch.items()})
            return step_fn(state, batch, *rest)

        self._train_step = train_step

    Trainer.__init__ = recording_init
    recipe_run.main(num_examples, argv)
    params = {}
    state = getattr(trainers[-1], "final_state", None) if trainers else None
    if state is not None:
        for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
            params[jax.tree_util.keystr(path, simple=True, separator="/")] = _array(leaf)
    reads = {spec: sorted(rows) for spec, rows in tfds_mock.READS.items()}
    print(json.dumps({"probe": {"params": params, "steps": steps, "reads": reads}}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
