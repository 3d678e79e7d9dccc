"""German-English sentence pairs from the Ding dictionary (Debian's `trans-de-en`).

    for de, en in read_sentence_pairs():   # ("Er gehört keiner politischen Partei an.", ...)

The Ding file (`<root>/raw/ding_de_en/usr/share/trans/de-en`, UTF-8) has one entry a line,
`German :: English`; `#` lines are comments. Each side lists sub-entries separated by ` | `, the
n-th German one translating the n-th English one; a sub-entry lists alternatives separated by
`; `. Annotations are in braces (`{n}`, `{vt}`), brackets (`[ugs.]`, `[Br.]`) and angle brackets
(`<...>`). Of each sub-entry pair the first alternatives are taken, the annotations removed and
the whitespace normalised (none before punctuation); a pair is kept when both sides are full
sentences: they end in `.`, `!` or `?` but not in a placeholder (`etw.`, `jdm.`, `sth.`, `sb.`,
`sb./sth.`, ...: "in Absprache mit jdm." is a phrase) and have at least 4 words. Lines whose sides have different numbers of
sub-entries are skipped; repeated pairs are kept once. The dictionary's example sentences come
out this way: 18,300 distinct pairs of ~391,800 sub-entry pairs in the 2023 file (18,484 with
repeats and placeholder phrases).

License: GPL-2+. `python -m data.fetch ding_de_en` fetches the file at run time; never commit it
or anything derived from it (test data for this reader are synthetic lines).
"""

from __future__ import annotations

import pathlib
import re
from typing import Iterator

from data import paths
from data.errors import DataError

NAME = "ding_de_en"  # the name data.fetch and the builder know it by
RAW_FILE = "usr/share/trans/de-en"  # where the package keeps the dictionary
MIN_WORDS = 4
SENTENCE_END = (".", "!", "?")
# Placeholders of the dictionary ("jemandem", "somebody", ...): a side ending in one is a phrase
# like "in Absprache mit jdm." / "in consultation with sb.", not a sentence.
PLACEHOLDERS = ("etw.", "jdm.", "jdn.", "jds.", "jd.", "sth.", "sb.")

_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>")
_SPACE_BEFORE_PUNCTUATION = re.compile(r" +(?=[.,;:!?])")


def ding_file() -> pathlib.Path:
    """The dictionary file (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / RAW_FILE


def clean_phrase(text: str) -> str:
    """`text` without {..}, [..] and <..> annotations, whitespace normalised (and none left
    before punctuation, where an annotation stood: "weggelegt [Ös.]." -> "weggelegt.")."""
    return _SPACE_BEFORE_PUNCTUATION.sub("", " ".join(_ANNOTATION.sub(" ", text).split()))


def is_sentence(text: str) -> bool:
    """True for a full sentence: ends in . ! or ? (not in a placeholder like 'sth.' or
    'sb./sth.') and has at least MIN_WORDS words."""
    words = text.split()
    return (text.endswith(SENTENCE_END) and len(words) >= MIN_WORDS
            and words[-1].split("/")[-1] not in PLACEHOLDERS)  # 'jdm./etw.' too


def parse_line(line: str) -> list[tuple[str, str]] | None:
    """[(de, en)] sub-entry pairs of one entry line (first alternatives, annotations removed);
    [] for a comment or blank line, None when the sides have different numbers of sub-entries.
    Raises ValueError when the line is not `German :: English`."""
    line = line.strip()
    if not line or line.startswith("#"):
        return []
    sides = line.split(" :: ")
    if len(sides) != 2:
        raise ValueError("not a `German :: English` line")
    german, english = (side.split(" | ") for side in sides)
    if len(german) != len(english):
        return None
    return [(clean_phrase(de.split("; ")[0]), clean_phrase(en.split("; ")[0]))
            for de, en in zip(german, english)]


def check_raw_files(path: pathlib.Path | None = None) -> pathlib.Path:
    """The dictionary file; DataError with the fetch command when it is missing or empty."""
    if path is None:
        path = paths.require_files(NAME, paths.raw_dir(NAME), [RAW_FILE])[RAW_FILE]
    elif not path.is_file():
        raise DataError(f"{path}: Ding dictionary not found; run: python -m data.fetch {NAME}")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: Ding dictionary is empty; run: python -m data.fetch {NAME}")
    return path


def read_sentence_pairs(path: pathlib.Path | None = None) -> Iterator[tuple[str, str]]:
    """(de, en) full-sentence pairs of the dictionary, in file order, each pair once.

    DataError with the fetch command when the file is missing, empty, not UTF-8, has a line
    that is not `German :: English`, or holds no entry at all.
    """
    path = check_raw_files(None if path is None else pathlib.Path(path))
    fix = f"run: python -m data.fetch {NAME} (it fetches again when the file changed)"
    seen: set[tuple[str, str]] = set()
    entries = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: line {number} is not UTF-8 ({e}); {fix}") from e
            try:
                pairs = parse_line(line)
            except ValueError as e:
                raise DataError(f"{path}: line {number} ({line.strip()[:80]!r}) is {e}; not a "
                                f"Ding dictionary file; {fix}") from e
            if pairs is None or not pairs:
                entries += pairs is None
                continue
            entries += 1
            for pair in pairs:
                if pair not in seen and is_sentence(pair[0]) and is_sentence(pair[1]):
                    seen.add(pair)
                    yield pair
    if entries == 0:
        raise DataError(f"{path}: no dictionary entry in the file; {fix}")
