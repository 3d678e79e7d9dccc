"""Grain pipeline for translation: tokenize, append EOS, limit the length, pack or pad, batch.

    tok = sentencepiece_vocab.vocab_for_source(train, ("en", "es"), vocab_size=32000)
    it = translation_batches(train, tok, source_key="en", target_key="es", batch_size=64,
                             max_length=256, train=True, seed=0,
                             process_index=jax.process_index(),
                             process_count=jax.process_count())
    batch = next(it); it.stats  # {'examples': ..., 'truncated': ..., 'dropped': ...}

Examples are dicts of texts (str or UTF-8 bytes), e.g. {'en': ..., 'es': ..., 'ref': ...}; the
fields `source_key` and `target_key` are encoded with the shared tokenizer and EOS is appended
to both.

Every batch is a dict of numpy arrays for ONE process, `L = max_length`, `b = batch_size` rows:
  'inputs', 'targets'                            int32 [b, L]  token ids, PAD_ID = 0 padding
  'inputs_segmentation', 'targets_segmentation'  int32 [b, L]  1, 2, ... per example, 0 padding
  'inputs_position', 'targets_position'          int32 [b, L]  0, 1, ... restarting per example
(models/transformer.py takes the last two as `inputs_positions=` and `targets_positions=`.)
Eval batches (train=False) add:
  'mask'                                         float32 [b]   1 real row, 0 padding row
  'index'                                        int32 [b]     example index, -1 on padding
  'source_text', 'target_text'                   object [b]    the raw texts ('' on padding)
The text arrays cannot go to a device: the trainer keeps only the numeric arrays before
`jax.make_array_from_process_local_data` (train/trainer.py `_numeric`; `without_text(batch)`
here does the same for this pipeline's keys), and keeps the texts for BLEU and printed samples.

Length. `max_length` counts tokens including EOS, per side. An example longer than that on
either side is handled by `long_examples`:
  'truncate'  keep the first L - 1 tokens of the long side(s), then EOS.
  'drop'      (training only) skip the example.
Evaluation never drops: inputs and targets are truncated (the targets only for the eval loss), and
'target_text' keeps the whole reference for BLEU.

Counting. Each example carries its own flags through the pipeline as data, and the returned
`CountingIterator` (data/pipelines/counts.py) removes them from the batch and adds them up:
`it.stats` holds the totals over the batches taken so far: 'examples' (in those batches),
'truncated' (examples truncated on at least one side) and 'dropped'; `it.last_stats` those of
the last batch. The totals are part of `get_state()`, so they continue across a restore.

Training order (train=True). The examples are shuffled with `seed`, reshuffled differently
(deterministically) each epoch and repeated forever. Process i of P reads the examples i, i + P,
i + 2P, ... of that one global stream, as the image pipeline shards its batch stream
(data/pipelines/sharding.py): the shards are disjoint and together cover every example once per
epoch. Each process then packs its own examples, so a global batch (unlike for images) depends on
the number of processes.

Packing (train=True, `pack=True`). Vaswani et al. 2017 (Sec. 5.1) batch sentence pairs of
similar length to waste little on padding; packing several pairs into each row does the same
with static shapes. grain's `FirstFitPackIterDataset` fills `batch_size` rows: each example, in
stream order, goes into the first row where both its inputs and its targets still fit; when one
fits nowhere the rows are emitted as one batch and a new set starts with it (so a batch holds a
contiguous stretch of the stream). Both sides of an example get the same row and the same segment
id. `pack=False` gives one example per row, padded (segmentation 1 / 0, positions 0..n-1), for
comparisons. `batch_size` counts rows in both cases.

Evaluation (train=False): one pass in order, one example per row, padded with mask=0 rows to a
whole number of global batches, so every example is seen exactly once and every process runs
`num_batches(len(source), ...)` steps; process i takes the batches i, i + P, ... (as images).

Checkpointing: the iterator's `get_state()` is a JSON-serialisable dict and `set_state(state)`
resumes exactly, into a pipeline built with the same source, tokenizer, keys, batch_size,
max_length, long_examples, pack, seed, process_index/process_count and worker_count.
"""

from __future__ import annotations

from typing import Any

import grain
import numpy as np
from grain.experimental import FirstFitPackIterDataset

from data.builders.examples import as_text, read_examples
from data.errors import DataError
from data.pipelines.counts import STAT_KEYS, CountingIterator
from data.pipelines.sharding import check_sharding, describe, padded_size, seeds
from data.pipelines.workers import check_worker_count, in_workers
from data.vocab.sentencepiece import EOS_ID, PAD_ID, Tokenizer

LONG_EXAMPLE_POLICIES = ("truncate", "drop")
ARRAY_KEYS = ("inputs", "targets", "inputs_segmentation", "targets_segmentation",
              "inputs_position", "targets_position")
TEXT_KEYS = ("source_text", "target_text")

_DEFAULT_READ = grain.ReadOptions(num_threads=4, prefetch_buffer_size=64)


def without_text(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """The batch without its text arrays: what can be sent to devices."""
    return {k: v for k, v in batch.items() if k not in TEXT_KEYS}


# --------------------------------------------------------------------------------- examples


def limit_length(ids: list[int], max_length: int) -> tuple[np.ndarray, bool]:
    """ids + EOS, cut to the first max_length - 1 ids + EOS; and whether it was cut (every
    source sentence the pipeline and `python -m train.predict` give a translation model)."""
    cut = len(ids) + 1 > max_length
    if cut:
        ids = ids[: max_length - 1]
    return np.asarray([*ids, EOS_ID], np.int32), cut


class _Tokenize:
    """Example dict -> {'inputs', 'targets': int32 [n] ending in EOS, 'truncated', 'drop'}.

    With long_examples='drop' an over-long example keeps its full tokens and `drop`=1;
    `_SkipDropped` removes it later (a MapDataset cannot count what it filters out).
    """

    def __init__(self, tokenizer: Tokenizer, source_key: str, target_key: str, max_length: int,
                 long_examples: str):
        self.tokenizer, self.source_key, self.target_key = tokenizer, source_key, target_key
        self.max_length, self.drop = max_length, long_examples == "drop"

    def __call__(self, example: dict) -> dict[str, Any]:
        src = self.tokenizer.encode(as_text(example[self.source_key]))
        tgt = self.tokenizer.encode(as_text(example[self.target_key]))
        if self.drop and max(len(src), len(tgt)) + 1 > self.max_length:
            return {"inputs": np.asarray([*src, EOS_ID], np.int32),
                    "targets": np.asarray([*tgt, EOS_ID], np.int32), "truncated": 0, "drop": 1}
        inputs, cut_src = limit_length(src, self.max_length)
        targets, cut_tgt = limit_length(tgt, self.max_length)
        return {"inputs": inputs, "targets": targets, "truncated": int(cut_src or cut_tgt),
                "drop": 0}


class _SkipDroppedIterator(grain.DatasetIterator):
    """Skips examples marked `drop`; the next kept example carries how many were skipped."""

    def __init__(self, parent: grain.DatasetIterator, give_up_after: int, what: str):
        super().__init__(parent)
        self.give_up_after, self.what = give_up_after, what

    def __next__(self) -> dict[str, Any]:
        dropped = 0
        while True:
            example = next(self._parent)
            if not example["drop"]:
                return {"inputs": example["inputs"], "targets": example["targets"],
                        "truncated": example["truncated"], "dropped": dropped}
            dropped += 1
            if dropped > self.give_up_after:
                raise DataError(f"{self.what}: {dropped} examples in a row are longer than "
                                "max_length; raise max_length or use long_examples='truncate'")

    def get_state(self) -> dict[str, Any]:  # nothing pending between two __next__ calls
        return self._parent.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state)


class _SkipDropped(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset, give_up_after: int, what: str):
        super().__init__(parent)
        self.give_up_after, self.what = give_up_after, what

    def __iter__(self) -> grain.DatasetIterator:
        return _SkipDroppedIterator(self._parent.__iter__(), self.give_up_after, self.what)


# ------------------------------------------------------------------------------------ rows


def _pad(x: np.ndarray, length: int) -> np.ndarray:
    out = np.zeros((length,), np.int32)
    out[: len(x)] = x
    return out


def _padded_row(inputs: np.ndarray, targets: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """One example in one row: segmentation 1 on its tokens, positions 0..n-1, zeros after."""
    row = {}
    for key, x in (("inputs", inputs), ("targets", targets)):
        row[key] = _pad(x, length)
        row[f"{key}_segmentation"] = _pad(np.ones_like(x), length)
        row[f"{key}_position"] = _pad(np.arange(len(x), dtype=np.int32), length)
    return row


class _UnpackedRow:
    def __init__(self, length: int):
        self.length = length

    def __call__(self, example: dict[str, Any]) -> dict[str, Any]:
        row = _padded_row(example["inputs"], example["targets"], self.length)
        row.update({STAT_KEYS["examples"]: 1, STAT_KEYS["truncated"]: example["truncated"],
                    STAT_KEYS["dropped"]: example["dropped"]})
        return row


def _packed_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of grain's packer, renamed to our keys; per-example flags summed over the row."""
    out = {}
    for key in ("inputs", "targets"):
        out[key] = row[key]
        out[f"{key}_segmentation"] = row[f"{key}_segment_ids"]
        out[f"{key}_position"] = row[f"{key}_positions"]
    out[STAT_KEYS["examples"]] = int(row["targets_segment_ids"].max())
    out[STAT_KEYS["truncated"]] = int(sum(row["truncated"]))
    out[STAT_KEYS["dropped"]] = int(sum(row["dropped"]))
    return out


# ------------------------------------------------------------------------------- pipelines


def _check(source, tokenizer: Tokenizer, source_key: str, target_key: str, batch_size: int,
           max_length: int, process_index: int, process_count: int) -> int:
    """Validates the common arguments; returns len(source)."""
    check_sharding(batch_size, process_index, process_count)
    if max_length < 2:
        raise DataError(f"max_length must be at least 2 (one token and EOS), got {max_length}")
    if tokenizer.pad_id != PAD_ID or tokenizer.eos_id != EOS_ID:
        raise DataError(f"the tokenizer's pad/eos ids ({tokenizer.pad_id}, {tokenizer.eos_id}) "
                        f"must be ({PAD_ID}, {EOS_ID})")
    n = len(source)
    if n == 0:
        raise DataError(f"{describe(source)} has no examples")
    first = source[0]
    missing = [k for k in (source_key, target_key) if k not in first]
    if missing:
        raise DataError(f"{describe(source)}: examples have no field {missing} (fields: "
                        f"{sorted(first)})")
    return n


def translation_batches(source, tokenizer: Tokenizer, *, source_key: str, target_key: str,
                        batch_size: int, max_length: int, train: bool, seed: int = 0,
                        pack: bool | None = None, long_examples: str = "truncate",
                        process_index: int = 0, process_count: int = 1, worker_count: int = 0,
                        read_options: grain.ReadOptions | None = None) -> CountingIterator:
    """Iterator over this process's batches of `source` (see the module docstring).

    train=True: endless, shuffled with `seed`, packed unless pack=False, long examples
    truncated or dropped (`long_examples`). train=False: one pass, unpacked, truncated (pack
    and long_examples may only be left at, or set to, False and 'truncate'). `worker_count` > 0
    (training) runs everything up to the batches in that many grain worker processes
    (`mp_prefetch`); the batches then depend on `worker_count`, deterministically.
    """
    n = _check(source, tokenizer, source_key, target_key, batch_size, max_length, process_index,
               process_count)
    worker_count = check_worker_count(worker_count)
    if long_examples not in LONG_EXAMPLE_POLICIES:
        raise DataError(f"long_examples={long_examples!r} is not one of "
                        f"{list(LONG_EXAMPLE_POLICIES)}")
    if train:
        return _train_iterator(source, n, tokenizer, source_key, target_key, batch_size,
                               max_length, seeds(seed, 1)[0], pack is not False, long_examples,
                               process_index, process_count, worker_count,
                               read_options or _DEFAULT_READ)
    if pack or long_examples != "truncate" or worker_count:
        raise DataError("evaluation batches are unpacked and truncated, never dropped, in this "
                        f"process: got pack={pack}, long_examples={long_examples!r}, "
                        f"worker_count={worker_count}")
    return _eval_iterator(source, n, tokenizer, source_key, target_key, batch_size, max_length,
                          process_index, process_count, read_options or _DEFAULT_READ)


def _train_iterator(source, n, tokenizer, source_key, target_key, batch_size, max_length,
                    shuffle_seed, pack, long_examples, process_index, process_count,
                    worker_count, read_options) -> CountingIterator:
    ds = grain.MapDataset.source(source).shuffle(seed=shuffle_seed).repeat(None)
    ds = ds[process_index::process_count]
    ds = ds.map(_Tokenize(tokenizer, source_key, target_key, max_length, long_examples))
    ds = _SkipDropped(ds.to_iter_dataset(read_options), give_up_after=n, what=describe(source))
    if pack:
        ds = FirstFitPackIterDataset(ds, length_struct={"inputs": max_length,
                                                        "targets": max_length},
                                     num_packing_bins=batch_size, shuffle_bins=False,
                                     meta_features=("truncated", "dropped"))
        ds = ds.map(_packed_row)
    else:
        ds = ds.map(_UnpackedRow(max_length))
    ds = ds.batch(batch_size, drop_remainder=True)
    return CountingIterator(iter(in_workers(ds, worker_count)))


class _LoadEvalBatch:
    """Batch of example indices -> padded rows, mask, index, texts; indices >= len(source) pad."""

    def __init__(self, source, tokenizer: Tokenizer, source_key: str, target_key: str,
                 max_length: int):
        self.source, self.tokenizer, self.length = source, tokenizer, max_length
        self.source_key, self.target_key, self.n = source_key, target_key, len(source)

    def __call__(self, indices: np.ndarray) -> dict[str, Any]:
        b, length = len(indices), self.length
        batch = {k: np.zeros((b, length), np.int32) for k in ARRAY_KEYS}
        texts = {k: np.full((b,), "", dtype=object) for k in TEXT_KEYS}
        truncated = 0
        real = indices[indices < self.n]
        for j, example in enumerate(read_examples(self.source, real)):
            source_text = as_text(example[self.source_key])
            target_text = as_text(example[self.target_key])
            inputs, cut_src = limit_length(self.tokenizer.encode(source_text), length)
            targets, cut_tgt = limit_length(self.tokenizer.encode(target_text), length)
            for key, value in _padded_row(inputs, targets, length).items():
                batch[key][j] = value
            texts["source_text"][j], texts["target_text"][j] = source_text, target_text
            truncated += int(cut_src or cut_tgt)
        mask = np.zeros((b,), np.float32)
        mask[: len(real)] = 1.0
        index = np.full((b,), -1, np.int32)
        index[: len(real)] = real
        return {**batch, "mask": mask, "index": index, **texts,
                STAT_KEYS["examples"]: len(real), STAT_KEYS["truncated"]: truncated,
                STAT_KEYS["dropped"]: 0}


def _eval_iterator(source, n, tokenizer, source_key, target_key, batch_size, max_length,
                   process_index, process_count, read_options) -> CountingIterator:
    ds = grain.MapDataset.range(padded_size(n, batch_size=batch_size,
                                            process_count=process_count)).batch(batch_size)
    ds = ds.map(_LoadEvalBatch(source, tokenizer, source_key, target_key, max_length))
    ds = ds[process_index::process_count]
    return CountingIterator(iter(ds.to_iter_dataset(read_options)))
