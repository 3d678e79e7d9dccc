"""python -m train.records save SOURCE NAME [--force] | list

Commits the record of a finished run where the docs' tables read it:
notebooks/results/runs/NAME/record.json. SOURCE is the run's workdir (its record.json) or a
record file (`python -m benchmarks.train_step --json FILE`). Only the record is copied: never
checkpoints, logs or vocabularies.

Refused, with the reason and what to do (--force overrides the last two):
  - a run that has not finished (stopped by SIGTERM / SIGINT, steps left): run its command
    again to finish it;
  - a record with a field missing (written by older code, or edited by hand);
  - a NAME that is not one of train/headline_runs.py's;
  - a record whose command differs from the one NAME stands for (output paths aside);
  - a NAME already recorded with another record (the committed one would be lost).
`list` shows every name, whether it is recorded, and the commands that make and save it.
Then `python -m train.tables` renders the docs' tables from the records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from etils import epath

from train import run_record
from train.config import ConfigError
from train.headline_runs import RUNS

RUNS_DIR = run_record.REPO / "notebooks" / "results" / "runs"
OUTPUT_OPTIONS = ("--workdir", "--json", "--markdown", "--profile")  # where, not what
# How a run shows its progress, not what it computes (a run logged to a file turns the bar off).
IGNORED_FLAGS = ("--allow_config_change", "--config.train.progress_bar")


def essential(command: list[str]) -> list[str]:
    """A command's items that decide what runs, in a canonical order: `--key value` and
    `--key=value` alike, output locations and the program's path left out."""
    module = command[2] if command[:2] == ["python", "-m"] else command[0]
    items, i, rest = [], 0, command[3:] if command[:2] == ["python", "-m"] else command[1:]
    while i < len(rest):
        item = rest[i]
        if "=" not in item and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            item, i = f"{item}={rest[i + 1]}", i + 1
        i += 1
        key = item.partition("=")[0]
        if key not in OUTPUT_OPTIONS and key not in IGNORED_FLAGS:
            items.append(_relative_config(item))
    return [module, *sorted(items)]


def _relative_config(item: str) -> str:
    """--config=/abs/repo/configs/x.py:arg as --config=configs/x.py:arg."""
    key, _, value = item.partition("=")
    prefix = f"{run_record.REPO}/"
    if key == "--config" and value.startswith(prefix):
        return f"{key}={value[len(prefix):]}"
    return item


def save(source: str | os.PathLike, name: str, *, runs_dir: Path = RUNS_DIR, force: bool = False
         ) -> epath.Path:
    """Checks the record at `source` and copies it to RUNS_DIR/NAME/record.json."""
    if name not in RUNS:
        raise run_record.RecordError(
            f"{name!r} is not a headline run; the names (train/headline_runs.py): "
            f"{', '.join(RUNS)}")
    record = run_record.load(source)
    if not record["finished"]:
        last = record["sessions"][-1]
        raise run_record.RecordError(
            f"{source}: the run has not finished ({last['outcome']} at step "
            f"{last['end_step']} of {record['config']['train']['num_steps']}): run "
            f"`{' '.join(record['command'])}` again to finish it, then save it")
    expected = RUNS[name].argv
    if essential(record["command"]) != essential(expected) and not force:
        raise run_record.RecordError(
            f"{source} ran `{' '.join(record['command'])}`, but {name!r} stands for "
            f"`{RUNS[name].command}` (output paths aside). Run that, or pass --force to save "
            "this one under the name anyway (the tables show the command it ran)")
    target = runs_dir / name / run_record.FILENAME
    if target.exists() and not force:
        saved = json.loads(target.read_text())
        if saved != record:
            raise run_record.RecordError(
                f"{target} already holds the record of a run that ended {saved.get('date')}; "
                "pass --force to replace it (git keeps the old one)")
    return run_record.write(target, record)


def list_runs(runs_dir: Path = RUNS_DIR) -> str:
    lines = []
    for run in RUNS.values():
        path = runs_dir / run.name / run_record.FILENAME
        state = (f"recorded {json.loads(path.read_text())['date']}" if path.exists()
                 else "not recorded yet")
        fetch = f"python -m data.fetch {run.fetch} && " if run.fetch else ""
        lines.append(f"{run.name}: {state}\n  {fetch}{run.command}\n  {run.save_command}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.records", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs_dir", type=Path, default=RUNS_DIR,  # local path: the repo's
                        help="where records are committed (default: %(default)s)")
    commands = parser.add_subparsers(dest="action", required=True)
    saving = commands.add_parser("save", help="commit a finished run's record under NAME")
    saving.add_argument("source", help="the run's workdir (a local folder or gs:// URL), or a "
                                       "record file")
    saving.add_argument("name", help=f"one of: {', '.join(RUNS)}")
    saving.add_argument("--force", action="store_true",
                        help="save although the command differs, or replace a saved record")
    commands.add_parser("list", help="every name, recorded or not, and its commands")
    args = parser.parse_args(argv)
    if args.action == "list":
        print(list_runs(args.runs_dir))
        return 0
    try:
        path = save(args.source, args.name, runs_dir=args.runs_dir, force=args.force)
    except (run_record.RecordError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"saved {path}; now `python -m train.tables` renders the docs' tables from it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
