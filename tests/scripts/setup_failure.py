"""Starts the trainer of the ViT smoke config on one of several processes where its setup fails
on one process only; prints, as one JSON line, how `Trainer.run` ended on this process.

    python tests/scripts/setup_failure.py WORKDIR POINT PROCESS --process=I/N@HOST:PORT

POINT is where process PROCESS fails: `data` (its train iterator raises DataError, as a host
without its shard of the data does) or `run_files` (writing config.json raises OSError
ENOSPC; process 0 alone writes it). The JSON line: the process index and either the step the
run ended at or the error it raised (type and message).
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402

from data.errors import DataError  # noqa: E402
from train import distributed, run_config, trainer  # noqa: E402
from train.config import apply_override, load_config_file  # noqa: E402


def main(workdir: str, point: str, failing: int, args: list[str]) -> None:
    index_count, address = [a.split("=", 1)[1] for a in args if a.startswith("--process=")][
        0].split("@")
    index, count = (int(x) for x in index_count.split("/"))
    distributed.initialize(address, count, index)
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in (("mesh.data", "2"), ("mesh.fsdp", "2"), ("train.progress_bar", "false")):
        apply_override(config, key, value)
    run = trainer.Trainer(config, workdir)
    if index == failing and point == "data":
        def no_data(**kwargs):
            raise DataError("fashion_mnist is not fetched on this host")
        run.task.train_iterator = no_data
    if index == failing and point == "run_files":
        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        run_config.write = full
    try:
        run.run()
    except Exception as error:  # noqa: BLE001 - reported, for the test to judge
        print(json.dumps({"process": index, "error": [type(error).__name__, str(error)]}),
              flush=True)
        return
    print(json.dumps({"process": index, "step": int(jax.device_get(run.final_state.step))}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:])
