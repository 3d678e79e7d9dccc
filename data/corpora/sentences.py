"""A small rule-based sentence splitter for edited English prose (Austen's novels, SOTU speeches).

    split_sentences('Mr. Darcy came. "Is he rich?" she asked. "Very!" Then he left.')
    -> ['Mr. Darcy came.', '"Is he rich?" she asked.', '"Very!"', 'Then he left.']

Runs of whitespace are first collapsed to one space, a lone '..' becomes '.' (a typo of the
source: '...' stays), and a space is put back where the source lost it after a sentence ('by
peace.We will': two lowercase letters, the mark, then a capitalised word). A sentence then
ends after a run of '.', '!' or '?' (so '...' and '?!' too), together with any closing quotes
and brackets right after it, when all of these hold:
  1. whitespace follows, or '--' (Austen's "I understand you.--You do not ..."; the dash stays
     with the sentence before);
  2. the next sentence starts with an uppercase letter or a digit, possibly after opening quotes
     or brackets ('"Very!" she cried' and 'Oh! my dear' stay one sentence);
  3. when the run is a single '.', the word before it (its part after a dash: 'five
     altogether--Mr. Bingley', 'Oct.-Dec. 1945') is not
     - an abbreviation of ABBREVIATIONS ('Mr. Darcy', 'St. James', 'Gen. Grant'),
     - one of NUMBER_ABBREVIATIONS followed by a number: digits or a Roman numeral before
       punctuation ('No. 97, Vol. II, Rambler', 'vol. 100, p. 62'); otherwise it is a word
       ('"No. Only to Honiton."' is two sentences),
     - a single capital letter, i.e. an initial ('Harry S. Truman', 'J. Q. Adams', 'Luke I.
       Wright'), except 'I' after a lowercase word, after 'War' or first in the paragraph: the
       pronoun or a numeral ('as well as I. What', 'World War I. Then', 'I. The economy'),
     - a dotted abbreviation such as 'U.S' or 'p.m'.
Straight quotes are both opening and closing; the rule needs no pairing because it looks only at
the characters around the boundary.

Known limits, accepted for pretraining text: a sentence that really ends with an abbreviation or
an initial ('... in the U.S. The next ...') is not split there; a sentence starting with a
lowercase word after '?' or '!' is joined to the one before; a Roman numeral one letter long
must be followed by punctuation ('Vol. I, p. 3', not 'Vol. I of'), so that the answer 'No. I
hope ...' splits.
"""

from __future__ import annotations

import re

# Abbreviations written with a final '.' that are almost never the end of a sentence in these
# texts: titles before a name, and words before a number or a name. Matched case-sensitively.
ABBREVIATIONS = frozenset({
    "Mr", "Mrs", "Ms", "Messrs", "Mme", "Mlle", "Dr", "St", "Jr", "Sr", "Esq", "Rev", "Hon",
    "Prof", "Gen", "Brig", "Col", "Capt", "Cpt", "Lt", "Lieut", "Sgt", "Maj", "Adm", "Cmdr", "Gov",
    "Sen", "Rep",
    "Pres", "Supt", "Mt", "Ft", "vs", "viz", "cf",
    "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",
    "Co", "Bros",
})
# Abbreviations only before a number ('No. 5', 'ART. II', 'p. 62'); elsewhere ordinary words
# ('No. Only to Honiton.'). 'p', 'pp', 'lbs' lowercase only: 'P.' is an initial.
NUMBER_ABBREVIATIONS = frozenset(
    {form for word in ("no", "nos", "vol", "vols", "art", "sec")
     for form in (word, word.capitalize(), word.upper())} | {"p", "pp", "lbs"})

_OPENERS = "\"'([\u2018\u201c"  # characters that may precede the first letter of a sentence
_CLOSERS = "\"')]\u2019\u201d"  # characters that may follow the final punctuation

# A candidate end: final punctuation, closers, an optional '--', optional whitespace, then (looking
# ahead) openers and an uppercase letter or a digit. A boundary needs the dash or the whitespace.
_CANDIDATE = re.compile(
    rf"([.!?]+)[{re.escape(_CLOSERS)}]*(--)?(\s*)(?=[{re.escape(_OPENERS)}]*[A-Z0-9])")
_WORD_BEFORE = re.compile(r"(\S+)$")
_DASH = re.compile("--|-|\u2014")
_DOUBLE_PERIOD = re.compile(r"(?<!\.)\.\.(?!\.)")
_LOST_SPACE = re.compile(r"(?<=[a-z]{2}[.?!])(?=[A-Z][a-z])")
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # 'U.S', 'p.m', 'e.g' (before the last '.')
# A number: digits, or a Roman numeral ending at punctuation or the end ('II,', 'IV.').
_NUMBER = re.compile(r"\d|[IVXLC]+(?:[,.;:)]|$)")


def _is_abbreviation(text_before: str, text_after: str) -> bool:
    """Whether the word right before a single '.' is an abbreviation or an initial, given the
    text after the '.' (and the space)."""
    match = _WORD_BEFORE.search(text_before)
    if match is None:
        return False
    word = _DASH.split(match.group(1))[-1].lstrip(_OPENERS)
    if word in NUMBER_ABBREVIATIONS:
        return _NUMBER.match(text_after) is not None
    if word == "I":  # an initial only after a capitalised word other than 'War'
        before = text_before[:match.start(1)].split()
        return bool(before) and before[-1][:1].isupper() and before[-1] != "War"
    return (word in ABBREVIATIONS or (len(word) == 1 and word.isupper())
            or _DOTTED.match(word) is not None)


def split_sentences(text: str) -> list[str]:
    """The sentences of `text` (a paragraph), by the rules in the module docstring."""
    text = " ".join(text.split())
    text = _LOST_SPACE.sub(" ", _DOUBLE_PERIOD.sub(".", text))
    sentences, start = [], 0
    for match in _CANDIDATE.finditer(text):
        punctuation, dash, space = match.groups()
        if not (dash or space):
            continue  # 'U.S.A', '3.5': no boundary without a space or a dash
        if punctuation == "." and _is_abbreviation(text[start:match.start(1)],
                                                   text[match.end(3):]):
            continue
        sentences.append(text[start:match.start(3)])
        start = match.end(3)
    sentences.append(text[start:])
    return [s for s in sentences if s]
