"""data/pipelines/pretraining_stream.py: BERT examples made article by article from a source
of Wikipedia-like texts. An example's A and B are checked against the articles' own tokenized
sentences: A opens an article, B is the rest of it (label 0) or a run of sentences of another
article (label 1); the stream is reproducible and resumes exactly; processes read disjoint
articles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data.corpora import wikipedia
from data.errors import DataError
from data.pipelines import pretraining as pt
from data.pipelines import pretraining_stream as ps
from english_documents import make_documents
from pretraining_batches import english_tokenizer, originals

SEQ = 256  # long enough that no article is truncated: A + B is whole sentences


def _article(doc) -> str:
    """A Wikipedia-like text: a heading, the paragraphs, a list item and a 'See also' heading."""
    body = "\n\n".join(" ".join(paragraph) for paragraph in doc.paragraphs)
    return f"Early life\n\n{body}\n\nSee also\n* Notes on the harvest"


@pytest.fixture(scope="module")
def setup():
    docs = make_documents(24, seed=3, paragraphs=(1, 2), sentences=(2, 3))
    source = [{"text": _article(d).encode(), "title": d.doc_id.encode()} for d in docs]
    source.append({"text": b"List of harvests\n* 1801\n* 1802", "title": b"list"})  # no passage
    tok = english_tokenizer()
    sentences = [ps.document_sentences(source, i, wikipedia.article_document)
                 for i in range(len(source))]
    tokens = [[ids for ids in tok.encode_batch(s) if ids] for s in sentences]
    return source, tok, tokens


def _stream(setup, **kwargs):
    source, tok, _ = setup
    kwargs = {"batch_size": 8, "max_seq_length": SEQ, "seed": 0, "short_seq_prob": 0.0,
              "shuffle_window": 32, "masking": pt.masking_config(tok, max_predictions=20),
              **kwargs}
    return ps.stream_batches(source, tok, to_document=wikipedia.article_document, **kwargs)


def _segments(tok, row) -> tuple[list[int], list[int]]:
    ids = row[row != tok.pad_id].tolist()
    assert ids[0] == tok.cls_id and ids[-1] == tok.sep_id
    middle = ids.index(tok.sep_id)
    return ids[1:middle], ids[middle + 1:-1]


def test_segment_pairs_are_an_articles_opening_and_its_rest_or_another_articles_run(setup):
    source, tok, tokens = setup
    it = _stream(setup)
    batches = [next(it) for _ in range(12)]
    labels, articles = [], set()
    for batch in batches:
        assert set(batch) == set(pt.BATCH_KEYS) and batch["mask"].tolist() == [1.0] * 8
        for row, label, segment_ids in zip(originals(batch), batch["next_sentence_label"],
                                           batch["segment_ids"]):
            a, b = _segments(tok, row)
            assert segment_ids[1 + len(a) + 1:1 + len(a) + 1 + len(b) + 1].tolist() == \
                [1] * (len(b) + 1)
            # A is sentences j .. k - 1 of an article (j > 0 after a random B put the chunk's
            # unused sentences back)
            owners = [(d, j) for d, sent in enumerate(tokens) for j in range(len(sent))
                      if any(sum(sent[j:k], []) == a for k in range(j + 1, len(sent) + 1))]
            assert owners, "A is not a run of an article's sentences"
            d, j = owners[0]
            articles.add(d)
            if label == 0:
                assert a + b == sum(tokens[d][j:], []), "B is not the rest of A's article"
            else:
                runs = [e for e, sent in enumerate(tokens) if e != d and
                        any(sum(sent[j:], []) == b for j in range(len(sent)))]
                assert runs, "B is not a run of sentences of another article"
            labels.append(int(label))
    assert 0.3 < np.mean(labels) < 0.8
    assert len(source) - 1 not in articles  # the article with no passage made no example
    assert len(articles) >= 12


def test_the_stream_is_reproducible_and_resumes_exactly(setup):
    first = _stream(setup)
    batches = [next(first) for _ in range(6)]
    again = _stream(setup)
    for expected in batches:
        got = next(again)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    stopped = _stream(setup)
    for _ in range(3):
        next(stopped)
    state = json.loads(json.dumps(stopped.get_state()))  # what a checkpoint stores
    resumed = _stream(setup)
    resumed.set_state(state)
    for expected in batches[3:]:
        got = next(resumed)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    other_seed = next(_stream(setup, seed=1))
    assert not np.array_equal(other_seed["input_ids"], batches[0]["input_ids"])


def test_processes_read_disjoint_articles(setup):
    """Process i of 2 takes the articles at positions i, i + 2, ... of each epoch's order: in
    the first epoch (100 articles, the first dozen examples) the two read different ones."""
    _, tok, _ = setup
    docs = make_documents(100, seed=4, paragraphs=(1, 1), sentences=(2, 3))
    source = [{"text": _article(d).encode()} for d in docs]
    tokens = [[ids for ids in tok.encode_batch(
        ps.document_sentences(source, i, wikipedia.article_document)) if ids]
        for i in range(len(source))]

    def articles_of(process_index):
        it = _stream((source, tok, tokens), batch_size=4, shuffle_window=8,
                     process_index=process_index, process_count=2)
        found = set()
        for _ in range(3):
            for row in originals(next(it)):
                a, _ = _segments(tok, row)
                found |= {d for d, sent in enumerate(tokens) for j in range(len(sent))
                          if any(sum(sent[j:k], []) == a for k in range(j + 1, len(sent) + 1))}
        return found

    first, second = articles_of(0), articles_of(1)
    assert first and second and not first & second


def test_worker_processes_make_the_stream_deterministically_and_resume_exactly(setup):
    """worker_count=2: each worker streams every other article of the order (so the batches
    are not the one-process ones), the same batches on every run, and a restored state goes on
    with the batches that followed it; the articles of the first batches come from both
    workers' halves of the order."""
    source, tok, tokens = setup

    def take(it, n):
        return [next(it) for _ in range(n)]

    it = _stream(setup, worker_count=2)
    batches = take(it, 4)
    state = json.loads(json.dumps(it.get_state()))
    following = take(it, 2)
    it.close()
    again = _stream(setup, worker_count=2)
    for expected, got in zip(batches, take(again, 4)):
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    again.close()
    resumed = _stream(setup, worker_count=2)
    resumed.set_state(state)
    for expected, got in zip(following, take(resumed, 2)):
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    resumed.close()
    one = take(_stream(setup), 4)
    assert not all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(one, batches))
    for batch in batches:
        assert set(batch) == set(pt.BATCH_KEYS) and batch["input_ids"].shape == (8, SEQ)
    with pytest.raises(DataError, match="worker_count must be a non-negative integer"):
        _stream(setup, worker_count=-1)


def test_doc_sentences_pack_one_article_and_full_sentences_is_refused(setup):
    source, tok, tokens = setup
    batch = next(_stream(setup, input_format="doc_sentences", max_seq_length=32))
    assert "next_sentence_label" not in batch and batch["input_ids"].shape == (8, 32)
    for row in originals(batch):
        ids = row[row != tok.pad_id].tolist()[1:-1]
        assert any(ids == sum(sent, [])[i:i + len(ids)] for sent in tokens
                   for i in range(len(sum(sent, [])))), "a packed row crosses articles"
    with pytest.raises(DataError, match=r"input_format='full_sentences' is not streamed"):
        _stream(setup, input_format="full_sentences")
    with pytest.raises(DataError, match=r"shuffle_window=0 must be a positive integer"):
        _stream(setup, shuffle_window=0)


def test_the_vocabulary_sample_is_spread_over_the_source(setup):
    source, _, _ = setup
    sample = ps.sample_documents(source, 5, wikipedia.article_document)
    assert [d.doc_id for d in sample] == ["0", "6", "12", "18", "24"]
    assert sample[-1].paragraphs == [] and sample[0].sentences


def test_a_source_without_prose_is_refused_rather_than_read_forever(setup):
    """Articles that are only headings and lists give no example: after two passes over them
    (fewer than EMPTY_ARTICLES here) the stream names the source and the fix; one article of
    prose among them is enough to go on (the empty run between its reads spans at most the
    end of one shuffled pass and the start of the next)."""
    _, tok, _ = setup
    lists = [{"text": f"List {i}\n* one\n* two".encode(), "title": b"list"} for i in range(12)]
    with pytest.raises(DataError, match=r"24 articles in a row of .* gave no training example"):
        next(_stream(([*lists], tok, None)))
    prose = setup[0][0]
    stream = _stream(([*lists, prose], tok, None))
    for _ in range(4):  # enough batches to read through several passes
        assert next(stream)["input_ids"].shape == (8, SEQ)
