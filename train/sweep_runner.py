"""Running a sweep's planned runs (train/sweep.py `plan`): each a `python -m train` subprocess,
one at a time or `parallel` at a time on their own CPUs, with their outcomes recorded (each
run's result.json and sweep_attempts.jsonl) and SIGINT/SIGTERM passed on to the trainers, which
checkpoint; and what defines a run (`definition`: its command, paths aside), which the tables
compare (train/sweep_report.py). The command line, the plan and DIR/sweep.json are
train/sweep.py's; its docstring says how a sweep runs and resumes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from etils import epath

from train import storage
from train.metrics_writer import format_value
from train.run_record import REPO, final_eval
from train.sweep_spec import Sweep, SweepError


# ---- one run of a sweep ----------------------------------------------------------------------
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


def read_result(path: epath.Path) -> dict:
    """A run's result.json; a SweepError naming it where it is damaged (left as it is)."""
    try:
        result = json.loads(path.read_text())
    except ValueError as error:  # not JSON, or not text
        raise SweepError(f"{path} is damaged (not JSON: {error}): {_MOVE_ASIDE}") from None
    if not isinstance(result, dict) or not isinstance(result.get("metrics"), dict):
        raise SweepError(f"{path} is damaged (no 'metrics' object): {_MOVE_ASIDE}")
    return result


_MOVE_ASIDE = ("move it aside (e.g. to result.json.damaged) and run the sweep again, not "
               "--report_only: a run whose final eval is in its metrics.jsonl is recorded again, "
               "any other resumes from its checkpoints")


def load_result(run: Run) -> dict | None:
    """result.json if the sweep wrote one, else one made from a final eval in metrics.jsonl (a
    run that ended although the sweep did not record it: stopped in between, or run by hand)."""
    path = run.workdir / "result.json"
    if path.exists():
        return read_result(path)
    metrics = final_eval(run.workdir)
    return None if metrics is None else _result(run, metrics)


# ---- what defines a run: its command, paths aside --------------------------------------------
def portable(value: str) -> str:
    """An absolute path or URL as '<path>': a copied sweep's workdirs, or a teacher's workdir,
    lie elsewhere on another machine and name the same run."""
    return "<path>" if value.startswith(("/", "gs://")) else value


def portable_arg(arg: str) -> str:
    """A config `:arg` ('task=spam,teacher=/x/y') with its path values made `portable`."""
    items = (item.partition("=") for item in arg.split(",")) if arg else ()
    return ",".join(key + sep + portable(value) for key, sep, value in items)


def definition(command) -> dict[str, str]:
    """What decides a run, from its `python -m train` command: the config file (relative to the
    repo), each item of its `:arg` and each --config.KEY's last value, paths `portable`;
    --workdir and --allow_config_change (how, not what) left out."""
    found, items = {}, iter(command)
    for item in items:
        if item in ("--config", "--workdir"):
            value = next(items, "")
            if item == "--config":
                path, _, arg = value.partition(":")
                found["config file"] = path.removeprefix(f"{REPO}/")
                found.update({f":{key}": portable(v) for key, _, v in
                              (a.partition("=") for a in arg.split(",") if a)})
        elif item.startswith("--config."):
            key, _, value = item.partition("=")
            found[key] = portable(value)
    return found


def changes(result: dict, run: Run) -> list[str]:
    """How a finished run's recorded command (result.json) differs from the one `run` plans
    now, paths aside: ['--config.train.num_steps: not given before, 30 now'], [] if alike.
    A result.json moved by hand to the row that now names its computation says why in
    `renamed_from` (notebooks/results/vit_table8/relative_bias_2d): its `:arg` items, which
    name the row, are not compared; all else is."""
    if "command" not in result:
        return ["its result.json records no command"]
    before, now = definition(result["command"]), definition(run.argv)
    keys = sorted(before.keys() | now.keys())
    if "renamed_from" in result:
        keys = [key for key in keys if not key.startswith(":")]
    return [f"{key}: {before.get(key, 'not given')} before, {now.get(key, 'not given')} now"
            for key in keys if before.get(key) != now.get(key)]


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
    results, other = {}, set()  # other: finished under another definition (`changes`)
    for run in runs:
        if (result := load_result(run)) is not None:
            results[run.name] = result
            if not (run.workdir / "result.json").exists():
                _write_result(run, result)
            if changes(result, run):
                other.add(run.name)
    todo = [run for run in runs if run.name not in results]
    note = f" ({len(other)} under another definition: not in the tables)" if other else ""
    print(f"[sweep] {len(runs)} runs: {len(runs) - len(todo)} finished before{note}, "
          f"{len(todo)} to run", flush=True)
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
                  f"{best_row(sweep, [results[n] for n in results if n not in other])}",
                  flush=True)
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
