"""Best-span decoding for extractive QA (models/spans.py): hand cases and a brute-force search
over every allowed (start, end) pair."""

from __future__ import annotations

import numpy as np

from models.spans import best_span


def _brute_force(start, end, max_len, context):
    best, where = -np.inf, (0, 0)
    for i in range(len(start)):
        for j in range(i, min(len(start), i + max_len)):
            if context[i] and context[j] and start[i] + end[j] > best:
                best, where = start[i] + end[j], (i, j)
    return where


def test_best_span_hand_cases():
    def span(start, end, max_len, context=None):
        s, e, _ = best_span(np.asarray(start, np.float32), np.asarray(end, np.float32), max_len,
                            None if context is None else np.asarray(context))
        return int(s), int(e)

    assert span([0, 5, 0, 0], [0, 0, 4, 0], 5) == (1, 2)
    # end < start is never chosen: the best end comes before the best start.
    assert span([0, 0, 0, 9], [0, 9, 0, 1], 5) == (3, 3)
    # at most max_answer_length tokens: (0, 4) would score 20 but is 5 long.
    assert span([10, 0, 0, 0, 0], [0, 0, 1, 0, 10], 3) == (0, 2)
    assert span([10, 0, 0, 0, 0], [0, 0, 1, 0, 10], 5) == (0, 4)
    # masked positions (question, [CLS], [SEP]) are excluded at both ends.
    assert span([9, 1, 2, 0], [9, 0, 3, 0], 4, [0, 1, 1, 0]) == (2, 2)
    assert span([9, 1, 2, 0], [9, 0, 3, 0], 4, [0, 1, 1, 1]) == (2, 2)
    assert span([0, 8, 0, 0], [0, 0, 0, 9], 4, [0, 1, 1, 1]) == (1, 3)
    s, e, score = best_span(np.zeros(4), np.zeros(4), 3, np.zeros(4))
    assert (int(s), int(e)) == (0, 0) and score == -np.inf  # nothing allowed


def test_best_span_matches_brute_force_in_a_batch():
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(2, 3, 12)), rng.normal(size=(2, 3, 12))
    context = rng.random((2, 3, 12)) < 0.7
    s, e, _ = best_span(start, end, 4, context)
    for idx in np.ndindex(2, 3):
        assert (int(s[idx]), int(e[idx])) == _brute_force(start[idx], end[idx], 4, context[idx])
