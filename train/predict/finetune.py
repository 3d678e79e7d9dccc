"""Classify or tag texts, answer questions and choose endings with a BERT fine-tuning run:
`python -m train.predict WORKDIR --text "..."`.

    python -m train.predict workdirs/finetune_spam --text "WIN A FREE CRUISE, click here"
    python -m train.predict workdirs/finetune_brown_pos --file sentences.txt
    printf 'A man sleeps.\tSomeone rests.\n' | python -m train.predict workdirs/finetune_pairs
    printf 'Who wrote Emma?\tJane Austen wrote Emma.\n' | python -m train.predict workdirs/squad

Texts: every --text or (not both) one per line of --file, else of standard input. What a text is
depends on the run's dataset kind (data/pipelines/finetune_datasets.py):
  classify        one text                 -> its label and the label's probability
  pair_classify   two texts, TAB between   -> the label of the pair and its probability
  tag             words, space-separated   -> a tag per word (word/TAG), read at each word's
                                              first piece as the task's loss and metrics read it
  span            question TAB context     -> the answer: the best span of the context, at most
                                              task.max_answer_length pieces (models/spans.py,
                                              as the eval scores it), and its probability
  multiple_choice context TAB choice TAB.. -> the chosen ending (of the dataset's count) and
                                              its softmax probability over the choices
Each becomes the model's input by the task's own pipeline encoder (data/pipelines/finetune.py
`FeatureEncoder`: WordPiece with the run's vocabulary, [CLS] a [SEP] (b [SEP]), truncation to
config.data.max_seq_length, the tag alignment), run through the head the task built
(train/tasks/finetune.py `head_model`). Words a tag input loses to truncation get no tag, and a
message says so. Label names come from the dataset's definition. Texts go --batch_size at a
time over all local devices (train/predict/batching.py). A task-distillation run
(train/tasks/distill_finetune.py) predicts with its student, the head on the smaller encoder.
A span input is one window, as the eval reads it: a context cut to fit (said so) has its
answer looked for in what is left.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from data.errors import DataError
from data.pipelines import finetune_datasets
from data.pipelines.finetune import IGNORE
from data.pipelines.finetune_datasets import get_dataset
from models.bert import BertConfig
from models.spans import best_span
from train import run_config
from train.config import ConfigError
from train.predict.batching import DeviceBatches
from train.predict.bert_pretrain import encoder_of
from train.predict.texts import read_lines
from train.tasks.finetune import head_model

KINDS = finetune_datasets.KINDS  # every kind of fine-tuning data has a predictor
ROW_KEYS = ("input_ids", "segment_ids", "input_mask")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("BERT fine-tuning (" + ", ".join(KINDS) + ")")
    group.add_argument("--text", action="append", default=[],
                       help="a text; a pair is two texts with a TAB between; words to tag are "
                            "separated by spaces; a question and its context, or a context "
                            "and its choices, TAB-separated (repeat for several)")
    group.add_argument("--file", help="a file of texts, one per line")
    group.add_argument("--batch_size", type=int, default=32, help="texts per model call")


def dataset_of(run):
    """The run's dataset definition (kind, labels); ConfigError for an unknown one."""
    try:
        return get_dataset(run.config["data"]["name"])
    except DataError as error:
        raise ConfigError(f"the run's config.data.name: {error}") from error


def _fields(text: str, number: int, count: int, what: str) -> list[str]:
    """`text` split at TABs into `count` non-empty fields, else a ConfigError naming `what`."""
    parts = text.split("\t")
    if len(parts) != count or not all(p.strip() for p in parts):
        raise ConfigError(f"text {number} is not {what}: give its {count} parts with one TAB "
                          f"between each two (found {len(parts)})")
    return parts


def example_of(kind: str, text: str, number: int, num_choices: int = 0) -> dict:
    """The raw example of the kind (placeholder labels 0 and no answers: only the inputs are
    read)."""
    if kind == "classify":
        return {"text": text, "label": 0}
    if kind == "pair_classify":
        a, b = _fields(text, number, 2, "a pair")
        return {"text_a": a, "text_b": b, "label": 0}
    if kind == "span":
        question, context = _fields(text, number, 2, "a question and its context")
        return {"question": question, "context": context, "answers": []}
    if kind == "multiple_choice":
        context, *choices = _fields(text, number, 1 + num_choices,
                                    f"a context and the run's {num_choices} choices")
        return {"context": context, "choices": choices, "label": 0}
    words = text.split()
    return {"words": words, "tags": [0] * len(words)}


def predict(run, args, *, stdin=None, out=print, note=None) -> list:
    """Per text: (label, probability) for classify and pair_classify; [(word, tag)] for tag
    (the words truncation cut left out); (answer, probability) for span; (index, choice,
    probability) for multiple_choice. Printed to `out`, truncation noted to `note`."""
    note = note or (lambda message: print(message, file=sys.stderr))
    texts = read_lines(args.text, args.file, what="text", flag="--text", file_flag="--file",
                       stdin=stdin)
    dataset = dataset_of(run)
    kind, labels = dataset.kind, dataset.labels
    task = run.config["task"]
    options = ({"num_choices": dataset.num_choices} if kind == "multiple_choice" else
               {"max_query_length": int(run.config["data"]["max_query_length"])}
               if kind == "span" else {})
    encoder = encoder_of(run, kind, dataset.num_labels, **options)
    rows, words_of, examples = [], [], []
    for number, text in enumerate(texts, 1):
        example = example_of(kind, text, number, dataset.num_choices)
        examples.append(example)
        row, truncated, _ = encoder(example)
        keep = {k: row[k] for k in ROW_KEYS}
        if kind == "span":
            keep["context_mask"] = row["context_mask"]
            if not keep["context_mask"].any():
                raise ConfigError(f"text {number}: no piece of its context is left to answer "
                                  f"from (config.data.max_seq_length={encoder.length})")
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
    # A distilled student's head is always fine-tuning's default one (no feature options).
    head_options = {key: task[key] for key in ("features", "head_hidden", "feature_head")
                    if key in task}
    model = head_model(kind, run_config.saved_model(BertConfig, run.config, run.workdir),
                       dataset.num_labels, **head_options)

    def step(params, batch):
        outputs = model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                              batch["input_mask"], train=False)
        if kind == "span":
            return span_answer(*outputs, batch["context_mask"], int(task["max_answer_length"]))
        return {"probabilities": jax.nn.softmax(outputs, -1)}

    results = []
    batches = DeviceBatches(run.params, batch_size=args.batch_size)
    for i, (row, result) in enumerate(zip(rows, batches.run(jax.jit(step), rows))):
        if kind == "span":
            answer = answer_text(run.tokenizer, examples[i], result, first=int(
                np.argmax(row["context_mask"])))
            results.append((answer, float(result["probability"])))
            out(f"{answer}\t{float(result['probability']):.4f}")
            continue
        p = result["probabilities"]
        if kind == "multiple_choice":
            best = int(np.argmax(p))
            results.append((best, examples[i]["choices"][best], float(p[best])))
            out(f"{best + 1} {float(p[best]):.4f}\t{examples[i]['choices'][best]}")
        elif kind == "tag":
            tags = np.argmax(p, -1)[row["first_pieces"] == 1]
            pairs = [(word, labels[int(t)]) for word, t in zip(words_of[i], tags)]
            results.append(pairs)
            out(" ".join(f"{word}/{tag}" for word, tag in pairs))
        else:
            best = int(np.argmax(p))
            results.append((labels[best], float(p[best])))
            out(f"{labels[best]} {float(p[best]):.4f}\t{texts[i]}")
    return results


def span_answer(start_logits, end_logits, context_mask, max_answer_length: int) -> dict:
    """The best span of each row (`models.spans.best_span`, as the eval picks it) and its
    probability: the start softmax at its start times the end softmax at its end, each over
    the context's tokens."""
    start, end, _ = best_span(start_logits, end_logits, max_answer_length, context_mask)
    masked = lambda logits: jnp.where(context_mask > 0, logits, -jnp.inf)  # noqa: E731
    p_start = jnp.take_along_axis(jax.nn.softmax(masked(start_logits), -1), start[..., None], -1)
    p_end = jnp.take_along_axis(jax.nn.softmax(masked(end_logits), -1), end[..., None], -1)
    return {"start": start, "end": end, "probability": (p_start * p_end)[..., 0]}


def answer_text(tokenizer, example: dict, span: dict, first: int) -> str:
    """The characters of the context that the span's pieces cover (`first`: the row position
    of the context's first piece)."""
    _, offsets = tokenizer.encode_with_offsets(example["context"])
    start, end = int(span["start"]) - first, int(span["end"]) - first
    return example["context"][offsets[start][0]:offsets[end][1]]
