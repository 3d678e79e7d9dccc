"""Length-based alignment of two sequences of sentences (Gale & Church 1993).

    steps = gale_church_align([len(s) for s in english], [len(s) for s in spanish])
    # [(1, 1), (1, 1), (1, 2), (1, 1), ...]: one English sentence to two Spanish ones, ...

Gale and Church ("A Program for Aligning Sentences in Bilingual Corpora", Computational
Linguistics 19(1), 1993) model the length in characters of a translation: a text of l1
characters becomes one of l2 = c * l1 characters on average, with variance s2 * l1, so

    delta = (l2 - c * l1) / sqrt(l1 * s2)

is about standard normal for a true match (c = 1, s2 = 6.8 in their data, eq. and Sec. 4). A
candidate match of `a` sentences to `b` costs -log P(a-b) - log(2 * (1 - Phi(|delta|))), with
the prior of its kind (their Table 5: 1-1 0.89, "2-1 or 1-2" 0.089, given here to each);
dynamic programming finds the cheapest sequence of matches. Here only 1-1, 2-1 and 1-2 matches
are allowed: the callers pair texts that have the same number of units and want to know where
the plain one-to-one pairing is not the likeliest (data/corpora/bible.py: verse divisions that
differ between two Bibles).
"""

from __future__ import annotations

import math
from typing import Sequence

MEAN_RATIO = 1.0  # c: characters of the second text per character of the first
VARIANCE = 6.8  # s2: variance of l2 per character of l1
PRIORS = {(1, 1): 0.89, (2, 1): 0.089, (1, 2): 0.089}  # P(kind of match), Table 5
_LOG_FLOOR = 1e-300  # 2 (1 - Phi(|delta|)) underflows to 0 past |delta| ~ 38


def gale_church_cost(length_a: int, length_b: int, kind: tuple[int, int] = (1, 1)) -> float:
    """-log P(kind) - log P(|delta|) of matching `length_a` characters of the first text with
    `length_b` of the second (module docstring); an empty first side counts as 1 character."""
    delta = (length_b - MEAN_RATIO * length_a) / math.sqrt(max(length_a, 1) * VARIANCE)
    tail = math.erfc(abs(delta) / math.sqrt(2.0))  # 2 (1 - Phi(|delta|))
    return -math.log(PRIORS[kind]) - math.log(max(tail, _LOG_FLOOR))


def gale_church_align(lengths_a: Sequence[int],
                      lengths_b: Sequence[int]) -> list[tuple[int, int]]:
    """The cheapest sequence of (units of a, units of b) matches, each (1, 1), (2, 1) or
    (1, 2), that covers both sequences; ValueError when none does (e.g. 1 unit against 3)."""
    n, m = len(lengths_a), len(lengths_b)
    prefix_a = [0]
    for length in lengths_a:
        prefix_a.append(prefix_a[-1] + length)
    prefix_b = [0]
    for length in lengths_b:
        prefix_b.append(prefix_b[-1] + length)
    cost = [[math.inf] * (m + 1) for _ in range(n + 1)]
    back: dict[tuple[int, int], tuple[int, int]] = {}
    cost[0][0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            for a, b in PRIORS:
                if i < a or j < b or cost[i - a][j - b] == math.inf:
                    continue
                total = cost[i - a][j - b] + gale_church_cost(
                    prefix_a[i] - prefix_a[i - a], prefix_b[j] - prefix_b[j - b], (a, b))
                if total < cost[i][j]:
                    cost[i][j], back[i, j] = total, (a, b)
    if cost[n][m] == math.inf:
        raise ValueError(f"{n} units cannot be matched with {m} by 1-1, 2-1 and 1-2 matches")
    steps, i, j = [], n, m
    while i or j:
        a, b = back[i, j]
        steps.append((a, b))
        i, j = i - a, j - b
    return steps[::-1]
