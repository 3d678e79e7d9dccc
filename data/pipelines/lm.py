"""Grain pipeline for a causal language model: whole documents, packed into rows, no attention
across documents.

    tok = bpe.load_or_train_for_dataset("english_lm", "train", vocab_size=8192)
    it = lm_train_batches(train, tok, batch_size=32, max_length=128, seed=0)
    batch = next(it)      # this process's rows; it.stats['examples']: documents begun so far
    rows = eval_rows(document_stream(validation, tok), 128)   # the eval split, cut into rows

A document is `[EOS] + encode(text) + [EOS]` (EOS = '<|endoftext|>', data/vocab/bpe.py): the
first EOS is the context its first token is predicted from (a prompt starts the same way), the
last one is predicted (the model learns where a document ends). Documents are never truncated
or dropped: they are laid end to end in one token stream, which is cut into rows.

Rows. Row k holds stream tokens [k L, k L + L + 1): its `tokens` (inputs) are the first L,
its `targets` the last L, so consecutive rows overlap by one token and every adjacent pair of the
stream is scored in exactly one row, whatever L is (so perplexities at different lengths are
over the very same target tokens). A row may end one document and begin the next:
  'tokens', 'targets'  int32 [b, L]     inputs, and the next token of each
  'segment_ids'        int32 [b, L]     1, 2, ... per document within the row, 0 padding
  'positions'          int32 [b, L]     0, 1, ... from each document's start within the row; a
                                        row that begins inside a document starts at 0 (the model
                                        sees nothing before it)
  'weights'            float32 [b, L]   1 where the target is the next token of the same
                                        document, 0 across a boundary (a document's first EOS is
                                        never a target) and on padding
`models.decoder_lm.DecoderLM` takes the first three; with the segment ids no token attends
across documents.

Training (`lm_train_batches`): the training documents are shuffled with `seed`, reshuffled each
epoch and repeated forever; process i of P reads documents i, i + P, ... of that one stream
(data/pipelines/sharding.py) and cuts its own rows, so a global batch depends on P. The
iterator's `get_state()` holds the state of the document stream before the oldest document
still in its buffer and the offset into it: restoring re-reads that document, so nothing is lost
or repeated (a JSON-serialisable dict, saved with the checkpoint). Its counts (`it.stats`,
data/pipelines/counts.py): 'examples' the documents begun; none is truncated or dropped.

Evaluation (`document_stream`, `eval_rows`, `lm_eval_batches`): the split's documents in order
(optionally only the first `max_tokens` tokens of the stream), cut into rows of each length
asked for; the last row is padded (weights 0), then each length is padded with empty rows to
whole global batches and process i takes batches i, i + P, ... So every process runs the same
number of steps, and the padding counts for nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

import grain
import numpy as np

from data.builders.examples import as_text, read_examples
from data.errors import DataError
from data.pipelines.counts import STAT_KEYS, CountingIterator
from data.pipelines.sharding import check_sharding, describe, padded_size, seeds

ROW_KEYS = ("tokens", "targets", "segment_ids", "positions", "weights")
_DEFAULT_READ = grain.ReadOptions(num_threads=2, prefetch_buffer_size=16)


def document_tokens(tokenizer, text: str) -> np.ndarray:
    """int32 `[EOS] + encode(text) + [EOS]` (module docstring)."""
    return np.asarray([tokenizer.eos_id, *tokenizer.encode(text), tokenizer.eos_id], np.int32)


def make_row(tokens: np.ndarray, document: np.ndarray, length: int,
             pad_id: int = 0) -> dict[str, np.ndarray]:
    """One row (module docstring) of up to `length + 1` consecutive stream tokens and the
    index of the document each belongs to (any integers, equal within a document); shorter
    pieces are padded."""
    n = len(tokens)
    if not 1 <= n <= length + 1 or len(document) != n:
        raise ValueError(f"a row takes 1 to {length + 1} tokens with their documents, got "
                         f"{n} tokens and {len(document)} document indices")
    full_tokens = np.full(length + 1, pad_id, np.int32)
    full_tokens[:n] = tokens
    inputs_doc = np.asarray(document[: min(n, length)])
    m = len(inputs_doc)  # real inputs
    new_doc = np.ones(m, bool)
    new_doc[1:] = inputs_doc[1:] != inputs_doc[:-1]
    segment_ids = np.zeros(length, np.int32)
    segment_ids[:m] = np.cumsum(new_doc)
    index = np.arange(m)
    starts = np.maximum.accumulate(np.where(new_doc, index, 0))
    positions = np.zeros(length, np.int32)
    positions[:m] = index - starts
    weights = np.zeros(length, np.float32)
    scored = n - 1  # pairs (input i, target i) within this piece
    if scored > 0:
        weights[:scored] = np.asarray(document[1:n]) == np.asarray(document[: n - 1])
    return {"tokens": full_tokens[:length], "targets": full_tokens[1:], "segment_ids": segment_ids,
            "positions": positions, "weights": weights}


def _documents_begun(document_starts: np.ndarray, length: int) -> int:
    """Documents whose first token is among the row's inputs (each stream token is an input of
    exactly one row, so these add up to the documents read)."""
    return int(np.sum(document_starts[:length]))


# --------------------------------------------------------------------------------- training


class _Tokenize:
    def __init__(self, tokenizer, key: str):
        self.tokenizer, self.key = tokenizer, key

    def __call__(self, example: dict) -> np.ndarray:
        return document_tokens(self.tokenizer, as_text(example[self.key]))


class _RowsIterator(grain.DatasetIterator):
    """Documents (token arrays) -> rows of `length` (module docstring), with an exact state."""

    def __init__(self, parent: grain.DatasetIterator, length: int, pad_id: int):
        super().__init__(parent)
        self.length, self.pad_id = length, pad_id
        self._docs: list[np.ndarray] = []    # pending documents, oldest first
        self._states: list[Any] = []         # the parent's state before each was read
        self._offset = 0                     # the next row's first token in _docs[0]
        self._serial = 0                     # a running document index (only equality matters)

    def _fill(self, need: int) -> None:
        while sum(len(d) for d in self._docs) - self._offset < need:
            self._states.append(self._parent.get_state())
            self._docs.append(next(self._parent))

    def __next__(self) -> dict[str, Any]:
        length = self.length
        self._fill(length + 1)
        tokens, document, starts = [], [], []
        take, offset = length + 1, self._offset
        for i, doc in enumerate(self._docs):
            piece = doc[offset: offset + take]
            tokens.append(piece)
            document.append(np.full(len(piece), self._serial + i))
            starts.append(np.arange(offset, offset + len(piece)) == 0)
            take -= len(piece)
            offset = 0
            if not take:
                break
        row = make_row(np.concatenate(tokens), np.concatenate(document), length, self.pad_id)
        row[STAT_KEYS["examples"]] = _documents_begun(np.concatenate(starts), length)
        row[STAT_KEYS["truncated"]] = row[STAT_KEYS["dropped"]] = 0
        self._offset += length  # the next row starts at this row's last token
        while self._offset >= len(self._docs[0]):  # at least one token always stays
            self._offset -= len(self._docs.pop(0))
            self._states.pop(0)
            self._serial += 1
        return row

    def get_state(self) -> dict[str, Any]:
        parent = self._states[0] if self._docs else self._parent.get_state()
        return {"documents": parent, "offset": int(self._offset)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["documents"])
        self._docs, self._states, self._offset = [], [], int(state["offset"])


class _Rows(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset, length: int, pad_id: int):
        super().__init__(parent)
        self.length, self.pad_id = length, pad_id

    def __iter__(self) -> grain.DatasetIterator:
        return _RowsIterator(self._parent.__iter__(), self.length, self.pad_id)


def _check(source, tokenizer, key: str, batch_size: int, max_length: int, process_index: int,
           process_count: int) -> int:
    check_sharding(batch_size, process_index, process_count)
    if max_length < 1:
        raise DataError(f"max_length must be at least 1, got {max_length}")
    n = len(source)
    if n == 0:
        raise DataError(f"{describe(source)} has no documents")
    if key not in source[0]:
        raise DataError(f"{describe(source)}: examples have no field {key!r} (fields: "
                        f"{sorted(source[0])})")
    if tokenizer.pad_id == tokenizer.eos_id:
        raise DataError("the tokenizer's pad and EOS ids must differ (padding is never a target)")
    return n


def lm_train_batches(source, tokenizer, *, batch_size: int, max_length: int, seed: int = 0,
                     key: str = "text", process_index: int = 0, process_count: int = 1,
                     read_options: grain.ReadOptions | None = None) -> CountingIterator:
    """Endless iterator over this process's training batches of `source` (module docstring):
    rows of `max_length` inputs, `batch_size` rows a batch."""
    _check(source, tokenizer, key, batch_size, max_length, process_index, process_count)
    ds = grain.MapDataset.source(source).shuffle(seed=seeds(seed, 1)[0]).repeat(None)
    ds = ds[process_index::process_count].map(_Tokenize(tokenizer, key))
    ds = _Rows(ds.to_iter_dataset(read_options or _DEFAULT_READ), max_length, tokenizer.pad_id)
    return CountingIterator(iter(ds.batch(batch_size, drop_remainder=True)))


# ------------------------------------------------------------------------------- evaluation


def document_stream(source, tokenizer, *, key: str = "text", max_tokens: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, document index) int32 [N] of every document of `source` in order, end to end;
    only the first `max_tokens` when > 0 (the last document then cut)."""
    n = len(source)
    if n == 0:
        raise DataError(f"{describe(source)} has no documents")
    texts = [as_text(e[key]) for e in read_examples(source, range(n))]
    ids = tokenizer.encode_batch(texts)
    tokens = np.concatenate([np.asarray([tokenizer.eos_id, *d, tokenizer.eos_id], np.int32)
                             for d in ids])
    document = np.repeat(np.arange(n, dtype=np.int32), [len(d) + 2 for d in ids])
    if max_tokens:
        tokens, document = tokens[:max_tokens], document[:max_tokens]
    return tokens, document


def eval_rows(stream: tuple[np.ndarray, np.ndarray], length: int, pad_id: int = 0
              ) -> dict[str, np.ndarray]:
    """Every row of the stream at this `length` (module docstring), stacked: {key: [rows, L]}."""
    tokens, document = stream
    if len(tokens) < 2:
        raise DataError(f"an eval stream of {len(tokens)} tokens has nothing to score")
    rows = [make_row(tokens[s: s + length + 1], document[s: s + length + 1], length, pad_id)
            for s in range(0, len(tokens) - 1, length)]
    return {k: np.stack([r[k] for r in rows]) for k in ROW_KEYS}


def lm_eval_batches(rows_by_length: Sequence[dict[str, np.ndarray]], *, batch_size: int,
                    process_index: int = 0, process_count: int = 1):
    """(iterator, batches per process) over this process's eval batches: each length's rows in
    turn (`eval_rows`), padded with empty rows to whole global batches (module docstring)."""
    check_sharding(batch_size, process_index, process_count)
    batches = []
    for rows in rows_by_length:
        n, length = rows["tokens"].shape
        total = padded_size(n, batch_size=batch_size, process_count=process_count)
        padded = {k: np.concatenate([v, np.zeros((total - n, length), v.dtype)])
                  for k, v in rows.items()}
        globals_ = total // batch_size
        mine = range(process_index, globals_, process_count)
        batches += [{k: v[b * batch_size:(b + 1) * batch_size] for k, v in padded.items()}
                    for b in mine]
    return iter(batches), len(batches)
