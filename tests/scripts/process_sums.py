"""Joins a multi-process run the way `python -m train` does, then sums counters over processes.

    JAX_COORDINATOR_ADDRESS=HOST:PORT JAX_NUM_PROCESSES=N JAX_PROCESS_ID=I \\
        python tests/scripts/process_sums.py

Prints one JSON line: how the process joined, its index, the process and device counts, and
`sum_over_processes` of {"examples": 3e9 + index, "dropped": index} (3e9 > 2^31: the counts
cross the collectives in two halves), and `differing_processes` of a digest that every process
shares and of one that depends on the index.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

from train import distributed  # noqa: E402


def main() -> None:
    joined = distributed.initialize()
    index = jax.process_index()
    totals = distributed.sum_over_processes({"examples": 3e9 + index, "dropped": float(index)})
    shared = hashlib.sha256(b"one vocabulary").hexdigest()
    own = hashlib.sha256(f"vocabulary of process {index}".encode()).hexdigest()
    print(json.dumps({"joined": joined, "process": index, "processes": jax.process_count(),
                      "devices": jax.device_count(), "totals": totals,
                      "differ_shared": distributed.differing_processes(shared),
                      "differ_own": distributed.differing_processes(own)}))


if __name__ == "__main__":
    main()
