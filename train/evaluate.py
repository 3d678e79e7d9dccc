"""python -m train.evaluate WORKDIR [--split S] [--step N] [--weights W] [--write]: score a
run's checkpoint.

    python -m train.evaluate workdirs/vit_fashion_mnist
    python -m train.evaluate workdirs/vit_fashion_mnist --split train --step 4000
    python -m train.evaluate workdirs/transformer_en_es --split test --write

The run is rebuilt from its workdir as a resumed start would build it: its requested config
(requested_config.json, train/run_config.py) and the vocabulary its checkpoints were trained
with (train/vocabulary.py), by the trainer itself (train/trainer.py `Trainer`), whose eval path
then scores the checkpoint: `Trainer.evaluate`, the same pass over the whole split, the same
metrics and, for a task that generates (translation: BLEU), the same decoding as the run's own
evals. Nothing trains, and nothing in the workdir is written unless --write appends the result
to metrics.jsonl as a record of its own kind, `"split": "evaluate"` with the split it scored
(`"eval_split"`) and the checkpoint's step, which the run's own "eval" records and whatever reads
them never confuse with theirs.

--split replaces config.data.eval_split (e.g. 'test' for a run that selected on 'validation');
--step picks a saved checkpoint (default: the latest); --weights raw scores its weights as
saved, ema the moving average of them that a run with train.ema_decay > 0 keeps beside them
(the `ema.<name>` metrics of its own evals), and average the mean of the last
train.average_checkpoints checkpoints up to it, as a run that averages them reports its final
eval (the default for such a run; raw for the others; train/run_weights.py). Exit status: 0
scored, 2 a config, data or checkpoint error (the message names it and what to do).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import ml_collections

from train import run_config, storage
from train.workdir import completed_request

WRITTEN_SPLIT = "evaluate"  # the metrics.jsonl records of this command


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.evaluate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("workdir", help="a run's workdir (requested_config.json, vocabulary/, "
                                        "checkpoints/)")
    parser.add_argument("--split", help="the split to score (default: the run's "
                                        "config.data.eval_split), e.g. validation or test")
    parser.add_argument("--step", type=int, help="the checkpoint's step (default: the latest)")
    from train.run_weights import WEIGHTS

    parser.add_argument("--weights", choices=WEIGHTS, default=None,
                        help="raw: the checkpoint's; ema: their moving average (a run with "
                             "train.ema_decay > 0); average: the last train.average_checkpoints "
                             "checkpoints up to it averaged (default: those the run's final "
                             "eval scored: average for a finished run that averages)")
    parser.add_argument("--write", action="store_true",
                        help=f"append the result to the run's metrics.jsonl (\"split\": "
                             f"\"{WRITTEN_SPLIT}\")")
    return parser.parse_args(argv)


def run_config_of(workdir, split: str | None) -> ml_collections.ConfigDict:
    """The run's requested config, its eval split replaced by `split` when given."""
    from train.config import ConfigError

    saved = run_config.saved_request(workdir)
    if saved is None:
        raise ConfigError(f"{workdir} holds no run ({run_config.REQUESTED_FILE} is missing): give "
                          "the workdir of a `python -m train` run")
    config = ml_collections.ConfigDict(completed_request(saved))  # keys added since it ran
    if split is not None:
        if not split.strip():
            raise ConfigError("--split is empty: name a split, e.g. validation or test")
        config.data.eval_split = split
    return config


def evaluate(workdir, *, split: str | None = None, step: int | None = None,
             weights: str | None = None, log=print) -> tuple[int, dict[str, float]]:
    """(the checkpoint's step, its metrics on the split) for the run in `workdir` (module
    docstring), of the `weights` of train/run_weights.py (None: those the run's final eval
    scored); `log` gets the task's messages (translation samples)."""
    from train import vocabulary
    from train.checkpointing import CheckpointError, checkpoint_steps
    from train.config import ConfigError
    from train.run_weights import averaged_steps, final_eval_weights, load_weights
    from train.trainer import Trainer

    workdir = storage.run_path(workdir)
    config = run_config_of(workdir, split)
    steps = checkpoint_steps(workdir)
    if not steps or (step is not None and step not in steps):
        raise CheckpointError(f"no checkpoint{'' if step is None else f' of step {step}'} in "
                              f"{workdir}/checkpoints (saved steps: {steps}); train the run first "
                              "(python -m train --workdir ...) or give one of the saved --step")
    step = steps[-1] if step is None else step
    trainer = Trainer(config, workdir)  # builds; writes nothing before run()
    if getattr(trainer.task, "tokenizer", None) is not None and vocabulary.load(workdir) is None:
        raise ConfigError(f"{workdir} holds no vocabulary/ (a run keeps the one its checkpoints "
                          "were trained with there; the one cached under the data root may "
                          "have other ids): restore it from a copy of the workdir")
    weights = weights or final_eval_weights(workdir, config.to_dict())
    saved = load_weights(workdir, step, weights, note=log)
    params = jax.tree.map(
        lambda value, like: jax.make_array_from_callback(value.shape, like.sharding,
                                                         lambda index: value[index]),
        saved, trainer.abstract_state.params)
    metrics = trainer.evaluate(params, decode=trainer.task.decode_every is not None, log=log)
    if weights == "average":  # as the trainer's own final eval records it
        metrics["averaged_checkpoints"] = len(averaged_steps(workdir, step))
    return step, metrics


def write_record(workdir, step: int, split: str, metrics: dict[str, float],
                 weights: str = "raw") -> None:
    """Appends the result to the run's metrics.jsonl, marked as this command's (process 0)."""
    if jax.process_index() != 0:
        return
    path = storage.run_path(workdir) / "metrics.jsonl"
    record = {"step": step, "split": WRITTEN_SPLIT, "eval_split": split, "weights": weights,
              "time": time.time(), **metrics}
    storage.append(path, json.dumps(record) + "\n")


def main(argv=None) -> int:
    from data.errors import DataError
    from train.checkpointing import CheckpointError
    from train.config import ConfigError
    from train.metrics_writer import format_value

    from train.run_weights import final_eval_weights

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        config = run_config_of(storage.run_path(args.workdir), args.split)
        weights = args.weights or final_eval_weights(storage.run_path(args.workdir),
                                                     config.to_dict())
        step, metrics = evaluate(args.workdir, split=args.split, step=args.step,
                                 weights=weights,
                                 log=lambda message: print(message, file=sys.stderr))
        split = config.data.eval_split
        if args.write:
            write_record(args.workdir, step, split, metrics, weights)
    except (ConfigError, CheckpointError, DataError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"step {step}, split {split}: " + " ".join(
        f"{name}={format_value(value)}" for name, value in metrics.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
