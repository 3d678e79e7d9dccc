"""Test helpers: install the small real Fashion-MNIST excerpt of tests/fixtures as if fetched.

    def test_train(tmp_path, monkeypatch):
        install_fashion_mnist_fixture(tmp_path)
        monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
        ...  # get_data_source("fashion_mnist", "train") now has 2000 examples, "test" 1000

The excerpt holds the first 2000 train and first 1000 test images of Fashion-MNIST in the original
IDX format (see tests/fixtures/README.md). The builder prepares it into <root>/tfds on first use
(a few seconds).

    install_brown_fixture(tmp_path)  # ten real Brown files: read_documents("brown", "train") ...

    install_bible_fixture(tmp_path)  # ~2,000 real verse pairs: get_data_source("bible_en_es", ...)

tests/fixtures/bible_en_es/verses.tsv holds the verse pairs with their OSIS markup, and
`install_bible_fixture` writes them as the two SWORD zText modules that the fetch puts in place
(data/formats/sword.py writes the format), so the reader and the builder run on the real format.
"""

from __future__ import annotations

import pathlib
import shutil

from data.builders.bible_en_es import BibleEnEsLocal
from data.builders.brown import BrownLocal
from data.builders.fashion_mnist import FashionMnistLocal
from data.corpora import bible, brown, fashion_mnist
from data.formats import sword

FIXTURE_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "fashion_mnist"
FIXTURE_SIZES = {"train": 2000, "test": 1000}


def install_fashion_mnist_fixture(root: str | pathlib.Path) -> pathlib.Path:
    """Copies the fixture IDX files into the raw layout under `root`; returns their folder.

    Also removes a TFDS dataset prepared earlier under `root`, so the next read prepares the
    fixture (there is no fetch marker: `python -m data.fetch` would fetch the real files over it).
    """
    root = pathlib.Path(root)
    dest = root / "raw" / fashion_mnist.NAME / fashion_mnist.RAW_SUBDIR
    dest.mkdir(parents=True, exist_ok=True)
    for files in fashion_mnist.SPLIT_FILES.values():
        for name in files:
            source = FIXTURE_DIR / name
            if not source.is_file():
                raise FileNotFoundError(f"fixture file {source} is missing; make it with "
                                        "python tests/fixtures/make_fashion_mnist_fixture.py")
            shutil.copyfile(source, dest / name)
    shutil.rmtree(root / "tfds" / FashionMnistLocal.name, ignore_errors=True)
    return dest


BROWN_FIXTURE_DIR = FIXTURE_DIR.parent / "brown"
BROWN_FIXTURE_SPLITS = {"train": 5, "validation": 5}  # documents: one of each of 5 genres each


def install_brown_fixture(root: str | pathlib.Path) -> pathlib.Path:
    """Copies the ten committed Brown files (and the corpus README) into the raw layout under
    `root`, as `python -m data.fetch brown` leaves them; returns their folder.

    Also removes a TFDS dataset prepared earlier under `root`, so the next read prepares the
    fixture (there is no fetch marker: `python -m data.fetch` would fetch the real files over it).
    """
    root = pathlib.Path(root)
    files = sorted(p for p in BROWN_FIXTURE_DIR.glob("*") if p.is_file())  # [] if no folder
    if not any(p.name.startswith("c") for p in files):
        raise FileNotFoundError(f"fixture files in {BROWN_FIXTURE_DIR} are missing; make them "
                                "with python tests/fixtures/make_brown_fixture.py")
    dest = root / "raw" / brown.NAME / brown.RAW_SUBDIR
    dest.mkdir(parents=True, exist_ok=True)
    for source in files:
        shutil.copyfile(source, dest / source.name)
    shutil.rmtree(root / "tfds" / BrownLocal.name, ignore_errors=True)
    return dest


BIBLE_FIXTURE = FIXTURE_DIR.parent / "bible_en_es" / "verses.tsv"
# The versification each fetched module declares; the fixture's modules declare the same.
BIBLE_VERSIFICATIONS = {"en": "NRSVA", "es": "KJV"}


def read_bible_fixture() -> list[tuple[str, str, str]]:
    """(ref, English OSIS markup, Spanish OSIS markup) of every verse of the fixture."""
    if not BIBLE_FIXTURE.is_file():
        raise FileNotFoundError(f"fixture file {BIBLE_FIXTURE} is missing; make it with "
                                "python tests/fixtures/make_bible_fixture.py")
    lines = BIBLE_FIXTURE.read_text(encoding="utf-8").rstrip("\n").split("\n")
    if lines[:1] != ["ref\ten\tes"]:
        raise ValueError(f"{BIBLE_FIXTURE}: header 'ref<TAB>en<TAB>es' expected")
    rows = [tuple(line.split("\t")) for line in lines[1:]]
    bad = [row[0] for row in rows if len(row) != 3]
    if bad:
        raise ValueError(f"{BIBLE_FIXTURE}: rows without 3 fields: {bad[:5]}")
    return rows


def parse_ref(ref: str) -> sword.Ref:
    """'Gen.1.1' -> ('Gen', 1, 1)."""
    book, chapter, verse = ref.split(".")
    return book, int(chapter), int(verse)


def install_bible_fixture(root: str | pathlib.Path) -> pathlib.Path:
    """Writes the fixture's verses as the two SWORD zText modules under `root`, where
    `python -m data.fetch bible_en_es` puts the real ones; returns the SWORD library folder.

    Also removes a TFDS dataset prepared earlier under `root`, so the next read prepares the
    fixture (there is no fetch marker: `python -m data.fetch` would fetch the real files over it).
    """
    root = pathlib.Path(root)
    library = root / "raw" / bible.NAME / bible.LIBRARY_SUBDIR
    rows = read_bible_fixture()
    for column, lang in enumerate(("en", "es"), 1):
        module = bible.MODULES[lang]
        shutil.rmtree(library / "modules" / "texts" / "ztext" / module, ignore_errors=True)
        sword.write_module(library, module, {parse_ref(row[0]): row[column] for row in rows},
                           versification=BIBLE_VERSIFICATIONS[lang], lang=lang,
                           description=f"test fixture: {len(rows)} verses of {module}")
    shutil.rmtree(root / "tfds" / BibleEnEsLocal.name, ignore_errors=True)
    return library
