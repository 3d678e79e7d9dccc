"""Two processes of one run take a workdir's lock as `python -m train` does (process 0 takes it,
every process learns the outcome):

    python tests/scripts/workdir_holders.py WORKDIR --process=I/N@HOST:PORT

Prints one JSON line: the process index and "held", or "refused" with the error's message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

from train import distributed, workdir_lock  # noqa: E402
from train.config import ConfigError  # noqa: E402


def main(workdir: str, process: str) -> None:
    index_count, address = process.split("=", 1)[1].split("@")
    index, count = (int(x) for x in index_count.split("/"))
    distributed.initialize(address, count, index)
    try:
        with workdir_lock.hold(workdir, take=jax.process_index() == 0):
            outcome = {"held": True}
    except ConfigError as error:
        outcome = {"refused": str(error)}
    print(json.dumps({"process": jax.process_index(), **outcome}))


if __name__ == "__main__":
    main(*sys.argv[1:])
