"""A benchmark command's frame, the same for every benchmark: parse the options, run, print the
Markdown table, and on request (`--json FILE`, `--markdown FILE`) write the run record
(train/run_record.py, which `python -m train.records save FILE NAME` commits and
`python -m train.tables` quotes) and the table as a file.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable


def run_command(module: str, argv: list[str] | None, *, parse_args: Callable, run: Callable,
                table: Callable[[dict], str], record: Callable) -> dict:
    """`python -m module argv`: args = parse_args(argv), report = run(args), table(report)
    printed; record(args, report, command, started) written to args.json and the table to
    args.markdown where they are set. Returns the report."""
    started = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    for option in ("json", "markdown"):  # before the run, not after it
        if getattr(args, option):
            check_output(getattr(args, option), option)
    report = run(args)
    text = table(report)
    print(text)
    if args.json:
        from train import run_record

        command = ["python", "-m", module, *argv]
        run_record.write(Path(args.json), record(args, report, command, started))
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return report


def check_output(path: str, option: str) -> None:
    """Stops (SystemExit naming the fix) where `--option path` could not be written once the
    benchmark has run: a folder there, or a parent folder that cannot be made or written."""
    target = Path(path)
    if target.is_dir():
        raise SystemExit(f"--{option} {path} is a folder; give a file path")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SystemExit(f"--{option} {path}: cannot make its folder ({error}); give a path in "
                         "a writable folder") from error
    if not os.access(target.parent, os.W_OK) or (target.exists()
                                                 and not os.access(target, os.W_OK)):
        raise SystemExit(f"--{option} {path} is not writable; give a path in a writable folder")


def benchmark_record(args, report: dict, table: str, command: list[str], started: float, *,
                     peak: float | None = None, peak_source: str = "",
                     leave_out: tuple[str, ...] = ()) -> dict:
    """The run record (train/run_record.py) of a benchmark: its options as the config (the
    output files and `leave_out` left out, tuples as lists), `report` as its metrics with the
    Markdown `table`, one finished session; `peak` (FLOP/s per device) where MFU was computed
    against one, else what `peak_source` says instead."""
    from train import run_record

    session = run_record.session(command, started, None, None, "finished", peak, peak_source)
    config = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(args).items()
              if k not in ("json", "markdown", *leave_out)}
    return run_record.make("benchmark", config=config, metrics={**report, "table": table},
                           sessions=[session], finished=True)
