"""The shared shape of the TFDS builders of document corpora (brown, austen, sotu).

A corpus builder names its metadata features and reads its documents with a reader of
data/corpora/; `DocumentCorpusBuilder` stores each as one example (data/builders/documents.py),
splits them into `train` and `validation` by held-out documents (data/corpora/splits.py: a
stable hash of the document id, about 5% held out, stratified by `split_group`) and writes them
in corpus order.
"""

from __future__ import annotations

import tensorflow_datasets as tfds

from data.builders.documents import document_features, to_example
from data.builders.local import LocalBuilder
from data.corpora.documents import Document
from data.corpora.splits import DOCUMENT_SPLITS, DOCUMENT_VALIDATION_FRACTION, assign_splits


class DocumentCorpusBuilder(LocalBuilder, skip_registration=True):
    """Base of the document corpus builders: features, splits and examples."""

    TAGGED = False  # whether documents carry tokens and POS tags
    VALIDATION_FRACTION = DOCUMENT_VALIDATION_FRACTION

    @classmethod
    def metadata_features(cls) -> dict:
        """Metadata feature name -> tfds feature (scalars: Text, Scalar, ClassLabel)."""
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
        return {split: [d for d in docs if splits[d.doc_id] == split]
                for split in DOCUMENT_SPLITS}

    def features(self) -> tfds.features.FeaturesDict:
        return document_features(self.metadata_features(), tagged=self.TAGGED)

    def split_examples(self):
        return {split: ((doc.doc_id, to_example(doc)) for doc in docs)
                for split, docs in self.split_documents(self.read_corpus()).items()}
