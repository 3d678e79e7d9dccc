"""Fill the [MASK]s of texts with a BERT pretraining run: `python -m train.predict WORKDIR --text
"the [MASK] sat on the mat"`.

    python -m train.predict workdirs/bert_pretrain --text "He went to the [MASK] ." --top_k 5
    python -m train.predict workdirs/bert_pretrain --file masked.txt

Texts: every --text or (not both) one per line of --file, else one per line of standard input; each
with at least one [MASK] (the vocabulary keeps the token whole). A text becomes the input the
pretraining pipeline gives one segment, `[CLS] text [SEP]` padded to config.data.max_seq_length
(built by data/pipelines/finetune.py `FeatureEncoder`, the fine-tuning pipeline's encoder of one
text); the masked-LM head (models/bert_pretraining.py) reads the [MASK] positions. A text cut
to that length is said so on stderr, and one whose [MASK] the cut drops is an error. Printed per
text: the text with each [MASK] replaced by its most probable token, then per [MASK] the top
--top_k tokens with their probabilities. Texts go --batch_size at a time over all local
devices (train/predict/batching.py). A general-distillation run (train/tasks/distill_pretrain.py)
fills them with its student, a smaller BertForPreTraining.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from data.errors import DataError
from data.pipelines.finetune import FeatureEncoder
from models.bert import BertConfig
from models.bert_pretraining import BertForPreTraining
from train import run_config
from train.config import ConfigError
from train.predict.batching import DeviceBatches
from train.predict.texts import read_lines

MASK = "[MASK]"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("masked LM (BERT pretraining)")
    group.add_argument("--text", action="append", default=[],
                       help=f"a text with one or more {MASK} (repeat for several)")
    group.add_argument("--file", help="a file of texts, one per line")
    group.add_argument("--top_k", type=int, default=5, help="tokens printed per mask")
    group.add_argument("--batch_size", type=int, default=32, help="texts per model call")


def encoder_of(run, kind: str = "classify", num_labels: int = 2, **options) -> FeatureEncoder:
    """The fine-tuning pipeline's encoder of the run's texts (its vocabulary, its length;
    `options`: FeatureEncoder's num_choices, max_query_length)."""
    if run.tokenizer is None:
        raise ConfigError(f"{run.workdir} holds no vocabulary/ (a run keeps the one it trained "
                          "with there): restore it from a copy of the workdir")
    try:
        return FeatureEncoder(kind, run.tokenizer, int(run.config["data"]["max_seq_length"]),
                              num_labels=num_labels, **options)
    except DataError as error:
        raise ConfigError(f"the run's config.data: {error}") from error


def rows_of(run, texts: list[str], note=None) -> list[dict[str, np.ndarray]]:
    """Each text's input arrays and its [MASK] positions (padded with 0 to the most masks of
    any text: one shape for every batch; `mask_weights` 1 on the real ones); a text cut to the
    run's length is told to `note` (default: standard error)."""
    note = note or (lambda message: print(message, file=sys.stderr))
    encoder = encoder_of(run)
    mask_id = run.tokenizer.mask_id
    rows, positions = [], []
    for number, text in enumerate(texts, 1):
        row, truncated, _ = encoder({"text": text, "label": 0})
        where = np.flatnonzero(row["input_ids"] == mask_id)
        if truncated and len(where) < text.count(MASK):
            raise ConfigError(f"text {number}: a {MASK} lies beyond the run's "
                              f"config.data.max_seq_length={encoder.length} pieces; shorten it")
        if not len(where):
            raise ConfigError(f"text {number} has no {MASK} to fill (write {MASK} where a "
                              "token is to be predicted)")
        if truncated:
            note(f"text {number} was cut to config.data.max_seq_length={encoder.length} pieces")
        rows.append({k: row[k] for k in ("input_ids", "segment_ids", "input_mask")})
        positions.append(where)
    most = max(map(len, positions))
    for row, where in zip(rows, positions):
        row["masked_positions"] = np.zeros((most,), np.int32)
        row["masked_positions"][:len(where)] = where
        row["mask_weights"] = (np.arange(most) < len(where)).astype(np.float32)
    return rows


def predict(run, args, *, stdin=None, out=print,
            note=None) -> list[list[list[tuple[str, float]]]]:
    """Per text, per [MASK] in order, the top-k (token, probability); printed to `out`, a text
    cut to the run's length noted to `note` (default: standard error)."""
    texts = read_lines(args.text, args.file, what="text", flag="--text", file_flag="--file",
                       stdin=stdin)
    if args.top_k < 1:
        raise ConfigError(f"--top_k={args.top_k} must be >= 1")
    rows = rows_of(run, texts, note)
    model = BertForPreTraining(run_config.saved_model(BertConfig, run.config, run.workdir))

    def step(params, batch):
        outputs = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                              batch["input_mask"], masked_positions=batch["masked_positions"],
                              train=False, with_nsp=False)
        return {"probabilities": jax.nn.softmax(outputs["mlm_logits"], -1)}

    results = []
    batches = DeviceBatches(run.params, batch_size=args.batch_size)
    for text, row, result in zip(texts, rows, batches.run(jax.jit(step), rows)):
        count = int(row["mask_weights"].sum())
        ranked = []
        for p in result["probabilities"][:count]:
            top = np.argsort(-p, kind="stable")[:args.top_k]
            ranked.append([(run.tokenizer.id_to_token(int(i)), float(p[i])) for i in top])
        results.append(ranked)
        filled = text
        for choices in ranked:
            filled = filled.replace(MASK, choices[0][0], 1)
        out(filled)
        for number, choices in enumerate(ranked, 1):
            out(f"  {MASK} {number}: " + ", ".join(f"{t} {p:.4f}" for t, p in choices))
    return results
