"""The English LM corpus (data/builders/english_lm.py), its byte-level BPE (data/vocab/bpe.py)
and the rows of the causal-LM pipeline (data/pipelines/lm.py)."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from data import builders, fetch, fetched
from data.builders.documents import read_documents
from data.builders.english_lm import CORPORA
from data.builders.sources import get_data_source
from data.corpora import bible
from data.errors import DataError
from data.pipelines import lm as lm_data
from data.vocab import bpe

TEXTS = ["It is a truth universally acknowledged, that a single man in possession of a good "
         "fortune, must be in want of a wife.", "Caf\u00e9 na\u00efve \u2014 \u201cquoted\u201d "
         "and  double  spaces\n\nand newlines.", "The Congress shall have power."] * 20


def _texts(split):
    source = get_data_source("english_lm", split)
    return [source[i] for i in range(len(source))]


# ----------------------------------------------------------------------------- the corpus


def test_english_lm_holds_every_corpus_whole_split_as_their_own_datasets(english_lm_env):
    examples = {split: _texts(split) for split in ("train", "validation")}
    for split, items in examples.items():
        assert {e["corpus"].decode() for e in items} == set(CORPORA), split
    ids = [e["doc_id"].decode() for items in examples.values() for e in items]
    assert len(ids) == len(set(ids))
    # Austen's and Brown's documents are split as their own datasets split them.
    for corpus in ("austen", "brown"):
        own = {d.doc_id for d in read_documents(corpus, "validation")}
        held_out = {e["doc_id"].decode()[len(corpus) + 1:] for e in examples["validation"]
                    if e["corpus"] == corpus.encode()}
        assert held_out == own, corpus
    # A document is the whole text, paragraphs on lines of their own.
    brown_doc = next(d for d in read_documents("brown", "train") if d.doc_id == "ca01")
    stored = next(e for e in examples["train"] if e["doc_id"] == b"brown/ca01")
    assert stored["text"].decode() == "\n".join(" ".join(p) for p in brown_doc.paragraphs)


def test_bible_chapters_are_whole_english_chapters(english_lm_env):
    chapters = bible.read_english_chapters()
    by_id = {d.doc_id: d for d in chapters}
    verses = bible.read_modules()["en"]
    genesis = [text for ref, text in verses.items() if ref[:2] == ("Gen", 1) and text]
    assert by_id["Gen.1"].paragraphs == [genesis]
    assert by_id["Gen.1"].metadata == {"book": "Gen", "chapter": 1}
    # Every book with two or more chapters keeps one in validation (5%, at least one).
    validation = {e["doc_id"].decode() for e in _texts("validation") if e["corpus"] == b"bible"}
    books = collections.Counter(d.metadata["book"] for d in chapters)
    held = collections.Counter(v.split("/")[1].split(".")[0] for v in validation)
    assert all(held[b] >= 1 for b, n in books.items() if n >= 2)


def test_fetching_english_lm_fetches_its_four_parts(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(fetch.raw, "fetch", lambda name, force: calls.append(name) or False)
    monkeypatch.setattr(fetch, "_prepare", lambda name, force: calls.append(f"prepare {name}"))
    assert fetch.main(["english_lm"]) == 0
    assert calls == ["austen", "brown", "sotu", "bible_en_es", "prepare english_lm"]
    assert fetch.main(["englsh_lm"]) == 1
    assert "english_lm" in capsys.readouterr().err  # the known names, this one among them


def test_a_run_without_the_parts_is_told_to_fetch_english_lm(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    with pytest.raises(DataError, match="python -m data.fetch english_lm"):
        fetched.require(["english_lm"])


# ----------------------------------------------------------------------------- the vocabulary


def test_bpe_round_trips_and_counts_the_bytes_of_its_tokens(tmp_path):
    tok = bpe.train_bpe(TEXTS, vocab_size=300)
    assert (tok.pad_id, tok.eos_id) == (0, 1) and tok.vocab_size <= 300
    literal = "a web page quoting <|endoftext|> and <|pad|> as text"
    for text in TEXTS[:3] + ["unseen \u00e6 \U0001F600 text", literal]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text and tok.encode_batch([text]) == [ids]
        assert tok.token_bytes[ids].sum() == len(text.encode("utf-8"))
        assert tok.pad_id not in ids and tok.eos_id not in ids
    assert tok.token_bytes[[tok.pad_id, tok.eos_id]].tolist() == [0, 0]
    again = bpe.train_bpe(TEXTS, vocab_size=300)
    assert again.tokenizer_json == tok.tokenizer_json  # deterministic
    with pytest.raises(DataError, match="must be an integer >= 258"):
        bpe.train_bpe(TEXTS, vocab_size=100)


def test_bpe_cache_trains_once_and_refuses_a_file_not_its_own(tmp_path):
    calls = []

    def texts():
        calls.append(1)
        return iter(TEXTS)

    first = bpe.load_or_train("x", "train", texts, vocab_size=300, cache_dir=tmp_path,
                              verbose=False)
    second = bpe.load_or_train("x", "train", texts, vocab_size=300, cache_dir=tmp_path,
                               verbose=False)
    assert calls == [1] and first.tokenizer_json == second.tokenizer_json
    assert not list(tmp_path.glob(".*lock"))
    path = bpe.cache_path("y", "train", vocab_size=259, cache_dir=tmp_path)
    path.write_text(first.tokenizer_json)  # 300 tokens under a name that says 259
    with pytest.raises(DataError, match="more than its name's 259"):
        bpe.load_or_train("y", "train", texts, vocab_size=259, cache_dir=tmp_path)
    path.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(DataError, match="corrupt"):
        bpe.cached("y", "train", vocab_size=259, cache_dir=tmp_path)
    assert bpe.cached("z", "train", vocab_size=259, cache_dir=tmp_path) is None


def test_a_run_keeps_its_bpe_vocabulary(tmp_path):
    from train import vocabulary

    tok = bpe.train_bpe(TEXTS, vocab_size=300)
    vocabulary.save(tmp_path, tok, {"data.vocab_size": 300})
    loaded = vocabulary.load(tmp_path)
    assert vocabulary.kind_of(loaded) == "bpe" and vocabulary.same(loaded, tok)
    assert not vocabulary.same(loaded, bpe.train_bpe(TEXTS[:2], vocab_size=300))


# ----------------------------------------------------------------------------- rows


def test_a_row_scores_only_pairs_inside_one_document():
    # stream: doc 7 = [1 5 6 1], doc 8 = [1 9 1]; a row of 5 inputs and 5 targets
    tokens = np.array([1, 5, 6, 1, 1, 9], np.int32)
    document = np.array([7, 7, 7, 7, 8, 8])
    row = lm_data.make_row(tokens, document, 5)
    assert row["tokens"].tolist() == [1, 5, 6, 1, 1]
    assert row["targets"].tolist() == [5, 6, 1, 1, 9]
    assert row["segment_ids"].tolist() == [1, 1, 1, 1, 2]
    assert row["positions"].tolist() == [0, 1, 2, 3, 0]
    assert row["weights"].tolist() == [1, 1, 1, 0, 1]  # never from doc 7's EOS into doc 8
    short = lm_data.make_row(tokens[:3], document[:3], 5)  # the padded last row of a split
    assert short["weights"].tolist() == [1, 1, 0, 0, 0]
    assert short["segment_ids"].tolist() == [1, 1, 1, 0, 0]


@pytest.mark.parametrize("length", [1, 3, 8, 40])
def test_eval_rows_score_every_pair_of_the_stream_once_at_any_length(length):
    rng = np.random.default_rng(0)
    sizes = rng.integers(3, 30, size=6)
    document = np.repeat(np.arange(6), sizes)
    tokens = rng.integers(2, 50, size=len(document)).astype(np.int32)
    rows = lm_data.eval_rows((tokens, document), length)
    pairs = collections.Counter()
    for inp, tgt, w in zip(rows["tokens"], rows["targets"], rows["weights"]):
        for a, b, weight in zip(inp, tgt, w):
            if weight:
                pairs[(int(a), int(b))] += 1
    expected = collections.Counter(
        (int(tokens[i]), int(tokens[i + 1])) for i in range(len(tokens) - 1)
        if document[i] == document[i + 1])
    assert pairs == expected
    assert rows["weights"].sum() == len(tokens) - 6  # all but each document's first token


def _docs(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [{"text": " ".join(f"w{int(x)}" for x in rng.integers(0, 40, rng.integers(1, 25)))}
            for _ in range(n)]


class _Source(list):
    pass


def test_training_rows_resume_exactly_from_a_saved_state():
    tok = bpe.train_bpe([d["text"] for d in _docs(40, 1)], vocab_size=300)
    source = _Source(_docs())

    def batches(it, n):
        return [next(it) for _ in range(n)]

    it = lm_data.lm_train_batches(source, tok, batch_size=2, max_length=7, seed=3)
    batches(it, 5)
    state = json.loads(json.dumps(it.get_state()))
    expected = batches(it, 6)
    resumed = lm_data.lm_train_batches(source, tok, batch_size=2, max_length=7, seed=3)
    resumed.set_state(state)
    for a, b in zip(expected, batches(resumed, 6)):
        for key in lm_data.ROW_KEYS:
            np.testing.assert_array_equal(a[key], b[key])
    # One epoch's rows hold every document once: the documents begun count them.
    fresh = lm_data.lm_train_batches(source, tok, batch_size=1, max_length=4, seed=3)
    total = sum(len(lm_data.document_tokens(tok, d["text"])) for d in source)
    batches(fresh, (total - 1) // 4)
    assert fresh.stats["examples"] == len(source)


def test_eval_batches_pad_each_length_to_whole_global_batches():
    rows = [lm_data.eval_rows((np.arange(2, 30, dtype=np.int32), np.zeros(28, int)), n)
            for n in (4, 8)]  # 7 and 4 rows
    shards = [lm_data.lm_eval_batches(rows, batch_size=2, process_index=i, process_count=2)
              for i in range(2)]
    assert [count for _, count in shards] == [3, 3]  # lengths 4: 2 global batches; 8: 1
    got = [list(it) for it, _ in shards]
    weights = sum(b["weights"].sum() for part in got for b in part)
    assert weights == 2 * 27
    assert [b["tokens"].shape[1] for b in got[0]] == [4, 4, 8]
