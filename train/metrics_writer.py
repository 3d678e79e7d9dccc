"""Where metrics go: `metrics.jsonl` and TensorBoard event files in the workdir, and a progress bar.

Only process 0 writes; other processes get a writer that does nothing, so the loop needs no
`if process_index == 0` branches.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np


def summarize(metric_sums: dict) -> dict[str, float]:
    """{'loss': (sum, count), ...} -> {'loss': sum / count, ...} on the host."""
    out = {}
    for name, (total, count) in metric_sums.items():
        total, count = float(np.asarray(total)), float(np.asarray(count))
        out[name] = total / count if count else math.nan
    return out


SUPERSEDED = "metrics.superseded.jsonl"


def _drop_records_after(path: Path, step: int) -> None:
    """A run killed after its last checkpoint logged steps it will now redo: take them out of
    the log, so it continues without repeats. They are appended to `metrics.superseded.jsonl`
    beside it (a run that restarts from scratch moves the whole log there: nothing logged is
    lost). The log is replaced atomically, after the superseded records are on disk."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept, superseded = [], []
    for line in lines:
        try:
            (kept if json.loads(line)["step"] <= step else superseded).append(line)
        except (ValueError, KeyError):  # a line cut short by the kill
            continue
    if len(kept) != len(lines):
        if superseded:
            with open(path.with_name(SUPERSEDED), "a", encoding="utf-8") as aside:
                aside.write("".join(superseded))
                aside.flush()
                os.fsync(aside.fileno())
        temporary = path.with_suffix(".jsonl.tmp")
        temporary.write_text("".join(kept), encoding="utf-8")
        temporary.replace(path)


class MetricsWriter:
    def __init__(self, workdir: Path, *, total_steps: int, start_step: int, progress_bar: bool):
        self.enabled = jax.process_index() == 0
        self._bar = None
        if not self.enabled:
            return
        from tensorboardX import SummaryWriter
        path = Path(workdir) / "metrics.jsonl"
        _drop_records_after(path, start_step)
        self._jsonl = open(path, "a", encoding="utf-8")
        # purge_step: TensorBoard hides events a killed run wrote after its last checkpoint.
        self._tb = SummaryWriter(str(Path(workdir) / "tensorboard"), purge_step=start_step + 1)
        if progress_bar:
            from tqdm import tqdm
            self._bar = tqdm(total=total_steps, initial=start_step, unit="step",
                             dynamic_ncols=True, file=sys.stderr)

    def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "split": split, "time": time.time(), **metrics}
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        for name, value in metrics.items():
            self._tb.add_scalar(f"{split}/{name}", value, step)
        self._tb.flush()
        line = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        self.message(f"[{split} step {step}] {line}")

    def advance(self, steps: int, **postfix) -> None:
        if self._bar is not None:
            self._bar.update(steps)
            if postfix:
                self._bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)

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
