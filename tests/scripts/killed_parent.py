"""A process that feeds on two grain workers (data/pipelines/workers.py), then waits to be killed.

It takes one element, prints "ready", and sleeps. Worker 0 then blocks on its queue and
worker 1 sits in an element that never ends: the two ways a worker can be busy when its parent
is killed outright. tests/test_workers.py kills this process with SIGKILL and checks that the
workers end with it.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import grain  # noqa: E402
import numpy as np  # noqa: E402

from data.pipelines.workers import in_workers  # noqa: E402


def element(i):
    if i % 2 == 1 and i > 1:  # worker 1's second element
        time.sleep(10**6)
    return np.full((64,), i, np.int32)


if __name__ == "__main__":
    it = iter(in_workers(grain.MapDataset.range(10**6).map(element).to_iter_dataset(), 2))
    assert int(next(it)[0]) == 0
    print("ready", flush=True)
    time.sleep(10**6)
