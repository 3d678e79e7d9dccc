"""Counts that ride along in the batches: examples taken, truncated, dropped.

A step that truncates or drops an example knows it, but a grain MapDataset cannot count what it
filters out, and grain threads and worker processes each see only their own examples. So every
batch carries its counts as data, under `STAT_KEYS`, and the `CountingIterator` that ends a
pipeline pops them in the consuming process and adds them up: the counts are right with any
number of threads or workers. `it.stats` holds the totals over the batches taken so far (part
of `get_state()`, so they continue across a restore), `it.last_stats` those of the last batch.
"""

from __future__ import annotations

from typing import Any

import grain
import numpy as np

STAT_NAMES = ("examples", "truncated", "dropped")
STAT_KEYS = {name: f"_num_{name}" for name in STAT_NAMES}  # carried in batches, popped at the end


class CountingIterator(grain.DatasetIterator):
    """The pipeline's iterator: batches without the carried counts, whose totals it keeps.

    `stats`: totals over the batches taken ('examples', 'truncated', 'dropped'), restored by
    `set_state`; `last_stats`: the same for the last batch.
    """

    def __init__(self, parent: grain.DatasetIterator):
        super().__init__(parent)
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        self.last_stats = dict.fromkeys(STAT_NAMES, 0)

    def __next__(self) -> dict[str, Any]:
        batch = dict(next(self._parent))
        for name, key in STAT_KEYS.items():
            self.last_stats[name] = int(np.sum(batch.pop(key)))
            self.stats[name] += self.last_stats[name]
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"pipeline": self._parent.get_state(), "stats": dict(self.stats)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["pipeline"])
        self.stats = {name: int(state["stats"][name]) for name in STAT_NAMES}
        self.last_stats = dict.fromkeys(STAT_NAMES, 0)


def long_example_counts(iterator: CountingIterator) -> dict[str, int]:
    """What a trainer logs about the data so far: examples taken, truncated, dropped."""
    return {name: int(value) for name, value in iterator.stats.items()}
