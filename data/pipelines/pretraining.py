"""Grain pipeline of BERT / RoBERTa pretraining batches: pairs or packed sentences, masked.

    tok = wordpiece.vocab_for_documents(...)                 # data/vocab/wordpiece.py
    masking = masking_config(tok, select_prob=0.15, max_predictions=20)
    it = pretraining_batches(train_docs, tok, batch_size=32, max_seq_length=128,
                             input_format="segment_pair", masking=masking, seed=0, train=True,
                             process_index=jax.process_index(),
                             process_count=jax.process_count())

Which tokens form each example (`input_format`) is decided in
data/pipelines/pretraining_instances.py:
  segment_pair    BERT: [CLS] A [SEP] B [SEP], B the actual next sentences (label 0) or a
                  random span of another document (label 1), 50/50; short_seq_prob of the
                  examples aim at a random shorter length; A and B truncated to fit
  full_sentences  RoBERTa: [CLS] s1 s2 ... [SEP], whole sentences packed in order, crossing
                  document boundaries with an extra [SEP] between documents; no NSP
  doc_sentences   RoBERTa: the same, never crossing a document boundary
Segment ids are 0 for [CLS] A [SEP] and 1 for B [SEP] (all 0 without B). Masking is
data.masking's `MaskTokens` with the tokenizer's `word_starts` (whole-word masking); the
special ids never get chosen (the masking config must list the tokenizer's five; padding is
[PAD], so it is never chosen either).

Every batch is a dict of numpy arrays for ONE process, b = batch_size, L = max_seq_length,
P = masking.max_predictions:
  input_ids            int32   [b, L]  the masked sequence, [PAD] after the end
  input_mask           int32   [b, L]  1 for a real token, 0 for padding
  segment_ids          int32   [b, L]  0 = [CLS] A [SEP], 1 = B [SEP]; 0 on padding
  masked_positions     int32   [b, P]  positions to predict, increasing, then 0
  masked_ids           int32   [b, P]  the original tokens there (labels), then 0
  masked_weights       float32 [b, P]  1.0 for a real prediction, 0.0 for padding
  next_sentence_label  int32   [b]     0 = B follows A, 1 = B is random; segment_pair ONLY
  mask                 float32 [b]     1 for a real example, 0 for an eval padding row
`next_sentence_label` is absent, rather than present with weight 0, for the formats without
NSP: a loss cannot then silently train on a constant label, and a run's keys never change.

Static or dynamic (`dynamic`):
  static   (BERT) `dupe_factor` copies of the data are made, each with its own pairing (its own
           plan seed) and its own masks; copy k's instance i always has the same pairs and mask
           (the mask generator is seeded with the instance's index, not its position in the
           stream), so every epoch over the dupe_factor x instances repeats them, reshuffled.
  dynamic  (RoBERTa) a new plan every epoch (segment_pair: a fresh pairing, seeded by the
           epoch; packed formats: the same packing) and a new mask every time an example is
           fed (the mask generator is seeded by the position in the stream). The epoch
           length is the number of instances of epoch 0's plan; a later epoch's plan (a few
           instances more or fewer) is shuffled and then cut to, or cycled up to, that length.

Order (data/pipelines/sharding.py). All processes build the same global stream of batches of
`batch_size` (per process) and process i takes batches i, i + P, i + 2P, ...; so the global
batch of a step is the same whatever the number of processes.
  train=True   shuffled with `seed`, reshuffled every epoch, endless; batches may span epochs.
  train=False  one pass over a fixed plan (plan seed and masks from `seed`, one copy whatever
               `dynamic`/`dupe_factor` say) in plan order, padded with mask=0 rows to whole
               global batches: every process yields `num_batches(num_examples(...), ...)`.

Checkpointing: the returned `grain.DatasetIterator` has `get_state()` (JSON-serialisable) and
`set_state(state)`; a state resumes exactly into a pipeline built with the same documents,
tokenizer and arguments.
"""

from __future__ import annotations

import collections
import re
import threading
from typing import Any, Iterable

import grain
import numpy as np

from data.errors import DataError
from data.pipelines.masking import MaskingConfig, MaskTokens
from data.pipelines.pretraining_instances import (A_END, A_START, B_END, B_START, INPUT_FORMATS,
                                                  LABEL, TokenizedCorpus, make_plan,
                                                  tokenize_documents)
from data.pipelines.sharding import check_sharding, padded_size, seeds

BATCH_KEYS = ("input_ids", "input_mask", "segment_ids", "masked_positions", "masked_ids",
              "masked_weights", "next_sentence_label", "mask")
_DEFAULT_READ = grain.ReadOptions(num_threads=4, prefetch_buffer_size=8)


UNUSED = re.compile(r"\[unused\d+\]")  # Google's vocabularies' placeholders, [unused0] ...


def masking_config(tokenizer, **rates) -> MaskingConfig:
    """A MaskingConfig for `tokenizer` (its vocab size, [MASK] id and special ids) with the
    given fields (select_prob, mask_prob, random_prob, keep_prob, max_predictions, whole_word).
    A random replacement is never a special token nor one of the ~1,000 [unusedN] placeholders
    of Google's vocab.txt (BERT's script drew from the whole vocabulary, placeholders and all:
    tokens that never occur in text, here 3% of the random replacements)."""
    unused = [i for i, token in enumerate(tokenizer.tokens) if UNUSED.fullmatch(token)]
    return MaskingConfig(vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                         special_ids=tokenizer.special_ids,
                         random_exclude_ids=(*tokenizer.special_ids, *unused), **rates)


# ------------------------------------------------------------------------------ examples


class Examples:
    """Plan row -> unmasked example: input_ids (no mask yet), word_starts, input_mask,
    segment_ids, next_sentence_label (segment_pair), mask."""

    def __init__(self, corpus: TokenizedCorpus, tokenizer, max_seq_length: int, nsp: bool):
        self.tokens, self.starts = corpus.tokens, corpus.word_starts
        self.doc_starts = corpus.doc_starts
        self.length, self.nsp = max_seq_length, nsp
        self.pad, self.cls, self.sep = tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id

    def _empty(self) -> dict[str, Any]:
        out = {"input_ids": np.full((self.length,), self.pad, np.int32),
               "word_starts": np.ones((self.length,), bool),
               "input_mask": np.zeros((self.length,), np.int32),
               "segment_ids": np.zeros((self.length,), np.int32),
               "mask": np.float32(0.0)}
        if self.nsp:
            out["next_sentence_label"] = np.int32(0)
        return out

    def padding(self) -> dict[str, Any]:
        return self._empty()

    def __call__(self, row: np.ndarray) -> dict[str, Any]:
        out = self._empty()
        a0, a1 = int(row[A_START]), int(row[A_END])
        if self.nsp:
            b0, b1 = int(row[B_START]), int(row[B_END])
            ids = [[self.cls], self.tokens[a0:a1], [self.sep], self.tokens[b0:b1], [self.sep]]
            starts = [[True], self.starts[a0:a1], [True], self.starts[b0:b1], [True]]
            out["segment_ids"][a1 - a0 + 2:a1 - a0 + b1 - b0 + 3] = 1
            out["next_sentence_label"] = np.int32(row[LABEL])
        else:  # a [SEP] wherever a document starts inside the span
            first, last = np.searchsorted(self.doc_starts, [a0, a1], side="right")
            cuts = self.doc_starts[first:last] - a0
            cuts = cuts[cuts < a1 - a0]
            ids = [[self.cls], np.insert(self.tokens[a0:a1], cuts, self.sep), [self.sep]]
            starts = [[True], np.insert(self.starts[a0:a1], cuts, True), [True]]
        ids = np.concatenate(ids).astype(np.int32)
        n = len(ids)
        if n > self.length:
            raise AssertionError(f"an example of {n} > {self.length} tokens: plan row {row}")
        out["input_ids"][:n] = ids
        out["word_starts"][:n] = np.concatenate(starts).astype(bool)
        out["input_mask"][:n] = 1
        out["mask"] = np.float32(1.0)
        return out


class _Plans:
    """Plans by id (an epoch of dynamic segment pairs), generated on demand; the last few are
    kept. Thread-safe; pickles without its cache."""

    def __init__(self, corpus, *, input_format, max_seq_length, short_seq_prob, seed,
                 keep: int = 3):
        self.corpus, self.seed, self.keep = corpus, seed, keep
        self.kwargs = dict(input_format=input_format, max_seq_length=max_seq_length,
                           short_seq_prob=short_seq_prob)
        self._setup()

    def _setup(self):
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[int, np.ndarray] = collections.OrderedDict()

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_cache")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._setup()

    def __call__(self, plan_id: int) -> np.ndarray:
        with self._lock:
            if plan_id not in self._cache:
                self._cache[plan_id] = make_plan(self.corpus, seed=self.seed, plan_id=plan_id,
                                                 **self.kwargs)
                while len(self._cache) > self.keep:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(plan_id)
            return self._cache[plan_id]


class _Row:
    """Instance index -> example of a fixed plan (static data, eval); beyond it: padding."""

    def __init__(self, examples: Examples, plan: np.ndarray):
        self.examples, self.plan = examples, plan

    def __call__(self, i: int) -> dict[str, Any]:
        return self.examples(self.plan[i]) if i < len(self.plan) else self.examples.padding()


class _Lookup:
    """Instance index -> element `i` of a (masked) MapDataset of instances."""

    def __init__(self, instances: grain.MapDataset):
        self.instances = instances

    def __call__(self, i: int) -> dict[str, Any]:
        return self.instances[int(i)]


class _EpochRow:
    """(stream position, shuffled index in the epoch) -> example of that epoch's plan."""

    def __init__(self, examples: Examples, plans: _Plans, epoch_length: int, per_epoch: bool):
        self.examples, self.plans = examples, plans
        self.epoch_length, self.per_epoch = epoch_length, per_epoch

    def __call__(self, position: int, i: int) -> dict[str, Any]:
        plan = self.plans(position // self.epoch_length if self.per_epoch else 0)
        return self.examples(plan[int(i) % len(plan)])


def batch_fields(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: batch[k] for k in BATCH_KEYS if k in batch}


# ------------------------------------------------------------------------------ pipeline


def _corpus(documents_source, tokenizer) -> TokenizedCorpus:
    if isinstance(documents_source, TokenizedCorpus):
        return documents_source
    return tokenize_documents(documents_source, tokenizer)


def _check(tokenizer, *, input_format, max_seq_length, short_seq_prob,
           masking: MaskingConfig | None = None, batch_size: int = 1,
           process_index: int = 0, process_count: int = 1, dynamic: bool = True,
           dupe_factor: int = 1) -> None:
    if input_format not in INPUT_FORMATS:
        raise DataError(f"input_format={input_format!r} is not one of {list(INPUT_FORMATS)}")
    least = 5 if input_format == "segment_pair" else 3
    if not isinstance(max_seq_length, (int, np.integer)) or max_seq_length < least:
        raise DataError(f"max_seq_length={max_seq_length!r} must be an integer >= {least} for "
                        f"{input_format} (its special tokens and one token per segment)")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise DataError(f"short_seq_prob={short_seq_prob} must be in [0, 1]")
    check_sharding(batch_size, process_index, process_count)
    if not isinstance(dupe_factor, (int, np.integer)) or dupe_factor < 1:
        raise DataError(f"dupe_factor must be a positive integer, got {dupe_factor!r}")
    if dynamic and dupe_factor != 1:
        raise DataError(f"dupe_factor={dupe_factor} applies to static data (dynamic=False); "
                        "dynamic data makes a new pairing and mask every epoch: use "
                        "dupe_factor=1")
    if masking is None:
        return
    problems = []
    if masking.vocab_size != tokenizer.vocab_size:
        problems.append(f"vocab_size {masking.vocab_size} != the tokenizer's "
                        f"{tokenizer.vocab_size}")
    if masking.mask_id != tokenizer.mask_id:
        problems.append(f"mask_id {masking.mask_id} != the tokenizer's [MASK] id "
                        f"{tokenizer.mask_id}")
    missing = sorted(set(tokenizer.special_ids) - set(masking.special_ids))
    if missing:
        problems.append(f"special_ids lack the tokenizer's special ids {missing}")
    if problems:
        raise DataError("the masking config does not fit the tokenizer: " + "; ".join(problems)
                        + " (build it with data.pipelines.pretraining.masking_config(tokenizer, "
                        "...))")


def pretraining_batches(documents_source: Iterable | TokenizedCorpus, tokenizer, *,
                        batch_size: int, max_seq_length: int, masking: MaskingConfig,
                        seed: int, train: bool, input_format: str = "segment_pair",
                        short_seq_prob: float = 0.1, dynamic: bool = True,
                        dupe_factor: int = 1, process_index: int = 0, process_count: int = 1,
                        read_options: grain.ReadOptions | None = None
                        ) -> grain.DatasetIterator:
    """Iterator over this process's pretraining batches (see the module docstring).

    `documents_source`: Documents (data.corpora.documents.Document: doc_id, paragraphs of
    sentence strings) or a TokenizedCorpus; `tokenizer`: a
    data.vocab.wordpiece.WordPieceTokenizer.
    """
    _check(tokenizer, input_format=input_format, max_seq_length=max_seq_length,
           short_seq_prob=short_seq_prob, masking=masking, batch_size=batch_size,
           process_index=process_index, process_count=process_count,
           dynamic=dynamic if train else True, dupe_factor=dupe_factor if train else 1)
    corpus = _corpus(documents_source, tokenizer)
    plan_seed, shuffle_seed, mask_seed = seeds(seed, 3)  # the plans, the shuffle, the masks
    nsp = input_format == "segment_pair"
    examples = Examples(corpus, tokenizer, max_seq_length, nsp)
    plans = _Plans(corpus, input_format=input_format, max_seq_length=max_seq_length,
                   short_seq_prob=short_seq_prob, seed=plan_seed)
    mask = MaskTokens(masking)
    if len(plans(0)) == 0:
        raise DataError("the documents give no pretraining example")

    if not train:
        plan = plans(0)
        padded = padded_size(len(plan), batch_size=batch_size, process_count=process_count)
        ds = grain.MapDataset.range(padded).map(_Row(examples, plan))
        ds = ds.random_map(mask, seed=mask_seed)               # seeded by the instance index
        ds = ds.batch(batch_size)
    elif dynamic:
        epoch_length = len(plans(0))
        ds = grain.MapDataset.range(epoch_length).shuffle(seed=shuffle_seed).repeat()
        ds = ds.map_with_index(_EpochRow(examples, plans, epoch_length, per_epoch=nsp))
        ds = ds.random_map(mask, seed=mask_seed)               # seeded by the stream position
        ds = ds.batch(batch_size, drop_remainder=True)
    else:
        copies = [plans(k) for k in range(dupe_factor)] if nsp else [plans(0)] * dupe_factor
        plan = np.concatenate(copies)
        instances = grain.MapDataset.range(len(plan)).map(_Row(examples, plan))
        instances = instances.random_map(mask, seed=mask_seed)  # seeded by the instance index
        ds = grain.MapDataset.range(len(plan)).shuffle(seed=shuffle_seed).repeat()
        ds = ds.map(_Lookup(instances))
        ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds[process_index::process_count].map(batch_fields)
    return iter(ds.to_iter_dataset(read_options or _DEFAULT_READ))


def num_examples(documents_source: Iterable | TokenizedCorpus, tokenizer, *,
                 max_seq_length: int, seed: int, input_format: str = "segment_pair",
                 short_seq_prob: float = 0.1, dupe_factor: int = 1) -> int:
    """Examples in one pass: the eval set (dupe_factor=1) of `pretraining_batches` with these
    arguments, or one epoch of its static training data (dynamic data: dupe_factor=1)."""
    _check(tokenizer, input_format=input_format, max_seq_length=max_seq_length,
           short_seq_prob=short_seq_prob, dynamic=False, dupe_factor=dupe_factor)
    corpus = _corpus(documents_source, tokenizer)
    plans = _Plans(corpus, input_format=input_format, max_seq_length=max_seq_length,
                   short_seq_prob=short_seq_prob, seed=seeds(seed, 1)[0])
    if input_format != "segment_pair":
        return dupe_factor * len(plans(0))
    return sum(len(plans(k)) for k in range(dupe_factor))
