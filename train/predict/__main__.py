"""python -m train.predict WORKDIR [options] (train/predict/__init__.py)."""

from __future__ import annotations

import argparse
import sys

from data.errors import DataError
from train.checkpointing import CheckpointError
from train.config import ConfigError
from train.predict import PREDICTORS, load_run, predictor, task_of


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="python -m train.predict", description=__doc__.split("\n")[0],
        epilog=f"tasks with a predictor: {', '.join(PREDICTORS)}; `python -m train.predict "
               "WORKDIR --help` lists that run's options")
    parser.add_argument("workdir", help="a trained run's workdir (config.json, vocabulary/, "
                                        "checkpoints/)")
    known, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    try:
        task, _ = task_of(known.workdir) if known.workdir else (None, None)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    module = predictor(task) if task else None
    if module is not None:
        module.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        module.predict(load_run(args.workdir), args)
    except (ConfigError, CheckpointError, DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
