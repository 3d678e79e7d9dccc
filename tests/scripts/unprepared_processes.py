"""Joins a multi-process run the way `python -m train` does, then opens a TFDS catalog dataset
that is not prepared (tests/tfds_mock.py with prepared=False), as every process of a run would.

    JAX_COORDINATOR_ADDRESS=HOST:PORT JAX_NUM_PROCESSES=N JAX_PROCESS_ID=I \\
        python tests/scripts/unprepared_processes.py

Prints one JSON line: the process count data/builders/sources.py sees, the error it raised (or
null), and the datasets TFDS was asked to download and prepare.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # tests/ (tfds_mock)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the repository

from tfds_mock import mock_tfds  # noqa: E402

from data.builders import sources  # noqa: E402
from data.errors import DataError  # noqa: E402
from train import distributed  # noqa: E402


def main() -> None:
    import tensorflow_datasets as tfds

    distributed.initialize()
    prepared, error = [], None
    with mock_tfds(4, prepared=False), mock.patch.object(
            tfds.core.DatasetBuilder, "download_and_prepare",
            lambda self, *a, **kw: prepared.append(self.name)):
        try:
            sources.get_data_source("wmt14_translate/de-en", "train", source="tfds")
        except DataError as e:
            error = str(e)
    print(json.dumps({"processes": sources.process_count(), "error": error,
                      "prepared": prepared}), flush=True)


if __name__ == "__main__":
    main()
