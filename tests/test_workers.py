"""Input worker processes (data/pipelines/workers.py) end with the process that started them."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_workers_end_when_their_parent_is_killed_outright(tmp_path):
    """A process killed with SIGKILL (the out-of-memory killer, `kill -9`) takes its grain
    workers with it, whether a worker is waiting on its queue or busy in an element: grain's own
    workers outlive it, each holding memory and spinning on the queue (data/pipelines/workers.py
    ends them from a thread that waits on the parent's sentinel)."""
    parent = subprocess.Popen([sys.executable, str(REPO / "tests/scripts/killed_parent.py")],
                              stdout=subprocess.PIPE, stderr=(tmp_path / "err").open("w"),
                              text=True)  # the killed parent's resource tracker warns of leaks
    try:
        line = parent.stdout.readline()
        assert line == "ready\n", (line, (tmp_path / "err").read_text()[-3000:])
        time.sleep(1.0)  # worker 1 is now inside its endless element
        workers = [pid for pid in children(parent.pid)
                   if "spawn_main" in pathlib.Path(f"/proc/{pid}/cmdline").read_text()]
        assert len(workers) == 2
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while (alive := [pid for pid in workers if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:  # not to leave them spinning on the machine after a failure
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their killed parent"


def children(pid: int) -> list[int]:
    tasks = pathlib.Path(f"/proc/{pid}/task").iterdir()
    return [int(c) for task in tasks for c in (task / "children").read_text().split()]


def running(pid: int) -> bool:
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
