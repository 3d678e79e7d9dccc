"""Reader of Jane Austen's six novels from the R package janeaustenr (Debian r-cran-janeaustenr).

The package's lazy-load database `data/Rdata.{rdx,rdb}` (read by data/formats/rdata.py) holds one
character vector per novel, one element per line of the Project Gutenberg text: `emma`,
`mansfieldpark`, `northangerabbey`, `persuasion`, `prideprejudice`, `sensesensibility` (there is
no combined data frame: the package's `austen_books()` is R code that builds it).

Each chapter is one document (269 in all):
  - a chapter starts at a heading line 'CHAPTER I', 'CHAPTER 12' or 'Chapter 3' (Roman or Arabic
    numerals, any case) and runs to the next heading; the title pages before the first chapter
    are dropped;
  - 'VOLUME II' lines (Emma) are not text: they are dropped, and the heading records them
    ('VOLUME II, CHAPTER I'), because Emma numbers its chapters again in each volume;
  - the novel ends at a line 'THE END' or 'FINIS', or at the editor's 'A NOTE ON THE TEXT'
    (Northanger Abbey), whichever comes first;
  - paragraphs are separated by empty lines; the lines of a paragraph are stripped and joined
    with a space; underscores, the Gutenberg marks of italics ('_she_'), are removed;
  - each paragraph is split into sentences by data/corpora/sentences.py.
"""

from __future__ import annotations

import pathlib
import re

from data import paths
from data.corpora.documents import Document
from data.corpora.sentences import split_sentences
from data.errors import DataError
from data.formats.rdata import LazyLoadDB, RObject

NAME = "austen"  # the name data.fetch and the builder know it by
RAW_SUBDIR = "usr/lib/R/site-library/janeaustenr/data"  # where the package keeps the database
RDATA_FILES = ("Rdata.rdx", "Rdata.rdb")

# R variable -> title, in the order of publication.
BOOKS = {
    "sensesensibility": "Sense and Sensibility",
    "prideprejudice": "Pride and Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}

CHAPTER = re.compile(r"^chapter\s+([ivxlc]+|\d+)\.?$", re.IGNORECASE)
VOLUME = re.compile(r"^volume\s+([ivxlc]+|\d+)\.?$", re.IGNORECASE)
END = re.compile(r"^(the end|finis|a note on the text)\.?$", re.IGNORECASE)


def split_chapters(lines: list[str]) -> list[tuple[str, list[str]]]:
    """[(heading, lines of the chapter)] of a novel's lines (rules in the module docstring)."""
    chapters: list[tuple[str, list[str]]] = []
    volume = None
    for line in lines:
        stripped = line.strip()
        if END.match(stripped):
            break
        if VOLUME.match(stripped):
            volume = stripped
        elif CHAPTER.match(stripped):
            heading = stripped if volume is None else f"{volume}, {stripped}"
            chapters.append((heading, []))
        elif chapters:
            chapters[-1][1].append(line)
    return chapters


def paragraphs_of(lines: list[str]) -> list[str]:
    """Paragraph texts of a chapter's lines: empty lines separate them; italics marks removed."""
    paragraphs, current = [], []
    for line in lines + [""]:
        text = line.replace("_", "").strip()
        if text:
            current.append(text)
        elif current:
            paragraphs.append(" ".join(" ".join(current).split()))
            current = []
    return paragraphs


def novel_documents(book: str, lines: list[str]) -> list[Document]:
    """One Document per chapter of novel `book` (an R variable name of BOOKS)."""
    if book not in BOOKS:
        raise DataError(f"unknown Austen novel {book!r}; known: {sorted(BOOKS)}")
    docs = []
    for number, (heading, chapter_lines) in enumerate(split_chapters(lines), start=1):
        paragraphs = [split_sentences(p) for p in paragraphs_of(chapter_lines)]
        paragraphs = [p for p in paragraphs if p]
        if paragraphs:
            docs.append(Document(f"{book}/{number:02d}", paragraphs,
                                 {"book": BOOKS[book], "chapter": number, "heading": heading}))
    if not docs:
        raise DataError(f"Austen novel {book!r}: no chapter headings found")
    return docs


def raw_folder() -> pathlib.Path:
    """Folder holding Rdata.rdx and Rdata.rdb (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / RAW_SUBDIR


def check_raw_files() -> None:
    """DataError with the fetch command when a file of the database is missing."""
    paths.require_files(NAME, raw_folder(), RDATA_FILES)


def read_novels(rdata_stem: str | pathlib.Path) -> dict[str, list[str]]:
    """{R variable: lines} of the novels in the lazy-load database `<rdata_stem>.{rdx,rdb}`."""
    db = LazyLoadDB(rdata_stem)
    missing = [b for b in BOOKS if b not in db]
    if missing:
        raise DataError(f"{db.rdx}: the novels {missing} are missing; it holds {db.names}")
    novels = {}
    for book in BOOKS:
        value = db[book]
        if not isinstance(value, RObject) or value.kind != "character":
            raise DataError(f"{db.rdb}: {book!r} should be a character vector, found "
                            f"{getattr(value, 'kind', type(value).__name__)}")
        novels[book] = [line or "" for line in value.values]  # NA lines read as None
    return novels


def read_austen(rdata_stem: str | pathlib.Path | None = None) -> list[Document]:
    """All chapters of the six novels, novel by novel in order of publication (default: the
    database in `raw_folder()`)."""
    rdata_stem = raw_folder() / "Rdata" if rdata_stem is None else rdata_stem
    return [doc for book, lines in read_novels(rdata_stem).items()
            for doc in novel_documents(book, lines)]
