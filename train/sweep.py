"""python -m train.sweep --config FILE[:ARG] --workdir DIR [--seeds N] [--rows a,b] [--parallel N]
                         [--config.k=v]

Runs an ablation: every row of a sweep config x every seed (x every stage), each as its own
`python -m train` subprocess in DIR/<row>/seed_<k>/<stage> with `config.seed = k` (DIR a local
folder or gs://BUCKET/PATH, train/storage.py), then tabulates
the final evals beside the paper's numbers in DIR/results.csv, results.md and results.png. Each
finished run leaves DIR/<row>/seed_<k>/<stage>/result.json: its row, seed, stage, final eval,
wall time, command and, under `record`, the run's own record.json (train/run_record.py: the
resolved config, machine, date and code version).

A sweep config file declares `get_sweep(arg) -> Sweep` (train/sweep_spec.py):

    Sweep(title="ViT Table 8: position embeddings",
          stages=(Stage("train", "configs/vit/fashion_mnist.py", {"train.num_steps": 600}),),
          rows={"none": "posemb=none",                   # a `:arg` of the stage's config file,
                "wide": {"model.hidden_size": 256}},     # or {config key: value} overrides
          metrics=(Metric("accuracy", "max"), Metric("loss", "min")),  # the first ranks the rows
          paper={"none": {"accuracy": 0.61382}})

Stages run in order for each row and seed, each once the previous one has finished (a failed
stage skips the later ones of its row and seed). A stage with `previous_workdir_key` gets the
previous stage's workdir (absolute path) in that config key: e.g. BERT pretraining, then a
fine-tuning config that restores from `<key>/checkpoints`. `apply_rows=False` runs a stage the
same way for every row (only its input differs). `--config.k=v` here applies to every stage.

Runs go seed by seed (all rows with seed 0 first), so a sweep stopped early already holds one
seed of every row. Each run is a subprocess: one that crashes is reported (its log tail is
printed; the whole log is DIR/<row>/seed_<k>/<stage>/train.log) and the sweep goes on.

--parallel N (CPU, Linux): N runs at once, each pinned to its own share of the CPUs this process
may use (`os.sched_setaffinity`), in the same order; a later stage still waits for its previous
one. Small models use many cores poorly: on the 2-core machine two runs of Transformer Table 3's
model, one a core, made 1.8 steps/s each (the median of the sweep's records) against 3.0 for
one run on both (measured by hand, not recorded), a fifth faster between them. A share of one
core runs single-threaded (XLA_FLAGS gains --xla_cpu_multi_thread_eigen=false: two threads on
one core only slowed it, 1.5 against 1.95 steps/s). Each run's record says what it had
(train/run_record.py: usable_cpus, xla_flags).

Resuming: the same command again skips the finished runs (result.json, or a final eval at
train.num_steps in metrics.jsonl) and lets the trainer resume the unfinished ones from their
checkpoints. DIR/sweep.json records how the runs are defined; a command that would define them
differently is refused unless --allow_config_change (adding rows, seeds or later stages is
always allowed). With it, sweep.json becomes the new definition; the runs finished before are
kept as they are, and the tables (train/sweep_report.py) leave out, naming them, the row x seeds
whose recorded command (result.json) differs from the one the definition gives them, paths
aside: one table never mixes two definitions. To rerun one, move DIR/<row>/seed_<k> aside (e.g.
to seed_<k>.old) and run the sweep again. --report_only and --dry_run take the same --config
and --config.k=v items as the runs (paths in them aside, e.g. a teacher's workdir on another
machine); another definition of the runs is refused, naming both.
Ctrl-C / SIGTERM: the running trainer checkpoints, the sweep writes its reports and stops.

Exit status: 0 every selected run finished; 1 some failed (listed); 2 the sweep itself is wrong
(also a --workdir that is a file, or a damaged sweep.json or result.json: named, left as it is);
130 / 143 interrupted by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from etils import epath

from train import storage
from train.config import ConfigError
from train.sweep_runner import (Run, changes, cpu_shares, execute, load_result, portable,
                                portable_arg)
from train.sweep_spec import Sweep, SweepError, load_sweep_file

REPO = Path(__file__).resolve().parents[1]


# ---- the plan: one Run per row x seed x stage ------------------------------------------------
def _format_value(value: Any) -> str:
    """A Python value as `--config.k=` text that train/config.py reads back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return repr(value)


def _with_arg(config: str, arg: str) -> str:
    """'f.py:smoke' + 'posemb=none' -> 'f.py:smoke,posemb=none'."""
    if not arg:
        return config
    path, has_arg, base = config.partition(":")
    return f"{path}:{base},{arg}" if has_arg and base else f"{path}:{arg}"


def _resolve(config: str) -> str:
    """A relative config path that is not found from the cwd is taken from the repo root."""
    path, sep, arg = config.partition(":")
    config_file = Path(path)  # local path: a config file
    if not config_file.is_absolute() and not config_file.exists() and (REPO / path).exists():
        path = str(REPO / path)
    return f"{path}{sep}{arg}"


def plan(sweep: Sweep, sweep_dir: str | os.PathLike, rows: list[str], seeds: list[int],
         cli_overrides: list[str]) -> list[Run]:
    """Seed by seed, row by row, stage by stage; each run's `python -m train` arguments."""
    sweep_dir = storage.run_path(sweep_dir)
    runs = []
    for seed in seeds:
        for row in rows:
            definition = sweep.rows[row]
            previous, done = None, {}
            for stage in sweep.stages:
                workdir = sweep_dir / row / f"seed_{seed}" / stage.name
                config = stage.config
                overrides = {**stage.overrides}
                if stage.apply_rows and isinstance(definition, str):
                    config = _with_arg(config, definition)
                elif stage.apply_rows:
                    overrides.update(definition)
                overrides.update(stage.row_overrides.get(row, {}))
                argv = ["--config", _resolve(config), "--workdir", str(workdir)]
                argv += [f"--config.{k}={_format_value(v)}" for k, v in overrides.items()]
                argv += cli_overrides
                argv.append(f"--config.seed={seed}")
                source = done[stage.workdir_from] if stage.workdir_from else previous
                if stage.previous_workdir_key:
                    argv.append(f"--config.{stage.previous_workdir_key}={source}")
                runs.append(Run(row, seed, stage.name, workdir, tuple(argv), source))
                previous = done[stage.name] = workdir
    return runs


def check_overrides(runs: list[Run]) -> None:
    """SweepError naming the first run whose --config.KEY=VALUE items its config does not take
    (a misspelt key of the command line or of a stage): refused before any run starts."""
    from train.config import apply_override, load_config_file

    loaded = {}
    for run in runs:
        spec = run.argv[1]
        if spec not in loaded:
            loaded[spec] = load_config_file(spec)
        config = loaded[spec].copy_and_resolve_references()
        try:
            for item in run.argv[4:]:
                key, _, value = item[len("--config."):].partition("=")
                apply_override(config, key, value)
        except (ConfigError, ValueError) as error:
            raise SweepError(f"run {run.name}: {error}") from None


# ---- DIR/sweep.json: how the runs are defined ------------------------------------------------
def _jsonable(value):
    return json.loads(json.dumps(value, default=list))


def run_spec(sweep: Sweep, cli_overrides: list[str]) -> dict:
    """Everything that decides the runs' configs (not the seeds or rows chosen, not the report)."""
    stages = [{"name": s.name, "config": s.config,
               "overrides": {k: _format_value(v) for k, v in s.overrides.items()},
               "apply_rows": s.apply_rows, "previous_workdir_key": s.previous_workdir_key,
               "workdir_from": s.workdir_from,
               # only where declared: the sweeps saved before the field define their runs alike
               **({"row_overrides": {row: {k: _format_value(v) for k, v in keys.items()}
                                     for row, keys in s.row_overrides.items()}}
                  if s.row_overrides else {})}
              for s in sweep.stages]
    return _jsonable({"stages": stages, "overrides": list(cli_overrides), "rows": dict(sweep.rows)})


def _saved_spec(path: epath.Path) -> dict | None:
    """DIR/sweep.json, None where there is none; a SweepError where it is damaged."""
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except ValueError as error:  # not JSON, or not text
        saved, why = None, f"not JSON: {error}"
    else:
        why = "no 'stages' and 'overrides' lists"
    if not isinstance(saved, dict) or not all(isinstance(saved.get(key), list)
                                              for key in ("stages", "overrides")):
        raise SweepError(
            f"{path} is damaged ({why}); it records how the runs of {path.parent} are "
            "defined. Move it aside and run the command that made the runs: it is written "
            "again, and runs recorded under another definition are left out of the tables")
    return saved


def _differences(saved: dict, spec: dict) -> list[str]:
    """How `spec` defines the runs of `saved` differently (stages may be added after saved's)."""
    diff = []
    if spec["stages"][:len(saved["stages"])] != saved["stages"]:
        diff.append(f"  stages: {saved['stages']!r} before, {spec['stages']!r} now")
    if saved["overrides"] != spec["overrides"]:
        diff.append(f"  overrides: {saved['overrides']!r} before, {spec['overrides']!r} now")
    diff += [f"  row {row!r}: {saved['rows'][row]!r} before, {spec['rows'][row]!r} now"
             for row in spec["rows"] if row in saved.get("rows", {})
             and saved["rows"][row] != spec["rows"][row]]
    return diff


def check_spec(sweep_dir: epath.Path, spec: dict, allow_change: bool, save: bool = True) -> None:
    """Refuses to define a run of DIR differently from before; saves the (merged) spec."""
    path = sweep_dir / "sweep.json"
    saved = _saved_spec(path)
    if saved is not None:
        diff = _differences(saved, spec)
        if diff and not allow_change:
            raise SweepError(
                f"{path} defines the runs differently:\n" + "\n".join(diff)
                + "\nUse the same command line (and sweep config) to resume, another --workdir, "
                  "or --allow_config_change (finished runs are kept as they are, and left out of "
                  "the tables until rerun).")
        spec = {**spec, "rows": {**saved.get("rows", {}), **spec["rows"]}}  # rows may be added
    if save:
        try:
            storage.make_folder(sweep_dir)
        except OSError as error:  # e.g. a file where a folder of the path would be
            raise SweepError(f"--workdir {sweep_dir} cannot be made a folder ({error}): give "
                             "another --workdir") from None
        storage.write_atomically(path, json.dumps(spec, indent=2) + "\n")


def _portable_spec(spec: dict) -> dict:
    """A run_spec with every path in it `portable` (a teacher's workdir on another machine)."""
    def values(mapping):
        return {k: portable(v) if isinstance(v, str) else v for k, v in mapping.items()}

    def config(text):
        path, sep, arg = text.partition(":")
        return path + sep + portable_arg(arg)

    stages = [{**stage, "config": config(stage["config"]), "overrides": values(stage["overrides"]),
               **({"row_overrides": {row: values(keys) for row, keys in
                                     stage["row_overrides"].items()}}
                  if "row_overrides" in stage else {})} for stage in spec["stages"]]
    overrides = [key + sep + portable(value)
                 for key, sep, value in (item.partition("=") for item in spec["overrides"])]
    rows = {row: portable_arg(change) if isinstance(change, str) else values(change)
            for row, change in spec.get("rows", {}).items()}
    return {"stages": stages, "overrides": overrides, "rows": rows}


def check_same_sweep(sweep_dir: epath.Path, spec: dict) -> None:
    """SweepError unless DIR/sweep.json defines its runs as `spec` does (its stages may be
    followed by more), paths in either aside (e.g. a teacher's absolute path on another
    machine), so that --report_only never writes one sweep's (or variant's) tables over
    another's runs."""
    path = sweep_dir / "sweep.json"
    diff = _differences(_portable_spec(_saved_spec(path)), _portable_spec(spec))
    if diff:
        raise SweepError(f"{path} is another sweep's (or defines its runs otherwise):\n"
                         + "\n".join(diff) + "\nits report is not written over: give this "
                         "sweep's --workdir, or the --config and --config.k=v items that made it")


# ---- the command line ------------------------------------------------------------------------
def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True,
                        help="FILE[:ARG] declaring get_sweep(arg), "
                             "e.g. configs/ablations/vit_posemb.py:smoke")
    parser.add_argument("--workdir", required=True, help="DIR: runs, sweep.json and results.*")
    parser.add_argument("--seeds", type=int, help="run seeds 0..N-1 (default: the sweep's)")
    parser.add_argument("--rows", help="comma-separated rows to run (default: all)")
    parser.add_argument("--dry_run", action="store_true",
                        help="print each run's command and state, run nothing")
    parser.add_argument("--report_only", action="store_true",
                        help="write results.csv/md/png from the finished runs, run nothing")
    parser.add_argument("--parallel", type=int, default=1,
                        help="N runs at once, each pinned to its share of the CPUs (default 1)")
    parser.add_argument("--allow_config_change", action="store_true",
                        help="run although DIR/sweep.json defines the runs differently")
    args, rest = parser.parse_known_args(argv)
    overrides = []
    for item in rest:
        if not item.startswith("--config.") or "=" not in item:
            parser.error(f"unrecognised argument {item!r}; overrides look like "
                         "--config.train.num_steps=100")
        overrides.append(item)
    return args, overrides


def main(argv=None) -> int:
    args, cli_overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        sweep_dir = storage.run_path(args.workdir)
        if sweep_dir.exists() and not sweep_dir.is_dir():
            raise SweepError(f"--workdir {sweep_dir} is a file, not a folder: give a new folder "
                             "or a sweep's")
        sweep = load_sweep_file(args.config)
        rows = list(sweep.rows) if args.rows is None else [r.strip() for r in args.rows.split(",")]
        if "" in rows:
            raise SweepError(f"--rows {args.rows!r} names an empty row; give row names, "
                             f"comma-separated, from {list(sweep.rows)}")
        if len(set(rows)) != len(rows):  # a repeat would run a finished run a second time
            raise SweepError(f"--rows {args.rows!r} names a row twice")
        unknown = [r for r in rows if r not in sweep.rows]
        if unknown:
            raise SweepError(f"unknown rows {unknown}; the rows of {args.config}: "
                             f"{list(sweep.rows)}")
        seeds = args.seeds if args.seeds is not None else sweep.seeds
        if seeds < 1:
            raise SweepError(f"--seeds {seeds} must be >= 1")
        cpu_shares(args.parallel)  # a share of CPUs this process does not have is refused here
        runs = plan(sweep, sweep_dir, rows, list(range(seeds)), cli_overrides)
        if args.report_only:
            if args.dry_run:
                raise SweepError("--dry_run runs and writes nothing, --report_only writes the "
                                 "reports: give one of them")
            if not (sweep_dir / "sweep.json").exists():
                raise SweepError(f"{sweep_dir} holds no sweep (no sweep.json): nothing to "
                                 "report; run the sweep first, or give its --workdir")
            check_same_sweep(sweep_dir, run_spec(sweep, cli_overrides))
            return _report(sweep, sweep_dir, args.config, cli_overrides)
        check_overrides(runs)
        check_spec(sweep_dir, run_spec(sweep, cli_overrides), args.allow_config_change,
                   save=not args.dry_run)
        if args.dry_run:
            for run in runs:
                print(f"{run.name} [{_state(run)}]: python -m train {' '.join(run.argv)}")
            return 0
    except (SweepError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.allow_config_change:
        runs = [dataclasses.replace(r, argv=(*r.argv, "--allow_config_change")) for r in runs]
    try:  # e.g. a damaged result.json (before any run starts), a metric the runs do not report
        failures, received = execute(sweep, runs, args.parallel)
        _report(sweep, sweep_dir, args.config, cli_overrides)
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if received:
        print(f"[sweep] interrupted by {received.name}; run the same command to resume")
        return 128 + received.value
    if failures:
        print(f"[sweep] {len(failures)} run(s) failed:\n  " + "\n  ".join(failures))
        return 1
    return 0


def _state(run: Run) -> str:
    """A planned run's state for --dry_run: finished (under another definition), resumes, new."""
    result = load_result(run)
    if result is not None:
        return ("finished" if not changes(result, run) else
                "finished under another definition: left out of the tables")
    return "resumes" if (run.workdir / "checkpoints").exists() else "new"


def _report(sweep: Sweep, sweep_dir: epath.Path, config: str, cli_overrides: list[str]) -> int:
    """Writes the tables of the runs this definition gives (others are left out, named)."""
    from train import sweep_report  # numpy and matplotlib only when writing the report

    def planned(row: str, seed: int) -> list[Run]:
        return plan(sweep, sweep_dir, [row], [seed], cli_overrides)

    paths = sweep_report.write_reports(sweep, sweep_dir, config, cli_overrides, planned)
    print("[sweep] results: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    # Run as train.sweep, not __main__, so that the Sweep a config file imports is this one.
    from train.sweep import main as _main
    sys.exit(_main())
