"""TFDS builder of an English language-modelling corpus: Austen, Brown, SOTU and the World
English Bible, every document kept whole as running text.

    python -m data.fetch english_lm     # fetches the four parts, then prepares this dataset

One example per document, from the readers of the four fetched corpora:

    {"text": b"CHAPTER I\\nEmma Woodhouse, handsome, clever, and rich, ...",
     "doc_id": b"austen/emma/01", "corpus": b"austen"}

What a document is, and why:
  austen   a chapter (269): the unit the `austen` dataset already stores;
  brown    a text sample of about 2,000 words (500): the corpus's own unit;
  sotu     a speech (233): one address, one author and occasion;
  bible    a chapter (1,300-odd of the WEB's books, the Deuterocanon included): a book is too
           coarse (the 150 Psalms would be one document of 40,000 words, and 5% of the books is
           four books, so the validation text would hang on which four), a verse too fine (a
           verse alone is a sentence, and a model trained on whole chapters would be scored on
           context-free fragments). Chapters are near the other documents' length and hold
           their own context.
The text of a document is its sentences joined by a space and its paragraphs by a newline
(`Document.text`); the pipeline (data/pipelines/lm.py) packs whole documents into rows.

Splits. A document's split is the one its own dataset gives it (data/corpora/splits.py
`assign_splits`: about 5% of the documents of each group held out, by a stable hash of the id;
groups: Austen's novel, Brown's genre, SOTU one group), so the validation chapters of
`english_lm` are those of `austen`, and so on; the Bible's chapters are held out the same way
within each book (its `bible_en_es` verse pairs are split by verse, a rule for sentence pairs).
Every split thus holds every corpus, and no document is cut between splits.
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.austen import AustenLocal
from data.builders.brown import BrownLocal
from data.builders.document_corpus import DocumentCorpusBuilder
from data.builders.local import LocalBuilder
from data.builders.sotu import SotuLocal
from data.corpora import bible
from data.corpora.documents import Document
from data.corpora.splits import DOCUMENT_SPLITS, DOCUMENT_VALIDATION_FRACTION, assign_splits
from data.paths import require_files

NAME = "english_lm"
# corpus -> the builder whose reader and split rule it uses (the Bible: below)
CORPUS_BUILDERS: dict[str, type[DocumentCorpusBuilder]] = {
    "austen": AustenLocal, "brown": BrownLocal, "sotu": SotuLocal}
CORPORA = (*CORPUS_BUILDERS, "bible")


def check_bible_english() -> None:
    """DataError naming `python -m data.fetch bible_en_es` when the English module is missing."""
    require_files(bible.NAME, bible.raw_folder(), bible.module_files(bible.ENGLISH))


def bible_splits(chapters: list[Document]) -> dict[str, list[Document]]:
    """{split: chapters}: about 5% of each book's chapters held out (module docstring)."""
    splits = assign_splits([d.doc_id for d in chapters], [d.metadata["book"] for d in chapters],
                           DOCUMENT_VALIDATION_FRACTION)
    return {split: [d for d in chapters if splits[d.doc_id] == split]
            for split in DOCUMENT_SPLITS}


def corpus_splits() -> dict[str, dict[str, list[Document]]]:
    """{corpus: {split: documents}} of the four fetched corpora, in corpus order."""
    parts = {corpus: builder.split_documents(builder.read_corpus())
             for corpus, builder in CORPUS_BUILDERS.items()}
    parts["bible"] = bible_splits(bible.read_english_chapters())
    return parts


class EnglishLmLocal(LocalBuilder):
    """English documents of four fetched corpora as running text, for language modelling."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First version: austen, brown, sotu 1.1.0 texts and the World "
                              "English Bible by chapter."}
    DESCRIPTION = ("English running text for language modelling: Jane Austen's chapters, the "
                   "Brown corpus's samples, the State of the Union addresses and the World "
                   "English Bible's chapters, one whole document per example; train / "
                   "validation by held-out documents.")
    HOMEPAGE = "https://ebible.org/web/"
    LICENSE = ("Public domain (Austen, SOTU, WEB); Brown: redistribution permitted")

    @classmethod
    def check_raw_files(cls) -> None:
        for builder in CORPUS_BUILDERS.values():
            builder.check_raw_files()
        check_bible_english()

    def features(self) -> tfds.features.FeaturesDict:
        return tfds.features.FeaturesDict({"text": tfds.features.Text(),
                                           "doc_id": tfds.features.Text(),
                                           "corpus": tfds.features.Text()})

    def split_examples(self):
        parts = corpus_splits()
        examples: dict[str, list] = {split: [] for split in DOCUMENT_SPLITS}
        for corpus, splits in parts.items():
            for split, docs in splits.items():
                for doc in docs:
                    doc_id = f"{corpus}/{doc.doc_id}"
                    examples[split].append((doc_id, {"text": doc.text, "doc_id": doc_id,
                                                     "corpus": corpus}))
        return examples
