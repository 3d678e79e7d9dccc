"""TFDS builder of Jane Austen's six novels read from Debian's `r-cran-janeaustenr`.

One example per chapter (269): its paragraphs of sentences, the novel's title, the chapter's
number in the novel and its heading. The R lazy-load database is read by data/formats/rdata.py,
chapters and paragraphs are cut by data/corpora/austen.py. Validation holds about 5% of the
chapters of each novel (at least one), chosen by a stable hash of the document id.

    python -m data.fetch austen     # fetches the raw files and prepares this dataset
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from data.builders.document_corpus import DocumentCorpusBuilder
from data.corpora import austen
from data.corpora.documents import Document


class AustenLocal(DocumentCorpusBuilder):
    """Jane Austen's novels, one document per chapter, from a locally fetched R package."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: the lazy-load database of r-cran-janeaustenr.",
                     "1.1.0": "Sentence splitting (data/corpora/sentences.py): 'No.' ends a "
                              "sentence unless a number follows; 'Mr.' after a dash "
                              "('altogether--Mr. Bingley') and 'Lieut.' do not; 'I' does "
                              "after a lowercase word. 32,963 -> 32,940 sentences."}
    DESCRIPTION = ("Jane Austen's six completed novels (Project Gutenberg texts via the R "
                   "package janeaustenr): 269 chapters. Each example is one chapter: paragraphs "
                   "of sentences, the book's title, the chapter number and heading.")
    HOMEPAGE = "https://github.com/juliasilge/janeaustenr"
    LICENSE = "MIT (package); the novels are in the public domain"
    check_raw_files = staticmethod(austen.check_raw_files)

    @classmethod
    def metadata_features(cls) -> dict:
        return {"book": tfds.features.Text(), "chapter": tfds.features.Scalar(dtype=np.int32),
                "heading": tfds.features.Text()}

    @classmethod
    def read_corpus(cls) -> list[Document]:
        return austen.read_austen()

    @classmethod
    def split_group(cls, doc: Document) -> str:
        return doc.metadata["book"]
