"""Runs blocks under `distributed.together` that fail on some processes only; prints, as one
JSON line, what each block raised on this process.

    python tests/scripts/together_processes.py --process=I/N@HOST:PORT

The blocks: one that fails nowhere; one where process 1 raises DataError; one where process 0
raises OSError (a kind the caller did not name); one where every process raises its own
ConfigError. Then the processes add up a count, which shows they are still in step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from data.errors import DataError  # noqa: E402
from train import distributed  # noqa: E402
from train.config import ConfigError  # noqa: E402

KINDS = (ConfigError, DataError)


def main(args: list[str]) -> None:
    index_count, address = [a.split("=", 1)[1] for a in args if a.startswith("--process=")][
        0].split("@")
    index, count = (int(x) for x in index_count.split("/"))
    distributed.initialize(address, count, index)
    failures = {"none": {}, "data_on_1": {1: DataError("no data/fashion_mnist on this host")},
                "os_on_0": {0: OSError(28, "No space left on device")},
                "everywhere": {p: ConfigError(f"bad key on {p}") for p in range(count)}}
    raised = {}
    for name, errors in failures.items():
        try:
            with distributed.together("reading its shard", KINDS):
                if index in errors:
                    raise errors[index]
            raised[name] = None
        except Exception as error:  # noqa: BLE001 - reported
            raised[name] = [type(error).__name__, str(error), error is errors.get(index)]
    total = distributed.sum_over_processes({"one": 1})["one"]
    print(json.dumps({"process": index, "raised": raised, "total": total}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
