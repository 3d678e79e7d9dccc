"""python -m train.diagnose_encoder WORKDIR [WORKDIR ...] [--steps 0,latest] [--out FILE.json]
    [--overwrite]

Looks inside BERT pretraining runs (`python -m train --config configs/bert/pretrain.py ...`):
for each checkpoint asked for (step 0: the initial weights, exactly as the trainer makes them
from the run's config.seed; `all`: every saved step; `latest`), on the first batch of the run's
validation split, corrupted as the run corrupts it:

  pretrain.layers     per layer, train/encoder_probe.py `encoder_report`: how alike the
                      positions' vectors are (cosine, common share, effective rank), whether
                      the input token can still be read from them (identity readout), attention
                      entropy per head, each sublayer's size against the residual stream, GELU
                      activity and the LayerNorm gains
  pretrain.mlm        the MLM head's predictions (accuracy, entropy, how often one token is the
                      answer everywhere, how often a randomly replaced input is copied)
  pretrain.gradients  the L2 norm and per-element RMS of the pretraining loss's gradient per
                      layer (encoder_probe.gradient_groups)
  pretrain.adam       from the checkpoint's optimizer state: Adam's step per unit of learning
                      rate per layer, and the gradient size its second moment remembers
  embeddings          the [MASK] embedding against the word-embedding table
  finetune            (unless --finetune none) the same layer report and gradients on the first
                      training batch of a fine-tuning task (default Brown POS tagging, as BERT
                      Table 8's sweep fine-tunes), from that checkpoint's encoder and the
                      fine-tuning run's own freshly initialised head: where the fine-tuning
                      gradient reaches and how large it is there, to read against Adam's eps

and, from the run's record.json, the commands that trained it (to which step), from its
metrics.jsonl its training curve (`train_log`: step, learning rate,
gradient norm, loss, MLM and NSP accuracy per logged step) and the first logged step whose MLM
accuracy reached --plateau (default 0.07, configs/ablations/bert_table8.py LEFT_PLATEAU). One
JSON document goes to --out (default: stdout; an existing file is replaced only with
--overwrite) with a table per checkpoint on stderr. Nothing in the workdir is written. Used for
BERT Table 8's collapsed rows (docs/reproductions.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

DEFAULT_FINETUNE = "configs/bert/finetune.py:task=brown_pos"


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.diagnose_encoder",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdirs", nargs="+", help="workdirs of BERT pretraining runs")
    parser.add_argument("--steps", default="latest",
                        help="comma-separated checkpoint steps, 0 (initial weights), 'latest' "
                             "or 'all' (default: latest)")
    parser.add_argument("--batch_size", type=int, default=64,
                        help="sequences of the validation batch (default 64)")
    parser.add_argument("--finetune", default=DEFAULT_FINETUNE,
                        help="FILE[:ARG] of a fine-tuning config whose first training batch "
                             f"is probed, or 'none' (default {DEFAULT_FINETUNE})")
    parser.add_argument("--plateau", type=float, default=0.07,
                        help="MLM accuracy that counts as having left the unigram plateau")
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out file (refused without)")
    return parser.parse_args(argv)


def _check_arguments(args):
    """The path of --out (None: stdout); ConfigError for an argument the run would fail on."""
    from train import storage
    from train.config import ConfigError

    if args.batch_size < 1:
        raise ConfigError(f"--batch_size {args.batch_size} must be >= 1")
    if not 0 <= args.plateau < 1:  # NaN too
        raise ConfigError(f"--plateau {args.plateau} must be an accuracy in [0, 1)")
    if not [step for step in args.steps.split(",") if step.strip()]:
        raise ConfigError(f"--steps {args.steps!r} names no step: give steps, 'latest' or 'all'")
    if args.out is None:
        if args.overwrite:
            raise ConfigError("--overwrite replaces an existing --out file: give --out FILE, "
                              "or drop --overwrite (the JSON goes to stdout)")
        return None
    try:
        out = storage.run_path(args.out)
    except ConfigError as error:  # blank, or a URL of another kind
        raise ConfigError(f"--out {args.out!r}: {error}") from None
    if not storage.is_url(out) and out.is_dir():
        raise ConfigError(f"--out {out} is a folder")
    if not storage.is_url(out) and not out.parent.is_dir():
        raise ConfigError(f"--out {out}: its folder {out.parent} does not exist")
    if out.exists() and not args.overwrite:
        raise ConfigError(f"--out {out} exists; pass --overwrite to replace it, or give "
                          "another file")
    return out


def main(argv=None) -> int:
    from data.errors import DataError
    from train.checkpointing import CheckpointError
    from train import storage
    from train.config import ConfigError
    from train import run_record
    from train.encoder_diagnosis import diagnose_run, format_run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:  # checked before the work, so that none of it is lost at the end
        out = _check_arguments(args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs, started = [], time.time()
    try:
        for workdir in args.workdirs:
            run = diagnose_run(workdir, steps=args.steps, batch_size=args.batch_size,
                               finetune=None if args.finetune == "none" else args.finetune,
                               plateau=args.plateau)
            print(format_run(run), file=sys.stderr)
            runs.append(run)
    except (ConfigError, DataError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command = ["python", "-m", "train.diagnose_encoder",
               *(sys.argv[1:] if argv is None else argv)]
    made = {"date": run_record.utc_iso(started), "wall_s": round(time.time() - started, 1),
            "machine": run_record.machine(None, "none: a diagnosis computes no MFU"),
            "code": run_record.code_version(), "versions": run_record.versions()}
    text = json.dumps({"command": command, **made, "runs": runs}, indent=1) + "\n"
    if out is not None:
        storage.write_atomically(out, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
