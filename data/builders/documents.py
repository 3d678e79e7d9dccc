"""How a TFDS example stores a Document (data/corpora/documents.py), and how it is read back.

    for doc in read_documents("brown", "validation"):   # data.corpora.documents.Document
        doc.doc_id, doc.paragraphs, doc.metadata

Storage (one TFDS example per document). Nested ragged sequences (`Sequence(Sequence(Text()))`)
need TensorFlow to encode, which is not installed; one level of `Tensor(shape=(None,))` encodes
and decodes without it. So a document is stored flat, the usual ragged layout of values plus
row lengths:

    doc_id             Text                     e.g. 'ca14', 'emma/07', '1861_abraham_lincoln_r'
    sentences          Tensor((None,), str)     all sentences, in order
    paragraph_lengths  Tensor((None,), int32)   sentences per paragraph (sums to len(sentences))
    tokens, tags       Tensor((None,), str)     tagged corpora only: all tokens / POS tags, and
    sentence_lengths   Tensor((None,), int32)   tokens per sentence (sums to len(tokens))
    <anything else>    scalar metadata (Text, int, ClassLabel), e.g. genre, year, book

`as_document(example)` turns any such example back into a Document, so code downstream never
depends on this layout. TFDS is imported only where a feature is built or read, so reading
documents costs no TFDS import until a dataset is opened.
"""

from __future__ import annotations

import pathlib
from typing import Any, Iterator, Mapping

import numpy as np

from data import builders
from data.builders.examples import as_text, as_texts
from data.builders.sources import get_data_source
from data.corpora.documents import Document
from data.errors import DataError

TEXT_KEYS = ("doc_id", "sentences", "paragraph_lengths")
TAGGED_KEYS = ("tokens", "tags", "sentence_lengths")


def document_features(metadata: Mapping[str, Any], *, tagged: bool = False):
    """The tfds FeaturesDict of a document with the given metadata features (name -> feature)."""
    import tensorflow_datasets as tfds

    clash = sorted(set(metadata) & set(TEXT_KEYS + TAGGED_KEYS))
    if clash:
        raise ValueError(f"metadata names {clash} are reserved for the document layout")
    strings = tfds.features.Tensor(shape=(None,), dtype=np.str_)
    lengths = tfds.features.Tensor(shape=(None,), dtype=np.int32)
    features = {"doc_id": tfds.features.Text(), "sentences": strings,
                "paragraph_lengths": lengths}
    if tagged:
        features.update(tokens=strings, tags=strings, sentence_lengths=lengths)
    features.update(metadata)
    return tfds.features.FeaturesDict(features)


def to_example(doc: Document) -> dict[str, Any]:
    """The example a builder yields for `doc` (see the layout in the module docstring)."""
    if any(not paragraph for paragraph in doc.paragraphs):
        raise DataError(f"document {doc.doc_id!r} has an empty paragraph")
    example = {"doc_id": doc.doc_id,
               "sentences": np.array(doc.sentences, dtype=object),
               "paragraph_lengths": np.array([len(p) for p in doc.paragraphs], dtype=np.int32)}
    if doc.tokens is not None:
        if doc.tags is None or len(doc.tokens) != len(doc.sentences) or any(
                len(w) != len(t) for w, t in zip(doc.tokens, doc.tags, strict=True)):
            raise DataError(f"document {doc.doc_id!r}: tokens and tags must come one list per "
                            "sentence, of equal lengths")
        example.update(
            tokens=np.array([w for ws in doc.tokens for w in ws], dtype=object),
            tags=np.array([t for ts in doc.tags for t in ts], dtype=object),
            sentence_lengths=np.array([len(ws) for ws in doc.tokens], dtype=np.int32))
    example.update(doc.metadata)
    return example


def _ragged(values: list, lengths, what: str, doc_id: str) -> list[list]:
    lengths = [int(n) for n in np.asarray(lengths).reshape(-1)]
    if sum(lengths) != len(values) or any(n < 0 for n in lengths):
        raise DataError(f"document {doc_id!r}: {what} lengths {lengths} do not add up to "
                        f"{len(values)}")
    offsets = np.cumsum([0] + lengths)
    return [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _scalar(value, feature) -> Any:
    if feature is not None:
        import tensorflow_datasets as tfds

        if isinstance(feature, tfds.features.ClassLabel):
            return feature.int2str(int(value))
    if isinstance(value, (bytes, str)):
        return as_text(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    return as_text(value) if isinstance(value, bytes) else value


def as_document(example: Mapping[str, Any], features: Mapping[str, Any] | None = None
                ) -> Document:
    """The Document stored in `example` (as a TFDS data source returns it: numpy and bytes).

    features: the dataset's `builder.info.features`; when given, ClassLabel metadata come back
    as their names (e.g. genre 'press: reportage'), else as integers.
    """
    missing = [k for k in TEXT_KEYS if k not in example]
    if missing:
        raise DataError(f"not a document example: it lacks {missing} (keys {sorted(example)})")
    doc_id = as_text(example["doc_id"])
    paragraphs = _ragged(as_texts(example["sentences"]), example["paragraph_lengths"],
                         "paragraph", doc_id)
    tokens = tags = None
    if "tokens" in example:
        tokens = _ragged(as_texts(example["tokens"]), example["sentence_lengths"], "sentence",
                         doc_id)
        tags = _ragged(as_texts(example["tags"]), example["sentence_lengths"], "sentence", doc_id)
    metadata = {k: _scalar(v, features[k] if features is not None and k in features else None)
                for k, v in example.items() if k not in TEXT_KEYS + TAGGED_KEYS}
    return Document(doc_id, paragraphs, metadata, tokens, tags)


def read_documents(name: str, split: str, *, data_dir: str | pathlib.Path | None = None
                   ) -> Iterator[Document]:
    """The Documents of `split` of local corpus `name` (prepared on first use), in order."""
    source = get_data_source(name, split, data_dir=data_dir)
    features = builders.get_builder(name, data_dir).info.features
    for i in range(len(source)):
        yield as_document(source[i], features)
