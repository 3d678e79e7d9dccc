"""python -m train --config FILE[:ARG] --workdir DIR [--config.KEY=VALUE ...]

Trains the experiment a config file describes. The resolved config is written to
DIR/config.json; logs go to DIR/metrics.jsonl and DIR/tensorboard/, checkpoints to
DIR/checkpoints/. Starting again with the same workdir resumes from the latest checkpoint; a
workdir that holds a different config is refused (with the differing keys) unless
--allow_config_change is given. A damaged checkpoint is set aside as
DIR/checkpoints/STEP.corrupt-TIME and the previous one resumed; a workdir left with only such
set-aside checkpoints is refused unless --fresh_start is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from train.config import ConfigError, apply_override, load_config_file, to_json


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="FILE[:ARG], e.g. configs/vit/fashion_mnist.py:smoke")
    parser.add_argument("--workdir", required=True, help="logs, checkpoints and config.json go here")
    parser.add_argument("--allow_config_change", action="store_true",
                        help="resume in a workdir whose saved config differs from this one")
    parser.add_argument("--fresh_start", action="store_true",
                        help="train from step 0 when every checkpoint in the workdir was set aside "
                             "as damaged (checkpoints/STEP.corrupt-TIME; they are kept); without "
                             "it such a workdir is refused. A usable checkpoint is still resumed")
    parser.add_argument("--print_config", action="store_true", help="print the resolved config and exit")
    group = parser.add_argument_group("multi-process (otherwise read from JAX_COORDINATOR_ADDRESS, "
                                      "JAX_NUM_PROCESSES and JAX_PROCESS_ID, a TPU pod / SLURM / "
                                      "MPI environment, or a single process)")
    group.add_argument("--coordinator_address", help="HOST:PORT of process 0's coordinator")
    group.add_argument("--num_processes", type=int, help="how many processes take part")
    group.add_argument("--process_id", type=int, help="this process's index, 0..num_processes-1")
    args, rest = parser.parse_known_args(argv)
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
    (the mesh) that changed, as lines to report."""
    saved_path = workdir / "config.json"
    if not saved_path.exists():
        return []
    saved = _flatten(json.loads(saved_path.read_text()))
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
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    from data.errors import DataError
    from train.checkpointing import CheckpointError
    from train.partitioning import MeshError
    from train.trainer import NonFiniteError

    try:
        config = load_config_file(args.config)
        for key, value in overrides:
            apply_override(config, key, value)
        config_json = to_json(config)
        if args.print_config:
            print(config_json)
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
        trainer = Trainer(config, workdir, fresh_start=args.fresh_start)  # validates all first
        final = trainer.run()  # writes config.json once the checkpoint (if any) is restored
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
