"""Runs blocks under `distributed.together` that fail on some processes only; prints, as one
JSON line, what each block raised on this process.

    python tests/scripts/together_processes.py --process=I/N@HOST:PORT

The blocks: one that fails nowhere; one where process 1 raises DataError; one where process 0
raises OSError (a kind the caller did not name); one where every process raises its own
ConfigError; one where SIGTERM stops process 1 (StoppedBySignal); one where process 1's error
names a file whose name is not UTF-8 (a surrogate escape, which strict UTF-8 cannot encode).
Then the processes add up a count, which shows they are still in step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from data.errors import DataError  # noqa: E402
from train import distributed  # noqa: E402
from train.config import ConfigError  # noqa: E402
from train.interrupts import StoppedBySignal  # noqa: E402

KINDS = (ConfigError, DataError)


def main(args: list[str]) -> None:
    index_count, address = [a.split("=", 1)[1] for a in args if a.startswith("--process=")][
        0].split("@")
    index, count = (int(x) for x in index_count.split("/"))
    distributed.initialize(address, count, index)
    failures = {"none": {}, "data_on_1": {1: DataError("no data/fashion_mnist on this host")},
                "os_on_0": {0: OSError(28, "No space left on device")},
                "everywhere": {p: ConfigError(f"bad key on {p}") for p in range(count)},
                "signal_on_1": {1: StoppedBySignal(15)},
                "undecodable_on_1": {1: DataError("no file data/\udcff.txt")}}
    raised = {}
    for name, errors in failures.items():
        try:
            with distributed.together("reading its shard", KINDS):
                if index in errors:
                    raise errors[index]
            raised[name] = None
        except BaseException as error:  # noqa: BLE001 - reported (an interrupt too)
            raised[name] = [type(error).__name__, str(error).encode("utf-8", "replace").decode(),
                            error is errors.get(index), getattr(error, "signum", None)]
    total = distributed.sum_over_processes({"one": 1})["one"]
    print(json.dumps({"process": index, "raised": raised, "total": total}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
