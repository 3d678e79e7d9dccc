"""A benchmark command's frame, the same for every benchmark: parse the options, run, print the
Markdown table, and on request (`--json FILE`, `--markdown FILE`) write the run record
(train/run_record.py, which `python -m train.records save FILE NAME` commits and
`python -m train.tables` quotes) and the table as a file.
"""

from __future__ import annotations

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
