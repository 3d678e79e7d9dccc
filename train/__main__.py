"""python -m train --config FILE[:ARG] --workdir DIR [--config.KEY=VALUE ...]

Trains the experiment a config file describes. DIR/config.json records the resolved config,
the model that ran (a pretrained model's sizes, the vocabulary's size), and
DIR/requested_config.json the config as given (train/run_config.py); logs go to
DIR/metrics.jsonl and DIR/tensorboard/, checkpoints to DIR/checkpoints/; what ran, on what and
what it measured to DIR/record.json when the run ends or is stopped (train/run_record.py).
Starting again with the same workdir resumes from the latest checkpoint; a workdir that holds a
different (requested) config is refused (with the differing keys) unless --allow_config_change
is given. --print_config prints the resolved config without training (--workdir optional: with
one, as a start there would resolve it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from train import run_config
from train.config import ConfigError, apply_override, load_config_file, to_json


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="FILE[:ARG], e.g. configs/vit/fashion_mnist.py:smoke")
    parser.add_argument("--workdir", help="logs, checkpoints and config.json go here (required "
                                          "but with --print_config)")
    parser.add_argument("--allow_config_change", action="store_true",
                        help="resume in a workdir whose saved config differs from this one")
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


def _flatten(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Where a run computes, not what: the same experiment may resume on another mesh (the
# checkpoint restores into the new shardings; the global batch stays the same), so these keys
# may differ from the workdir's without --allow_config_change.
PLACEMENT_PREFIXES = ("mesh.",)


def check_workdir(workdir: Path, config_json: str, allow_change: bool) -> list[str]:
    """Refuses to mix two different experiments in one workdir; returns the placement keys
    (the mesh) that changed, as lines to report. `config_json` is the requested config, compared
    with the one the workdir's run requested (run_config.saved_request: cheap, and in the keys
    the command line sets; config.json holds the resolved one)."""
    saved = run_config.saved_request(workdir)
    if saved is None:
        return []
    saved = _flatten(saved)
    current = _flatten(json.loads(config_json))
    changed = [key for key in sorted(set(saved) | set(current))
               if saved.get(key) != current.get(key)]
    lines = {key: f"  {key}: {saved.get(key, '<absent>')!r} in the workdir, "
                  f"{current.get(key, '<absent>')!r} now" for key in changed}
    placement = [key for key in changed if key.startswith(PLACEMENT_PREFIXES)]
    diff = [lines[key] for key in changed if key not in placement]
    if diff and not allow_change:
        raise ConfigError(f"workdir {workdir} holds a run with a different config:\n" + "\n".join(diff)
                          + "\nUse another --workdir, or pass --allow_config_change to resume anyway.")
    return [lines[key] for key in placement]


def main(argv=None) -> int:
    started = time.time()  # the record's wall clock: the whole command
    argv = sys.argv[1:] if argv is None else list(argv)
    args, overrides = parse_args(argv)
    from data.errors import DataError
    from train.checkpointing import CheckpointError
    from train.partitioning import MeshError
    from train.trainer import NonFiniteError

    try:
        config = load_config_file(args.config)
        for key, value in overrides:
            apply_override(config, key, value)
        config_json = to_json(config)
        if args.print_config:  # nothing trained, loaded or compiled: the task's `plan`
            from train.tasks import plan_task

            resolution = plan_task(config, Path(args.workdir) if args.workdir else None)
            for note in resolution.notes:
                print(note, file=sys.stderr)
            print(run_config.to_text(run_config.resolved(config, resolution)))
            return 0
        workdir = Path(args.workdir)
        if workdir.exists() and not workdir.is_dir():
            raise ConfigError(f"--workdir {workdir} is a file, not a directory")
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
        trainer = Trainer(config, workdir)  # validates everything before compiling
        final = trainer.run()  # writes config.json once the checkpoint (if any) is restored
        from train.run_record import write_train_record
        write_train_record(trainer, command=["python", "-m", "train", *argv], started=started)
    except (ConfigError, DataError, MeshError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (NonFiniteError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    if trainer.interrupted:
        return 0  # checkpointed on SIGTERM/SIGINT; the same command resumes
    summary = ", ".join(f"{k} {v:.4f}" for k, v in final.items())
    print(f"final eval ({config.data.eval_split} split): {summary}")
    print(f"logs: {workdir / 'metrics.jsonl'}, {workdir / 'tensorboard'}; "
          f"checkpoints: {workdir / 'checkpoints'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
