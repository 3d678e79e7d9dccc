"""Decoding an extractive answer from start/end scores (BERT Sec. 4.2, SQuAD).

The score of the span from token i to token j is ``start_logits[i] + end_logits[j]``; the
prediction is the best-scoring span with ``i <= j`` and ``j - i + 1 <= max_answer_length``
(BERT's run_squad uses 30 word pieces) whose tokens are all context tokens (``context_mask``:
the question, [CLS], [SEP] and padding are never part of an answer).

    start, end, score = best_span(start_logits, end_logits, max_answer_length=30,
                                  context_mask=batch["context_mask"])

Pure jax.numpy (NumPy inputs work too), vectorised over leading batch dimensions, jittable:
all ``L x L`` pairs are scored at once (147k pairs at L = 384: cheap next to the encoder).
"""

from __future__ import annotations

import jax.numpy as jnp


def span_scores(start_logits, end_logits, max_answer_length: int, context_mask=None):
    """``[..., L, L]`` float32: ``start[i] + end[j]`` where the span (i, j) is allowed, else -inf."""
    if max_answer_length < 1:
        raise ValueError(f"max_answer_length={max_answer_length} must be >= 1")
    start = jnp.asarray(start_logits, jnp.float32)
    end = jnp.asarray(end_logits, jnp.float32)
    length = start.shape[-1]
    i = jnp.arange(length)[:, None]
    j = jnp.arange(length)[None, :]
    allowed = (j >= i) & (j - i < max_answer_length)
    if context_mask is not None:
        context = jnp.asarray(context_mask).astype(bool)
        allowed = allowed & context[..., :, None] & context[..., None, :]
    return jnp.where(allowed, start[..., :, None] + end[..., None, :], -jnp.inf)


def best_span(start_logits, end_logits, max_answer_length: int, context_mask=None):
    """(start [...], end [...], score [...]) of the best allowed span of each sequence.

    ``start_logits``, ``end_logits``: ``[..., L]``; ``context_mask``: ``[..., L]`` (1 = may be
    part of the answer) or None (every token may). When no span is allowed (no context token)
    the result is (0, 0) with score -inf.
    """
    scores = span_scores(start_logits, end_logits, max_answer_length, context_mask)
    length = scores.shape[-1]
    flat = scores.reshape(*scores.shape[:-2], length * length)
    best = jnp.argmax(flat, axis=-1)
    return best // length, best % length, jnp.max(flat, axis=-1)
