"""English-Spanish verse pairs: the World English Bible and the Reina-Valera 1909, aligned.

    for ref, en, es in read_verse_pairs():   # ("Gen.1.1", "In the beginning, God created ...", ...)

`python -m data.fetch bible_en_es` puts the two SWORD zText modules of Debian's `sword-text-web`
(engWEB2015eb, versification NRSVA) and `sword-text-sparv` (spaRV1909eb, versification KJV) under
`<root>/raw/bible_en_es/usr/share/sword/` (a SWORD library: mods.d/*.conf + modules/). Both are
public domain. data/formats/sword.py reads the modules; this file turns verses into plain text
and pairs them by (book, chapter, verse):

- Text. Footnotes, cross-references (`<note>`), the speaker labels of the Song of Songs and
  non-canonical titles are dropped with their content; canonical titles (the Psalm
  superscriptions, which both translations count as verse text) are kept. Every other element
  is unwrapped. Elements that are not word-level markup (`<w>`, `<hi>`, ...) stand for a word
  break, so `God<note>...</note>created` and the Spanish `alabanza</w><transChange>sea` do not
  glue words; the break vanishes next to punctuation. Entities are unescaped, whitespace is
  normalised. A verse ends at the end of its book: what the module stores after it (the WEB's
  glossary after Rev 22:21) is dropped.
- Pairs. Only the books both translations have (the 66 of the Protestant canon); a pair is
  skipped when either side is empty (a verse the WEB omits, like Acts 8:37).
- Different verse divisions. The Reina-Valera text divides some chapters differently from the
  KJV scheme its module is stored in (its Jonah 2:1 is the KJV's Jonah 1:17), and the SWORD
  importer then leaves the last KJV slot(s) of a chapter empty and shifts the verses against the
  English ones. Where one side leaves the last verse(s) of a chapter empty while the other has
  text there, that chapter and the next one of the book are skipped: there the two sides may be
  shifted against each other. (An empty verse inside a chapter is an omitted verse, which shifts
  nothing; only that pair is skipped.)
- Divisions that differ inside a chapter. Elsewhere the Reina-Valera may split a KJV verse and
  fold the overflow into the chapter's last slot (1 Chr 21:15-30 are one verse off), divide two
  verses differently (2 Sam 2:31-32) or carry words the WEB lacks (the colophons after Paul's
  letters, 1 John 5:7): no slot is empty, but the pairs no longer translate each other. Each
  chapter's verses are aligned by their lengths (data/corpora/alignment.py, Gale & Church 1993);
  where the likeliest alignment matches two verses with one, the verses from the first such
  match to the end of the last are skipped.
  With the Debian modules: 30,408 pairs; 31,077 verses have text on both sides, 592 of them in
  the 24 skipped chapters (Num 12-13, Job 38-41, Jonah 1-2, Rom 16, ...) and 77 in the stretches
  of 15 chapters skipped by the alignment (1 Kgs 22:43-53, 1 Chr 21:15-30, ...).
"""

from __future__ import annotations

import html
import pathlib
import re
from typing import Iterator

from data import paths
from data.corpora.alignment import gale_church_align
from data.corpora.documents import Document
from data.errors import DataError
from data.formats import sword

NAME = "bible_en_es"  # the name data.fetch and the builder know it by
LIBRARY_SUBDIR = "usr/share/sword"  # the SWORD library inside the packages
ENGLISH = "engWEB2015eb"  # World English Bible (with Deuterocanon), sword-text-web
SPANISH = "spaRV1909eb"  # Reina-Valera 1909, sword-text-sparv
MODULES = {"en": ENGLISH, "es": SPANISH}


def module_files(module: str) -> tuple[str, ...]:
    """Files of a module relative to the library: its conf and its six zText files."""
    data = f"modules/texts/ztext/{module}"
    return (f"mods.d/{module}.conf",
            *(f"{data}/{t}.bz{kind}" for t in sword.TESTAMENTS for kind in "svz"))


REQUIRED_FILES = tuple(f for module in MODULES.values() for f in module_files(module))


def raw_folder() -> pathlib.Path:
    """The SWORD library folder (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / LIBRARY_SUBDIR


def _fix(e: DataError) -> DataError:
    return DataError(f"{e}; run: python -m data.fetch {NAME} (it fetches again when a file "
                     "changed)")


def check_raw_files(folder: pathlib.Path | None = None) -> None:
    """DataError with the fetch command when a file is missing, a conf unreadable or an index
    of the wrong size (cheap: reads the confs and the index sizes only)."""
    folder = raw_folder() if folder is None else pathlib.Path(folder)
    paths.require_files(NAME, folder, REQUIRED_FILES)
    try:
        for module in MODULES.values():
            sword.check_module(sword.read_conf(folder, module))
    except DataError as e:
        raise _fix(e) from e


# ----------------------------------------------------------------------------- text

# Elements that are markup inside a word or around words; every other element (paragraph and
# line milestones, list items, quotation and added-word markers, ...) is a word break.
_INLINE = frozenset({"w", "hi", "divineName", "foreign", "name", "seg", "abbr", "mentioned",
                     "rdg", "catchWord", "reference", "index"})
# Dropped with their content: notes (footnotes, cross-references), speaker labels, and titles
# not marked canonical (section headings). `(?:/>|>...</x>)`: empty or with content.
_DROPPED = re.compile(
    r"<(note|speaker)\b[^>]*?(?:/>|>.*?</\1\s*>)"
    r"|<title\b(?![^>]*\bcanonical=\"true\")[^>]*?(?:/>|>.*?</title\s*>)", re.S)
# The end of a book (<div ... eID=... type="book"/>, attributes in any order).
_BOOK_END = re.compile(r"<div\b(?=[^>]*\beID=)(?=[^>]*\btype=\"book\")[^>]*>")
_TAG = re.compile(r"<\s*/?\s*([A-Za-z][\w:.-]*)[^>]*>|<!--.*?-->", re.S)
_BREAK = "\x00"  # stands for a word break until the punctuation around it is known
# A break vanishes after opening and before closing punctuation.
_BREAK_AFTER_OPENING = re.compile(f"(?<=[(\\[{{«“‘¿¡—]){_BREAK}+")
_BREAK_BEFORE_CLOSING = re.compile(f"{_BREAK}+(?=[,.;:!?)\\]}}»”’—])")


def _tag(match: re.Match) -> str:
    name = match.group(1)
    return "" if name is None or name in _INLINE else _BREAK


def clean_verse(markup: str) -> str:
    """Plain text of a verse's OSIS markup (see the module docstring)."""
    end = _BOOK_END.search(markup)
    if end is not None:
        markup = markup[:end.start()]
    text = _DROPPED.sub(_BREAK, markup)
    text = _TAG.sub(_tag, text)
    text = html.unescape(text.replace(_BREAK, " " + _BREAK + " "))
    # Breaks were padded with spaces above so that they sit in whitespace; now join each run
    # of whitespace and breaks into one break (if it has one) or one space.
    text = re.sub(r"\s+", " ", text)
    text = re.sub(f"[ {_BREAK}]*{_BREAK}[ {_BREAK}]*", _BREAK, text)
    text = _BREAK_AFTER_OPENING.sub("", text)
    text = _BREAK_BEFORE_CLOSING.sub("", text)
    return text.replace(_BREAK, " ").strip()


def format_ref(ref: sword.Ref) -> str:
    """('Gen', 1, 1) -> 'Gen.1.1' (OSIS)."""
    return "{}.{}.{}".format(*ref)


# ----------------------------------------------------------------------------- pairs


def _shifted_chapters(en: dict, es: dict, common: list[sword.Ref]) -> set[tuple[str, int]]:
    """(book, chapter) pairs to skip: chapters whose last verse(s) are empty on one side only,
    and the chapter after each (see the module docstring)."""
    last: dict[tuple[str, int], list[sword.Ref]] = {}
    for ref in common:
        last.setdefault(ref[:2], []).append(ref)
    skipped = set()
    for (book, chapter), refs in last.items():
        for side, other in ((en, es), (es, en)):
            tail = 0
            while tail < len(refs) and not side[refs[-1 - tail]]:
                tail += 1
            if any(other[r] for r in refs[len(refs) - tail:]):
                skipped.update({(book, chapter), (book, chapter + 1)})
    return skipped


def _misaligned_verses(en: dict, es: dict, common: list[sword.Ref],
                       skipped: set[tuple[str, int]]) -> set[sword.Ref]:
    """Verses of the other chapters where the one-to-one pairing is not the likeliest: in each
    chapter, the verses with text on both sides are aligned by length (data/corpora/alignment.py,
    Gale & Church 1993) and those from the first 2-1 or 1-2 match to the end of the last are
    returned (see the module docstring)."""
    chapters: dict[tuple[str, int], list[sword.Ref]] = {}
    for ref in common:
        if en[ref] and es[ref] and ref[:2] not in skipped:
            chapters.setdefault(ref[:2], []).append(ref)
    misaligned = set()
    for refs in chapters.values():
        steps = gale_church_align([len(en[r]) for r in refs], [len(es[r]) for r in refs])
        start, end, i, j = len(refs), 0, 0, 0  # i, j: the step's first English, Spanish verse
        for a, b in steps:
            if (a, b) != (1, 1):
                start, end = min(start, i, j), max(end, i + a, j + b)
            i, j = i + a, j + b
        misaligned.update(refs[start:end])
    return misaligned


def read_modules(folder: pathlib.Path | None = None) -> dict[str, dict[sword.Ref, str]]:
    """{'en': {ref: plain text}, 'es': {...}} of every verse of both modules."""
    folder = raw_folder() if folder is None else pathlib.Path(folder)
    paths.require_files(NAME, folder, REQUIRED_FILES)
    try:
        return {lang: {ref: clean_verse(text)
                       for ref, text in sword.read_module(folder, module).items()}
                for lang, module in MODULES.items()}
    except DataError as e:
        raise _fix(e) from e


def read_verse_pairs(folder: pathlib.Path | None = None) -> Iterator[tuple[str, str, str]]:
    """(ref, en, es) of every aligned verse, in canonical order: ('Gen.1.1', 'In the ...', ...).

    `folder` is the SWORD library (default `raw_folder()`). DataError with the fetch command
    when a file is missing or corrupt.
    """
    verses = read_modules(folder)
    en, es = verses["en"], verses["es"]
    common = [ref for ref in es if ref in en]  # Spanish (KJV) order; the 66 shared books
    if not common:
        raise DataError(f"the modules in {folder or raw_folder()} share no verse; run: "
                        f"python -m data.fetch {NAME}")
    skipped = _shifted_chapters(en, es, common)
    misaligned = _misaligned_verses(en, es, common, skipped)
    for ref in common:
        if en[ref] and es[ref] and ref[:2] not in skipped and ref not in misaligned:
            yield format_ref(ref), en[ref], es[ref]


# ----------------------------------------------------------------------------- English alone


def read_english_chapters(folder: pathlib.Path | None = None) -> list[Document]:
    """The World English Bible alone (every book of its module, the Deuterocanon included), one
    Document per chapter: doc_id 'Gen.1', one paragraph whose sentences are the chapter's
    non-empty verses in order, metadata {'book': 'Gen', 'chapter': 1}.

    For language modelling (data/builders/english_lm.py) the English text is wanted whole, so
    nothing of the pairing above applies: no verse is skipped for the Spanish side, only verses
    the WEB leaves empty (Acts 8:37). Needs only the English module's files.
    """
    folder = raw_folder() if folder is None else pathlib.Path(folder)
    paths.require_files(NAME, folder, module_files(ENGLISH))
    try:
        verses = sword.read_module(folder, ENGLISH)
    except DataError as e:
        raise _fix(e) from e
    chapters: dict[tuple[str, int], list[str]] = {}
    for ref, markup in verses.items():
        text = clean_verse(markup)
        if text:
            chapters.setdefault(ref[:2], []).append(text)
    if not chapters:
        raise DataError(f"the module {ENGLISH} in {folder} has no verse text; run: "
                        f"python -m data.fetch {NAME}")
    return [Document(f"{book}.{chapter}", [texts], {"book": book, "chapter": chapter})
            for (book, chapter), texts in chapters.items()]
