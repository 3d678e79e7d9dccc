"""The shared shape of the TFDS builders of document corpora (brown, austen, sotu).

Each example is one document in the layout of data/corpora/documents.py (read it back with
`as_document`). A corpus builder names its raw files and metadata features and reads its
documents with a reader of data/corpora/; this base class splits them into `train` and
`validation` by held-out documents (data/corpora/splits.py: a stable hash of the document id,
about 5% held out, stratified by `split_group`) and writes them in corpus order.
"""

from __future__ import annotations

import pathlib

import tensorflow_datasets as tfds

from data.corpora.documents import Document, document_features, to_example
from data.corpora.splits import SPLITS, VALIDATION_FRACTION, assign_splits
from data.errors import DataError
from data.builders.local import LocalBuilder


def missing_data(name: str, folder: pathlib.Path, what: str = "") -> DataError:
    """The error for raw files that are not there, with the command that fetches them."""
    which = f" ({what})" if what else ""
    return DataError(f"dataset {name!r} not found in {folder}{which}; run: "
                     f"python -m data.fetch {name}")


class DocumentCorpusBuilder(LocalBuilder, skip_registration=True):
    """Base of the document corpus builders: features, splits and examples."""

    NAME = ""  # the name data.fetch knows the corpus by
    TAGGED = False  # whether documents carry tokens and POS tags
    VALIDATION_FRACTION = VALIDATION_FRACTION
    DESCRIPTION = ""
    HOMEPAGE = ""
    CITATION = ""
    LICENSE = ""

    @classmethod
    def metadata_features(cls) -> dict:
        """Metadata feature name -> tfds feature (scalars: Text, Scalar, ClassLabel)."""
        raise NotImplementedError

    @classmethod
    def check_raw_files(cls) -> None:
        """DataError naming `python -m data.fetch NAME` when the raw files are missing."""
        raise NotImplementedError

    @classmethod
    def read_corpus(cls) -> list[Document]:
        """All documents of the raw files, in corpus order."""
        raise NotImplementedError

    @classmethod
    def split_group(cls, doc: Document) -> str:
        """The stratum of `doc`: every group gets validation documents (default: one group)."""
        del doc
        return ""

    @classmethod
    def split_documents(cls, docs: list[Document]) -> dict[str, list[Document]]:
        """{split: documents}, each in corpus order, by held-out documents."""
        splits = assign_splits([d.doc_id for d in docs], [cls.split_group(d) for d in docs],
                               cls.VALIDATION_FRACTION)
        return {split: [d for d in docs if splits[d.doc_id] == split] for split in SPLITS}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.DESCRIPTION,
            features=document_features(self.metadata_features(), tagged=self.TAGGED),
            disable_shuffling=True,  # keep corpus order: pipelines shuffle
            homepage=self.HOMEPAGE,
            citation=self.CITATION,
            license=self.LICENSE,
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # Nothing to download: data.fetch put the files in place.
        self.check_raw_files()
        parts = self.split_documents(self.read_corpus())
        return {split: self._generate_examples(docs) for split, docs in parts.items()}

    def _generate_examples(self, docs: list[Document]):
        for doc in docs:
            yield doc.doc_id, to_example(doc)
