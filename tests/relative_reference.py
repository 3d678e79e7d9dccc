"""ViT's 1-D relative attention logits in plain NumPy loops (Dosovitskiy et al. 2021, App. D.4:
the original query against a learned key per patch offset p_q - p_k, plus three keys for the
prefix tokens' pairs); the reference of the relative-attention and ViT tests."""

from __future__ import annotations

import math

import numpy as np


def np_relation(i: int, j: int, n: int, prefix: int) -> int:
    """The table row of query token i and key token j (prefix tokens first): the paper's offset
    p_q - p_k between two patches, shifted to 0 .. 2n - 2, or one of the three prefix relations."""
    i_patch, j_patch = i >= prefix, j >= prefix
    if i_patch and j_patch:
        return (i - prefix) - (j - prefix) + n - 1
    if i_patch:
        return 2 * n - 1          # patch query, prefix key
    if j_patch:
        return 2 * n              # prefix query, patch key
    return 2 * n + 1              # prefix query, prefix key


def np_relative_logits(query, table, n, prefix):
    """logits[b, h, i, j] = query[b, i, h] . table[relation(i, j), h] / sqrt(d), in float64."""
    query, table = np.asarray(query, np.float64), np.asarray(table, np.float64)
    b, t, h, d = query.shape
    out = np.zeros((b, h, t, t))
    for bi in range(b):
        for hi in range(h):
            for i in range(t):
                for j in range(t):
                    key = table[np_relation(i, j, n, prefix), hi]
                    out[bi, hi, i, j] = query[bi, i, hi] @ key / math.sqrt(d)
    return out
