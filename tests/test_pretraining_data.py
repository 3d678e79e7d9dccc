"""BERT/RoBERTa pretraining examples (data/pipelines/pretraining_instances.py, pretraining.py), on
documents of English text made by tests/english_documents.py. Epochs (static and dynamic
masking), resuming and process sharding: test_pretraining_epochs.py.

Tolerances. A rate p estimated from n independent draws has standard error sqrt(p (1 - p) / n);
we accept |observed - p| <= 4 standard errors, which a correct implementation fails with
probability about 6e-5 per check. Rates of exactly 0 or 1 must be met exactly. Each check below
names its n. Everything is seeded, so the outcomes are fixed; the bounds say how far a correct
implementation may legitimately stray.
"""

from __future__ import annotations

import collections
import math
import random

import numpy as np
import pytest

from batch_checks import take
from data.pipelines import pretraining as pt
from data.pipelines import pretraining_instances as pi
from data.pipelines.sharding import num_batches
from data.vocab import wordpiece as wp
from data.corpora.documents import Document
from data.errors import DataError
from english_documents import DOCS
from pretraining_batches import batches, english_tokenizer, originals, rows


@pytest.fixture(scope="module")
def tok() -> wp.WordPieceTokenizer:
    return english_tokenizer()


@pytest.fixture(scope="module")
def corpus(tok) -> pi.TokenizedCorpus:
    return pi.tokenize_documents(DOCS, tok)


def within(observed: float, p: float, n: int, num_se: float = 4.0) -> bool:
    return abs(observed - p) <= num_se * math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------------ segment pairs (NSP)


class Locator:
    """Finds token sequences in the documents, tokenized here sentence by sentence."""

    def __init__(self, tok, docs):
        self.docs, self.bounds = [], []
        for doc in docs:
            sentences = [ids for p in doc.paragraphs for s in p if (ids := tok.encode(s))]
            self.docs.append(np.concatenate(sentences))
            self.bounds.append(set(np.cumsum([0] + [len(s) for s in sentences]).tolist()))
        self.index = collections.defaultdict(list)
        for d, tokens in enumerate(self.docs):
            for p in range(len(tokens) - 2):
                self.index[tuple(tokens[p:p + 3])].append((d, p))

    def find(self, seq: np.ndarray) -> list[tuple[int, int]]:
        return [(d, p) for d, p in self.index[tuple(seq[:3])]
                if np.array_equal(self.docs[d][p:p + len(seq)], seq)]


def split_pair(ids: np.ndarray, tok) -> tuple[np.ndarray, np.ndarray]:
    seps = np.flatnonzero(ids == tok.sep_id)
    return ids[1:seps[0]], ids[seps[0] + 1:seps[1]]


def test_segment_pair_layout_next_and_random_b(tok):
    num = pt.num_examples(DOCS, tok, max_seq_length=64, seed=3, short_seq_prob=0.0)
    it = batches(tok, seed=3, short_seq_prob=0.0, train=False)
    b = rows(take(it, num_batches(num, batch_size=16)))
    real = b["mask"] > 0
    assert real.sum() == num and not b["input_mask"][~real].any()
    ids, seg, inmask = originals(b)[real], b["segment_ids"][real], b["input_mask"][real]
    labels = b["next_sentence_label"][real]
    locate = Locator(tok, DOCS)
    checked = {0: 0, 1: 0}
    untruncated_next = 0
    for r in range(len(ids)):
        n = int(inmask[r].sum())
        assert n <= 64 and inmask[r, :n].all() and not inmask[r, n:].any()
        assert (b["input_ids"][real][r, n:] == tok.pad_id).all()
        row = ids[r, :n]
        seps = np.flatnonzero(row == tok.sep_id)
        assert row[0] == tok.cls_id and len(seps) == 2 and seps[1] == n - 1
        assert not np.isin(row, [tok.cls_id, tok.mask_id, tok.pad_id])[1:].any()
        np.testing.assert_array_equal(seg[r, :seps[0] + 1], 0)        # [CLS] A [SEP]
        np.testing.assert_array_equal(seg[r, seps[0] + 1:n], 1)       # B [SEP]
        assert not seg[r, n:].any()
        a, bb = split_pair(row, tok)
        assert len(a) >= 1 and len(bb) >= 1
        if len(a) < 3 or len(bb) < 3:
            continue
        places_a = locate.find(a)
        assert places_a, "A is not a span of a document"
        if labels[r] == pi.IS_NEXT:
            # B follows A in the same document; only truncation may have cut tokens around the
            # sentence boundary between them.
            ok = False
            for d, p in places_a:
                for d2, q in locate.find(bb):
                    end = p + len(a)
                    if d2 == d and q >= end and any(end <= s <= q for s in locate.bounds[d]):
                        ok = True
                        untruncated_next += q == end
            assert ok, f"example {r}: label 0 but B does not follow A"
        else:
            docs_a = {d for d, _ in places_a}
            docs_b = {d for d, _ in locate.find(bb)}
            assert docs_b and not docs_b & docs_a, f"example {r}: random B from A's document"
        checked[int(labels[r])] += 1
    assert min(checked.values()) > 150 and untruncated_next > 50


def test_nsp_labels_are_balanced(corpus, tok):
    # A chunk of one sentence always gets a random B (as in BERT's code); with these short
    # sentences and no short targets that happens only for a document's last sentence alone,
    # i.e. exactly when A is the last sentence of its document. All other examples: 50/50.
    last_sentence = {(int(corpus.sentence_starts[e - 1]), int(corpus.sentence_starts[e]))
                     for e in corpus.doc_sentences[1:]}
    plans = [pi.segment_pair_plan(corpus, max_seq_length=64, short_seq_prob=0.0,
                                  rng=random.Random(s)) for s in range(6)]
    plan = np.concatenate(plans)
    forced = np.array([(a, b) in last_sentence for a, b in plan[:, :2].tolist()])
    assert (plan[forced, pi.LABEL] == pi.RANDOM_NEXT).all()
    free = plan[~forced, pi.LABEL]
    assert len(free) > 3000                          # 4 SE = +-0.036 at n = 3,000
    assert within(free.mean(), 0.5, len(free)), free.mean()
    # In the pipeline output (one eval pass, ~1,250 examples): 1/2 plus half the forced share.
    num = pt.num_examples(DOCS, tok, max_seq_length=64, seed=5, short_seq_prob=0.0)
    b = rows(take(batches(tok, seed=5, short_seq_prob=0.0, train=False),
                  num_batches(num, batch_size=16)))
    labels = b["next_sentence_label"][b["mask"] > 0]
    assert set(labels.tolist()) == {0, 1}
    expected = 0.5 + forced.mean() / 2
    assert within(labels.mean(), expected, len(labels)), (labels.mean(), expected)


def test_segment_pair_chunks_split_points_and_random_b_length(tok):
    """The sentence-level rules of segment_pair, on the untruncated plan rows (len(A) + len(B)
    below the maximum, so every span edge is a sentence edge):
    - label 0: A and B are one chunk of one document, closed as soon as it reaches `target`
      (without its last sentence it is shorter than `target`) or at the document's end;
    - the split point k (sentences in A) is uniform in 1..n-1 for a chunk of n sentences;
    - label 1: B is the shortest run of whole sentences of another document that fills the rest
      of the target (without its last sentence it falls short), or ends at its document's end.
    A split always after the first sentence, a chunk closed one sentence late, or a random B
    sized to the whole target instead of the rest, all fail here. The documents are DOCS cut
    into sentences of three words (~5 pieces), so many chunks of 3+ sentences fit untruncated."""
    short_docs = []
    for doc in DOCS[:80]:
        words = " ".join(s for p in doc.paragraphs for s in p).split()
        short_docs.append(Document(doc.doc_id, [[" ".join(words[i:i + 3])
                                                 for i in range(0, len(words), 3)]]))
    corpus = pi.tokenize_documents(short_docs, tok)
    max_tokens = 64 - 3
    ss = corpus.sentence_starts
    doc_of_sentence = np.repeat(np.arange(corpus.num_documents), np.diff(corpus.doc_sentences))
    doc_end = corpus.doc_sentences[1:][doc_of_sentence]     # per sentence: its document's end
    sentence = {int(s): k for k, s in enumerate(ss.tolist())}
    plan = np.concatenate([pi.segment_pair_plan(corpus, max_seq_length=64, short_seq_prob=0.5,
                                                rng=random.Random(s)) for s in range(3)])
    a0, a1, b0, b1, label, target = plan.T
    whole = (a1 - a0) + (b1 - b0) < max_tokens
    splits, next_checked, random_checked, multi_sentence_b = [], 0, 0, 0
    for r in np.flatnonzero(whole):
        sa0, sa1, sb0, sb1 = (sentence[int(x)] for x in (a0[r], a1[r], b0[r], b1[r]))
        assert sa0 < sa1 and sb0 < sb1 and doc_of_sentence[sa0] == doc_of_sentence[sa1 - 1]
        t = int(target[r])
        if label[r] == pi.IS_NEXT:
            assert sa1 == sb0 and doc_of_sentence[sb1 - 1] == doc_of_sentence[sa0]
            assert ss[sb1 - 1] - ss[sa0] < t, f"row {r}: the chunk went on past its target"
            assert ss[sb1] - ss[sa0] >= t or sb1 == doc_end[sa0], f"row {r}: chunk cut short"
            splits.append((sa1 - sa0, sb1 - sa0))
            next_checked += 1
        else:
            assert doc_of_sentence[sb0] != doc_of_sentence[sa0]
            assert doc_of_sentence[sb1 - 1] == doc_of_sentence[sb0]
            need = t - int(a1[r] - a0[r])
            if sb1 - sb0 >= 2:
                multi_sentence_b += 1
                assert ss[sb1 - 1] - ss[sb0] < need, f"row {r}: random B longer than needed"
            assert ss[sb1] - ss[sb0] >= need or sb1 == doc_end[sb0], f"row {r}: B too short"
            random_checked += 1
    assert next_checked > 300 and random_checked > 300 and multi_sentence_b > 100, (
        next_checked, random_checked, multi_sentence_b)
    # k uniform on 1..n-1: mean n/2, variance ((n-1)^2 - 1)/12; 4 SE on the sum over chunks.
    k, n = np.array([s for s in splits if s[1] >= 3]).T
    assert len(k) > 100 and ((k >= 1) & (k <= n - 1)).all()
    se = math.sqrt((((n - 1) ** 2 - 1) / 12).sum())
    assert abs(k.sum() - (n / 2).sum()) <= 4 * se, (k.sum(), (n / 2).sum(), se)
    assert (k > 1).any() and (k == n - 1).any()


def truncate_reference(la, lb, max_tokens):
    """BERT's truncate_seq_pair, token by token: final lengths."""
    while la + lb > max_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


@pytest.mark.parametrize("la, lb, max_tokens", [
    (100, 10, 50), (10, 100, 50), (60, 50, 100), (55, 55, 100), (56, 55, 100), (7, 3, 9),
    (30, 30, 61), (1, 500, 2), (500, 1, 2), (3, 3, 61)])
def test_truncation_removes_from_the_longer_segment(la, lb, max_tokens):
    rng = random.Random(0)
    fronts = []
    for _ in range(400):
        a0, a1, b0, b1 = pi.truncate_pair(1000, 1000 + la, 5000, 5000 + lb, max_tokens, rng)
        assert (a1 - a0, b1 - b0) == truncate_reference(la, lb, max_tokens)
        assert a1 - a0 + b1 - b0 <= max_tokens and a1 - a0 >= 1 and b1 - b0 >= 1
        assert 1000 <= a0 <= a1 <= 1000 + la and 5000 <= b0 <= b1 <= 5000 + lb
        fronts.append((a0 - 1000, b0 - 5000))
    cut_a, cut_b = la - (a1 - a0), lb - (b1 - b0)
    # Front or back with probability 1/2 per token: front cuts ~ Binomial(cut, 1/2).
    for k, cut in enumerate((cut_a, cut_b)):
        front = np.array([f[k] for f in fronts])
        if cut == 0:
            assert not front.any()
        else:   # mean of 400 Binomial(cut, 1/2) draws: SE sqrt(cut / 4 / 400)
            assert abs(front.mean() - cut / 2) <= 4 * math.sqrt(cut / 4 / 400)


def test_short_seq_prob(corpus, tok):
    max_tokens = 64 - 3
    for p in (0.0, 0.1, 0.5):
        plan = np.concatenate([pi.segment_pair_plan(corpus, max_seq_length=64,
                                                    short_seq_prob=p, rng=random.Random(s))
                               for s in range(4)])
        targets = plan[:, pi.TARGET]
        assert targets.min() >= 2 and targets.max() == max_tokens
        short = targets < max_tokens   # a short target equals the max with prob 1/60: ignored
        assert within(short.mean(), p * (1 - 1 / (max_tokens - 1)), len(short)) if p else (
            not short.any()), (p, short.mean(), len(short))
        if p:  # short targets are uniform on [2, max - 1]: mean ~ (max + 1) / 2
            assert abs(targets[short].mean() - (max_tokens + 1) / 2) < 4 * 17.6 / math.sqrt(
                short.sum())
    # In the pipeline output: short targets give shorter sequences (not very short here: A and
    # B hold a whole sentence each, ~15 pieces, before truncation).
    lengths = {}
    for p in (0.0, 1.0):
        b = rows(take(batches(tok, short_seq_prob=p), 10))
        lengths[p] = b["input_mask"].sum(1)
    assert lengths[0.0].mean() > 62 and lengths[1.0].mean() < lengths[0.0].mean() - 4, {
        k: v.mean() for k, v in lengths.items()}
    assert (lengths[1.0] < 48).mean() > (lengths[0.0] < 48).mean() + 0.05


# ------------------------------------------------------------------------------ packed formats


def inner(ids: np.ndarray, tok) -> np.ndarray:
    """Tokens between [CLS] and the final [SEP] of one unpadded row."""
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    return ids[1:-1]


@pytest.mark.parametrize("input_format", ["full_sentences", "doc_sentences"])
def test_packed_formats_boundaries(tok, input_format):
    num = pt.num_examples(DOCS, tok, max_seq_length=64, seed=0, input_format=input_format)
    b = rows(take(batches(tok, train=False, input_format=input_format),
                  num_batches(num, batch_size=16)))
    assert "next_sentence_label" not in b and not b["segment_ids"].any()
    real = b["mask"] > 0
    ids, inmask = originals(b)[real], b["input_mask"][real]
    locate = Locator(tok, DOCS)
    doc_tokens, budget = locate.docs, 64 - 2

    def next_sentence(doc, position):  # length of the sentence starting at `position`
        return min(e for e in locate.bounds[doc] if e > position) - position

    lengths, position, doc = [], 0, 0        # walk the corpus along the examples (plan order)
    for r in range(len(ids)):
        body = inner(ids[r, :inmask[r].sum()], tok)
        parts = np.split(body, np.flatnonzero(body == tok.sep_id))
        parts = [parts[0]] + [p[1:] for p in parts[1:]]
        if input_format == "doc_sentences":
            assert len(parts) == 1                                   # never crosses documents
        for k, part in enumerate(parts):
            if k > 0:   # an inner [SEP] stands exactly between two documents
                assert position == len(doc_tokens[doc]), "a [SEP] inside a document"
                doc, position = doc + 1, 0
            elif position == len(doc_tokens[doc]):   # this example starts the next document
                doc, position = doc + 1, 0
            assert position in locate.bounds[doc]        # starts with a whole sentence
            np.testing.assert_array_equal(part, doc_tokens[doc][position:position + len(part)])
            position += len(part)
            assert position in locate.bounds[doc]        # ends with a whole sentence
        lengths.append(len(body))
        # Greedy: the next sentence would not have fit (after a [SEP] at a document's end).
        if position < len(doc_tokens[doc]):
            assert len(body) + next_sentence(doc, position) > budget
        elif input_format == "full_sentences" and doc + 1 < len(doc_tokens):
            assert len(body) + 1 + next_sentence(doc + 1, 0) > budget
    assert doc == len(doc_tokens) - 1 and position == len(doc_tokens[doc])   # all, in order
    assert max(lengths) <= budget and np.mean(lengths) > 40


def test_overlong_sentence_is_cut_into_pieces(tok):
    long = " ".join(["the unfinished bridge"] * 40) + "."
    docs = [Document("a", [["After dinner.", long, "The harvest."]]),
            Document("b", [["The annual ball."]])]
    c = pi.tokenize_documents(docs, tok)
    for fmt, cross in (("full_sentences", True), ("doc_sentences", False)):
        plan = pi.packed_plan(c, max_seq_length=32, cross_documents=cross)
        spans = plan[:, :2]
        assert (spans[:, 1] - spans[:, 0] <= 30).all()
        np.testing.assert_array_equal(spans[1:, 0], spans[:-1, 1])   # nothing lost or repeated
        assert spans[0, 0] == 0 and spans[-1, 1] == len(c.tokens)
    segment = pi.segment_pair_plan(c, max_seq_length=32, short_seq_prob=0.0,
                                   rng=random.Random(0))
    lengths = segment[:, 1] - segment[:, 0] + segment[:, 3] - segment[:, 2]
    assert (lengths <= 29).all() and (lengths >= 2).all()


# ------------------------------------------------------------------------------------ masking


@pytest.mark.parametrize("rates, whole_word, max_predictions", [
    ((0.15, 0.8, 0.1, 0.1), False, 20),      # BERT
    ((0.20, 1.0, 0.0, 0.0), True, 32),       # 20%, all [MASK], whole words
])
def test_masking_rates_from_the_pipeline(tok, rates, whole_word, max_predictions):
    select, p_mask, p_random, p_keep = rates
    cfg = pt.masking_config(tok, select_prob=select, mask_prob=p_mask, random_prob=p_random,
                            keep_prob=p_keep, max_predictions=max_predictions,
                            whole_word=whole_word)
    b = rows(take(batches(tok, masking=cfg, max_seq_length=128, batch_size=50), 20))
    original = originals(b)
    special = np.isin(original, tok.special_ids)
    candidates = ~special
    assert candidates.sum() >= 100_000
    weights = b["masked_weights"] > 0
    r, c = np.nonzero(weights)
    positions = b["masked_positions"][r, c]
    labels = b["masked_ids"][r, c]
    shown = b["input_ids"][r, positions]

    assert not np.isin(labels, tok.special_ids).any()          # specials never chosen
    assert (b["input_ids"][:, 0] == tok.cls_id).all()
    assert ((b["input_ids"] == tok.sep_id).sum(1) == 2).all()   # both [SEP] intact
    unchanged = np.ones_like(weights[:, :1]).repeat(128, 1).astype(bool)
    unchanged[r, positions] = False
    np.testing.assert_array_equal(b["input_ids"][unchanged], original[unchanged])

    per_row = weights.sum(1)
    target = [min(max_predictions, max(1, round(n * select))) for n in candidates.sum(1)]
    if whole_word:
        assert (per_row <= target).all() and per_row.sum() >= 0.99 * sum(target)
    else:
        np.testing.assert_array_equal(per_row, target)
    assert abs(per_row.sum() / candidates.sum() - select) < 0.005

    n = len(labels)
    is_mask = shown == tok.mask_id
    is_random = ~is_mask & (shown != labels)
    assert not np.isin(shown[is_random], tok.special_ids).any()  # random never special
    pool = tok.vocab_size - len(tok.special_ids)
    for observed, p in ((is_mask.mean(), p_mask), (is_random.mean(), p_random * (1 - 1 / pool)),
                        ((~is_mask & ~is_random).mean(), p_keep + p_random / pool)):
        assert (observed == p) if p in (0.0, 1.0) else within(observed, p, n), (observed, p, n)

    if whole_word:  # every chosen word is chosen whole
        chosen = np.zeros_like(original, bool)
        chosen[r, positions] = True
        starts = tok.word_starts(original) | special
        # Token j + 1 continues the word of token j (a '##' piece right after [SEP], left by
        # truncating B at the front, starts a word of its own).
        follows = ~starts[:, 1:] & ~special[:, :-1]
        np.testing.assert_array_equal(chosen[:, 1:][follows], chosen[:, :-1][follows])
        assert follows[chosen[:, 1:]].any()                     # multi-piece words were chosen


def test_config_errors(tok):
    with pytest.raises(DataError, match="input_format"):
        batches(tok, input_format="sentence_pair")
    with pytest.raises(DataError, match="dupe_factor"):
        batches(tok, dupe_factor=5)                   # dynamic by default
    wrong = pt.MaskingConfig(vocab_size=tok.vocab_size, mask_id=tok.mask_id, special_ids=(0,))
    with pytest.raises(DataError, match="special_ids"):
        batches(tok, masking=wrong)
    with pytest.raises(DataError, match="at least 2 documents"):
        batches(tok, docs=DOCS[:1])
    with pytest.raises(DataError, match="max_seq_length"):
        batches(tok, max_seq_length=4)
