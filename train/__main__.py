"""python -m train --config FILE[:ARG] --workdir DIR [--config.KEY=VALUE ...]

Trains the experiment a config file describes. DIR is a local folder or a Cloud Storage URL,
gs://BUCKET/PATH (the `gcs` extra; train/storage.py). Into DIR go: config.json, the resolved
config (the model that ran: a pretrained model's sizes, the vocabulary's size) and
requested_config.json, the config as given (train/run_config.py); metrics.jsonl and
tensorboard/; checkpoints/; record.json, what ran, on what and what it measured, when the run
ends or is stopped (train/run_record.py).

Starting again with the same workdir resumes from the latest checkpoint. A workdir that holds
another (requested) config is refused, naming the keys that differ: where they leave the train
state as saved (train.*, learning rates, evaluation and data settings) --allow_config_change
resumes anyway; another task or model needs a new --workdir (train/workdir.py). A damaged
checkpoint is set aside as checkpoints/STEP.corrupt-TIME and the previous one resumed; a
workdir left with only such set-aside checkpoints is refused unless --fresh_start is given.
--print_config prints the resolved config without training (--workdir optional: with one, as
a start there would resolve it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from train import run_config, storage
from train.config import (CONFIGS, ConfigError, apply_override, describe_configs,
                          load_config_file, to_json)
from train.interrupts import StoppedBySignal
from train.workdir import check_workdir


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m train", description=__doc__,
        epilog=describe_configs(CONFIGS, Path.cwd()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="FILE[:ARG], e.g. configs/vit/fashion_mnist.py:smoke")
    parser.add_argument("--workdir", help="logs, checkpoints and config.json go here: a local "
                                          "folder or gs://BUCKET/PATH (required but with "
                                          "--print_config)")
    parser.add_argument("--allow_config_change", action="store_true",
                        help="resume in a workdir whose saved config differs from this one in "
                             "keys that keep the train state (train.*, learning rates, eval, data)")
    parser.add_argument("--fresh_start", action="store_true",
                        help="train from step 0 when every checkpoint in the workdir was set aside "
                             "as damaged (checkpoints/STEP.corrupt-TIME; they are kept); without "
                             "it such a workdir is refused. A usable checkpoint is still resumed")
    parser.add_argument("--print_config", action="store_true",
                        help="print the resolved config (what the run would use; \"<...>\" for "
                             "a value only training a vocabulary would tell) and exit")
    group = parser.add_argument_group("multi-process (otherwise read from JAX_COORDINATOR_ADDRESS, "
                                      "JAX_NUM_PROCESSES and JAX_PROCESS_ID, a TPU pod / SLURM / "
                                      "MPI / Kubernetes environment, or a single process)")
    group.add_argument("--coordinator_address", help="HOST:PORT of process 0's coordinator")
    group.add_argument("--num_processes", type=int, help="how many processes take part")
    group.add_argument("--process_id", type=int, help="this process's index, 0..num_processes-1")
    args, rest = parser.parse_known_args(argv)
    if args.workdir is None and not args.print_config:
        parser.error("--workdir is required (logs, checkpoints and config.json go there); only "
                     "--print_config runs without one")
    overrides = []
    for item in rest:
        if not item.startswith("--config.") or "=" not in item:
            parser.error(f"unrecognised argument {item!r}; overrides look like --config.train.num_steps=100")
        key, _, value = item[len("--config."):].partition("=")
        overrides.append((key, value))
    return args, overrides


class Interrupted(StoppedBySignal):
    """SIGINT or SIGTERM before the trainer handles them (from its first train step on, a signal
    checkpoints the step reached instead: train/trainer.py). Another process of the run that
    learns of it raises StoppedBySignal (train/interrupts.py), and exits alike."""


class _Signals:
    """SIGINT / SIGTERM while the trainer does not hold them. Before its first train step they
    raise Interrupted: nothing is saved yet. Once it has handed them back (the steps trained are
    checkpointed, or a non-finite loss stopped it), they are ignored: what is left is writing
    the run's record and its last lines, moments, and a signal then would lose the record and
    claim that nothing was saved.

    Python runs a handler between any two bytecodes, also inside a garbage-collection callback
    (jax's, while it compiles) or a __del__, where what the handler raises is discarded: so the
    signal is also kept in `pending`, which train/preemption.py's arm() honours by calling the
    handler again before the trainer takes over (and `quiet_discarded` keeps the discarded one
    off stderr)."""

    def __init__(self):
        self.trainer = None  # set once the trainer is built
        self.pending: int | None = None
        self.previous_hook = sys.unraisablehook

    def __call__(self, signum, frame):
        preemption = getattr(self.trainer, "preemption", None)
        if preemption is not None and preemption.took_over:
            return
        self.pending = signum
        raise Interrupted(signum)

    def quiet_discarded(self, unraisable) -> None:
        """sys.unraisablehook: an Interrupted Python could not raise is pending, not an error."""
        if not isinstance(unraisable.exc_value, Interrupted):
            self.previous_hook(unraisable)


def main(argv=None, command: list[str] | None = None) -> int:
    """Trains as the command line `argv` says; the run's record names `command` as what ran
    (default `python -m train ARGV`; a wrapper that calls this in-process names itself, as
    tests/scripts/recipe_run.py does, which mocks TFDS's datasets). Exit status: 0 trained to
    the end, or stopped by SIGINT/SIGTERM during training with the step reached checkpointed
    (nothing trained is lost; the same command resumes); 2 a config or data error, 3 a
    non-finite loss or an unusable checkpoint, both before anything is overwritten; 128 + the
    signal's number (130 for Ctrl-C, 143 for SIGTERM) when a signal stops the run before its
    first train step, with nothing saved (the shell's convention for a command a signal ended;
    a workdir's checkpoints stay as they were)."""
    started = time.time()  # the record's wall clock: the whole command
    argv = sys.argv[1:] if argv is None else list(argv)
    args, overrides = parse_args(argv)
    signals = _Signals()
    previous = {sig: signal.signal(sig, signals) for sig in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = signals.quiet_discarded
    try:
        return _train(args, overrides, started, signals,
                      command or ["python", "-m", "train", *argv])
    except StoppedBySignal as stop:  # here (Interrupted) or on another process
        print(f"interrupted by {stop} before the first train step: no checkpoint was written "
              "(those already in the workdir are kept); the same command starts again",
              file=sys.stderr)
        return 128 + stop.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = signals.previous_hook


def _train(args, overrides, started: float, signals: _Signals,
           command: list[str]) -> int:
    from data.errors import DataError
    from train.checkpointing import CheckpointError
    from train.partitioning import MeshError
    from train.step_log import NonFiniteError

    try:
        config = load_config_file(args.config)
        for key, value in overrides:
            apply_override(config, key, value)
        config_json = to_json(config)
        if args.print_config:  # nothing trained, loaded or compiled: the task's `plan`
            from train.tasks import plan_task
            from train.start_checks import check_config

            resolution = plan_task(config, storage.run_path(args.workdir) if args.workdir
                                   else None)
            checked = check_config(config, resolution.model_config)  # what a start refuses
            for note in (*resolution.notes, *checked):
                print(note, file=sys.stderr)
            print(run_config.to_text(run_config.resolved(config, resolution)))
            return 0
        workdir = storage.run_path(args.workdir)  # a local folder or gs://BUCKET/PATH
        if workdir.exists() and not workdir.is_dir():
            raise ConfigError(f"--workdir {workdir} is a file, not a directory")
        if not storage.is_url(workdir):  # afile/run: named, not a lock that cannot be taken
            blocked = next((p for p in workdir.parents if p.exists() and not p.is_dir()), None)
            if blocked is not None:
                raise ConfigError(f"--workdir {workdir}: {blocked} is a file, not a directory")
        from train.start_checks import check_sections
        check_sections(config)  # a config file's own keys (overrides were checked as set)
        moved = check_workdir(workdir, config_json, args.allow_config_change)

        import jax

        from train import distributed
        from train.trainer import Trainer

        try:
            joined = distributed.initialize(args.coordinator_address, args.num_processes,
                                            args.process_id)
        except ValueError as error:
            raise ConfigError(str(error)) from error
        if jax.process_count() > 1 and jax.process_index() == 0:
            print(f"multi-process run: {joined}; {jax.device_count()} devices", file=sys.stderr)
        if moved and jax.process_index() == 0:
            print("the mesh differs from the workdir's; the checkpoint is restored onto the new "
                  "one:\n" + "\n".join(moved), file=sys.stderr)
        from train import run_record, workdir_lock
        with workdir_lock.hold(workdir, take=jax.process_index() == 0):  # one run at a time
            trainer = signals.trainer = Trainer(config, workdir, fresh_start=args.fresh_start)
            final = trainer.run()  # writes config.json once the checkpoint (if any) is restored
            run_record.write_train_record(trainer, command=command, started=started)
    except (ConfigError, DataError, MeshError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NonFiniteError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    if trainer.interrupted:
        return 0  # checkpointed on SIGTERM/SIGINT; the same command resumes
    from train.metrics_writer import format_value
    summary = ", ".join(f"{k} {format_value(v, '.4f')}" for k, v in final.items())
    print(f"final eval ({config.data.eval_split} split): {summary}")
    print(f"logs: {workdir / 'metrics.jsonl'}, {workdir / 'tensorboard'}; "
          f"checkpoints: {workdir / 'checkpoints'}; record: {workdir / run_record.FILENAME}")
    return 0


if __name__ == "__main__":
    code = main()
    if code >= 128:  # stopped inside a library (an XLA compile, orbax starting its threads):
        sys.stdout.flush()  # its native threads can crash the interpreter's shutdown (seen:
        sys.stderr.flush()  # SIGSEGV), and nothing is left to save, so leave at once
        os._exit(code)
    sys.exit(code)
