"""Gale & Church's length-based alignment (data/corpora/alignment.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import norm

from data.corpora.alignment import PRIORS, gale_church_align, gale_church_cost


def test_cost_against_the_normal_tail_of_scipy():
    """-log P(kind) - log 2 (1 - Phi(|delta|)), delta = (l2 - l1) / sqrt(6.8 l1) (c = 1)."""
    for l1, l2, kind in [(100, 100, (1, 1)), (100, 130, (1, 1)), (40, 25, (2, 1)),
                         (250, 90, (1, 2)), (7, 150, (1, 1)), (0, 5, (1, 1))]:
        delta = (l2 - l1) / np.sqrt(max(l1, 1) * 6.8)
        expected = -np.log(PRIORS[kind]) - np.log(2 * norm.sf(abs(delta)))
        assert gale_church_cost(l1, l2, kind) == pytest.approx(expected, rel=1e-9)
    # Far in the tail the probability underflows: the cost stays finite and grows with |delta|.
    assert math.isfinite(gale_church_cost(10, 10_000)) and \
        gale_church_cost(10, 10_000) >= gale_church_cost(10, 1_000)


def _brute_force(lengths_a, lengths_b):
    """The cheapest path by trying every sequence of 1-1, 2-1, 1-2 steps (small inputs only)."""
    best, best_steps = math.inf, None
    for count in range(1, len(lengths_a) + len(lengths_b) + 1):
        for steps in itertools.product(list(PRIORS), repeat=count):
            if sum(a for a, _ in steps) != len(lengths_a) or \
                    sum(b for _, b in steps) != len(lengths_b):
                continue
            i = j = 0
            total = 0.0
            for a, b in steps:
                total += gale_church_cost(sum(lengths_a[i:i + a]), sum(lengths_b[j:j + b]),
                                          (a, b))
                i, j = i + a, j + b
            if total < best:
                best, best_steps = total, list(steps)
    return best_steps


def test_dynamic_programming_finds_the_cheapest_path():
    rng = np.random.default_rng(0)
    for _ in range(30):
        n, m = rng.integers(1, 6), rng.integers(1, 6)
        if not (n <= 2 * m and m <= 2 * n):
            continue
        a, b = rng.integers(5, 200, n).tolist(), rng.integers(5, 200, m).tolist()
        assert gale_church_align(a, b) == _brute_force(a, b), (a, b)


def test_one_to_one_where_lengths_agree_and_the_split_where_one_side_divides():
    verses = [120, 80, 200, 60, 150, 90]
    assert gale_church_align(verses, [round(v * 1.05) for v in verses]) == [(1, 1)] * 6
    # The second text splits verse 3 (200) in two, which shifts the rest by one: its last slot
    # holds the first text's last two verses (150 + 90).
    other = [120, 80, 110, 90, 60, 240]
    assert gale_church_align(verses, other) == [(1, 1), (1, 1), (1, 2), (1, 1), (2, 1)]
    with pytest.raises(ValueError, match="1 units cannot be matched with 3"):
        gale_church_align([10], [10, 10, 10])
