"""Exact match and F1 of answer spans (train/span_metrics.py) against a plain-Python count of the
shared token positions, best over references, padded references ignored."""

from __future__ import annotations

import numpy as np
import pytest

from train.span_metrics import exact_match_and_f1


def reference(start, end, gold_starts, gold_ends):
    """SQuAD's definitions on sets of positions, the best over the valid references."""
    predicted = set(range(start, end + 1))
    exact, f1 = 0.0, 0.0
    for gold_start, gold_end in zip(gold_starts, gold_ends):
        if gold_start < 0:
            continue
        gold = set(range(gold_start, gold_end + 1))
        exact = max(exact, float(predicted == gold))
        common = len(predicted & gold)
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            f1 = max(f1, 2 * precision * recall / (precision + recall))
    return exact, f1


def test_hand_counted_cases():
    # prediction (3, 6): [4 tokens]; references per example, -1 = padding
    start, end = np.array([3, 3, 3, 3, 3]), np.array([6, 6, 6, 6, 6])
    gold_starts = np.array([[3, -1], [5, -1], [0, 4], [8, -1], [-1, -1]])
    gold_ends = np.array([[6, -1], [10, -1], [1, 6], [9, -1], [-1, -1]])
    exact, f1 = exact_match_and_f1(start, end, gold_starts, gold_ends)
    np.testing.assert_array_equal(exact, [1, 0, 0, 0, 0])
    # (5, 10): 2 common, P = 2/4, R = 2/6 -> F1 = 0.4; best of (0, 1) -> 0 and (4, 6): 3 common,
    # P = 3/4, R = 1 -> 6/7; disjoint -> 0; no valid reference -> 0.
    np.testing.assert_allclose(f1, [1, 0.4, 6 / 7, 0, 0], rtol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_random_spans_match_the_set_counts(seed):
    rng = np.random.default_rng(seed)
    batch, refs, length = 64, 3, 12
    start = rng.integers(0, length, batch)
    end = np.minimum(start + rng.integers(0, 4, batch), length - 1)
    gold_starts = rng.integers(0, length, (batch, refs))
    gold_ends = np.minimum(gold_starts + rng.integers(0, 5, (batch, refs)), length - 1)
    padded = rng.random((batch, refs)) < 0.3
    gold_starts[padded], gold_ends[padded] = -1, -1
    gold_starts[::5], gold_ends[::5] = start[::5, None], end[::5, None]  # some exact matches
    exact, f1 = exact_match_and_f1(start, end, gold_starts, gold_ends)
    expected = np.array([reference(*row) for row in zip(start, end, gold_starts, gold_ends)])
    assert expected[:, 0].sum() >= batch // 5 and 0 < (expected[:, 1] % 1).sum()
    np.testing.assert_array_equal(exact, expected[:, 0])
    np.testing.assert_allclose(f1, expected[:, 1], rtol=1e-6)
