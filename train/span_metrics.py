"""Exact match and F1 of a predicted answer span (SQuAD, Rajpurkar et al. 2016, Sec. 6; BERT
Sec. 4.2 reports both), counted on token positions.

A span is an inclusive ``(start, end)`` of token positions. Exact match is 1 when the prediction
equals a reference span. F1 is the harmonic mean of precision (the share of the predicted tokens
inside the reference) and recall (the share of the reference's tokens predicted); with spans of
positions the common tokens are the positions the two intervals share. The official script
counts normalised words of the answer text instead (punctuation and articles removed, a bag of
words); here they are word pieces, so figures are close to but not the official ones. Each score
is the best over an example's references; references with ``start < 0`` are padding, and an
example without a valid one scores 0.

    exact, f1 = exact_match_and_f1(start, end, gold_starts, gold_ends)  # [b], [b, r] -> [b], [b]
"""

from __future__ import annotations

import jax.numpy as jnp


def exact_match_and_f1(start, end, gold_starts, gold_ends):
    """``start``/``end`` ``[b]`` the predicted spans (``start <= end``); ``gold_starts``/
    ``gold_ends`` ``[b, r]`` the references (``-1``: none). Returns float32 ``[b]`` exact match
    and ``[b]`` F1, each the best over the references."""
    start, end = jnp.asarray(start)[:, None], jnp.asarray(end)[:, None]
    gold_starts, gold_ends = jnp.asarray(gold_starts), jnp.asarray(gold_ends)
    valid = gold_starts >= 0
    exact = ((start == gold_starts) & (end == gold_ends) & valid).any(-1)
    overlap = jnp.maximum(0, jnp.minimum(end, gold_ends) - jnp.maximum(start, gold_starts) + 1)
    precision = overlap / jnp.maximum(end - start + 1, 1)
    recall = overlap / jnp.maximum(gold_ends - gold_starts + 1, 1)
    f1 = jnp.where(valid & (overlap > 0),
                   2 * precision * recall / jnp.maximum(precision + recall, 1e-9), 0.0)
    return exact.astype(jnp.float32), f1.max(-1).astype(jnp.float32)
