"""Runs `python -m train ARGS` with TFDS mocked (tests/tfds_mock.py: the real builders'
features and splits, random examples), for the paper-scale recipes' end-to-end tests.

    python tests/scripts/recipe_run.py NUM_EXAMPLES --config ... --workdir ... [--config.K=V]

The device count comes from XLA_FLAGS, set by the caller before this process starts. Prints the
exit status of `python -m train` as a JSON line, {"code": N}, and exits 0 (the test reads the
workdir for the rest). The run's record names this command, mocked data and all (not
`python -m train`). benchmarks/gpu_recipes.py runs the recipes' real models through it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # tests/ (tfds_mock)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the repository

from tfds_mock import mock_tfds  # noqa: E402


def command(num_examples: int, argv: list[str]) -> list[str]:
    """What the run's record names as its command."""
    return ["python", "tests/scripts/recipe_run.py", str(num_examples), *argv]


def main(num_examples: int, argv: list[str]) -> None:
    from train.__main__ import main as train_main

    with mock_tfds(num_examples):
        code = train_main(argv, command=command(num_examples, argv))
    print(json.dumps({"code": code}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
