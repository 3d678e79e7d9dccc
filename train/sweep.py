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
model, one a core, made 3.8 steps/s between them against 3.0 for one run on both. A share of one
core runs single-threaded (XLA_FLAGS gains --xla_cpu_multi_thread_eigen=false: two threads on
one core only slowed it, 1.5 against 1.95 steps/s). Each run's record says what it had
(train/run_record.py: usable_cpus, xla_flags).

Resuming: the same command again skips the finished runs (result.json, or a final eval at
train.num_steps in metrics.jsonl) and lets the trainer resume the unfinished ones from their
checkpoints. DIR/sweep.json records how the runs were defined; a command that would define them
differently is refused unless --allow_config_change (adding rows, seeds or later stages is
always allowed).
Ctrl-C / SIGTERM: the running trainer checkpoints, the sweep writes its reports and stops.

Exit status: 0 every selected run finished; 1 some failed (listed); 2 the sweep itself is wrong;
130 / 143 interrupted by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from etils import epath

from train import storage
from train.config import ConfigError
from train.metrics_writer import format_value
from train.run_record import final_eval
from train.sweep_spec import Sweep, SweepError, load_sweep_file

REPO = Path(__file__).resolve().parents[1]


# ---- the plan: one Run per row x seed x stage ------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
    row: str
    seed: int
    stage: str
    workdir: epath.Path        # absolute, or a gs:// URL (train/storage.py)
    argv: tuple[str, ...]      # after `python -m train`
    previous: epath.Path | None  # the workdir of the stage it needs: it must finish first

    @property
    def name(self) -> str:
        return f"{self.row}/seed_{self.seed}/{self.stage}"


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


# ---- DIR/sweep.json: how the runs are defined ------------------------------------------------
def _jsonable(value):
    return json.loads(json.dumps(value, default=list))


def run_spec(sweep: Sweep, cli_overrides: list[str]) -> dict:
    """Everything that decides the runs' configs (not the seeds or rows chosen, not the report)."""
    stages = [{"name": s.name, "config": s.config,
               "overrides": {k: _format_value(v) for k, v in s.overrides.items()},
               "apply_rows": s.apply_rows, "previous_workdir_key": s.previous_workdir_key,
               "workdir_from": s.workdir_from}
              for s in sweep.stages]
    return _jsonable({"stages": stages, "overrides": list(cli_overrides), "rows": dict(sweep.rows)})


def check_spec(sweep_dir: epath.Path, spec: dict, allow_change: bool, save: bool = True) -> None:
    """Refuses to define a run of DIR differently from before; saves the (merged) spec."""
    path = sweep_dir / "sweep.json"
    saved = json.loads(path.read_text()) if path.exists() else None
    if saved is not None:
        diff = []
        # Stages may be added after the saved ones: the runs of those are defined as before.
        if spec["stages"][:len(saved["stages"])] != saved["stages"]:
            diff.append(f"  stages: {saved['stages']!r} before, {spec['stages']!r} now")
        if saved["overrides"] != spec["overrides"]:
            diff.append(f"  overrides: {saved['overrides']!r} before, {spec['overrides']!r} now")
        diff += [f"  row {row!r}: {saved['rows'][row]!r} before, {spec['rows'][row]!r} now"
                 for row in spec["rows"] if row in saved.get("rows", {})
                 and saved["rows"][row] != spec["rows"][row]]
        if diff and not allow_change:
            raise SweepError(
                f"{path} defines the runs differently:\n" + "\n".join(diff)
                + "\nUse the same command line (and sweep config) to resume, another --workdir, "
                  "or --allow_config_change (finished runs are kept as they are).")
        spec = {**spec, "rows": {**saved.get("rows", {}), **spec["rows"]}}  # rows may be added
    if save:
        storage.make_folder(sweep_dir)
        storage.write_atomically(path, json.dumps(spec, indent=2) + "\n")


# ---- finished runs ---------------------------------------------------------------------------
def done_line(name: str, seconds: float, metrics: dict) -> str:
    """'[sweep] done ROW/seed_K/STAGE in TIME: bleu 5.1234, decoded 575' (counts as counts)."""
    summary = ", ".join(f"{k} {format_value(v, '.4f')}" for k, v in metrics.items())
    return f"[sweep] done {name} in {_duration(seconds)}: {summary}"


def _attempts(workdir: epath.Path) -> list[dict]:
    path = workdir / "sweep_attempts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _result(run: Run, metrics: dict) -> dict:
    """What the reports read (row, seed, stage, metrics, wall_s), and the run's own record
    (train/run_record.py: its config, machine, date and code version) where it wrote one."""
    attempts = _attempts(run.workdir)
    result = {"row": run.row, "seed": run.seed, "stage": run.stage, "metrics": metrics,
              "wall_s": sum(a["wall_s"] for a in attempts), "attempts": len(attempts),
              "command": ["python", "-m", "train", *run.argv]}
    record = run.workdir / "record.json"
    if record.exists():
        result["record"] = json.loads(record.read_text())
    return result


def _write_result(run: Run, result: dict) -> None:
    storage.write_atomically(run.workdir / "result.json", json.dumps(result, indent=2) + "\n")


def load_result(run: Run) -> dict | None:
    """result.json if the sweep wrote one, else one made from a final eval in metrics.jsonl (a
    run that ended although the sweep did not record it: stopped in between, or run by hand)."""
    path = run.workdir / "result.json"
    if path.exists():
        return json.loads(path.read_text())
    metrics = final_eval(run.workdir)
    return None if metrics is None else _result(run, metrics)


# ---- running ---------------------------------------------------------------------------------
class _Signals:
    """Records SIGINT/SIGTERM and passes them on to the running trainers (which checkpoint)."""

    def __init__(self):
        self.received, self.children = None, []

    def __enter__(self):
        self._previous = {sig: signal.signal(sig, self._handle)
                          for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signal.Signals(signum)
            print(f"\n[sweep] {self.received.name}: stopping after the current runs checkpoint",
                  flush=True)
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signum)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    if hours:
        return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"
    return f"{rest // 60}m{rest % 60:02d}s"


def _tail(path: epath.Path, lines: int = 15) -> str:
    text = path.read_bytes().decode(errors="replace").splitlines() if path.exists() else []
    return "\n".join("    " + line for line in text[-lines:])


SINGLE_THREAD_FLAG = "--xla_cpu_multi_thread_eigen=false"


def cpu_shares(parallel: int) -> list[tuple[int, ...] | None]:
    """The CPUs of each of `parallel` run slots: None (no pinning) for one slot, else this
    process's usable CPUs split into `parallel` contiguous shares as even as they can be."""
    if parallel < 1:
        raise SweepError(f"--parallel {parallel} must be >= 1")
    if parallel == 1:
        return [None]
    if not hasattr(os, "sched_setaffinity"):
        raise SweepError("--parallel pins each run to its own CPUs, which needs Linux "
                         "(os.sched_setaffinity); run without it here")
    cpus = sorted(os.sched_getaffinity(0))
    if parallel > len(cpus):
        raise SweepError(f"--parallel {parallel} needs at least {parallel} CPUs; this process "
                         f"may use {len(cpus)} ({cpus}): use --parallel {len(cpus)} or fewer")
    size, extra = divmod(len(cpus), parallel)
    shares, start = [], 0
    for i in range(parallel):
        end = start + size + (i < extra)
        shares.append(tuple(cpus[start:end]))
        start = end
    return shares


def _environment(cpus: tuple[int, ...] | None) -> dict | None:
    """The trainer's environment: this one, single-threaded where its share is one core."""
    if cpus is None or len(cpus) > 1:
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    if SINGLE_THREAD_FLAG not in flags.split():
        flags = f"{flags} {SINGLE_THREAD_FLAG}".strip()
    return {**os.environ, "XLA_FLAGS": flags}


@dataclasses.dataclass
class _Attempt:
    """One trainer subprocess running."""
    run: Run
    process: subprocess.Popen
    start: float
    log: contextlib.ExitStack   # closes its log (storage.output_file) when it has ended


def launch(run: Run, cpus: tuple[int, ...] | None = None) -> _Attempt:
    """Starts (or resumes) one trainer subprocess, on `cpus` only when given."""
    storage.make_folder(run.workdir)
    command = [sys.executable, "-m", "train", *run.argv]
    start = time.time()
    closing = contextlib.ExitStack()
    log = closing.enter_context(storage.output_file(run.workdir / "train.log"))
    pinned = "" if cpus is None else f" (cpus {','.join(map(str, cpus))})"
    log.write(f"\n=== sweep attempt {len(_attempts(run.workdir)) + 1}, "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}{pinned}: {' '.join(command)}\n")
    log.flush()
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    try:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env=_environment(cpus), preexec_fn=pin)
    except BaseException:
        closing.close()
        raise
    return _Attempt(run, process, start, closing)


def finish(running: _Attempt, returncode: int, signals: _Signals) -> tuple[str, float]:
    """Closes a trainer's attempt; returns ('done' | 'failed (...)', seconds)."""
    running.log.close()
    run, start = running.run, running.start
    seconds = time.time() - start
    metrics = final_eval(run.workdir) if returncode == 0 else None
    if metrics is not None:
        outcome = "done"
    elif signals.received:
        outcome = f"interrupted by {signals.received.name} (the same command resumes it)"
    elif returncode == 0:
        outcome = "failed (stopped before its final eval; the same command resumes it)"
    else:
        outcome = f"failed (exit status {returncode})"
    storage.append(run.workdir / "sweep_attempts.jsonl", json.dumps(
        {"start": start, "wall_s": seconds, "returncode": returncode, "outcome": outcome}) + "\n")
    if metrics is not None:
        _write_result(run, _result(run, metrics))
    return outcome, seconds


def best_row(sweep: Sweep, results) -> str:
    """'learned_1d accuracy 0.8123 (2 seeds)': the best mean of the first metric so far."""
    metric = sweep.metrics[0]
    stage = metric.stage or sweep.stages[-1].name
    values: dict[str, list[float]] = {}
    for result in results:
        if result["stage"] == stage and metric.name in result["metrics"]:
            values.setdefault(result["row"], []).append(result["metrics"][metric.name])
    if not values:
        return "none yet"
    pick = max if metric.better == "max" else min
    row = pick(values, key=lambda r: statistics.fmean(values[r]))
    seeds = len(values[row])
    return (f"{row} {sweep.label(metric)} {statistics.fmean(values[row]):.4f} "
            f"({seeds} seed{'s' if seeds > 1 else ''})")


def execute(sweep: Sweep, runs: list[Run], parallel: int = 1
            ) -> tuple[list[str], signal.Signals | None]:
    """Runs what is not finished yet, in order, `parallel` at a time (each on its own CPUs,
    `cpu_shares`); returns the failures and the signal, if any."""
    shares = cpu_shares(parallel)
    results = {}
    for run in runs:
        if (result := load_result(run)) is not None:
            results[run.name] = result
            if not (run.workdir / "result.json").exists():
                _write_result(run, result)
    todo = [run for run in runs if run.name not in results]
    print(f"[sweep] {len(runs)} runs: {len(runs) - len(todo)} finished before, {len(todo)} to run",
          flush=True)
    finished = {run.workdir for run in runs if run.name in results}
    failures, stuck, durations, start = [], set(), [], time.time()  # stuck: workdirs not done
    pending, running = list(todo), {}                                # running: slot -> _Attempt
    with _Signals() as signals:
        while True:
            # Fill the free slots with the first runs whose previous stage has finished.
            for slot in range(len(shares)):
                if slot in running or signals.received:
                    continue
                run = _next_run(pending, finished, stuck, failures)
                if run is None:
                    break
                resuming = (run.workdir / "checkpoints").exists()
                where = "" if shares[slot] is None else \
                    f" on cpus {','.join(map(str, shares[slot]))}"
                print(f"[sweep] {'resume' if resuming else 'start'} {run.name}{where}", flush=True)
                running[slot] = launch(run, shares[slot])
                signals.children.append(running[slot].process)
            if not running:
                break
            ended = _wait_any(running)
            signals.children.remove(ended.process)
            outcome, seconds = finish(ended, ended.process.returncode, signals)
            run = ended.run
            durations.append(seconds)
            if outcome == "done":
                results[run.name] = load_result(run)
                finished.add(run.workdir)
                print(done_line(run.name, seconds, results[run.name]["metrics"]), flush=True)
            else:
                stuck.add(run.workdir)
                if not signals.received:
                    failures.append(f"{run.name}: {outcome}; log {run.workdir / 'train.log'}")
                    print(f"[sweep] FAILED {run.name}: {outcome}\n"
                          f"{_tail(run.workdir / 'train.log')}", flush=True)
            left = sum(1 for r in todo if r.name not in results and r.workdir not in stuck
                       and r.previous not in stuck)
            print(f"[sweep] {len(results)}/{len(runs)} runs done | elapsed "
                  f"{_duration(time.time() - start)} | ETA "
                  f"{_duration(statistics.fmean(durations) * left / len(shares))} | best: "
                  f"{best_row(sweep, results.values())}", flush=True)
    return failures, signals.received


def _next_run(pending: list[Run], finished: set, stuck: set, failures: list[str]) -> Run | None:
    """Takes from `pending` the first run that can start (its previous stage finished); runs
    after a failed stage are listed as not run (and block their own later stages)."""
    for run in list(pending):
        if run.previous in stuck:
            pending.remove(run)
            failures.append(f"{run.name}: not run (its previous stage failed)")
            stuck.add(run.workdir)
        elif run.previous is None or run.previous in finished:
            pending.remove(run)
            return run
    return None


def _wait_any(running: dict[int, _Attempt]) -> _Attempt:
    """Blocks until one of the running trainers exits; removes and returns it."""
    if len(running) == 1:
        (slot, only), = running.items()
        only.process.wait()
        return running.pop(slot)
    while True:
        for slot, attempt in running.items():
            if attempt.process.poll() is not None:
                return running.pop(slot)
        time.sleep(0.5)


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
        sweep = load_sweep_file(args.config)
        rows = list(sweep.rows) if not args.rows else [r.strip() for r in args.rows.split(",")]
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
            return _report(sweep, sweep_dir, args.config)
        check_spec(sweep_dir, run_spec(sweep, cli_overrides), args.allow_config_change,
                   save=not args.dry_run)
        if args.dry_run:
            for run in runs:
                state = ("finished" if load_result(run) is not None else
                         "resumes" if (run.workdir / "checkpoints").exists() else "new")
                print(f"{run.name} [{state}]: python -m train {' '.join(run.argv)}")
            return 0
    except (SweepError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.allow_config_change:
        runs = [dataclasses.replace(r, argv=(*r.argv, "--allow_config_change")) for r in runs]
    failures, received = execute(sweep, runs, args.parallel)
    try:
        _report(sweep, sweep_dir, args.config)
    except SweepError as error:  # e.g. a metric the runs do not report
        print(f"error: {error}", file=sys.stderr)
        return 2
    if received:
        print(f"[sweep] interrupted by {received.name}; run the same command to resume")
        return 128 + received.value
    if failures:
        print(f"[sweep] {len(failures)} run(s) failed:\n  " + "\n  ".join(failures))
        return 1
    return 0


def _report(sweep: Sweep, sweep_dir: epath.Path, config: str) -> int:
    from train import sweep_report  # numpy and matplotlib only when writing the report

    paths = sweep_report.write_reports(sweep, sweep_dir, config)
    print("[sweep] results: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    # Run as train.sweep, not __main__, so that the Sweep a config file imports is this one.
    from train.sweep import main as _main
    sys.exit(_main())
