"""SIGTERM / SIGINT during training: noted, so the loop checkpoints the step it reached and stops.

A preempted VM, `scancel` or Ctrl-C sends one of them. The trainer arms the handlers once its
first step is compiled and running; before that, the caller's handlers apply (`python -m train`
stops with nothing saved, exit 130 / 143). Further signals during the final save are ignored, and
`took_over` tells the caller, once its handlers are back, that the steps trained were saved (so
`python -m train` ignores a signal while it writes the run's record).

With several processes every one must stop after the same step: the checkpoint and the last
log are collectives, and a process that stopped a step before the others would wait in them
for ever while the others wait in the next train step. A signal rarely reaches every host
between the same two steps (or reaches only one: Ctrl-C in one terminal, `kill` of one
process), so `stop_now` stops on what all processes had received one step earlier (a signal
that arrives while a step is logged or saved stops the run two steps later): after each step
it launches, on the devices, the maximum over the processes of the signal each has received (a
number, 0 for none), and reads the one launched after the previous step. Reading it waits for
that previous step only, which the devices have finished or nearly, so the host keeps a step
ahead of them.
"""

from __future__ import annotations

import signal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preemption:
    def __init__(self, mesh: Mesh | None = None):
        """`mesh`: the run's, whose devices agree on when to stop when it spans several
        processes (None, or one process: each decides on its own signals)."""
        self.received: list[str] = []  # names of the signals caught, e.g. ['SIGTERM']
        self.took_over = False  # armed at least once: training started
        self.cause: str | None = None  # why stop_now said stop, e.g. 'SIGTERM'
        self._previous: dict = {}
        several = mesh is not None and len({d.process_index for d in mesh.devices.flat}) > 1
        self._max_over_processes = _max_over_processes(mesh) if several else None
        self._launched = None  # the maximum launched at the last stop_now

    def stop_now(self) -> bool:
        """Whether to stop after the step just taken (and save it). One process: it received a
        signal. Several: any of them had received one when this was last called, the same
        answer on every process; `cause` then names the signal (the largest number's, if the
        processes received different ones)."""
        number = signal.Signals[self.received[0]].value if self.received else 0
        if self._max_over_processes is None:
            agreed = number
        else:
            launched, self._launched = self._launched, self._max_over_processes(number)
            agreed = 0 if launched is None else int(launched)
        if agreed and self.cause is None:
            self.cause = signal.Signals(agreed).name
        return bool(agreed)

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


def _max_over_processes(mesh: Mesh):
    """f(number) -> a scalar jax.Array, still computing: the maximum of the numbers every
    process passed (a collective: all call it at the same point)."""
    sharding = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))  # one per device
    maximum = jax.jit(jnp.max, out_shardings=NamedSharding(mesh, PartitionSpec()))
    devices = sorted(sharding.addressable_devices, key=lambda d: d.id)

    def launch(number: int) -> jax.Array:
        shards = [jax.device_put(np.array([number], np.int32), d) for d in devices]
        return maximum(jax.make_array_from_single_device_arrays((mesh.size,), sharding, shards))

    return launch
