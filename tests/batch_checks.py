"""Helpers shared by the data pipeline tests: taking batches from an iterator and comparing two
runs of a pipeline batch by batch."""

from __future__ import annotations

import numpy as np


def take(iterator, n: int) -> list[dict]:
    """The next `n` batches of `iterator`."""
    return [next(iterator) for _ in range(n)]


def assert_batches_equal(a: list[dict], b: list[dict]) -> None:
    """Same number of batches, the same keys in each, every array equal (the key named)."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)
