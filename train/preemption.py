"""SIGTERM / SIGINT during training: noted, so the loop checkpoints the step it reached and stops.

A preempted VM, `scancel` or Ctrl-C sends one of them. The trainer arms the handlers once its
first step is compiled and running; before that, the caller's handlers apply (`python -m train`
stops with nothing saved, exit 130 / 143). Further signals during the final save are ignored, and
`took_over` tells the caller, once its handlers are back, that the steps trained were saved (so
`python -m train` ignores a signal while it writes the run's record).
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preemption:
    def __init__(self):
        self.received: list[str] = []  # names of the signals caught, e.g. ['SIGTERM']
        self.took_over = False  # armed at least once: training started
        self._previous: dict = {}

    def arm(self) -> None:
        """From now on a signal is noted instead of handled by the previous handler. A previous
        handler whose `pending` names a signal it already received (its exception was raised
        where Python discards it, as in a garbage-collection callback) is called with it again
        first, here, where what it raises reaches the caller."""
        if not self._previous:
            for sig in SIGNALS:
                handler = signal.getsignal(sig)
                pending = getattr(handler, "pending", None)
                if pending is not None:
                    handler(pending, None)
            self._previous = {sig: signal.signal(sig, self._note) for sig in SIGNALS}
            self.took_over = True

    def _note(self, signum, frame) -> None:
        self.received.append(signal.Signals(signum).name)

    def disarm(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
