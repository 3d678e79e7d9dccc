"""Attention masks: boolean, ``True`` = "this query may attend to this key", with a shape
broadcastable to ``[b, h, q, k]`` (these return ``[b, 1, q, k]`` or ``[1, 1, q, k]``); combine
several with ``combine_masks``. models/attention.py re-exports them beside the attention that
takes them.
"""

from __future__ import annotations

import jax.numpy as jnp


def padding_mask(q_valid, kv_valid):
    """``[b, 1, q, k]``: a pair may attend when both the query and the key are real tokens.

    ``q_valid`` ``[b, q]`` and ``kv_valid`` ``[b, k]`` are bool (or 0/1 int) arrays.
    """
    q_valid = jnp.asarray(q_valid).astype(bool)
    kv_valid = jnp.asarray(kv_valid).astype(bool)
    return q_valid[:, None, :, None] & kv_valid[:, None, None, :]


def causal_mask(q_len: int, kv_len: int | None = None, offset=0):
    """``[1, 1, q, k]``: query ``i`` sits at absolute position ``i + offset`` and sees keys
    ``j <= i + offset`` (Vaswani et al. 2017 decoder: no peeking at later tokens).

    ``offset`` lets ``q_len`` new queries sit after ``offset`` already-known keys (decoding).
    """
    kv_len = q_len if kv_len is None else kv_len
    q_pos = jnp.arange(q_len)[:, None] + offset
    kv_pos = jnp.arange(kv_len)[None, :]
    return (kv_pos <= q_pos)[None, None]


def segment_mask(q_segment_ids, kv_segment_ids):
    """``[b, 1, q, k]``: attend only within the same segment of a packed sequence.

    Several short examples packed into one row carry ids 1, 2, 3, ...; id 0 marks padding,
    which attends to nothing and is attended by nothing.
    """
    q_ids = jnp.asarray(q_segment_ids)[:, None, :, None]
    kv_ids = jnp.asarray(kv_segment_ids)[:, None, None, :]
    return (q_ids == kv_ids) & (q_ids != 0) & (kv_ids != 0)


def sliding_window_mask(q_positions, kv_positions, window: int, *, causal: bool = True):
    """``[b, 1, q, k]`` local attention over ``window`` positions.

    With ``diff = q_pos - kv_pos``:
      - ``causal=True``: ``0 <= diff < window``, the query and the ``window - 1`` keys before it
        (Mistral style; ``window=1`` attends only to itself).
      - ``causal=False``: ``|diff| < window``, ``window - 1`` keys on each side (Longformer style).
    Positions are ``[b, len]`` integer arrays.
    """
    if window < 1:
        raise ValueError(f'sliding_window_mask needs window >= 1, got {window}.')
    diff = jnp.asarray(q_positions)[:, :, None] - jnp.asarray(kv_positions)[:, None, :]
    if causal:
        allowed = (diff >= 0) & (diff < window)
    else:
        allowed = jnp.abs(diff) < window
    return allowed[:, None]


def combine_masks(*masks):
    """Logical AND of the masks that are not None (broadcasting); None if all are None."""
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    combined = jnp.asarray(masks[0]).astype(bool)
    for m in masks[1:]:
        combined = combined & jnp.asarray(m).astype(bool)
    return combined
