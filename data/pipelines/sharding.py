"""What every pipeline shares: how its batches are split between processes, and its seeds.

All processes build the same global stream of batches of `batch_size` (per process) and process
i of P takes the batches i, i + P, i + 2P, ... of it (`ds[process_index::process_count]`). So
the batches of a step, concatenated in process order (what
`jax.make_array_from_process_local_data` builds), are one global batch whatever P is, the
processes' shards are disjoint, and every process yields as many batches as the others.

An evaluation pass is padded to whole global batches (`padded_size`: rows past the end are
padding, mask 0), so it sees every example once with static shapes, and every process yields
`num_batches` batches: the trainer runs that many eval steps.

A pipeline's `seed` is split into independent 32-bit seeds (`seeds`), one per use (the shuffle,
the augmentation, the masks, ...); the k-th does not depend on how many are asked for, so a
pipeline that takes one more keeps the ones it had.
"""

from __future__ import annotations

import numpy as np

from data.errors import DataError


def check_sharding(batch_size: int, process_index: int, process_count: int) -> None:
    """DataError for a batch size that is not a positive integer, or a process index outside
    [0, process_count)."""
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise DataError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not 0 <= process_index < process_count:
        raise DataError(f"process_index {process_index} not in [0, process_count="
                        f"{process_count})")


def seeds(seed: int, count: int) -> tuple[int, ...]:
    """`count` independent 32-bit seeds derived from the pipeline's `seed` (module docstring)."""
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DataError(f"seed must be a non-negative integer, got {seed!r}")
    return tuple(int(s) for s in np.random.SeedSequence(int(seed)).generate_state(count))


def num_batches(num_examples: int, *, batch_size: int, process_count: int = 1) -> int:
    """Batches each process yields in one eval pass over `num_examples`."""
    return -(-num_examples // (batch_size * process_count))


def padded_size(num_examples: int, *, batch_size: int, process_count: int = 1) -> int:
    """`num_examples` rounded up to whole global batches: the rows of one eval pass."""
    return num_batches(num_examples, batch_size=batch_size,
                       process_count=process_count) * batch_size * process_count


def dataset_name(source) -> str:
    """The name of a TFDS data source's dataset, or the type name of any other source."""
    info = getattr(source, "dataset_info", None)
    return getattr(info, "name", None) or type(source).__name__


def describe(source) -> str:
    """'<dataset> split <split>' of a data source, for messages ('?' for an unknown split)."""
    return f"{dataset_name(source)} split {getattr(source, 'split', None) or '?'}"
