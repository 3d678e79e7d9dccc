"""Which tokens form each pretraining example: tokenized documents and instance plans.

data/pipelines/pretraining.py turns a plan into model inputs, masks them and batches them in grain;
this module decides, without grain, which spans of which documents make each example.

Tokenized corpus. Every sentence of every document is tokenized once (WordPiece, no specials)
and the ids are laid end to end in one array, sentence after sentence, document after document;
offsets say where each sentence and each document starts. Paragraph breaks are not kept (BERT's
input files have one sentence per line and a blank line between documents only). Sentences that
tokenize to nothing, and documents left without a sentence, are dropped.

A plan is an int64 array [n, 6], one row per example, columns `COLUMNS`:
  a_start, a_end   segment A = tokens[a_start:a_end] of the flat array
  b_start, b_end   segment B (segment_pair; 0, 0 otherwise)
  label            next-sentence label: 0 = B is the actual continuation, 1 = B is random
                   (BERT's convention); -1 for the formats without that task
  target           the length the example aimed at (segment_pair; max tokens otherwise)
Spans stay contiguous in the flat array even after truncation, so a plan is small.

segment_pair (Devlin et al. 2019, Sec. 3.1 and App. A.2; the logic of BERT's
create_pretraining_data.py, rewritten). Per document, sentences are collected into a chunk until
it holds `target` tokens or the document ends. `target` is max_seq_length - 3 ([CLS], 2 x [SEP]),
or, with probability `short_seq_prob`, uniform in [2, max_seq_length - 3]: shorter sequences
reduce the mismatch with short fine-tuning inputs. A is the chunk's first k sentences (k
uniform in 1..len-1). With probability 1/2 B is the rest of the chunk (label 0); otherwise
(label 1) B is a run of sentences from a random start in another random document, long enough to
fill the target, and the chunk's unused sentences are put back to start the next chunk. A chunk
of one sentence has no rest, so it always gets a random B: label 1 is exactly half of the
examples made from chunks of two or more sentences, and slightly more than half overall. Then
the pair is truncated to max_seq_length - 3 tokens (`truncate_pair`).
  One deliberate difference: BERT's code draws `target` once per document, so all examples of
  10% of the documents are short; we draw it for every example, which is what the paper and the
  code's own comment ("10% of the time") describe. The reference also retries 10 times to find
  a random document different from the current one; we draw among the others directly.

full_sentences / doc_sentences (RoBERTa, Liu et al. 2019, Sec. 4.2): whole sentences packed in
order into `max_seq_length - 2` tokens ([CLS] ... [SEP]), a new example starting when the next
sentence does not fit. full_sentences continues across documents, paying one [SEP] token between
two documents; doc_sentences ends the example at the end of each document (so examples near a
document's end are shorter). A sentence longer than the budget is cut into budget-sized pieces,
each placed like a sentence. These plans do not depend on the seed.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import random
import threading
from typing import Iterable

import numpy as np

from data.errors import DataError

INPUT_FORMATS = ("segment_pair", "full_sentences", "doc_sentences")
COLUMNS = ("a_start", "a_end", "b_start", "b_end", "label", "target")
A_START, A_END, B_START, B_END, LABEL, TARGET = range(len(COLUMNS))
IS_NEXT, RANDOM_NEXT = 0, 1


@dataclasses.dataclass(frozen=True, eq=False)
class TokenizedCorpus:
    """Documents tokenized once, as flat arrays (see the module docstring)."""

    tokens: np.ndarray            # int32 [N] all word pieces, sentence after sentence
    word_starts: np.ndarray       # bool [N] False for '##' continuation pieces
    sentence_starts: np.ndarray   # int64 [S + 1] sentence s is tokens[ss[s]:ss[s + 1]]
    doc_sentences: np.ndarray     # int64 [D + 1] document d is sentences ds[d]:ds[d + 1]
    doc_ids: tuple[str, ...]      # [D]
    fingerprint: str              # sha256 of the tokenizer and the texts

    @property
    def num_documents(self) -> int:
        return len(self.doc_ids)

    @property
    def doc_starts(self) -> np.ndarray:
        """int64 [D + 1]: document d is tokens[doc_starts[d]:doc_starts[d + 1]]."""
        return self.sentence_starts[self.doc_sentences]

    def document_tokens(self, d: int) -> np.ndarray:
        starts = self.doc_starts
        return self.tokens[starts[d]:starts[d + 1]]


_CORPUS_CACHE: collections.OrderedDict[str, TokenizedCorpus] = collections.OrderedDict()
_CORPUS_CACHE_SIZE = 4
_CORPUS_LOCK = threading.Lock()


def tokenize_documents(documents: Iterable, tokenizer) -> TokenizedCorpus:
    """`documents` (Document objects: doc_id and paragraphs of sentence strings) tokenized with
    `tokenizer` (data.vocab.wordpiece.WordPieceTokenizer). The result is kept in memory (the last
    few corpora, by fingerprint), so a second pipeline over the same split does not tokenize
    again."""
    doc_ids, doc_texts = [], []
    digest = hashlib.sha256(tokenizer.fingerprint.encode())
    for doc in documents:
        sentences = [s for paragraph in doc.paragraphs for s in paragraph]
        doc_ids.append(str(doc.doc_id))
        doc_texts.append(sentences)
        digest.update(f"\x1d{doc.doc_id}\x1e".encode())
        digest.update("\x1f".join(sentences).encode())
    fingerprint = digest.hexdigest()
    with _CORPUS_LOCK:
        if fingerprint in _CORPUS_CACHE:
            _CORPUS_CACHE.move_to_end(fingerprint)
            return _CORPUS_CACHE[fingerprint]

    flat = [s for sentences in doc_texts for s in sentences]
    encoded: list[list[int]] = []
    for start in range(0, len(flat), 8192):
        encoded.extend(tokenizer.encode_batch(flat[start:start + 8192]))
    lengths, kept_ids, doc_sentences, k = [], [], [0], 0
    for doc_id, sentences in zip(doc_ids, doc_texts):
        n_before = len(lengths)
        for ids in encoded[k:k + len(sentences)]:
            if ids:
                lengths.append(len(ids))
        k += len(sentences)
        if len(lengths) > n_before:
            kept_ids.append(doc_id)
            doc_sentences.append(len(lengths))
    if not kept_ids:
        raise DataError("the documents hold no text to make pretraining examples from")
    tokens = np.fromiter((i for ids in encoded for i in ids), dtype=np.int32)
    corpus = TokenizedCorpus(
        tokens=tokens, word_starts=tokenizer.word_starts(tokens),
        sentence_starts=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        doc_sentences=np.asarray(doc_sentences, np.int64), doc_ids=tuple(kept_ids),
        fingerprint=fingerprint)
    with _CORPUS_LOCK:
        _CORPUS_CACHE[fingerprint] = corpus
        while len(_CORPUS_CACHE) > _CORPUS_CACHE_SIZE:
            _CORPUS_CACHE.popitem(last=False)
    return corpus


# ----------------------------------------------------------------------------- segment pairs


def truncate_pair(a_start: int, a_end: int, b_start: int, b_end: int, max_tokens: int,
                  rng: random.Random) -> tuple[int, int, int, int]:
    """Shortens A and B until len(A) + len(B) <= max_tokens (BERT's truncate_seq_pair).

    One token at a time is removed from the longer segment (B when they are equal), from its
    front or its back with probability 1/2 each. Computed in closed form: the counts removed
    from each segment are those of that loop, and the number taken from the front of a segment
    that loses k tokens is Binomial(k, 1/2), as k fair coin flips give.
    """
    la, lb = a_end - a_start, b_end - b_start
    excess = la + lb - max_tokens
    if excess <= 0:
        return a_start, a_end, b_start, b_end
    gap = abs(la - lb)
    first = min(excess, gap)          # the longer one alone until both are equal
    rest = excess - first             # then alternately, B first (B on a tie)
    cut_a = (first if la > lb else 0) + rest // 2
    cut_b = (first if lb > la else 0) + rest - rest // 2
    front_a = bin(rng.getrandbits(cut_a)).count("1") if cut_a else 0
    front_b = bin(rng.getrandbits(cut_b)).count("1") if cut_b else 0
    return (a_start + front_a, a_end - (cut_a - front_a),
            b_start + front_b, b_end - (cut_b - front_b))


def plan_rng(seed: int, plan_id: int) -> random.Random:
    """The generator of plan `plan_id` (a dupe or an epoch) for a pipeline seed."""
    state = np.random.SeedSequence([int(seed), int(plan_id)]).generate_state(2, np.uint64)
    return random.Random(int(state[0]) << 64 | int(state[1]))


def document_pairs(starts, first: int, end: int, *, max_tokens: int, short_seq_prob: float,
                   rng: random.Random, random_segment) -> list[tuple[int, ...]]:
    """The segment-pair rows (COLUMNS) of one document, whose sentences s = first .. end - 1 are
    the tokens starts[s]:starts[s + 1] (module docstring). `random_segment(need)` gives a random
    B from another document, (b_start, b_end) aiming at `need` tokens, drawing from `rng`; or
    None when it finds none: then a chunk of two or more sentences takes its actual next
    sentences (label 0) and a one-sentence chunk makes no example."""
    def draw_target() -> int:
        if rng.random() < short_seq_prob:
            return rng.randint(2, max_tokens)
        return max_tokens

    rows = []
    chunk_first, target, i = first, draw_target(), first
    while i < end:
        if starts[i + 1] - starts[chunk_first] < target and i < end - 1:
            i += 1
            continue
        n = i + 1 - chunk_first                       # sentences in the chunk
        a_end = chunk_first + (rng.randint(1, n - 1) if n >= 2 else 1)
        a = (starts[chunk_first], starts[a_end])
        b = None
        if n == 1 or rng.random() < 0.5:
            b = random_segment(target - (a[1] - a[0]))
            if b is not None:
                label = RANDOM_NEXT
                i = a_end - 1                         # put the unused sentences back
        if b is None and n >= 2:
            label = IS_NEXT
            b = (starts[a_end], starts[i + 1])
        if b is not None:
            rows.append((*truncate_pair(*a, *b, max_tokens, rng), label, target))
        chunk_first, target = i + 1, draw_target()
        i += 1
    return rows


def segment_pair_plan(corpus: TokenizedCorpus, *, max_seq_length: int, short_seq_prob: float,
                      rng: random.Random, shuffle: bool = True) -> np.ndarray:
    """Sentence-pair examples of every document (module docstring), in a random order when
    `shuffle` (else document order)."""
    if corpus.num_documents < 2:
        raise DataError("segment_pair needs at least 2 documents (a random B comes from another "
                        f"document); got {corpus.num_documents}")
    starts = corpus.sentence_starts.tolist()
    doc_sentences = corpus.doc_sentences.tolist()
    num_docs = corpus.num_documents

    rows = []
    for d in range(num_docs):
        def random_segment(need: int, d=d) -> tuple[int, int]:
            """A run of sentences from a random start in another random document, long enough
            to fill `need` tokens (or to that document's end)."""
            other = rng.randrange(num_docs - 1)
            other += other >= d
            j = rng.randrange(doc_sentences[other], doc_sentences[other + 1])
            b_start = starts[j]
            j += 1
            while starts[j] - b_start < need and j < doc_sentences[other + 1]:
                j += 1
            return b_start, starts[j]

        rows += document_pairs(starts, doc_sentences[d], doc_sentences[d + 1],
                               max_tokens=max_seq_length - 3, short_seq_prob=short_seq_prob,
                               rng=rng, random_segment=random_segment)
    if shuffle:
        rng.shuffle(rows)
    return np.asarray(rows, np.int64).reshape(-1, len(COLUMNS))


# ----------------------------------------------------------------------------- packed formats


def packed_plan(corpus: TokenizedCorpus, *, max_seq_length: int,
                cross_documents: bool) -> np.ndarray:
    """full_sentences (`cross_documents`) or doc_sentences examples (module docstring), in
    corpus order."""
    budget = max_seq_length - 2
    starts = corpus.sentence_starts.tolist()
    doc_sentences = corpus.doc_sentences.tolist()
    rows = []
    lo = hi = used = None                                 # the open example

    def close():
        rows.append((lo, hi, 0, 0, -1, budget))

    for d in range(corpus.num_documents):
        new_doc = True
        for s in range(doc_sentences[d], doc_sentences[d + 1]):
            for piece_lo in range(starts[s], starts[s + 1], budget):
                piece_hi = min(piece_lo + budget, starts[s + 1])
                cost = piece_hi - piece_lo + (1 if new_doc and lo is not None else 0)
                if lo is not None and used + cost <= budget:
                    hi, used = piece_hi, used + cost
                else:
                    if lo is not None:
                        close()
                    lo, hi, used = piece_lo, piece_hi, piece_hi - piece_lo
                new_doc = False
        if not cross_documents and lo is not None:
            close()
            lo = None
    if lo is not None:
        close()
    return np.asarray(rows, np.int64).reshape(-1, len(COLUMNS))


def make_plan(corpus: TokenizedCorpus, *, input_format: str, max_seq_length: int,
              short_seq_prob: float, seed: int, plan_id: int) -> np.ndarray:
    """Plan `plan_id` (a dupe of static data, or an epoch of dynamic data) of `input_format`."""
    if input_format == "segment_pair":
        return segment_pair_plan(corpus, max_seq_length=max_seq_length,
                                 short_seq_prob=short_seq_prob, rng=plan_rng(seed, plan_id))
    if input_format in ("full_sentences", "doc_sentences"):
        return packed_plan(corpus, max_seq_length=max_seq_length,
                           cross_documents=input_format == "full_sentences")
    raise DataError(f"input_format={input_format!r} is not one of {list(INPUT_FORMATS)}")
