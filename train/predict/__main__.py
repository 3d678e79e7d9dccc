"""python -m train.predict WORKDIR [options] (train/predict/__init__.py)."""

from __future__ import annotations

import argparse
import sys

from data.errors import DataError
from train.checkpointing import CheckpointError
from train.config import ConfigError
from train.predict import PREDICTORS, load_run, predictor, task_of
from train.run_weights import WEIGHTS


def build_parser(task: str | None, workdir_optional: bool = False) -> argparse.ArgumentParser:
    """The command's parser with the options of `task`'s predictor (None: the workdir alone);
    `workdir_optional` for the first look at the command line, which `--help` alone passes."""
    parser = argparse.ArgumentParser(
        prog="python -m train.predict", description=__doc__.split("\n")[0],
        epilog=f"tasks with a predictor: {', '.join(PREDICTORS)}; `python -m train.predict "
               "WORKDIR --help` lists that run's options")
    parser.add_argument("workdir", nargs="?" if workdir_optional else None,
                        help="a trained run's workdir (config.json, vocabulary/, checkpoints/)")
    parser.add_argument("--weights", choices=WEIGHTS, default=None,
                        help="raw: the latest checkpoint's; ema: their moving average (a run "
                             "with train.ema_decay > 0); average: the last "
                             "train.average_checkpoints checkpoints averaged (default: those "
                             "the run's final eval scored: average for a finished run that "
                             "averages)")
    if task is not None:
        predictor(task).add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    known, _ = build_parser(None, workdir_optional=True).parse_known_args(
        [a for a in argv if a not in ("-h", "--help")])
    try:
        task, _ = task_of(known.workdir) if known.workdir else (None, None)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    module = predictor(task) if task else None
    args = build_parser(task).parse_args(argv)
    try:
        module.predict(load_run(args.workdir, args.weights,
                                note=lambda message: print(message, file=sys.stderr)), args)
    except (ConfigError, CheckpointError, DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
