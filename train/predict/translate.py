"""Translate with a translation run: `python -m train.predict WORKDIR --sentence "..."`.

    python -m train.predict workdirs/translate --sentence "In the beginning God created the heaven"
    python -m train.predict workdirs/translate --file sentences.txt --decoding greedy
    echo "And God said" | python -m train.predict workdirs/translate --beam_size 8 --alpha 1.0

Sentences: every --sentence or (not both) one per line of --file, else one per line of standard
input.
Each is encoded as the run's eval pipeline encodes a source sentence (data/pipelines/
translation.py: the run's SentencePiece vocabulary, EOS appended, cut to config.data.max_length
tokens with a message when longer) and translated as the run's eval decodes
(train/tasks/translate.py `translate`): beam search with the run's config.task.beam_size and
length_penalty unless --beam_size / --alpha say otherwise (--decoding greedy: one hypothesis),
each sentence up to its input length + config.task.extra_decode_length tokens (Vaswani et al.
2017, Sec. 6.1), within the run's decoding width. The output is detokenized by the same
vocabulary. Sentences go --batch_size at a time over all local devices (train/predict/batching.py).
The weights are those of the run's final BLEU: for the base and big recipes the average of the
last checkpoints (train.average_checkpoints; `--weights raw` for the latest alone).
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from data.pipelines.translation import limit_length
from models.transformer import PAD_ID, Transformer, TransformerConfig
from train import run_config
from train.config import ConfigError
from train.predict.batching import DeviceBatches
from train.predict.texts import read_lines
from train.tasks.translate import decode_width, translate

DECODINGS = ("beam", "greedy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("translation")
    group.add_argument("--sentence", action="append", default=[],
                       help="a source sentence (repeat for several)")
    group.add_argument("--file", help="a file of source sentences, one per line")
    group.add_argument("--decoding", choices=DECODINGS, default="beam",
                       help="beam search (the run's beam size) or greedy")
    group.add_argument("--beam_size", type=int, default=None,
                       help="beams for --decoding beam (default: the run's task.beam_size)")
    group.add_argument("--alpha", type=float, default=None,
                       help="the beam search's length penalty (Wu et al. 2016; default: the "
                            "run's task.length_penalty)")
    group.add_argument("--batch_size", type=int, default=32, help="sentences per model call")


def settings(run, args) -> dict:
    """{'beam_size', 'alpha'} of the search: the run's, or the options' (module docstring)."""
    task = run.config["task"]
    if args.decoding == "greedy":
        if args.beam_size not in (None, 1):
            raise ConfigError(f"--beam_size={args.beam_size} with --decoding greedy: greedy "
                              "keeps one hypothesis (use --decoding beam)")
        if args.alpha is not None:
            raise ConfigError(f"--alpha={args.alpha} with --decoding greedy: the length penalty "
                              "ranks beams, and greedy keeps one hypothesis (use --decoding "
                              "beam)")
        return {"beam_size": 1, "alpha": task["length_penalty"]}
    beam = task["beam_size"] if args.beam_size is None else args.beam_size
    if beam < 1:
        raise ConfigError(f"--beam_size={beam} must be >= 1")
    vocab = None if run.tokenizer is None else run.tokenizer.vocab_size  # None: refused later
    if vocab is not None and beam > vocab:  # a guard of memory: beam x vocab scores a step
        raise ConfigError(f"--beam_size={beam} is more than the run's {vocab} tokens: each step "
                          f"scores beam x {vocab} continuations; use {vocab} beams or fewer")
    if beam == 1 and args.alpha is not None:
        raise ConfigError(f"--alpha={args.alpha} with a beam of 1: the length penalty ranks "
                          "beams, and one beam is greedy search, which never reads it (use "
                          "--beam_size 2 or more)")
    alpha = task["length_penalty"] if args.alpha is None else args.alpha
    if not 0 <= alpha < float("inf"):  # NaN too
        raise ConfigError(f"--alpha={alpha} must be a finite number >= 0 (0: no length penalty)")
    return {"beam_size": int(beam), "alpha": float(alpha)}


def model_of(run) -> Transformer:
    return Transformer(run_config.saved_model(TransformerConfig, run.config, run.workdir))


def encode(run, sentences: list[str], note=print) -> list[dict]:
    """The rows the model reads: each sentence's ids + EOS, padded to config.data.max_length,
    as the eval pipeline makes them (a longer one cut, with a note)."""
    length = int(run.config["data"]["max_length"])
    rows = []
    for number, sentence in enumerate(sentences, 1):
        ids = run.tokenizer.encode(sentence)
        inputs, cut = limit_length(ids, length)
        if cut:
            note(f"sentence {number} has {len(ids) + 1} tokens with EOS; the run reads at most "
                 f"config.data.max_length={length}: its first {length - 1} are translated")
        row = [PAD_ID] * length
        row[:len(inputs)] = inputs.tolist()
        rows.append({"inputs": np.asarray(row, np.int32)})
    return rows


def predict(run, args, *, stdin=None, out=print, note=None) -> list[str]:
    """The translation of every sentence (printed to `out`, one line each), in order; `note`
    (default: standard error) gets what was changed about an input."""
    note = note or _stderr
    sentences = read_lines(args.sentence, args.file, what="sentence", flag="--sentence",
                           file_flag="--file", stdin=stdin)
    search = settings(run, args)
    if run.tokenizer is None:
        raise ConfigError(f"{run.workdir} holds no vocabulary/ (a run keeps the one it trained "
                          "with there): restore it from a copy of the workdir")
    model, task = model_of(run), run.config["task"]
    extra = int(task["extra_decode_length"])
    width = decode_width(model.config, int(run.config["data"]["max_length"]), extra,
                         int(task["max_decode_length"]))
    step = jax.jit(lambda params, batch: {"tokens": translate(
        model, params, batch["inputs"], run.tokenizer, extra=extra, max_decode_length=width,
        **search)})
    batches = DeviceBatches(run.params, batch_size=args.batch_size)
    outputs = []
    for row in batches.run(step, encode(run, sentences, note)):
        text = run.tokenizer.decode(row["tokens"].tolist())
        outputs.append(text)
        out(text)
    return outputs


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
