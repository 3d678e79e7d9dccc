"""Builds the general-distillation smoke trainer on every visible device with parameters sharded
(mesh data=1, fsdp=2, tensor=N/2), runs two steps, and prints as one JSON line: the sharding of
each teacher array against the student's array of the same name, whether each teacher array
holds exactly the values read from its checkpoint, and the losses.

    XLA_FLAGS=--xla_force_host_platform_device_count=4 \
        python tests/scripts/distill_sharding.py TEACHER_WORKDIR STUDENT_WORKDIR

The caller sets the device count (it must precede the jax import) and PAPERS_JAX_DATA.
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


def main(teacher: str, workdir: str) -> None:
    config = load_config_file(f"configs/bert/distill.py:smoke,teacher={teacher}")
    for key, value in {"mesh.data": "1", "mesh.fsdp": "2",
                       "mesh.tensor": str(jax.device_count() // 2)}.items():
        apply_override(config, key, value)
    trainer = Trainer(config, workdir)
    student = traverse_util.flatten_dict(trainer.state_shardings.params, sep="/")
    frozen = traverse_util.flatten_dict(trainer.frozen, sep="/")
    read = traverse_util.flatten_dict(trainer.task.teacher.params, sep="/")
    report = {"specs": {}, "exact": all(np.array_equal(np.asarray(v), read[k])
                                        for k, v in frozen.items())}
    for name, array in frozen.items():
        report["specs"][name] = [str(array.sharding.spec),
                                 str(student[name].spec) if name in student else None,
                                 len(array.addressable_shards)]
    state = trainer.init_state()
    batches = trainer.task.train_iterator(batch_size=config.data.batch_size, seed=0,
                                          process_index=0, process_count=1)
    losses = []
    for _ in range(2):
        state, metrics = trainer.train_step(state, next(batches))
        total, count = jax.device_get(metrics["loss"])
        losses.append(float(total / count))
    report["losses"] = losses
    print(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:3])
