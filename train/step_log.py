"""The train loop's bookkeeping between two log lines: metric sums, NaN flags, throughput, MFU.

    log = StepLog(task, peak_flops=..., skip_nonfinite=...)
    batch = log.next_batch(it)      the next batch, the time spent waiting for it counted
    log.add(step, metrics)          after every step; nothing is read back from the devices
    log.check_finite(kept)          before a log or a checkpoint: NonFiniteError naming the first
                                    step whose loss or gradient norm was NaN/Inf (nonfinite='stop')
    values, n = log.flush(iterator) the train record of the n steps since the last flush
    log.restart_clock()             after an eval: its time is not train time
    log.after_compile(metrics)      after a session's first step: waits for it and restarts
                                    the clock, so that its compilation is not counted as
                                    training (a window of that step alone still counts it)

The metric sums and flags stay on the devices until a log or a checkpoint needs them, so the
host never waits for a step just to look at it.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from train.distributed import sum_over_processes
from train.metrics_writer import summarize

FLAGS = ("finite_loss", "finite_grads")


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm became NaN or Inf."""


class StepLog:
    def __init__(self, task, *, peak_flops: float, skip_nonfinite: bool):
        self.task = task  # its global_batch_at(step): BERT's phase 2 may batch otherwise
        self.peak_flops = peak_flops            # of all devices together
        self.skip_nonfinite = skip_nonfinite
        self.skipped_total = 0                  # steps whose update was dropped, this run
        self._flags: list = []                  # (step, (finite_loss, finite_grads)) on device
        self._sums = None
        self._window = 0                        # steps in the sums since the last flush
        self.restart_clock()

    def restart_clock(self) -> None:
        """Times from now: the rates count the steps after it (the metric sums keep theirs)."""
        self._start, self._steps, self._examples, self._flops = time.perf_counter(), 0, 0, 0.0
        self._input_s = 0.0

    def after_compile(self, metrics: dict) -> None:
        """Waits for the step that gave `metrics` (the first of a session: compiled on the way)
        and restarts the clock, its metrics kept in the window's means."""
        jax.block_until_ready(metrics)
        self.restart_clock()

    def next_batch(self, iterator):
        """next(iterator), its time counted as waiting for input: while the devices run the
        steps already dispatched this is free, so only a pipeline slower than the steps makes
        it a large part of the window (`input_wait_fraction`)."""
        start = time.perf_counter()
        batch = next(iterator)
        self._input_s += time.perf_counter() - start
        return batch

    def add(self, step: int, metrics: dict) -> None:
        self._flags.append((step, tuple(metrics[flag] for flag in FLAGS)))
        self._sums = metrics if self._sums is None else jax.tree.map(jnp.add, self._sums, metrics)
        self._window += 1
        self._steps += 1
        batch = self.task.global_batch_at(step)
        self._examples += batch
        self._flops += self.task.flops_per_example_at(step) * batch

    def check_finite(self, kept: str) -> None:
        """NonFiniteError naming the first step whose loss or gradient norm was not finite, and
        `kept` (what the last good checkpoint is); with nonfinite='skip' the flags are only
        dropped (the step's update already was)."""
        flags, self._flags = self._flags, []
        if self.skip_nonfinite or not flags:
            return
        for step, (finite_loss, finite_grads) in jax.device_get(flags):
            if not (finite_loss[0] and finite_grads[0]):
                which = "loss" if not finite_loss[0] else "gradient norm"
                raise NonFiniteError(
                    f"non-finite {which} at step {step}; stopping ({kept}). Lower the learning "
                    "rate, enable clipping (optimizer.clip_norm), or set train.nonfinite='skip'.")

    def flush(self, train_iterator) -> tuple[dict[str, float], int]:
        """(the means of the metrics since the last flush, the input pipeline's counters summed
        over the processes, steps/s, examples/s, MFU (model FLOPs / time / peak) and the
        fraction of the time spent waiting for batches, of the steps since the clock last
        started; how many steps the means are over)."""
        sums = jax.device_get(self._sums)  # waits for the steps to finish
        for flag in FLAGS:
            del sums[flag]
        self.skipped_total += int(sums.pop("nonfinite_steps")[0])
        values = self.task.derived_metrics(summarize(sums))
        counts = sum_over_processes(self.task.data_metrics(train_iterator))
        values.update(counts)
        values.update(self.task.derived_data_metrics(counts))
        if self.skip_nonfinite:
            values["skipped_steps_total"] = self.skipped_total
        elapsed = time.perf_counter() - self._start
        steps_per_s = self._steps / elapsed if self._steps else 0.0
        values.update(steps_per_second=steps_per_s,
                      examples_per_second=self._examples / elapsed,
                      mfu=self._flops / elapsed / self.peak_flops,
                      input_wait_fraction=self._input_s / elapsed)
        steps, self._sums, self._window = self._window, None, 0
        self.restart_clock()
        return values, steps
