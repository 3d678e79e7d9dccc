"""data/pipelines/phases.py: the first pipeline's batches, then the second's; at the switch the
first is closed (its threads and worker processes would live on through phase 2) and its final
state kept; a resume inside phase 2 closes it without restoring it."""

from __future__ import annotations

import grain
import pytest

from data.pipelines.phases import PhasedIterator


class Counter:
    """Batches start, start + 1, ...; records what was done to it."""

    def __init__(self, start: int):
        self.next, self.closed, self.restored = start, False, []

    def __next__(self):
        if self.closed:
            raise ValueError("closed")
        self.next += 1
        return self.next - 1

    def get_state(self):
        return {"next": self.next}

    def set_state(self, state):
        self.restored.append(state)
        self.next = state["next"]

    def close(self):
        self.closed = True


def _phased(switch_after=3):
    first = Counter(0)
    return PhasedIterator(first, lambda: Counter(100), switch_after), first


def test_the_first_pipeline_is_closed_at_the_switch_its_final_state_kept():
    phased, first = _phased()
    assert [next(phased) for _ in range(3)] == [0, 1, 2] and not first.closed
    assert next(phased) == 100 and first.closed
    assert phased.get_state() == {"batches": 4, "first": {"next": 3}, "second": {"next": 101}}


def test_a_resume_in_phase_2_closes_the_first_without_restoring_it():
    phased, _ = _phased()
    for _ in range(5):
        next(phased)
    state = phased.get_state()
    expected = [next(phased) for _ in range(3)]
    resumed, first = _phased()
    resumed.set_state(state)
    assert first.closed and first.restored == []
    assert [next(resumed) for _ in range(3)] == expected
    assert resumed.get_state()["first"] == {"next": 3}
    with pytest.raises(ValueError, match="phase 1's pipeline is closed"):
        resumed.set_state({"batches": 1, "first": {"next": 1}, "second": None})


def test_a_resume_in_phase_1_restores_the_first():
    phased, _ = _phased()
    next(phased)
    resumed, first = _phased()
    resumed.set_state(phased.get_state())
    assert first.restored == [{"next": 1}] and not first.closed
    assert [next(resumed) for _ in range(3)] == [1, 2, 100]


def test_a_grain_pipeline_is_closed_at_the_switch():
    first = grain.MapDataset.range(10).to_iter_dataset().__iter__()
    phased = PhasedIterator(first, lambda: iter(range(100, 110)), 2)
    assert [next(phased) for _ in range(3)] == [0, 1, 100]
    with pytest.raises(ValueError):
        next(first)
