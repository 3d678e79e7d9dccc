"""Where metrics go: `metrics.jsonl` and TensorBoard event files in the workdir, and a progress bar.

Only process 0 writes; other processes get a writer that does nothing, so the loop needs no
`if process_index == 0` branches. Both files go through train/storage.py, so a gs:// workdir
holds them too: tensorboardX writes a local logdir itself, and a URL's event files through
`_EventFiles` (its own gs:// writer would bypass the run's path type: another client, other
credentials, and nothing a test can put in memory).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
from etils import epath

from train import storage


def summarize(metric_sums: dict) -> dict[str, float]:
    """{'loss': (sum, count), ...} -> {'loss': sum / count, ...} on the host."""
    out = {}
    for name, (total, count) in metric_sums.items():
        total, count = float(np.asarray(total)), float(np.asarray(count))
        out[name] = total / count if count else math.nan
    return out


def format_value(value, float_format: str = ".4g") -> str:
    """A count (an int: examples, decoded sentences, skipped steps) as the whole number it is;
    any other metric (a float) in `float_format`. metrics.jsonl keeps both as JSON numbers."""
    return str(value) if isinstance(value, int) else format(value, float_format)


SUPERSEDED = "metrics.superseded.jsonl"
DAMAGED = "metrics.damaged.jsonl"


def _damage(line: str) -> str | None:
    """Why a line of metrics.jsonl is not a record, or None if it is one."""
    try:
        record = json.loads(line)
    except ValueError as error:
        if not line.endswith("\n"):
            return "cut short: the last line, without its newline (the run was killed writing it)"
        return f"not JSON ({error})"
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return "a JSON value without an integer 'step'"
    return None


def _drop_records_after(path: epath.Path, step: int) -> list[str]:
    """A run killed after its last checkpoint logged steps it will now redo: take them out of
    the log, so it continues without repeats. They are appended to `metrics.superseded.jsonl`
    beside it (a run that restarts from scratch moves the whole log there: nothing logged is
    lost). Lines that are not records (a line cut short by a kill, a damaged one) go to
    `metrics.damaged.jsonl` as {"line": number in the log, "reason": ..., "text": the line}.
    The log is replaced atomically, after the moved lines are on disk. Returns what was moved,
    as sentences for the console."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept, superseded, damaged = [], [], []
    for number, line in enumerate(lines, start=1):
        reason = _damage(line)
        if reason is not None:
            damaged.append((number, reason, line))
        else:  # a whole record whose newline a kill cut off gets it back
            record = line if line.endswith("\n") else line + "\n"
            (kept if json.loads(line)["step"] <= step else superseded).append(record)
    if kept == lines:
        return []
    notes = []
    if superseded:
        storage.append(path.with_name(SUPERSEDED), "".join(superseded))
        notes.append(f"{path.name}: {len(superseded)} record(s) after step {step}, which this "
                     f"run redoes, moved to {path.with_name(SUPERSEDED)}")
    if damaged:
        storage.append(path.with_name(DAMAGED), "".join(
            json.dumps({"line": number, "reason": reason, "text": line}) + "\n"
            for number, reason, line in damaged))
        listed = "; ".join(f"line {number}: {reason}" for number, reason, _ in damaged[:3])
        more = f"; and {len(damaged) - 3} more" if len(damaged) > 3 else ""
        notes.append(f"{path.name}: {len(damaged)} damaged line(s) moved to "
                     f"{path.with_name(DAMAGED)} ({listed}{more})")
    storage.write_atomically(path, "".join(kept))
    return notes


class _EventFiles:
    """tensorboardX's record-writer factory for a URL logdir: event files through the run's
    path type (train/storage.py AppendFile, uploaded whole at each flush)."""

    @staticmethod
    def open(path: str) -> storage.AppendFile:
        return storage.AppendFile(storage.run_path(path), binary=True)

    @staticmethod
    def directory_check(path: str) -> None:
        """Nothing to make: an object store has no folders."""


class MetricsWriter:
    def __init__(self, workdir: str | os.PathLike, *, total_steps: int, start_step: int,
                 progress_bar: bool):
        import jax  # here: the sweep runner formats metrics without starting jax

        self.enabled = jax.process_index() == 0
        self._bar = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter, record_writer
        workdir = storage.run_path(workdir)
        path = workdir / "metrics.jsonl"
        moved = _drop_records_after(path, start_step)
        self._jsonl = storage.AppendFile(path)
        for scheme in storage.SCHEMES:
            record_writer.register_writer_factory(scheme, _EventFiles)
        # purge_step: TensorBoard hides events a killed run wrote after its last checkpoint.
        self._tb = SummaryWriter(os.fspath(workdir / "tensorboard"), purge_step=start_step + 1)
        if progress_bar:
            from tqdm import tqdm
            self._bar = tqdm(total=total_steps, initial=start_step, unit="step",
                             dynamic_ncols=True, file=sys.stderr)
        for note in moved:
            self.message(note)

    def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, "time": time.time(), **metrics}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for name, value in metrics.items():
            self._tb.add_scalar(f"{split}/{name}", value, step)
        self._tb.flush()
        line = " ".join(f"{k}={format_value(v)}" for k, v in metrics.items())
        self.message(f"[{split} step {step}] {line}")

    def advance(self, steps: int, **postfix) -> None:
        if self._bar is not None:
            self._bar.update(steps)
            if postfix:
                self._bar.set_postfix({k: format_value(v) for k, v in postfix.items()},
                                      refresh=False)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        self._jsonl.close()
        self._tb.close()
