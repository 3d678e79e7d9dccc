"""Prediction batches over all local devices: rows split over them, the parameters replicated.

    batches = DeviceBatches(params, batch_size=32)
    outputs = batches.run(jax.jit(fn), rows)   # fn(params, batch) -> {name: [b, ...]}

`rows` is a list of examples, each a dict of NumPy arrays of one shape per key; they go
`batch_size` at a time (rounded up to a multiple of the device count), the last batch filled
by repeating its last row, so every call has one static shape (one compilation); the filling
rows' outputs are dropped. What comes back is one dict of host arrays per row, in order: the
same whatever the device count, as tests/test_predict.py checks on two forced host devices.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from train.config import ConfigError


class DeviceBatches:
    """A data-parallel mesh of the local devices, the parameters replicated on it."""

    def __init__(self, params: Any, *, batch_size: int):
        if batch_size < 1:
            raise ConfigError(f"--batch_size={batch_size} must be >= 1")
        devices = np.array(jax.local_devices())
        self.batch_size = -(-batch_size // len(devices)) * len(devices)
        mesh = Mesh(devices, ("data",))
        self.rows = NamedSharding(mesh, PartitionSpec("data"))
        self.params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))

    def run(self, fn: Callable, rows: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """fn(params, batch) -> {name: array [batch, ...]} over `rows` (module docstring)."""
        outputs = []
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start: start + self.batch_size]
            filled = chunk + [chunk[-1]] * (self.batch_size - len(chunk))
            batch = {key: jax.device_put(np.stack([row[key] for row in filled]), self.rows)
                     for key in chunk[0]}
            result = jax.device_get(fn(self.params, batch))
            outputs += [{key: np.asarray(value[i]) for key, value in result.items()}
                        for i in range(len(chunk))]
        return outputs
