"""python -m train.predict WORKDIR [options] (train/predict/__init__.py)."""

from __future__ import annotations

import argparse
import importlib
import sys

from data.errors import DataError
from train.checkpointing import CheckpointError
from train import storage
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


def first_look_parser() -> argparse.ArgumentParser:
    """The parser of the first look at the command line, before the task is known: the workdir
    and every predictor's options, their values unchecked, so that WORKDIR is found wherever it
    stands among them (`--top_k 2 WORKDIR`: 2 is --top_k's value, not the workdir)."""
    parser = build_parser(None, workdir_optional=True)
    seen = {name for action in parser._actions for name in action.option_strings}
    for module in sorted(set(PREDICTORS.values())):
        options = argparse.ArgumentParser(add_help=False)
        importlib.import_module(module).add_arguments(options)
        for action in options._actions:
            names = [name for name in action.option_strings if name not in seen]
            if not names:  # an option of an earlier predictor
                continue
            seen.update(names)
            takes = {"action": "store_true"} if action.nargs == 0 else {"nargs": action.nargs}
            parser.add_argument(*names, dest=f"any_{action.dest}", default=argparse.SUPPRESS,
                                **takes)
    return parser


def _is_run(word: str) -> bool:
    """Whether `word` names a run's workdir (a local folder or a gs:// URL with config.json)."""
    try:
        return (storage.run_path(word) / "config.json").is_file()
    except (ConfigError, OSError):  # not a path this project reads (s3://, blank), unreadable
        return False


def _given_first(error: ConfigError, workdir: str, rest: list[str]) -> str:
    """`error` about the workdir taken from the command line, with a hint when another of its
    words is a run's workdir (WORKDIR after an option this command does not know)."""
    runs = [word for word in rest if not word.startswith("-") and _is_run(word)]
    if not runs:
        return str(error)
    return (f"{error}. {runs[0]} is a run's workdir: give it first, `python -m train.predict "
            f"{runs[0]} [options]` ({workdir}, read as the workdir, may be the value of an "
            "option before it that no predictor has)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    known, rest = first_look_parser().parse_known_args(
        [a for a in argv if a not in ("-h", "--help")])
    try:
        task, _ = task_of(known.workdir) if known.workdir else (None, None)
    except ConfigError as error:
        print(f"error: {_given_first(error, known.workdir, rest)}", file=sys.stderr)
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
