"""data/corpora/wikipedia.py: BERT's "text passages" of a Wikipedia article as TFDS's builder
leaves its text (sections' headings and text, list items and table remnants on their own
lines), split into sentences."""

from __future__ import annotations

from data.corpora.wikipedia import article_document, is_passage, passages

ARTICLE = """Anarchism is a political philosophy. It is skeptical of authority (Dr. Smith, 1990).

History

Early societies were egalitarian; the term "anarchist" first appeared in 1642. Others said "no!"
Modern anarchism emerged from the Enlightenment.[1]
Forms
* Collectivist anarchism
* Anarcho-communism
See also
References
The end of the article is here, it said (quoting the archive.)"""


def test_passages_are_the_lines_that_end_a_sentence():
    assert passages(ARTICLE) == [
        "Anarchism is a political philosophy. It is skeptical of authority (Dr. Smith, 1990).",
        'Early societies were egalitarian; the term "anarchist" first appeared in 1642. '
        'Others said "no!"',
        "The end of the article is here, it said (quoting the archive.)"]
    for heading in ("History", "Forms", "See also", "* Anarcho-communism", "",
                    "Modern anarchism emerged from the Enlightenment.[1]"):
        assert not is_passage(heading)


def test_an_article_is_its_passages_split_into_sentences():
    doc = article_document("12", ARTICLE)
    assert doc.doc_id == "12"
    assert doc.paragraphs[0] == ["Anarchism is a political philosophy.",
                                 "It is skeptical of authority (Dr. Smith, 1990)."]
    assert doc.paragraphs[1] == ['Early societies were egalitarian; the term "anarchist" first '
                                 'appeared in 1642.', 'Others said "no!"']
    assert len(doc.paragraphs) == 3
    assert article_document("13", "List of rivers\n* Nile\n* Amazon").paragraphs == []
