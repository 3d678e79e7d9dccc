"""BERT pretraining batches streamed from a corpus too large to hold: Wikipedia, article by
article, with nothing prepared offline.

    it = stream_batches(source, tokenizer, to_document=wikipedia.article_document,
                        batch_size=..., max_seq_length=128, masking=..., seed=0,
                        process_index=jax.process_index(), process_count=jax.process_count())

data/pipelines/pretraining.py tokenizes a whole corpus up front and plans its examples over it,
which English Wikipedia (6.6 million articles, ~4 billion word pieces) would need hours and tens
of gigabytes for on every host of a pod. Here each article is turned into examples when it is
read, in grain's reader threads:

  1. documents: the article indices in a random order, a new one every epoch (seeded), cut
     into this process's share (process i of P takes positions i, i + P, ...: every process
     reads other articles);
  2. examples of one article (`_DocumentExamples`): the article read from the random-access
     source, split into passages and sentences (`to_document`, e.g.
     data/corpora/wikipedia.py), its sentences tokenized, and its examples made exactly as the
     in-memory pipeline makes one document's (pretraining_instances.document_pairs for BERT's
     segment_pair, packed_plan for RoBERTa's doc_sentences): a random B (NSP label 1) is a run
     of sentences from a random start in another random article, read and tokenized for it;
     then each example is masked (data/pipelines/masking.py). The generators of the pairing
     and the masks are seeded by the stream position of the article, so an article's examples
     depend on the seed and its position, not on the process count or the threads;
  3. the examples flattened, shuffled within windows of `shuffle_window` examples (an article's
     examples come out together; BERT shuffles its instances) and batched;
  4. with `worker_count` > 0, steps 1-3 run in that many processes (data/pipelines/workers.py),
     each on every worker_count-th article of this process's share, its own window: one
     process's interpreter lock caps the stream at about one core (docs/launch.md measures it),
     and a pod host must make thousands of examples a second.

full_sentences (RoBERTa's packing across documents) needs the previous article's tail and is
not streamed; segment_pair and doc_sentences are. An article whose random-B partners are all
empty after `RANDOM_B_ATTEMPTS` draws pairs its chunk with its own next sentences instead.

Batches are those of pretraining.py (BATCH_KEYS, for ONE process), all rows real (mask 1).
Unlike the in-memory pipelines, the global batch of a step depends on the process count (each
process streams its own articles): a run resumed on another number of processes starts the data
order anew (train/checkpointing.py warns). Checkpointing: the iterator's get_state() /
set_state() (JSON-serialisable) resume exactly: grain's flat-map and window-shuffle iterators
keep the article position and re-read the current window.
"""

from __future__ import annotations

from typing import Any, Callable

import grain
import numpy as np

from data.builders.examples import as_text, read_examples
from data.corpora.documents import Document
from data.errors import DataError
from data.pipelines.masking import MaskingConfig, MaskTokens
from data.pipelines.pretraining import Examples, _check, batch_fields
from data.pipelines.pretraining_instances import (COLUMNS, TokenizedCorpus, document_pairs,
                                                  packed_plan, plan_rng)
from data.pipelines.sharding import describe, seeds
from data.pipelines.workers import check_worker_count, in_workers

STREAM_FORMATS = ("segment_pair", "doc_sentences")
RANDOM_B_ATTEMPTS = 10
EMPTY_ARTICLES = 10_000  # articles in a row without an example before the stream gives up
_DEFAULT_READ = grain.ReadOptions(num_threads=8, prefetch_buffer_size=64)


def document_sentences(source, index: int, to_document: Callable[[str, str], Document],
                       text_key: str = "text") -> list[str]:
    """Every sentence of article `index` of `source`, passage by passage."""
    example = read_examples(source, [index])[0]
    return to_document(str(index), as_text(example[text_key])).sentences


class _DocumentExamples:
    """(stream position, article index) -> the article's masked examples (module docstring)."""

    def __init__(self, source, tokenizer, *, to_document, input_format: str,
                 max_seq_length: int, short_seq_prob: float, masking: MaskingConfig,
                 plan_seed: int, mask_seed: int):
        self.source, self.tokenizer, self.to_document = source, tokenizer, to_document
        self.length = len(source)
        self.input_format, self.max_seq_length = input_format, max_seq_length
        self.short_seq_prob = short_seq_prob
        self.mask, self.plan_seed, self.mask_seed = MaskTokens(masking), plan_seed, mask_seed

    def _encode(self, sentences: list[str]) -> list[list[int]]:
        return [ids for ids in self.tokenizer.encode_batch(sentences) if ids]

    def __call__(self, position: int, index: int) -> list[dict[str, Any]]:
        index, position = int(index), int(position)
        encoded = self._encode(document_sentences(self.source, index, self.to_document))
        if not encoded:
            return []
        chunks = list(encoded)                       # the article's sentences, then B segments
        starts = np.concatenate([[0], np.cumsum([len(ids) for ids in encoded])]).tolist()
        end_of_doc = starts[-1]
        rng = plan_rng(self.plan_seed, position)
        if self.input_format == "segment_pair":
            borrowed = [end_of_doc]                 # token offset where the next B goes

            def random_segment(need: int):
                for _ in range(RANDOM_B_ATTEMPTS):  # another article: len(source) >= 2
                    other = rng.randrange(self.length - 1)
                    other += other >= index
                    sentences = document_sentences(self.source, other, self.to_document)
                    if sentences:
                        break
                else:
                    return None
                j, first, taken = rng.randrange(len(sentences)), borrowed[0], 0
                while j < len(sentences) and (taken == 0 or taken < need):
                    for ids in self._encode(sentences[j:j + 1]):
                        chunks.append(ids)
                        taken += len(ids)
                    j += 1
                if taken == 0:
                    return None
                borrowed[0] += taken
                return first, first + taken

            rows = document_pairs(starts, 0, len(encoded), max_tokens=self.max_seq_length - 3,
                                  short_seq_prob=self.short_seq_prob, rng=rng,
                                  random_segment=random_segment)
            rows = np.asarray(rows, np.int64).reshape(-1, len(COLUMNS))
        corpus = self._corpus(chunks, len(encoded))
        if self.input_format != "segment_pair":
            rows = packed_plan(corpus, max_seq_length=self.max_seq_length,
                               cross_documents=False)
        build = Examples(corpus, self.tokenizer, self.max_seq_length,
                         self.input_format == "segment_pair")
        out = []
        for k, row in enumerate(rows):
            masked = self.mask.random_map(
                build(row), np.random.default_rng([self.mask_seed, position, k]))
            out.append(batch_fields(masked))
        return out

    def _corpus(self, chunks: list[list[int]], doc_sentences: int) -> TokenizedCorpus:
        """The article's sentences (document 0) and the borrowed B segments after them, as one
        flat TokenizedCorpus (the offsets the rows refer to)."""
        lengths = [len(ids) for ids in chunks]
        tokens = np.fromiter((i for ids in chunks for i in ids), dtype=np.int32,
                             count=sum(lengths))
        sentence_starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        bounds = [0, doc_sentences] + ([len(chunks)] if len(chunks) > doc_sentences else [])
        return TokenizedCorpus(
            tokens=tokens, word_starts=self.tokenizer.word_starts(tokens),
            sentence_starts=sentence_starts, doc_sentences=np.asarray(bounds, np.int64),
            doc_ids=tuple(str(d) for d in range(len(bounds) - 1)), fingerprint="stream")


class _Flatten(grain.experimental.FlatMapTransform):
    """An article's list of examples -> the examples one by one; DataError once `limit`
    articles in a row gave none (a stream with nothing to batch would otherwise read on
    forever). (grain's FlatMap interface asks for a `max_fan_out`, which only its MapDataset
    flat map uses; the iterator flat map here takes any number, so it is none.)"""

    max_fan_out = None

    def __init__(self, limit: int, source_name: str):
        self.limit, self.source_name, self.empty = limit, source_name, 0

    def flat_map(self, examples):
        self.empty = 0 if examples else self.empty + 1
        if self.empty >= self.limit:
            raise DataError(
                f"{self.limit:,} articles in a row of {self.source_name} gave no training "
                "example: none has a passage of sentences (headings, lists and tables are "
                "dropped: data/corpora/wikipedia.py). Check that the dataset (data.names) is "
                "one of prose in its 'text' field.")
        return examples


def stream_batches(source, tokenizer, *, to_document: Callable[[str, str], Document],
                   batch_size: int, max_seq_length: int, masking: MaskingConfig, seed: int,
                   input_format: str = "segment_pair", short_seq_prob: float = 0.1,
                   shuffle_window: int = 10_000, process_index: int = 0,
                   process_count: int = 1, worker_count: int = 0,
                   read_options: grain.ReadOptions | None = None) -> grain.DatasetIterator:
    """Endless iterator over this process's training batches of articles of `source` (a
    random-access source of examples with a 'text' field, e.g. TFDS wikipedia) (module
    docstring). `worker_count` > 0 makes them in that many processes (data/pipelines/
    workers.py): each takes every worker_count-th article of this process's share and makes,
    shuffles and batches its examples; the batches come back in turn, so they depend on the
    count, deterministically, and resume exactly."""
    _check(tokenizer, input_format=input_format, max_seq_length=max_seq_length,
           short_seq_prob=short_seq_prob, masking=masking, batch_size=batch_size,
           process_index=process_index, process_count=process_count)
    if input_format not in STREAM_FORMATS:
        raise DataError(f"input_format={input_format!r} is not streamed (it packs sentences "
                        f"across documents); streamed: {list(STREAM_FORMATS)}")
    check_worker_count(worker_count)
    if not isinstance(shuffle_window, (int, np.integer)) or shuffle_window < 1:
        raise DataError(f"shuffle_window={shuffle_window!r} must be a positive integer")
    if len(source) < 2:
        raise DataError(f"{describe(source)} has {len(source)} document(s); a stream of "
                        "sentence pairs needs at least 2")
    order_seed, plan_seed, mask_seed, window_seed = seeds(seed, 4)
    examples = _DocumentExamples(source, tokenizer, to_document=to_document,
                                 input_format=input_format, max_seq_length=max_seq_length,
                                 short_seq_prob=short_seq_prob, masking=masking,
                                 plan_seed=plan_seed, mask_seed=mask_seed)
    ds = grain.MapDataset.range(len(source)).shuffle(seed=order_seed).repeat()
    ds = ds.map_with_index(examples)[process_index::process_count]
    # One reader sees every article once a pass, so two passes (a run of empty ones can end
    # one shuffled pass and begin the next) without an example mean none has one. Several
    # readers (processes x workers) each take a random part of every reshuffled pass, and may
    # miss a corpus's few articles of prose for passes on end: EMPTY_ARTICLES then.
    readers = process_count * max(worker_count, 1)
    limit = min(2 * len(source), EMPTY_ARTICLES) if readers == 1 else EMPTY_ARTICLES
    it = grain.experimental.FlatMapIterDataset(
        ds.to_iter_dataset(read_options or _DEFAULT_READ), _Flatten(limit, describe(source)))
    it = grain.experimental.WindowShuffleIterDataset(it, window_size=shuffle_window,
                                                     seed=window_seed)
    return iter(in_workers(it.batch(batch_size, drop_remainder=True), worker_count))


def sample_documents(source, count: int, to_document: Callable[[str, str], Document]
                     ) -> list[Document]:
    """`count` articles of `source` evenly spaced over it (all when it holds fewer), as
    Documents: the sample a WordPiece vocabulary is trained on, the same on every host."""
    n = len(source)
    indices = sorted({int(i) for i in np.linspace(0, n - 1, num=min(count, n))})
    documents = []
    for start in range(0, len(indices), 256):
        chunk = indices[start:start + 256]
        for i, example in zip(chunk, read_examples(source, chunk)):
            documents.append(to_document(str(i), as_text(example["text"])))
    return documents
