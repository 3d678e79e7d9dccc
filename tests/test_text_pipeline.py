"""The translation pipeline (data/pipelines/translation.py): packing, truncation, resume, process
shards and eval batches, on the sentence pairs of tests/en_es_pairs.py."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from batch_checks import assert_batches_equal, take
from data.vocab import sentencepiece as sv
from data.pipelines import translation as text
from data.pipelines.counts import long_example_counts
from data.pipelines.sharding import num_batches
from data.errors import DataError
from en_es_pairs import KEYS, PAIRS, VOCAB, make_examples, texts_fn


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return sv.load_or_train("test_pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                            cache_dir=tmp_path_factory.mktemp("vocab"), verbose=False)


def train_batches(source, tokenizer, **kwargs):
    return text.translation_batches(source, tokenizer, train=True, **kwargs)


def eval_batches(source, tokenizer, **kwargs):
    return text.translation_batches(source, tokenizer, train=False, **kwargs)


def segments(row_tokens, row_segmentation):
    """{segment id: tokens} of one packed row."""
    return {int(s): row_tokens[row_segmentation == s].tolist()
            for s in np.unique(row_segmentation) if s}


def expected_tokens(tok, examples, max_length):
    """(inputs, targets) token lists of every example, truncated with EOS as the pipeline does."""
    out = []
    for e in examples:
        src = tok.encode(e["en"])[: max_length - 1] + [sv.EOS_ID]
        tgt = tok.encode(e["es"])[: max_length - 1] + [sv.EOS_ID]
        out.append((tuple(src), tuple(tgt)))
    return out


# --------------------------------------------------------------------------------- training


def test_packed_batches_hold_every_example_once(tokenizer):
    """Packed rows are well formed and one epoch holds every example once; the per-batch counts
    (`last_stats`) are the examples packed into the batch and, of those, the ones truncated
    (16 of the 40 examples are longer than 24 tokens), summed over all rows and segments."""
    examples = make_examples(as_bytes=True)
    max_length, rows = 24, 4
    it = train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=rows,
                            max_length=max_length, seed=3)
    want = expected_tokens(tokenizer, examples, max_length)
    untruncated = set(expected_tokens(tokenizer, examples, 10_000))
    assert len(set(want)) == len(examples) and 10 < len(set(want) - untruncated) < 30
    seen = []
    while len(seen) < len(examples):
        batch = next(it)
        before = len(seen)
        assert sorted(batch) == sorted(text.ARRAY_KEYS)
        for key in text.ARRAY_KEYS:
            assert batch[key].dtype == np.int32 and batch[key].shape == (rows, max_length), key
        for r in range(rows):
            for side in ("inputs", "targets"):
                seg = batch[f"{side}_segmentation"][r]
                pos = batch[f"{side}_position"][r]
                ids = np.unique(seg[seg > 0])
                np.testing.assert_array_equal(ids, np.arange(1, len(ids) + 1))  # 1, 2, ...
                # segments are contiguous, padding only at the end, positions restart at 0
                assert np.all(np.diff(seg[seg > 0]) >= 0) and np.all(seg[np.sum(seg > 0):] == 0)
                for s in ids:
                    np.testing.assert_array_equal(pos[seg == s], np.arange(np.sum(seg == s)))
                assert np.all(pos[seg == 0] == 0) and np.all(batch[side][r][seg == 0] == 0)
            src = segments(batch["inputs"][r], batch["inputs_segmentation"][r])
            tgt = segments(batch["targets"][r], batch["targets_segmentation"][r])
            assert src.keys() == tgt.keys()  # both sides of an example share the segment id
            seen += [(tuple(src[s]), tuple(tgt[s])) for s in sorted(src)]
        in_batch = seen[before:]
        assert it.last_stats == {"examples": len(in_batch), "dropped": 0,
                                 "truncated": sum(e not in untruncated for e in in_batch)}
    # The batches hold the first len(seen) examples of the stream (see the next test): the
    # whole first epoch, each example once, and the start of the second.
    extra = collections.Counter(seen) - collections.Counter(want)
    assert not collections.Counter(want) - collections.Counter(seen)
    assert sum(extra.values()) == len(seen) - len(examples)
    assert it.stats["examples"] == len(seen)
    assert it.stats["truncated"] == sum(e not in untruncated for e in seen) >= 16


def test_packed_matches_unpacked_decoded(tokenizer):
    """Packed batches decoded back give the examples of the unpacked pipeline (same stream).

    A batch of first-fit packing holds a contiguous stretch of the example stream (its rows are
    the packing bins), so k packed batches hold exactly the first m_k unpacked examples.
    """
    examples = make_examples()
    common = dict(source_key="en", target_key="es", max_length=96, seed=5)
    unpacked = train_batches(examples, tokenizer, batch_size=1, pack=False, **common)
    packed = train_batches(examples, tokenizer, batch_size=4, pack=True, **common)
    decoded = []
    while len(decoded) < 2 * len(examples):  # two epochs: the second is reshuffled
        batch = next(packed)
        for r in range(4):
            src_seg, tgt_seg = batch["inputs_segmentation"][r], batch["targets_segmentation"][r]
            for s in np.unique(src_seg[src_seg > 0]):
                decoded.append((tokenizer.decode(batch["inputs"][r][src_seg == s]),
                                tokenizer.decode(batch["targets"][r][tgt_seg == s])))
    rows = take(unpacked, len(decoded))
    for row in rows:
        np.testing.assert_array_equal(row["inputs_segmentation"], row["inputs"] != 0)
        n = int(row["targets_segmentation"].sum())
        np.testing.assert_array_equal(row["targets_position"][0, :n], np.arange(n))
    want = [(tokenizer.decode(row["inputs"][0]), tokenizer.decode(row["targets"][0]))
            for row in rows]
    assert sorted(decoded) == sorted(want)
    assert sorted(want[: len(examples)]) == sorted(PAIRS)  # nothing truncated at 96 tokens
    assert want[: len(examples)] != want[len(examples):]  # the second epoch is reshuffled
    assert packed.stats["examples"] == unpacked.stats["examples"] == len(decoded)


def test_truncation_policy_and_count(tokenizer):
    examples = make_examples()
    max_length = 20
    want = expected_tokens(tokenizer, examples, max_length)
    n_long = sum(len(tokenizer.encode(e["en"])) + 1 > max_length
                 or len(tokenizer.encode(e["es"])) + 1 > max_length for e in examples)
    assert 0 < n_long < len(examples)
    it = train_batches(examples, tokenizer, source_key="en", target_key="es",
                            batch_size=len(examples), max_length=max_length, seed=0, pack=False)
    batch = next(it)
    got = []
    for r in range(len(examples)):
        src = batch["inputs"][r][batch["inputs_segmentation"][r] > 0].tolist()
        tgt = batch["targets"][r][batch["targets_segmentation"][r] > 0].tolist()
        assert src[-1] == sv.EOS_ID and tgt[-1] == sv.EOS_ID and len(src) <= max_length
        got.append((tuple(src), tuple(tgt)))
    assert sorted(got) == sorted(want)
    assert it.last_stats == {"examples": len(examples), "truncated": n_long, "dropped": 0}
    assert it.stats == it.last_stats


def test_drop_policy_skips_and_counts(tokenizer):
    examples = make_examples()
    max_length = 22
    fits = [(s, t) for s, t in expected_tokens(tokenizer, examples, 10_000)
            if len(s) <= max_length and len(t) <= max_length]
    n_drop = len(examples) - len(fits)
    assert 0 < n_drop < len(examples)
    common = dict(source_key="en", target_key="es", max_length=max_length, seed=0,
                  long_examples="drop")
    # one example per row: the stream order is visible
    it = train_batches(examples, tokenizer, batch_size=1, pack=False, **common)
    rows = take(it, len(fits))
    first_epoch = [(tuple(r["inputs"][0][r["inputs"][0] > 0]),
                    tuple(r["targets"][0][r["targets"][0] > 0])) for r in rows]
    assert sorted(first_epoch) == sorted(fits)
    # a dropped example is counted with the next kept one (maybe the next epoch's first)
    assert it.stats["dropped"] <= n_drop and it.stats["truncated"] == 0
    next(it)
    assert it.stats["dropped"] >= n_drop
    # packed: only fitting examples, never truncated
    packed = train_batches(examples, tokenizer, batch_size=3, **common)
    for batch in take(packed, 10):
        for r in range(3):
            src = segments(batch["inputs"][r], batch["inputs_segmentation"][r])
            tgt = segments(batch["targets"][r], batch["targets_segmentation"][r])
            assert {(tuple(src[s]), tuple(tgt[s])) for s in src} <= set(fits)
    assert packed.stats["truncated"] == 0 and packed.stats["dropped"] > 0
    counts = long_example_counts(packed)
    assert counts == {k: float(v) for k, v in packed.stats.items()}


def test_drop_of_everything_is_a_data_error(tokenizer):
    it = train_batches(make_examples(), tokenizer, source_key="en", target_key="es",
                            batch_size=2, max_length=2, seed=0, long_examples="drop")
    with pytest.raises(DataError, match="longer than max_length"):
        next(it)


def test_resume_is_exact(tokenizer):
    common = dict(source_key="en", target_key="es", batch_size=3, max_length=20, seed=7,
                  long_examples="drop")
    examples = make_examples()
    it = train_batches(examples, tokenizer, **common)
    take(it, 5)
    state = it.get_state()
    stats = dict(it.stats)
    following = take(it, 25)  # crosses epoch boundaries
    restored = train_batches(examples, tokenizer, **common)
    restored.set_state(state)
    assert restored.stats == stats
    assert_batches_equal(following, take(restored, 25))
    assert restored.stats == it.stats
    json.dumps(state)  # checkpointable as JSON


def test_process_shards_disjoint_and_covering(tokenizer):
    """Each process's shard of one epoch: disjoint, and together every example once."""
    examples = make_examples()  # 40 distinct pairs: shards of 14, 13 and 13
    count = 3
    per_process = []
    for index in range(count):
        it = train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=1,
                                max_length=96, seed=11, pack=False, process_index=index,
                                process_count=count)
        shard = len(range(index, len(examples), count))
        per_process.append([tokenizer.decode(next(it)["inputs"][0]) for _ in range(shard)])
    flat = [s for shard in per_process for s in shard]
    assert sorted(flat) == sorted(e["en"] for e in examples)


def test_bad_arguments(tokenizer):
    examples = make_examples()
    with pytest.raises(DataError, match="long_examples"):
        train_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=2,
                           max_length=8, seed=0, long_examples="cut")
    for bad in (dict(pack=True), dict(long_examples="drop")):  # eval never packs or drops
        with pytest.raises(DataError, match="evaluation"):
            eval_batches(examples, tokenizer, source_key="en", target_key="es", batch_size=2,
                         max_length=8, **bad)
    with pytest.raises(DataError, match="'de'"):
        train_batches(examples, tokenizer, source_key="de", target_key="es", batch_size=2,
                           max_length=8, seed=0)


def test_worker_processes_resume_exactly(tokenizer):
    """grain worker processes (the tokenizer pickled into them), and their state restored."""
    examples = make_examples()
    common = dict(source_key="en", target_key="es", batch_size=4, max_length=24, seed=2)
    it = train_batches(examples, tokenizer, worker_count=2, **common)
    batches = take(it, 6)
    state = it.get_state()
    following = take(it, 3)
    it.close()
    restored = train_batches(examples, tokenizer, worker_count=2, **common)
    restored.set_state(state)
    assert_batches_equal(following, take(restored, 3))
    restored.close()
    assert all(sorted(b) == sorted(text.ARRAY_KEYS) for b in batches)


# ------------------------------------------------------------------------------------- eval


@pytest.mark.parametrize("process_count", [1, 2])
def test_eval_pads_with_mask_and_keeps_texts(tokenizer, process_count):
    examples = make_examples()  # 40 examples, the last one long
    batch_size, max_length = 6, 16
    steps = num_batches(len(examples), batch_size=batch_size, process_count=process_count)
    assert steps == -(-len(examples) // (batch_size * process_count))
    got_src, got_tgt, truncated = [], [], 0
    for index in range(process_count):
        it = eval_batches(examples, tokenizer, source_key="en", target_key="es",
                               batch_size=batch_size, max_length=max_length,
                               process_index=index, process_count=process_count)
        batches = list(it)
        assert len(batches) == steps
        for batch in batches:
            assert sorted(batch) == sorted((*text.ARRAY_KEYS, "mask", "index", *text.TEXT_KEYS))
            assert batch["mask"].dtype == np.float32 and batch["mask"].shape == (batch_size,)
            assert batch["inputs"].shape == (batch_size, max_length)
            real = batch["mask"] == 1
            assert batch["index"].dtype == np.int32 and np.all(batch["index"][~real] == -1)
            assert np.all(batch["inputs"][~real] == 0)
            assert np.all(batch["source_text"][~real] == "")
            for j in np.flatnonzero(real):
                ids = batch["inputs"][j][batch["inputs_segmentation"][j] > 0]
                assert ids[-1] == sv.EOS_ID
                assert tokenizer.decode(ids) in batch["source_text"][j]
                assert batch["source_text"][j] == PAIRS[batch["index"][j]][0]
                assert batch["target_text"][j] == PAIRS[batch["index"][j]][1]
            got_src += list(batch["source_text"][real])
            got_tgt += list(batch["target_text"][real])
            assert set(text.without_text(batch)) == {*text.ARRAY_KEYS, "mask", "index"}
        truncated += it.stats["truncated"]
        assert it.stats["dropped"] == 0
    assert sorted(got_src) == sorted(en for en, _ in PAIRS)  # every example exactly once
    assert PAIRS[-1][1] in got_tgt  # the long reference is kept whole for BLEU
    assert truncated >= 1
    if process_count == 1:
        assert got_src == [en for en, _ in PAIRS]  # in order


def test_tfds_array_record_source(tmp_path):
    """A real TFDS array_record data source (texts come back as bytes) through both pipelines."""
    import tensorflow_datasets as tfds

    class TextPairsForTest(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            text_feature = tfds.features.Text
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
                {"en": text_feature(), "es": text_feature(), "ref": text_feature()}))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(), "test": self._generate_examples()}

        def _generate_examples(self):
            for i, (en, es) in enumerate(PAIRS):
                yield i, {"en": en, "es": es, "ref": f"Test {i}:1"}

    builder = TextPairsForTest(data_dir=tmp_path / "tfds", file_format="array_record")
    builder.download_and_prepare()
    train, test = (builder.as_data_source(split=split) for split in ("train", "test"))
    assert isinstance(train[0]["en"], bytes)
    tok = sv.vocab_for_source(train, KEYS, vocab_size=VOCAB, cache_dir=tmp_path, verbose=False)
    assert tok.path.name.startswith(f"{builder.name}.train.en+es.")
    it = train_batches(train, tok, source_key="en", target_key="es", batch_size=4,
                       max_length=32, seed=0)
    assert sorted(next(it)) == sorted(text.ARRAY_KEYS)
    batches = list(eval_batches(test, tok, source_key="en", target_key="es", batch_size=16,
                                max_length=32))
    texts = [t for b in batches for t, m in zip(b["target_text"], b["mask"]) if m]
    assert sorted(texts) == sorted(es for _, es in PAIRS)
