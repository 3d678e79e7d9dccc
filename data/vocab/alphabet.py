"""A WordPiece vocabulary's alphabet limited to its most frequent characters (`max_characters`).

Every character a vocabulary keeps takes two of its tokens (data/vocab/wordpiece.py: a word start
and a '##' continuation). A corpus quoting many scripts, as a large sample of Wikipedia does,
holds thousands of characters, most of them rare: kept, they take a good part of BERT's 30,522
tokens from the word pieces. `limit_alphabet` keeps the most frequent (HF's
BertWordPieceTokenizer keeps 1,000 by default, its `limit_alphabet`) and leaves out of the
training the words that hold any other: those become [UNK], and the note says how many.
"""

from __future__ import annotations

import collections

import numpy as np

from data.errors import DataError


def check_max_characters(max_characters) -> int:
    """`max_characters` as an int; DataError unless it is an integer >= 0."""
    if isinstance(max_characters, bool) or not isinstance(max_characters, (int, np.integer)) \
            or max_characters < 0:
        raise DataError(f"max_characters={max_characters!r} must be an integer >= 0 (0: every "
                        "character the texts hold)")
    return int(max_characters)


def limit_alphabet(counts: collections.Counter, max_characters: int
                   ) -> tuple[collections.Counter, list[str], str | None]:
    """(the word counts without the words holding a character outside the `max_characters`
    most frequent ones, ties to the lower code point; those characters, sorted; a note of what
    that dropped, or None when nothing was). 0 keeps every character."""
    frequency: collections.Counter = collections.Counter()
    for word, count in counts.items():
        for character in word:
            frequency[character] += count
    if not max_characters or len(frequency) <= max_characters:
        return counts, sorted(frequency), None
    kept = set(sorted(frequency, key=lambda c: (-frequency[c], c))[:max_characters])
    limited = collections.Counter({w: n for w, n in counts.items() if set(w) <= kept})
    total = sum(counts.values())
    lost = total - sum(limited.values())
    note = (f"kept the {max_characters} most frequent of the texts' {len(frequency)} characters: "
            f"the words with the other {len(frequency) - max_characters} become [UNK], "
            f"{lost:,} of {total:,} words ({lost / total:.3%})")
    return limited, sorted(kept), note
