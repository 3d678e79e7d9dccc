"""Saves or restores a sharded checkpoint with each process's own data state; prints the result.

    python tests/scripts/checkpoint_processes.py save|restore DIR [--process=I/N@HOST:PORT]

`save` writes steps 2 and 3. The state is one [16, 8] array sharded over every device of the
run (rows on 'data'; VALUES at step 3, VALUES - 1 at step 2) and a step counter; process i's
data state is {"process": i, "next_index": 100 + i, "step": step}. `restore` restores the
newest good step (`restore_latest_good`) and prints one JSON line per process: its data state,
the step, the restored array (gathered whole), its sharding's mesh size, and the warnings the
restore gave; process 1 starts it 2 s after process 0. The device count comes from XLA_FLAGS.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from train.checkpointing import Checkpointer  # noqa: E402

STEP = 3
VALUES = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)


def main(action: str, directory: str, args: list[str]) -> None:
    process = [a.split("=", 1)[1] for a in args if a.startswith("--process=")]
    if process:
        from train import distributed
        index_count, address = process[0].split("@")
        index, count = (int(x) for x in index_count.split("/"))
        distributed.initialize(address, count, index)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, P("data", None))
    replicated = NamedSharding(mesh, P())
    with Checkpointer(directory, save_every=1, keep=2) as checkpointer:
        if action == "save":
            for saved in (STEP - 1, STEP):
                values = VALUES + (saved - STEP)
                w = jax.make_array_from_callback(VALUES.shape, sharding, lambda i: values[i])
                step = jax.device_put(jnp.int32(saved), replicated)
                data_state = {"process": jax.process_index(),
                              "next_index": 100 + jax.process_index(), "step": saved}
                assert checkpointer.save(saved, {"w": w, "step": step}, data_state, force=True)
            return
        abstract = {"w": jax.ShapeDtypeStruct(VALUES.shape, jnp.float32, sharding=sharding),
                    "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)}
        warnings: list[str] = []
        if jax.process_index() == 1:
            time.sleep(2)  # a slower host: process 0 must not set a step aside under its reads
        state, data_state, step = checkpointer.restore_latest_good(abstract, warnings.append)
    w = multihost_utils.process_allgather(state["w"], tiled=True)
    print(json.dumps({"process": jax.process_index(), "data": data_state, "step": step,
                      "w": np.asarray(w).tolist(), "mesh_size": state["w"].sharding.mesh.size,
                      "warnings": warnings}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
