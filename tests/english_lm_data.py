"""A data root for the english_lm tests, laid out as `python -m data.fetch english_lm` leaves
it: the committed Brown and Bible excerpts (real text), small Austen novels written as an R
lazy-load database (tests/r_xdr_writer.py) and a few SOTU speeches as JSON, both made of the
seeded sentences of tests/english_documents.py."""

from __future__ import annotations

import json
import pathlib

from english_documents import make_documents
from r_xdr_writer import write_lazyload_db

from data.corpora import austen, sotu
from data.testing import install_bible_fixture, install_brown_fixture


def _paragraphs(seed: int, count: int) -> list[str]:
    return [" ".join(p) for d in make_documents(count, seed, paragraphs=(1, 1), sentences=(4, 9))
            for p in d.paragraphs]


def install_english_lm_fixture(root: str | pathlib.Path) -> pathlib.Path:
    """Writes the four corpora's raw files under `root`; returns `root`."""
    root = pathlib.Path(root)
    install_brown_fixture(root)
    install_bible_fixture(root)
    novels = {}
    for i, (book, title) in enumerate(austen.BOOKS.items()):
        lines = [title.upper(), ""]
        for chapter, text in enumerate(_paragraphs(100 + i, 3), 1):
            lines += [f"CHAPTER {chapter}", "", text, ""]
        novels[book] = lines + ["THE END"]
    write_lazyload_db(root / "raw" / austen.NAME / austen.RAW_SUBDIR / "Rdata", novels)
    folder = root / "raw" / sotu.NAME / sotu.RAW_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    for year, text in zip(range(1901, 1905), _paragraphs(200, 4)):
        record = {"year": year, "name": "A President", "party": "none", "text": text}
        (folder / f"{year}_a_president_n.json").write_text(json.dumps(record))
    return root
