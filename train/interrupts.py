"""A signal that stops a run before its first train step, on one process or another of the run.

`python -m train` turns SIGINT and SIGTERM into `Interrupted` (train/__main__.py) until the
trainer takes them over at its first step. With several processes, one that is signalled while
the others set up tells them so (train/distributed.py `together`, the restore's agreement in
train/checkpoint_damage.py), and they raise `StoppedBySignal` with its number: every process
then exits alike, 128 + the signal's number. No JAX here: `python -m train --help` stays quick.
"""

from __future__ import annotations

import signal


class StoppedBySignal(KeyboardInterrupt):
    """SIGINT or SIGTERM (`signum`) before the first train step, on this process or said by
    another of the run (the message then names it)."""

    def __init__(self, signum: int, message: str | None = None):
        super().__init__(message or signal.Signals(signum).name)
        self.signum = signum
