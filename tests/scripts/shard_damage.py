"""Saves a checkpoint whose arrays each process writes its own share of, or restores the newest
good step of it, or averages the steps it lists (train/checkpoint_averaging.py); for the tests of
a restore that fails on one process only.

    python tests/scripts/shard_damage.py save|restore|average DIR --process=I/N@HOST:PORT

`save` writes steps 1 and 2: a [64, 256] float32 array of random values (step-dependent),
rows sharded over every device of the run, so that each process's rows are chunks of over
OCDBT's 1 KiB inline size in its own `ocdbt.process_<i>` file. `restore` restores the newest
good step (`restore_latest_good`) on the same mesh, so each process reads only its own rows,
and prints one JSON line per process: its index, the step, whether its rows are that step's
values, the warnings, or the error that stopped it (type and message); `average` likewise, its
rows compared with the mean of the steps' values. With
FAIL_RESTORE_ON_PROCESS=I, process I's reading of the arrays raises OSError EIO; with
INTERRUPT_RESTORE_ON_PROCESS=I a SIGTERM stops it there; with OLDER_LISTING_ON_PROCESS=I
process I lists the steps without the newest (a stale view of the folder).
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import types  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from train import distributed  # noqa: E402
from train.checkpoint_averaging import average_params  # noqa: E402
from train.checkpointing import Checkpointer  # noqa: E402
from train.interrupts import StoppedBySignal  # noqa: E402

SHAPE = (64, 256)


def values(step: int) -> np.ndarray:
    return np.random.default_rng(step).standard_normal(SHAPE).astype(np.float32)


class ParamsCheckpointer(Checkpointer):
    """Reads the saved {'w'} as the `params` of a train state, as average_params reads them."""

    def restore(self, abstract_state, step=None, warn=print):
        state, data_state, step = super().restore(abstract_state.params, step, warn)
        return types.SimpleNamespace(params=state), data_state, step


def main(action: str, directory: str, args: list[str]) -> None:
    index_count, address = [a.split("=", 1)[1] for a in args if a.startswith("--process=")][
        0].split("@")
    index, count = (int(x) for x in index_count.split("/"))
    distributed.initialize(address, count, index)
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data", None))
    if os.environ.get("FAIL_RESTORE_ON_PROCESS") == str(index):
        def fail(*args, **kwargs):
            raise OSError(errno.EIO, "Input/output error")
        ocp.StandardCheckpointHandler.restore = fail
    if os.environ.get("INTERRUPT_RESTORE_ON_PROCESS") == str(index):
        def interrupt(*args, **kwargs):
            raise StoppedBySignal(15)
        ocp.StandardCheckpointHandler.restore = interrupt
    if os.environ.get("OLDER_LISTING_ON_PROCESS") == str(index):
        listed = Checkpointer.all_steps
        Checkpointer.all_steps = lambda self: listed(self)[:-1]
    kind = ParamsCheckpointer if action == "average" else Checkpointer
    with kind(directory, save_every=1, keep=2) as checkpointer:
        if action == "save":
            for step in (1, 2):
                w = jax.make_array_from_callback(SHAPE, sharding, lambda i, s=step: values(s)[i])
                assert checkpointer.save(step, {"w": w}, {"process": index}, force=True)
            return
        abstract = {"w": jax.ShapeDtypeStruct(SHAPE, jnp.float32, sharding=sharding)}
        warnings: list[str] = []
        try:
            if action == "average":
                steps = checkpointer.all_steps()
                state = average_params(checkpointer, types.SimpleNamespace(params=abstract),
                                       steps, warnings.append)
                step, expected = steps, sum(values(s) for s in steps) / len(steps)
            else:
                state, _, step = checkpointer.restore_latest_good(abstract, warnings.append)
                expected = values(step)
        except BaseException as error:  # noqa: BLE001 - reported, for the test to judge
            print(json.dumps({"process": index, "error": [type(error).__name__, str(error)],
                              "signum": getattr(error, "signum", None)}), flush=True)
            return
    rows = all(np.array_equal(np.asarray(shard.data), expected[shard.index])
               for shard in state["w"].addressable_shards)
    print(json.dumps({"process": index, "step": step, "rows_match": rows,
                      "warnings": warnings}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
