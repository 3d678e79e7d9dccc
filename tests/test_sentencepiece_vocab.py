"""The shared SentencePiece vocabulary (data/vocab/sentencepiece.py): special ids, the cache and
its file names, deterministic training, corrupt or mismatched cache files, concurrent callers."""

from __future__ import annotations

import pickle
import re
import threading

import pytest

from data.vocab import sentencepiece as sv
from data.errors import DataError
from en_es_pairs import KEYS, PAIRS, VOCAB, make_examples, texts_fn


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return sv.load_or_train("test_pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                            cache_dir=tmp_path_factory.mktemp("vocab"), verbose=False)


def test_special_ids_and_round_trip(tokenizer):
    assert (tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.bos_id) == (0, 1, 2, 3)
    assert [tokenizer.id_to_piece(i) for i in range(4)] == ["<pad>", "</s>", "<unk>", "<s>"]
    assert tokenizer.vocab_size == VOCAB
    for en, es in PAIRS:
        for sentence in (en, es):
            ids = tokenizer.encode(sentence)
            assert sv.EOS_ID not in ids and sv.BOS_ID not in ids and sv.PAD_ID not in ids
            assert tokenizer.decode(ids) == sentence
            assert tokenizer.encode(sentence.encode("utf-8")) == ids  # bytes accepted
            # decode stops at EOS and skips BOS / padding
            assert tokenizer.decode([sv.BOS_ID, *ids, sv.EOS_ID, 7, 8, 0, 0]) == sentence
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode(PAIRS[0][1]) == tokenizer.encode(PAIRS[0][1])


def test_cache_reused_and_settings_give_other_files(tmp_path, monkeypatch):
    first = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                             verbose=False)
    path = first.path
    assert path.parent == tmp_path and path.exists()
    for part in ("pairs.train.en+es", "unigram", f"v{VOCAB}", "cov1", "max1000000"):
        assert part in path.name
    mtime = path.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of using the cache")

    monkeypatch.setattr(sv, "_train_model", no_training)
    again = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                             verbose=False)
    assert again.path == path and path.stat().st_mtime_ns == mtime
    assert again.model_proto == first.model_proto
    monkeypatch.undo()

    settings = dict(vocab_size=VOCAB, model_type="unigram", character_coverage=1.0,
                    max_sentences=1_000_000, cache_dir=tmp_path)
    changes = [("name", "pairs.train.en+fr"), ("vocab_size", VOCAB - 8), ("model_type", "bpe"),
               ("character_coverage", 0.9995), ("max_sentences", 50)]
    paths = {path}
    for key, value in changes:
        name = value if key == "name" else "pairs.train.en+es"
        other = {**settings, **({} if key == "name" else {key: value})}
        paths.add(sv.cache_path(name, **other))
    assert len(paths) == len(changes) + 1
    # split strings with odd characters stay distinct
    assert (sv.cache_path("d.train[:90%].en", vocab_size=8) !=
            sv.cache_path("d.train[:10%].en", vocab_size=8))

    bpe = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB - 8,
                           model_type="bpe", cache_dir=tmp_path, verbose=False)
    assert bpe.path != path and bpe.vocab_size == VOCAB - 8
    assert bpe.decode(bpe.encode(PAIRS[3][1])) == PAIRS[3][1]


def test_default_cache_is_under_data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    tok = sv.vocab_for_source(make_examples(), KEYS, dataset="pairs", split="train",
                              vocab_size=VOCAB, verbose=False)
    assert tok.path.parent == tmp_path / "vocab"
    assert tok.path.name.startswith("pairs.train.en+es.")


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_is_deterministic(model_type):
    kwargs = dict(vocab_size=VOCAB - 8, model_type=model_type, character_coverage=1.0)
    assert sv._train_model(texts_fn(), **kwargs) == sv._train_model(texts_fn(), **kwargs)


def test_corrupt_cache_raises_naming_the_file(tmp_path):
    path = sv.cache_path("pairs.train.en+es", vocab_size=VOCAB, cache_dir=tmp_path)
    path.write_bytes(b"\x00this is not a sentencepiece model\xff" * 10)
    with pytest.raises(DataError, match="delete") as error:
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                         verbose=False)
    assert str(path) in str(error.value)
    assert path.read_bytes().startswith(b"\x00this is not")  # never overwritten


def test_cache_file_of_other_settings_is_rejected(tmp_path):
    tok = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB - 8,
                           cache_dir=tmp_path, verbose=False)
    wrong = sv.cache_path("pairs.train.en+es", vocab_size=VOCAB, cache_dir=tmp_path)
    wrong.write_bytes(tok.path.read_bytes())  # a model of another size under this name
    with pytest.raises(DataError, match=re.escape(str(wrong))):
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                         verbose=False)


def test_concurrent_callers_train_once(tmp_path, monkeypatch):
    trainings = []
    train = sv._train_model

    def counting(*args, **kwargs):
        trainings.append(1)
        return train(*args, **kwargs)

    monkeypatch.setattr(sv, "_train_model", counting)
    results = [None] * 3

    def call(i):
        results[i] = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB,
                                      cache_dir=tmp_path, verbose=False)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trainings) == 1
    assert len({r.model_proto for r in results}) == 1
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [
        results[0].path.name]  # no temporary file left behind


def test_source_texts_spread_over_the_source():
    examples = make_examples()
    texts = list(sv.source_texts(examples, KEYS, max_sentences=10)())
    assert len(texts) == 10
    assert texts[:2] == list(PAIRS[0]) and texts[-2:] == list(PAIRS[-1])
    assert list(sv.source_texts(make_examples(as_bytes=True), KEYS)())[1] == PAIRS[0][1]


def test_load_or_train_for_dataset_opens_the_source_only_to_train(tmp_path, monkeypatch):
    import data.builders.sources

    opened = []

    def fake_source(name, split, *, source="local"):
        opened.append((name, split, source))
        return make_examples()

    monkeypatch.setattr(data.builders.sources, "get_data_source", fake_source)
    kwargs = dict(split="train", keys=KEYS, vocab_size=VOCAB, cache_dir=tmp_path, verbose=False)
    tok = sv.load_or_train_for_dataset("pairs", **kwargs)
    assert opened == [("pairs", "train", "local")]
    assert tok.path.name.startswith("pairs.train.en+es.")
    assert sv.load_or_train_for_dataset("pairs", **kwargs).model_proto == tok.model_proto
    assert len(opened) == 1  # the cache hit did not open the dataset


def test_too_large_vocabulary_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="lower vocab_size"):
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=50_000, cache_dir=tmp_path,
                         verbose=False)
    assert not list(tmp_path.glob("*.model"))


def test_too_small_vocabulary_names_the_smallest_and_leaves_nothing(tmp_path):
    """SentencePiece refuses a vocab_size below its special pieces plus the texts' characters
    (it never writes a model that the cache would then call corrupt); the error says the
    smallest size, which then trains, and a failed training leaves no lock file behind."""
    with pytest.raises(DataError, match=r"vocab_size=20 is below the (\d+) pieces.*at least "
                                        r"\1, or lower character_coverage") as error:
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=20, cache_dir=tmp_path,
                         verbose=False)
    assert list(tmp_path.iterdir()) == []
    smallest = int(re.search(r"at least (\d+)", str(error.value))[1])
    tok = sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=smallest,
                           cache_dir=tmp_path, verbose=False)
    assert tok.vocab_size == smallest
    assert [p.name for p in tmp_path.iterdir()] == [tok.path.name]


def test_a_trained_model_failing_the_cache_check_is_a_bug_not_a_corrupt_file(tmp_path,
                                                                            monkeypatch):
    """A model the run itself just trained is never reported as corrupt (with advice to delete
    it): one that fails the cache's check is a bug here, and is not written."""
    train = sv._train_model

    def one_short(texts, *, vocab_size, **kwargs):  # a bug: trains another size than asked
        return train(texts, vocab_size=vocab_size - 1, **kwargs)

    monkeypatch.setattr(sv, "_train_model", one_short)
    with pytest.raises(RuntimeError, match="a bug in data/vocab/sentencepiece.py"):
        sv.load_or_train("pairs.train.en+es", texts_fn, vocab_size=VOCAB, cache_dir=tmp_path,
                         verbose=False)
    assert list(tmp_path.iterdir()) == []


def test_training_reads_the_first_max_sentences_non_empty_texts(tmp_path, monkeypatch):
    """The trainer gets the first `max_sentences` texts of `texts_fn()` that are not empty, as
    str (bytes decoded), in order: empty texts neither reach it nor count towards the cap."""
    seen = []
    train = sv._train_model

    def recording(texts, **kwargs):
        seen.extend(texts)
        return train(texts_fn(), **kwargs)       # a real model, so the cache file loads

    monkeypatch.setattr(sv, "_train_model", recording)
    sentences = [s for pair in PAIRS for s in pair]
    mixed = ["", sentences[0], b"", sentences[1].encode("utf-8"), "", *sentences[2:]]
    sv.load_or_train("capped.train.en+es", lambda: iter(mixed), vocab_size=VOCAB,
                     max_sentences=7, cache_dir=tmp_path, verbose=False)
    assert seen == sentences[:7]
    seen.clear()
    sv.load_or_train("all.train.en+es", lambda: iter(mixed), vocab_size=VOCAB,
                     max_sentences=None, cache_dir=tmp_path, verbose=False)
    assert seen == sentences

