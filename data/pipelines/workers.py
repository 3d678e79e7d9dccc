"""Making the training batches of a grain pipeline in worker processes (`data.worker_count`).

A host that must feed several accelerators makes its examples in Python: decoding and cropping
JPEGs, tokenizing and packing sentence pairs. One process's threads share one interpreter lock,
so past a few thousand examples a second the input, not the model, sets the pace
(docs/launch.md). `in_workers` moves everything before it into `worker_count` processes with
grain's `mp_prefetch`: each worker makes every `worker_count`-th element and the parent takes
them back in order, so the batches are the same sequence whatever the count where the pipeline
seeds its randomness by element (the image pipeline), and depend on the count, deterministically,
where it does not (translation's packing, which runs inside each worker). The iterator's
get_state/set_state still resume exactly.

A worker ends when its parent process does, however the parent ended: grain's workers otherwise
outlive a parent killed outright (the kernel's out-of-memory killer, `kill -9`), each holding its
share of the input's memory and spinning on the queue nobody reads any more.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading

import grain
import numpy as np
from absl import flags as absl_flags

from data.errors import DataError

PARENT_GONE = 70  # a worker's exit status when its parent ended first (EX_SOFTWARE)


def check_worker_count(worker_count) -> int:
    """`worker_count` as an int; DataError unless it is a non-negative integer."""
    if isinstance(worker_count, bool) or not isinstance(worker_count, (int, np.integer)) \
            or worker_count < 0:
        raise DataError(f"worker_count must be a non-negative integer (0: make the batches in "
                        f"this process), got {worker_count!r}")
    return int(worker_count)


def in_workers(ds: grain.IterDataset, worker_count: int) -> grain.IterDataset:
    """`ds` made in `worker_count` grain worker processes (`ds` itself when 0)."""
    if not check_worker_count(worker_count):
        return ds
    if not absl_flags.FLAGS.is_parsed():  # grain reads its absl flags; outside absl.app.run
        absl_flags.FLAGS.mark_as_parsed()  # nobody parsed them: use their defaults
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count),
                          worker_init_fn=exit_with_parent)


def exit_with_parent(worker_index: int = 0, worker_count: int = 1) -> None:
    """In a worker process: end it, at once, when the process that started it ends.

    A daemon thread waits on the parent's sentinel (the pipe that the parent holds open while it
    lives) and calls os._exit, which a worker busy in a long element cannot delay. grain calls
    this with the worker's index and count; they are not needed. Nothing in a process that has
    no parent of multiprocessing's (the main process)."""
    del worker_index, worker_count
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def wait_then_exit():
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(PARENT_GONE)

    threading.Thread(target=wait_then_exit, name="exit-with-parent", daemon=True).start()
