"""BERT/RoBERTa pretraining batches across epochs and runs (data/pipelines/pretraining.py): static
masking repeats its examples every epoch and dynamic masking draws new masks (and pairs); a
restored pipeline continues exactly; processes take disjoint shares of the global batches."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from batch_checks import take
from data.pipelines import pretraining as pt
from data.pipelines.sharding import num_batches
from data.vocab import wordpiece as wp
from english_documents import DOCS
from pretraining_batches import batches, english_tokenizer, originals, rows


@pytest.fixture(scope="module")
def tok() -> wp.WordPieceTokenizer:
    return english_tokenizer()


def as_set(b: dict[str, np.ndarray], keys=("input_ids", "masked_positions", "segment_ids")):
    return collections.Counter(b"".join(b[k][r].tobytes() for k in keys)
                               for r in range(len(b[keys[0]])))


@pytest.mark.parametrize("input_format", ["segment_pair", "full_sentences"])
def test_static_repeats_epochs_and_dynamic_does_not(tok, input_format):
    n = pt.num_examples(DOCS, tok, max_seq_length=64, seed=0, input_format=input_format)
    need = -(-2 * n // 16)
    static = rows(take(batches(tok, input_format=input_format, dynamic=False), need))
    first = {k: v[:n] for k, v in static.items()}
    second = {k: v[n:2 * n] for k, v in static.items()}
    assert as_set(first) == as_set(second)                      # same pairs and masks
    assert not np.array_equal(first["input_ids"], second["input_ids"])   # reshuffled
    if input_format == "segment_pair":
        assert (np.sort(first["next_sentence_label"]) ==
                np.sort(second["next_sentence_label"])).all()

    dynamic = rows(take(batches(tok, input_format=input_format), need))
    first = {k: v[:n] for k, v in dynamic.items()}
    second = {k: v[n:2 * n] for k, v in dynamic.items()}
    overlap = sum((as_set(first) & as_set(second)).values()) / n
    assert overlap < 0.05, overlap                              # new masks (and pairs)
    unmasked = [as_set({"x": originals(x)}, ("x",)) for x in (first, second)]
    if input_format == "full_sentences":                        # the packing stays, masks change
        assert unmasked[0] == unmasked[1]
    else:                                                       # a fresh pairing every epoch
        assert sum((unmasked[0] & unmasked[1]).values()) / n < 0.2

    # Static with dupe_factor 2: two different pairings, each with its own masks.
    n2 = pt.num_examples(DOCS, tok, max_seq_length=64, seed=0, input_format=input_format,
                         dupe_factor=2)
    assert abs(n2 - 2 * n) <= (0.1 * n if input_format == "segment_pair" else 0)


@pytest.mark.parametrize("kwargs", [
    dict(),                                                  # dynamic segment pairs
    dict(dynamic=False, dupe_factor=2),                      # static
    dict(input_format="doc_sentences"),
    dict(train=False),
])
def test_resume_is_exact(tok, kwargs):
    # Training: the state is taken after 960 examples and the next 1,920 cross the end of the
    # first epoch (~1,250 examples; ~2,500 with dupe_factor 2), so a new plan is made.
    kwargs = dict(batch_size=64, **kwargs)
    it = batches(tok, **kwargs)
    head = take(it, 15 if kwargs.get("train", True) else 5)
    state = it.get_state()
    tail = take(it, 30 if kwargs.get("train", True) else 5)
    resumed = batches(tok, **kwargs)
    resumed.set_state(state)
    for expected, got in zip(tail, take(resumed, len(tail))):
        assert expected.keys() == got.keys()
        for k in expected:
            np.testing.assert_array_equal(expected[k], got[k], err_msg=k)
    assert head   # and a fresh pipeline starts from the beginning again
    np.testing.assert_array_equal(next(batches(tok, **kwargs))["input_ids"], head[0]["input_ids"])


@pytest.mark.parametrize("kwargs", [dict(), dict(dynamic=False)])
def test_process_sharding_train(tok, kwargs):
    single = take(batches(tok, batch_size=8, **kwargs), 8)
    shards = [take(batches(tok, batch_size=8, process_index=i, process_count=2, **kwargs), 4)
              for i in range(2)]
    for step in range(4):     # process i takes global batches i, i + 2, ...
        for i in range(2):
            for k in single[0]:
                np.testing.assert_array_equal(shards[i][step][k], single[2 * step + i][k])


@pytest.mark.parametrize("batch_size", [16, 10])
def test_process_sharding_eval(tok, batch_size):
    """Eval over 3 processes: every process yields exactly `num_batches(...)` batches, process
    i holding global batches i, i + 3, ... of the single-process stream, padded with all-zero
    mask=0 rows to whole global batches. 1,248 examples fill 78 batches of 16 exactly (no
    padding); with batch_size 10 the last global batch of 30 holds 18 real rows and 12 padding
    rows, so padding to per-process rather than global batches leaves a process short."""
    num = pt.num_examples(DOCS, tok, max_seq_length=64, seed=0)
    single = rows(take(batches(tok, train=False, batch_size=batch_size),
                       num_batches(num, batch_size=batch_size)))
    count = num_batches(num, batch_size=batch_size, process_count=3)
    assert (num % (3 * batch_size) == 0) == (batch_size == 16)
    shards = []
    for i in range(3):
        it = batches(tok, train=False, batch_size=batch_size, process_index=i, process_count=3)
        shards.append(take(it, count))
        with pytest.raises(StopIteration):        # every process yields exactly `count`
            next(it)
    for step in range(count):                     # process i holds global batches i, i + 3, ...
        for i in range(3):
            lo = (3 * step + i) * batch_size
            got = shards[i][step]
            real = got["mask"] > 0
            np.testing.assert_array_equal(real, np.arange(lo, lo + batch_size) < num)
            for k in got:
                np.testing.assert_array_equal(got[k][real], single[k][lo:lo + real.sum()],
                                              err_msg=k)
                pad = tok.pad_id if k == "input_ids" else 0     # padding rows: [PAD], zeros
                assert (got[k][~real] == pad).all(), k
    assert sum(int(b["mask"].sum()) for s in shards for b in s) == num
