"""Training in phases: one input pipeline for the first N batches, another afterwards.

BERT (Devlin et al. 2019, App. A.2) pretrains 90% of the steps on 128-token sequences and the
last 10% on 512-token ones, continuing the same optimizer state. The trainer sees one iterator;
`PhasedIterator` hands out batches of the first pipeline until `switch_after` batches have been
drawn, then of the second. Its state (for exact resume) is the count and both inner states. At
the switch the first pipeline is closed (its reader threads and worker processes would otherwise
live on through phase 2), its final state kept for the checkpoints; a resume inside phase 2
does not restore it (refilling its buffers for nothing) but closes it.
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
        self._first_state = None  # the first pipeline's final state, once it is closed

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
        if self.phase == 1:
            source = self._first
        else:
            if self._first_state is None:
                self._close_first(self._first.get_state())
            source = self._second_iterator()
        batch = next(source)
        self.batches += 1
        return batch

    def _close_first(self, final_state: dict[str, Any]) -> None:
        if self._first_state is None:
            self._first_state = final_state
            if callable(getattr(self._first, "close", None)):
                self._first.close()

    def get_state(self) -> dict[str, Any]:
        first = self._first_state if self._first_state is not None else self._first.get_state()
        return {"batches": self.batches, "first": first,
                "second": None if self._second is None else self._second.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        if self._first_state is not None and int(state["batches"]) < self.switch_after:
            raise ValueError("phase 1's pipeline is closed: a state of phase 1 needs a new "
                             "PhasedIterator")
        self.batches = int(state["batches"])
        if self.phase == 2:
            self._close_first(state["first"])
        else:
            self._first.set_state(state["first"])
        if state["second"] is not None:
            self._second_iterator().set_state(state["second"])
        else:
            self._second = None
