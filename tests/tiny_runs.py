"""Smoke runs trained for a few steps in a temporary workdir, for the tests of what reads a
trained workdir (python -m train.predict, python -m train.evaluate)."""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def data_root(root: Path | None):
    """PAPERS_JAX_DATA set to `root` (None: left as it is) for the duration."""
    previous = os.environ.get("PAPERS_JAX_DATA")
    if root is not None:
        os.environ["PAPERS_JAX_DATA"] = str(root)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PAPERS_JAX_DATA", None)
        else:
            os.environ["PAPERS_JAX_DATA"] = previous


def train(workdir: Path, config: str, root: Path | None, *overrides: str) -> Path:
    """`python -m train --config CONFIG --workdir WORKDIR OVERRIDES` in this process, with the
    data root `root`; returns the workdir."""
    from train.__main__ import main as train_main

    with data_root(root):
        assert train_main(["--config", config, "--workdir", str(workdir), *overrides]) == 0
    return workdir


def predictor_args(module, *argv: str) -> argparse.Namespace:
    """The parsed options of a predictor module (train/predict/), as the command parses them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir")
    module.add_arguments(parser)
    return parser.parse_args(["unused", *argv])
