"""The train loop's throughput and MFU (train/step_log.py StepLog) on a clock the test sets:
examples per second = examples / time, MFU = model FLOPs / time / peak, over the steps since the
clock last started, with the batch and FLOPs of each step; and the fraction of that time spent
waiting for the input pipeline's batches."""

from __future__ import annotations

import numpy as np
import pytest

from train import step_log
from train.step_log import StepLog


class _Task:
    """The task methods StepLog reads: a batch and FLOPs per example for each step."""

    def __init__(self, batches: dict[int, int], flops: dict[int, float]):
        self.batches, self.flops = batches, flops

    def global_batch_at(self, step):
        return self.batches[step]

    def flops_per_example_at(self, step):
        return self.flops[step]

    def derived_metrics(self, values):
        return values

    def data_metrics(self, iterator):
        return {}

    def derived_data_metrics(self, counts):
        return {}


class _Clock:
    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


def _metrics(loss):
    return {"finite_loss": np.array([True]), "finite_grads": np.array([True]),
            "nonfinite_steps": np.array([0]), "loss": (np.float32(loss), np.float32(1.0))}


def test_throughput_and_mfu_follow_the_clock_batch_flops_and_peak(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(step_log, "time", clock)
    peak = 4e12  # of all devices together
    # Steps 0-3: batch 32 at 1.5 GFLOPs an example; steps 4-5: BERT's phase 2, batch 8 at 6.
    batches = {0: 32, 1: 32, 2: 32, 3: 32, 4: 8, 5: 8, 6: 8}
    flops = {0: 1.5e9, 1: 1.5e9, 2: 1.5e9, 3: 1.5e9, 4: 6e9, 5: 6e9, 6: 6e9}
    log = StepLog(_Task(batches, flops), peak_flops=peak, skip_nonfinite=False)
    for step in range(4):
        log.add(step, _metrics(loss=step))
    clock.now += 2.5
    values, steps = log.flush(None)
    assert steps == 4
    assert values["loss"] == pytest.approx(1.5)  # the mean of 0, 1, 2, 3
    assert values["steps_per_second"] == pytest.approx(4 / 2.5, rel=1e-12)
    assert values["examples_per_second"] == pytest.approx(32 * 4 / 2.5, rel=1e-12)
    assert values["examples_per_second"] == pytest.approx(32 * values["steps_per_second"],
                                                          rel=1e-12)
    assert values["mfu"] == pytest.approx(values["examples_per_second"] * 1.5e9 / peak,
                                          rel=1e-12)
    assert values["mfu"] == pytest.approx(0.0192, rel=1e-12)  # 51.2 x 1.5e9 / 4e12

    # An eval's time is left out (restart_clock), and each step counts its own batch and FLOPs.
    clock.now += 7.0
    log.restart_clock()
    log.add(4, _metrics(loss=1.0))
    log.add(5, _metrics(loss=1.0))
    clock.now += 0.5
    values, steps = log.flush(None)
    assert steps == 2
    assert values["steps_per_second"] == pytest.approx(2 / 0.5, rel=1e-12)
    assert values["examples_per_second"] == pytest.approx(8 * 2 / 0.5, rel=1e-12)
    assert values["mfu"] == pytest.approx(2 * 8 * 6e9 / 0.5 / peak, rel=1e-12)

    # A flush starts the next window: its rates count only the steps after it.
    log.add(6, _metrics(loss=1.0))
    clock.now += 0.4
    values, steps = log.flush(None)
    assert steps == 1
    assert values["examples_per_second"] == pytest.approx(8 / 0.4, rel=1e-12)
    assert values["mfu"] == pytest.approx(8 * 6e9 / 0.4 / peak, rel=1e-12)


def test_a_session_s_first_step_compiles_outside_the_rates(monkeypatch):
    """after_compile (the trainer calls it after a session's first step): the 10 s the first
    step took to compile are not training time; the window's rates are of the steps after it,
    its metric means of all three."""
    clock = _Clock()
    monkeypatch.setattr(step_log, "time", clock)
    log = StepLog(_Task({s: 8 for s in range(3)}, {s: 1e9 for s in range(3)}), peak_flops=1e12,
                  skip_nonfinite=False)
    log.add(0, _metrics(loss=3.0))
    clock.now += 10.0  # compiling, then the step
    log.after_compile({"loss": np.float32(3.0)})
    for step in (1, 2):
        log.add(step, _metrics(loss=0.0))
    clock.now += 0.2
    values, steps = log.flush(None)
    assert steps == 3 and values["loss"] == pytest.approx(1.0)
    assert values["steps_per_second"] == pytest.approx(2 / 0.2, rel=1e-12)
    assert values["mfu"] == pytest.approx(2 * 8 * 1e9 / 0.2 / 1e12, rel=1e-12)


class _SlowInput:
    """An input pipeline that takes `seconds` of the test's clock for each batch."""

    def __init__(self, clock, seconds):
        self.clock, self.seconds = clock, seconds

    def __next__(self):
        self.clock.now += self.seconds
        return {"batch": self.clock.now}


def test_the_time_spent_waiting_for_batches_is_its_fraction_of_the_window(monkeypatch):
    """4 batches of 0.3 s each in a window of 2.5 s (1.3 s of steps besides): 1.2 / 2.5 of it
    waiting for input; an eval's restart starts the count again."""
    clock = _Clock()
    monkeypatch.setattr(step_log, "time", clock)
    log = StepLog(_Task({s: 8 for s in range(6)}, {s: 1e9 for s in range(6)}), peak_flops=1e12,
                  skip_nonfinite=False)
    slow = _SlowInput(clock, 0.3)
    for step in range(4):
        assert log.next_batch(slow) == {"batch": clock.now}
        log.add(step, _metrics(loss=1.0))
    clock.now += 1.3
    values, _ = log.flush(None)
    assert values["input_wait_fraction"] == pytest.approx(1.2 / 2.5, rel=1e-12)
    log.next_batch(slow)  # waited for before an eval: not counted after it
    log.restart_clock()
    log.add(4, _metrics(loss=1.0))
    clock.now += 1.0
    values, _ = log.flush(None)
    assert values["input_wait_fraction"] == 0.0
