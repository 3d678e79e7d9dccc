"""Where a compiled step spends its time: per-operation totals from a JAX profiler trace.

``profile_contender(contender, steps, directory)`` runs ``steps`` steps of one benchmark
contender under ``jax.profiler.trace`` and returns its op table: for every XLA operation the
runtime executed (the events on the runtime's worker threads, such as ``fusion``, ``dot`` or,
with XLA:CPU's library fusions, ``ynn_fusion``), the time summed over all of its executions and
threads, per step. Numbered instances (``copy_bitcast_fusion.85``) are grouped under their kind
(``copy_bitcast_fusion``), so two models' tables compare by kind of work: matmuls, layout copies
and transposes, broadcasts, elementwise fusions. The raw trace stays in ``directory`` for
TensorBoard's profile plugin or Perfetto.

On a CPU the thread times add up to more than the wall time when the runtime runs independent
operations concurrently. On a GPU the "XLA Ops" line of the device plane is read (this was
written without a GPU to try it on; the function raises if a trace holds no op events).
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import jax

# Events that wrap or wait on the operations rather than being one.
_WRAPPERS = ("ThunkExecutor", "SlinkyThreadPool", "end: ")
# Lines whose events are XLA operations: XLA:CPU's runtime threads, and on a GPU the device
# plane's "XLA Ops" line (its per-stream lines repeat the same kernels, so they are not read).
_OP_LINES = ("tf_XLA", "XLA Ops")


def op_kind(event_name: str) -> str:
    """``copy_bitcast_fusion.85`` -> ``copy_bitcast_fusion``."""
    return re.sub(r"\.\d+$", "", event_name)


def op_times(xplane_path: str | Path) -> collections.Counter:
    """Nanoseconds per op kind summed over the trace in ``xplane_path`` (an ``.xplane.pb``)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(xplane_path))
    totals: collections.Counter = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            if not line.name.startswith(_OP_LINES):
                continue
            for event in line.events:
                if not event.name.startswith(_WRAPPERS):
                    totals[op_kind(event.name)] += event.duration_ns
    return totals


def profile_contender(contender, steps: int, directory: str | Path, top: int = 12) -> dict:
    """Traces ``steps`` steps of ``contender`` into ``directory``; returns ``{'trace': path,
    'op_ms_per_step': {kind: ms}}`` with the ``top`` kinds by time plus ``'(other)'``."""
    directory = Path(directory)
    with jax.profiler.trace(str(directory)):
        contender.run(steps)
    traces = sorted(directory.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not traces:
        raise RuntimeError(f"jax.profiler wrote no .xplane.pb under {directory}")
    totals = op_times(traces[-1])
    if not totals:
        raise RuntimeError(f"no XLA operation events in {traces[-1]}: this backend's trace "
                           f"names its op threads differently from {_OP_LINES}")
    table = {kind: ns / 1e6 / steps for kind, ns in totals.most_common(top)}
    rest = sum(totals.values()) - sum(ns for _, ns in totals.most_common(top))
    if rest:
        table["(other)"] = rest / 1e6 / steps
    return {"trace": str(traces[-1]), "op_ms_per_step": table}


def markdown(profiles: dict[str, dict]) -> str:
    """One table: op kinds (rows) by contender (columns), ms per step summed over threads."""
    labels = list(profiles)
    kinds: list[str] = []
    for label in labels:
        kinds += [k for k in profiles[label]["op_ms_per_step"] if k not in kinds]
    kinds = [k for k in kinds if k != "(other)"] + ["(other)"]
    lines = ["| op kind (ms per step, all threads) | " + " | ".join(labels) + " |",
             "|---|" + "---|" * len(labels)]
    for kind in kinds:
        cells = [profiles[label]["op_ms_per_step"].get(kind) for label in labels]
        lines.append(f"| {kind} | " + " | ".join("" if c is None else f"{c:.1f}" for c in cells)
                     + " |")
    totals = [sum(profiles[label]["op_ms_per_step"].values()) for label in labels]
    lines.append("| **total** | " + " | ".join(f"**{t:.1f}**" for t in totals) + " |")
    lines.append("\nA blank cell: that kind is not among the contender's top kinds and is "
                 "counted in (other).")
    return "\n".join(lines)
