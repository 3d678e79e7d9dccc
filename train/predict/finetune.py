"""Classify or tag texts with a BERT fine-tuning run: `python -m train.predict WORKDIR --text
"..."`.

    python -m train.predict workdirs/finetune_spam --text "WIN A FREE CRUISE, click here"
    python -m train.predict workdirs/finetune_brown_pos --file sentences.txt
    printf 'A man sleeps.\tSomeone rests.\n' | python -m train.predict workdirs/finetune_pairs

Texts: every --text, else one per line of --file, else of standard input. What a text is
depends on the run's dataset kind (data/pipelines/finetune_datasets.py):
  classify        one text                 -> its label and the label's probability
  pair_classify   two texts, TAB between   -> the label of the pair and its probability
  tag             words, space-separated   -> a tag per word (word/TAG), read at each word's
                                              first piece as the task's loss and metrics read it
Each becomes the model's input by the task's own pipeline encoder (data/pipelines/finetune.py
`FeatureEncoder`: WordPiece with the run's vocabulary, [CLS] a [SEP] (b [SEP]), truncation to
config.data.max_seq_length, the tag alignment), run through the head the task built
(train/tasks/finetune.py `head_model`). Words a tag input loses to truncation get no tag, and a
message says so. Label names come from the dataset's definition. Texts go --batch_size at a
time over all local devices (train/predict/batching.py). A task-distillation run
(train/tasks/distill_finetune.py) predicts with its student, the head on the smaller encoder.
Span and multiple-choice runs have no predictor yet.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from data.errors import DataError
from data.pipelines.finetune import IGNORE
from data.pipelines.finetune_datasets import get_dataset
from models.bert import BertConfig
from train import run_config
from train.config import ConfigError
from train.predict.batching import DeviceBatches
from train.predict.bert_pretrain import encoder_of
from train.predict.texts import read_lines
from train.tasks.finetune import head_model

KINDS = ("classify", "pair_classify", "tag")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("BERT fine-tuning (classify, pair_classify, tag)")
    group.add_argument("--text", action="append", default=[],
                       help="a text; a pair is two texts with a TAB between; words to tag are "
                            "separated by spaces (repeat for several)")
    group.add_argument("--file", help="a file of texts, one per line")
    group.add_argument("--batch_size", type=int, default=32, help="texts per model call")


def dataset_of(run):
    """The run's dataset definition (kind, labels); ConfigError for an unknown one or a kind
    without a predictor."""
    name = run.config["data"]["name"]
    try:
        dataset = get_dataset(name)
    except DataError as error:
        raise ConfigError(f"the run's config.data.name: {error}") from error
    if dataset.kind not in KINDS:
        raise ConfigError(f"{run.workdir} is a {dataset.kind} run ({name}); python -m "
                          f"train.predict classifies or tags texts ({', '.join(KINDS)}), "
                          f"{dataset.kind} has no predictor yet: score it with python -m "
                          "train.evaluate")
    return dataset


def example_of(kind: str, text: str, number: int) -> dict:
    """The raw example of the kind (placeholder labels 0: only their positions are read)."""
    if kind == "classify":
        return {"text": text, "label": 0}
    if kind == "pair_classify":
        parts = text.split("\t")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise ConfigError(f"text {number} is not a pair: give the two texts of a pair with "
                              "one TAB between them")
        return {"text_a": parts[0], "text_b": parts[1], "label": 0}
    words = text.split()
    return {"words": words, "tags": [0] * len(words)}


def predict(run, args, *, stdin=None, out=print, note=None) -> list:
    """Per text: (label, probability) for classify and pair_classify; [(word, tag)] for tag
    (the words truncation cut left out); printed to `out`, truncation noted to `note`."""
    note = note or (lambda message: print(message, file=sys.stderr))
    texts = read_lines(args.text, args.file, what="text", flag="--text", file_flag="--file",
                       stdin=stdin)
    dataset = dataset_of(run)
    kind, labels = dataset.kind, dataset.labels
    encoder = encoder_of(run, kind, dataset.num_labels)
    rows, words_of = [], []
    for number, text in enumerate(texts, 1):
        example = example_of(kind, text, number)
        row, truncated, _ = encoder(example)
        keep = {k: row[k] for k in ("input_ids", "segment_ids", "input_mask")}
        if kind == "tag":
            keep["first_pieces"] = (row["labels"] != IGNORE).astype(np.int32)
            tagged = int(keep["first_pieces"].sum())
            if tagged < len(example["words"]):
                note(f"text {number}: its last {len(example['words']) - tagged} words lie "
                     f"beyond config.data.max_seq_length={encoder.length} pieces and get no tag")
            words_of.append(example["words"][:tagged])
        elif truncated:
            note(f"text {number} was cut to config.data.max_seq_length={encoder.length} pieces")
        rows.append(keep)
    task = run.config["task"]
    # A distilled student's head is always fine-tuning's default one (no feature options).
    options = {key: task[key] for key in ("features", "head_hidden", "feature_head")
               if key in task}
    model = head_model(kind, run_config.saved_model(BertConfig, run.config, run.workdir),
                       dataset.num_labels, **options)

    def step(params, batch):
        logits = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                             batch["input_mask"], train=False)
        return {"probabilities": jax.nn.softmax(logits, -1)}

    results = []
    batches = DeviceBatches(run.params, batch_size=args.batch_size)
    for i, (row, result) in enumerate(zip(rows, batches.run(jax.jit(step), rows))):
        p = result["probabilities"]
        if kind == "tag":
            tags = np.argmax(p, -1)[row["first_pieces"] == 1]
            pairs = [(word, labels[int(t)]) for word, t in zip(words_of[i], tags)]
            results.append(pairs)
            out(" ".join(f"{word}/{tag}" for word, tag in pairs))
        else:
            best = int(np.argmax(p))
            results.append((labels[best], float(p[best])))
            out(f"{labels[best]} {float(p[best]):.4f}\t{texts[i]}")
    return results
