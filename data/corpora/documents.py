"""Documents of the pretraining corpora: paragraphs of sentences, with metadata.

A document is a list of paragraphs, each a list of sentences (BERT's next-sentence task takes the
next segment from the same document; some input formats keep paragraph breaks):

    doc.doc_id          # 'ca14'
    doc.paragraphs      # [['The Fulton County Grand Jury said ...', ...], ...]
    doc.metadata        # {'genre': 'press: reportage'}
    doc.tokens, doc.tags  # Brown only: words and POS tags of each sentence, else None

The readers of data/corpora/ make them from the raw files; data/builders/documents.py
stores them as TFDS examples and reads them back (`read_documents("brown", "validation")`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence


@dataclasses.dataclass
class Document:
    """One document: paragraphs of sentences, its metadata, and (tagged corpora) tokens and tags.

    tokens, tags: one list per sentence, sentences in the order of `sentences` (paragraph by
    paragraph); None when the corpus has no tokenization.
    """

    doc_id: str
    paragraphs: list[list[str]]
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    tokens: list[list[str]] | None = None
    tags: list[list[str]] | None = None

    @property
    def sentences(self) -> list[str]:
        """All sentences, paragraph by paragraph."""
        return [s for paragraph in self.paragraphs for s in paragraph]

    @property
    def text(self) -> str:
        """The document as running text: sentences joined by a space, paragraphs by a newline
        (what a language model reads: data/builders/english_lm.py)."""
        return "\n".join(" ".join(paragraph) for paragraph in self.paragraphs)

    @property
    def num_words(self) -> int:
        """Whitespace-separated words of all sentences."""
        return sum(len(s.split()) for s in self.sentences)


def corpus_stats(docs: Sequence[Document]) -> dict[str, int]:
    """Counts of documents, paragraphs, sentences and whitespace-separated words."""
    return {"documents": len(docs),
            "paragraphs": sum(len(d.paragraphs) for d in docs),
            "sentences": sum(len(d.sentences) for d in docs),
            "words": sum(d.num_words for d in docs)}
