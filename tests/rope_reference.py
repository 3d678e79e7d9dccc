"""RoPE in plain NumPy (Su et al. 2021, "RoFormer", Sec. 3.2): feature pair (x[2i], x[2i+1]) of
the token at position m turned by the angle m * base^(-2i/d); the reference of the attention and
Transformer tests."""

from __future__ import annotations

import math

import numpy as np


def np_rope(x, positions, base):
    """Rotate adjacent pairs (x[2i], x[2i+1]) by position * base^(-2i/d)."""
    out = np.array(x, np.float64)
    d = x.shape[-1]
    for bi in range(x.shape[0]):
        for li in range(x.shape[1]):
            for i in range(d // 2):
                a = positions[bi, li] * base ** (-2.0 * i / d)
                x0, x1 = x[bi, li, :, 2 * i], x[bi, li, :, 2 * i + 1]
                out[bi, li, :, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
                out[bi, li, :, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out
