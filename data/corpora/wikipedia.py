"""A Wikipedia article (TFDS `wikipedia`, e.g. 'wikipedia/20230601.en') as a Document of text
passages split into sentences, done on the fly for each article a pipeline reads.

BERT (Devlin et al. 2019, Sec. 3.1): "For Wikipedia we extract only the text passages and ignore
lists, tables, and headers." TFDS's builder has already stripped the wiki markup
(mwparserfromhell's strip_code), leaving each section's heading and text with its paragraphs,
list items and table remnants on separate lines. A line is kept as a passage when it ends a
sentence: its last character, after closing quotes and brackets, is '.', '!' or '?'. Headings
('Early life'), list items without a full stop, infobox and table debris, 'References' and 'See
also' sections do not; prose paragraphs do. Each passage is split into sentences by
data/corpora/sentences.py's splitter. An article with no passage (a list or a disambiguation
page) is an empty Document: the pipelines make no example of it.

No offline step: a pipeline reads an article by its index and calls `article_document` on it,
in grain's reader threads (data/pipelines/pretraining_stream.py).
"""

from __future__ import annotations

import re

from data.corpora.documents import Document
from data.corpora.sentences import split_sentences

_CLOSERS = "\"')]\u2019\u201d"
_PASSAGE_END = re.compile(rf"[.!?][{re.escape(_CLOSERS)}]*\s*$")


def is_passage(line: str) -> bool:
    """Whether a line of an article is text (ends a sentence) rather than a heading, a list item
    or table debris (module docstring)."""
    return _PASSAGE_END.search(line) is not None


def passages(text: str) -> list[str]:
    """The text passages of an article's text, in order (one per kept line)."""
    return [line.strip() for line in text.splitlines() if line.strip() and is_passage(line)]


def article_document(doc_id: str, text: str) -> Document:
    """The article as a Document: one paragraph per passage, split into sentences."""
    paragraphs = [sentences for passage in passages(text) if (sentences :=
                                                               split_sentences(passage))]
    return Document(doc_id=doc_id, paragraphs=paragraphs)
