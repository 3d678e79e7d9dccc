"""Training in phases: one input pipeline for the first N batches, another afterwards.

BERT (Devlin et al. 2019, App. A.2) pretrains 90% of the steps on 128-token sequences and the
last 10% on 512-token ones, continuing the same optimizer state. The trainer sees one iterator;
`PhasedIterator` hands out batches of the first pipeline until `switch_after` batches have been
drawn, then of the second. Its state (for exact resume) is the count and both inner states.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator


class PhasedIterator:
    """`first` for batches 0 .. switch_after - 1, then `second` (created on first use)."""

    def __init__(self, first: Iterator, make_second: Callable[[], Iterator], switch_after: int):
        if switch_after < 0:
            raise ValueError(f"switch_after={switch_after} must be >= 0")
        self._first = first
        self._make_second = make_second
        self._second = None
        self.switch_after = switch_after
        self.batches = 0

    @property
    def phase(self) -> int:
        """1 before the switch, 2 after it (for the next batch)."""
        return 1 if self.batches < self.switch_after else 2

    def _second_iterator(self):
        if self._second is None:
            self._second = self._make_second()
        return self._second

    def __iter__(self):
        return self

    def __next__(self):
        source = self._first if self.phase == 1 else self._second_iterator()
        batch = next(source)
        self.batches += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"batches": self.batches, "first": self._first.get_state(),
                "second": None if self._second is None else self._second.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])
        self._first.set_state(state["first"])
        if state["second"] is not None:
            self._second_iterator().set_state(state["second"])
        else:
            self._second = None
