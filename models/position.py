"""Position information for attention models.

Self-attention is permutation-equivariant: shuffle the tokens and the outputs shuffle the same
way. Word order therefore has to be injected explicitly. There are two families:

Absolute encodings are added to the token embeddings once, at the input:
  - ``sinusoidal_table`` / ``SinusoidalPositionEmbedding``: fixed sines and cosines
    (Vaswani et al. 2017, Sec. 3.5).
  - ``LearnedPositionEmbedding``: a trained table with one row per position (BERT, ViT).
  - ``models.position_2d.sincos_2d_table`` and ``Learned2DPositionEmbedding``: the same ideas
    for a grid of image patches (ViT, Dosovitskiy et al. 2021, appendix D.4).

Relative encodings act inside every attention layer and see only the offset between a query
and a key:
  - ``apply_rope``: rotate queries and keys by an angle proportional to their position, so that
    their dot product depends on the offset only (RoFormer, Su et al. 2021). Given 2-D
    positions ``[b, l, 2]`` it is the axial 2-D RoPE of Heo et al. 2024 (RoPE-Axial): half of
    each head is rotated by the row, the other half by the column.
  - ``alibi_bias``: add a fixed, linearly decreasing penalty to the attention logits
    (ALiBi, Press et al. 2022); ``alibi_2d_bias`` is the same penalty on the Euclidean distance
    between two patches of an image grid.
  - ``T5RelativePositionBias``: add a learned per-head scalar chosen by a log-spaced bucket of the
    offset (T5, Raffel et al. 2020).
  - ``models.position_2d.RelativePositionBias2D``: a learned per-head scalar for every 2-D patch
    offset (the ViT's ``relative_bias_2d``, in the form of Swin's relative position bias).
  - ``models.relative_attention``: ViT's 1-D relative attention (Table 8, "Rel. Pos. Emb."), a
    learned key per offset that the queries meet, its logits added to the content logits.

Biases are returned with shape ``[batch, heads, q_len, kv_len]`` (or broadcastable), ready for the
``bias`` argument of ``models.attention.dot_product_attention``.

Choosing an encoding for a model is done by the model files (``POSITION_KINDS`` below only lists
the names they use, for documentation).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Dtype = Any
Initializer = Callable[..., Any]

POSITION_KINDS = {
    'none': 'no position information (a bag of tokens)',
    'sinusoidal': 'fixed sin/cos added to the input (Vaswani et al. 2017)',
    'learned': 'trained absolute table added to the input (BERT, ViT)',
    'rope': 'rotary query/key rotation inside attention (Su et al. 2021)',
    'alibi': 'fixed linear bias on attention logits (Press et al. 2022)',
    't5': 'learned bucketed relative bias on attention logits (Raffel et al. 2020)',
    'sincos2d': 'fixed 2-D sin/cos for image patches (ViT)',
    'learned2d': 'trained row and column tables, concatenated (ViT appendix D.4)',
    'relative2d': 'learned scalar bias per head and 2-D patch offset (ViT relative_bias_2d)',
    'relative_attention': 'learned key per 1-D patch offset, queried (ViT Table 8, "relative")',
    'rope2d': 'axial rotary rotation, half of each head by row, half by column (Heo et al. 2024)',
    'alibi2d': 'fixed bias -slope * Euclidean patch distance on attention logits (ALiBi, 2-D)',
}


# ----------------------------------------------------------------------------------------------
# Absolute, 1-D
# ----------------------------------------------------------------------------------------------

SINUSOID_LAYOUTS = ('interleaved', 'halves')


def sinusoidal_table(length: int, dim: int, max_timescale: float = 10000.0,
                     layout: str = 'interleaved') -> np.ndarray:
    """Fixed sinusoidal encodings, shape ``[length, dim]``, float32.

    With ``w_i = 1 / max_timescale^(2i / dim)``, ``i < dim / 2``, the wavelengths form a
    geometric progression from ``2*pi`` to ``2*pi * max_timescale``. For any fixed offset ``k``,
    ``PE[pos + k]`` is a rotation of ``PE[pos]`` in every (sin, cos) pair, which the paper hoped
    would help attend by offset. ``layout`` says where each pair's two columns sit:
      'interleaved'  column ``2i`` holds ``sin(pos * w_i)``, column ``2i + 1`` ``cos(pos * w_i)``
                     (the paper's formula, Sec. 3.5);
      'halves'       column ``i`` holds ``sin(pos * w_i)``, column ``dim/2 + i``
                     ``cos(pos * w_i)`` (Marian and the OPUS-MT models: the same pairs, the sines
                     first, then the cosines).
    The two hold the same values in permuted columns, so a model trained with one computes
    something else with the other: imported weights need their own.
    """
    if dim % 2:
        raise ValueError(f'sinusoidal_table needs an even dim, got dim={dim}.')
    if layout not in SINUSOID_LAYOUTS:
        raise ValueError(f'layout={layout!r} is not one of {list(SINUSOID_LAYOUTS)}')
    pos = np.arange(length, dtype=np.float64)[:, None]
    two_i = np.arange(0, dim, 2, dtype=np.float64)[None, :]
    # Vaswani et al. 2017, Sec. 3.5: PE(pos,2i) = sin(pos/10000^(2i/d)), PE(pos,2i+1) = cos(...).
    angles = pos / np.power(max_timescale, two_i / dim)
    table = np.empty((length, dim), dtype=np.float64)
    if layout == 'interleaved':
        table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    else:
        table[:, :dim // 2], table[:, dim // 2:] = np.sin(angles), np.cos(angles)
    return table.astype(np.float32)


class SinusoidalPositionEmbedding(nn.Module):
    """Looks up ``sinusoidal_table(max_length, features, max_timescale, layout)`` rows; has no
    parameters.

    ``__call__(positions [b, l] int) -> [b, l, features]``.
    """

    max_length: int
    features: int
    max_timescale: float = 10000.0
    layout: str = 'interleaved'
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32  # unused (no parameters); kept for a uniform interface

    @nn.compact
    def __call__(self, positions):
        table = jnp.asarray(sinusoidal_table(self.max_length, self.features, self.max_timescale,
                                             self.layout))
        return jnp.take(table, positions, axis=0).astype(self.dtype)


class LearnedPositionEmbedding(nn.Module):
    """A trained table ``'embedding'`` of shape ``[max_length, features]`` (BERT, GPT, ViT).

    ``__call__(positions [b, l] int) -> [b, l, features]``. Cannot extrapolate: positions
    ``>= max_length`` have no row, so a longer static sequence is an error. Position *values*
    are traced under jit and cannot be checked here: one past the table, or a negative one,
    reads a row of NaN (``mode='fill'``), never another row silently; callers that choose
    positions check them (``models/lm_decode.generate``).
    """

    max_length: int
    features: int
    embedding_init: Initializer = nn.initializers.normal(stddev=0.02)
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, positions):
        if positions.shape[-1] > self.max_length:
            raise ValueError(
                f'LearnedPositionEmbedding: sequence length {positions.shape[-1]} exceeds '
                f'max_length={self.max_length}; raise max_length in the model config.')
        table = self.param(
            'embedding', nn.with_logical_partitioning(self.embedding_init, ('length', 'embed')),
            (self.max_length, self.features), self.param_dtype)
        outside = jnp.where(positions < 0, self.max_length, positions)  # take would wrap -1
        return jnp.take(table, outside, axis=0, mode='fill',
                        fill_value=jnp.nan).astype(self.dtype)


# ----------------------------------------------------------------------------------------------
# Rotary (RoPE)
# ----------------------------------------------------------------------------------------------

def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
    """Rotation frequencies ``theta_i = base^(-2i / head_dim)``, ``i < head_dim / 2``; float32."""
    if head_dim % 2:
        raise ValueError(f'RoPE needs an even head_dim, got head_dim={head_dim}.')
    # Su et al. 2021 (RoFormer), Sec. 3.2: theta_i = 10000^(-2(i-1)/d), i = 1..d/2.
    return (base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)


def apply_rope(x, positions, base: float = 10000.0):
    """Rotary position embedding: rotates each feature pair of ``x`` by ``position * theta_i``.

    Args:
      x: queries or keys, ``[batch, length, heads, head_dim]``.
      positions: integer positions, ``[batch, length]`` (1-D RoPE), or ``[batch, length, k]``
        for ``k`` position axes (``k = 2``: row and column of an image patch).
      base: ``theta_i = base^(-2i/head_dim)``.

    Returns:
      Array like ``x`` (same dtype; the rotation itself is computed in float32).

    Pairing convention: the paper's *interleaved* one. Pair ``i`` is the adjacent features
    ``(x[2i], x[2i+1])``, treated as a 2-D vector and rotated by the angle ``m * theta_i`` for a
    token at position ``m``. (Some code bases pair ``x[i]`` with ``x[i + d/2]`` instead, the
    "rotate-half" layout; the two differ only by a fixed permutation of the projection columns,
    so they are equally expressive but their checkpoints are not interchangeable.)

    Because rotations compose, ``<R(m) q, R(n) k> = <q, R(n - m) k>``: after rotating both
    queries and keys, the attention logit depends on their positions only through ``n - m``.
    Rotations preserve norms, so nothing else about ``q`` and ``k`` changes.

    Several position axes (axial RoPE, Heo et al. 2024, "Rotary Position Embedding for Vision
    Transformer", RoPE-Axial): with ``positions`` ``[batch, length, k]`` the head dimension is
    cut into ``k`` equal, contiguous parts of width ``d_k = head_dim / k`` (each must be even),
    and part ``j`` is rotated as above by ``positions[..., j]`` with the frequencies of a
    ``d_k``-wide head, ``theta_i = base^(-2i/d_k)``. The parts are independent rotations, so the
    logit depends only on the offsets ``n_j - m_j`` of every axis. ``k = 1`` gives the 1-D result.
    """
    if positions.ndim == x.ndim - 1:
        return _apply_rope_axial(x, positions, base)
    if positions.ndim != x.ndim - 2:
        raise ValueError(
            f'apply_rope: positions must be [batch, length] or [batch, length, axes] for x of '
            f'shape {tuple(x.shape)} [batch, length, heads, head_dim], got shape '
            f'{tuple(positions.shape)}.')
    head_dim = x.shape[-1]
    theta = jnp.asarray(rope_frequencies(head_dim, base))                      # [d/2]
    angle = positions.astype(jnp.float32)[:, :, None, None] * theta            # [b, l, 1, d/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], head_dim // 2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    # Su et al. 2021 (RoFormer), Sec. 3.2: each pair times [[cos m.theta, -sin m.theta], [sin, cos]].
    rotated = jnp.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


def _apply_rope_axial(x, positions, base: float):
    """``apply_rope`` with ``positions`` ``[b, l, k]``: head part ``j`` turns by axis ``j``."""
    head_dim, num_axes = x.shape[-1], positions.shape[-1]
    if num_axes < 1 or head_dim % num_axes or (head_dim // num_axes) % 2:
        raise ValueError(
            f'apply_rope: {num_axes} position axes split head_dim={head_dim} into parts that are '
            f'not all of one even width; choose head_dim (hidden_size / num_heads) divisible by '
            f'{2 * max(num_axes, 1)}.')
    part = head_dim // num_axes
    theta = jnp.asarray(rope_frequencies(part, base))                          # [d_k/2]
    angle = positions.astype(jnp.float32)[:, :, None, :, None] * theta         # [b, l, 1, k, d_k/2]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], num_axes, part // 2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    # Heo et al. 2024 (RoPE-Axial): the RoFormer rotation of axis j's position, on part j only.
    rotated = jnp.stack([x_even * cos - x_odd * sin, x_even * sin + x_odd * cos], axis=-1)
    return rotated.reshape(x.shape).astype(x.dtype)


# ----------------------------------------------------------------------------------------------
# ALiBi
# ----------------------------------------------------------------------------------------------

def alibi_slopes(num_heads: int) -> np.ndarray:
    """Per-head ALiBi slopes, float64 array ``[num_heads]``.

    For ``n`` a power of two the slopes are the geometric sequence ``2^(-8/n), 2^(-16/n), ...,
    2^(-8)``: a few heads look far back, most look locally. For other ``n`` the paper takes all
    slopes of the largest power of two ``p < n`` and then every other slope of ``2p`` (its 1st,
    3rd, ...) until there are ``n``, appended after them (their values fall between the first
    ones', their heads come last).
    """
    if num_heads < 1:
        raise ValueError(f'alibi_slopes needs num_heads >= 1, got {num_heads}.')

    def geometric(n):
        # Press et al. 2022, Sec. 3: slopes 2^(-8/n), 2^(-16/n), ..., 2^(-8) for n heads.
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = geometric(p) + geometric(2 * p)[0::2][:num_heads - p]
    return np.asarray(slopes, dtype=np.float64)


def alibi_bias(num_heads: int, q_positions, kv_positions, causal: bool = True):
    """ALiBi attention bias ``-slope_h * distance``, float32 ``[batch, heads, q_len, kv_len]``.

    ``distance = q_pos - kv_pos`` when ``causal`` (keys in the future get a positive value, but a
    causal mask removes them anyway), ``|q_pos - kv_pos|`` for bidirectional attention.
    Positions are ``[batch, len]`` integer arrays.
    """
    distance = (q_positions[:, :, None] - kv_positions[:, None, :]).astype(jnp.float32)
    if not causal:
        distance = jnp.abs(distance)
    slopes = jnp.asarray(alibi_slopes(num_heads), dtype=jnp.float32)
    # Press et al. 2022, Sec. 3: softmax(q_i K^T + m * [-(i-1), ..., -2, -1, 0]).
    return -slopes[None, :, None, None] * distance[:, None, :, :]


def alibi_2d_bias(num_heads: int, grid_h: int, grid_w: int,
                  num_prefix_tokens: int = 0) -> np.ndarray:
    """2-D ALiBi bias ``-slope_h * ||(yq, xq) - (yk, xk)||_2``, float32 ``[heads, T, T]``.

    ALiBi (Press et al. 2022) extended to 2-D: the penalty between query patch ``(yq, xq)`` and key
    patch ``(yk, xk)`` grows with their Euclidean distance on the grid (in patches), with the
    per-head slopes of ``alibi_slopes(num_heads)``. It is symmetric: an encoder has no causal
    part. Prefix tokens (a class token) have no grid position; their rows and columns are 0 (no
    penalty either way). ``T = num_prefix_tokens + grid_h * grid_w``, prefix tokens first, patches
    in row-major order. No parameters: the result is a constant, broadcastable to the
    ``[batch, heads, T, T]`` of an attention ``bias``.
    """
    y, x = np.meshgrid(np.arange(grid_h, dtype=np.float64), np.arange(grid_w, dtype=np.float64),
                       indexing='ij')
    y, x = y.reshape(-1), x.reshape(-1)
    distance = np.sqrt((y[:, None] - y[None, :]) ** 2 + (x[:, None] - x[None, :]) ** 2)
    p, n = num_prefix_tokens, grid_h * grid_w
    bias = np.zeros((num_heads, p + n, p + n), dtype=np.float64)
    # Press et al. 2022, Sec. 3 (bias -m * distance), with the 2-D Euclidean patch distance.
    bias[:, p:, p:] = -alibi_slopes(num_heads)[:, None, None] * distance[None]
    return bias.astype(np.float32)


# ----------------------------------------------------------------------------------------------
# T5 relative position buckets
# ----------------------------------------------------------------------------------------------

def check_t5_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """ValueError unless T5's bucketing is well defined: each side (half of the buckets when
    ``bidirectional``) needs at least one exact bucket, ``max_exact = side // 2 >= 1``, and the
    log-spaced ones must span ``max_exact .. max_distance``, so ``max_distance > max_exact``
    (equal: a division by log(1) = 0; smaller: negative buckets)."""
    side = num_buckets // 2 if bidirectional else num_buckets
    max_exact = side // 2
    kind = "bidirectional" if bidirectional else "causal"
    if max_exact < 1:
        raise ValueError(f"{kind} T5 buckets need num_buckets >= {4 if bidirectional else 2} "
                         f"(half of each side's buckets hold exact distances); got {num_buckets}")
    if max_distance <= max_exact:
        raise ValueError(f"{kind} T5 buckets with num_buckets={num_buckets} hold exact "
                         f"distances up to {max_exact - 1}, so max_distance must be > "
                         f"{max_exact}; got {max_distance}")


def t5_relative_position_bucket(relative_position, bidirectional: bool = True,
                                num_buckets: int = 32, max_distance: int = 128):
    """Maps ``relative_position = kv_pos - q_pos`` (int array) to a bucket in ``[0, num_buckets)``.

    Raffel et al. 2020 (T5), Sec. 2.1. Write ``n = q_pos - kv_pos`` (how far back the key is).
      - ``bidirectional``: half of the buckets are for keys at or before the query (``n >= 0``),
        the other half, offset by ``num_buckets // 2``, for keys after it; then ``n = |n|``.
        Otherwise all buckets are for ``n >= 0`` and future keys share bucket 0.
      - Of the ``B`` buckets of one side, the first ``B // 2`` hold exact distances
        ``0 .. B//2 - 1``; the rest cover ``B//2 .. max_distance`` with logarithmically growing
        widths; every distance ``>= max_distance`` shares the last bucket.
    """
    check_t5_buckets(num_buckets, max_distance, bidirectional)
    n = -jnp.asarray(relative_position).astype(jnp.int32)
    bucket = jnp.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = jnp.where(n < 0, num_buckets, 0)
        n = jnp.abs(n)
    else:
        n = jnp.maximum(n, 0)
    max_exact = num_buckets // 2
    # Log-spaced buckets: floor(max_exact + log(n/max_exact)/log(max_distance/max_exact) * (B - max_exact)).
    n_far = jnp.maximum(n, max_exact).astype(jnp.float32)   # avoid log(0); small n is overridden
    log_ratio = jnp.log(n_far / max_exact) / math.log(max_distance / max_exact)
    far = max_exact + (log_ratio * (num_buckets - max_exact)).astype(jnp.int32)
    far = jnp.minimum(far, num_buckets - 1)
    return bucket + jnp.where(n < max_exact, n, far)


class T5RelativePositionBias(nn.Module):
    """Learned scalar per (head, relative-position bucket), T5 style.

    Param ``'rel_embedding'`` ``[num_buckets, num_heads]``. ``__call__(q_positions [b, q],
    kv_positions [b, k]) -> bias [b, heads, q, k]``. T5 computes it once and shares it across
    the layers of a stack; that is the model's choice.
    """

    num_heads: int
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    embedding_init: Initializer = nn.initializers.normal(stddev=0.02)
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, q_positions, kv_positions):
        table = self.param(
            'rel_embedding',
            nn.with_logical_partitioning(self.embedding_init, ('relpos_buckets', 'heads')),
            (self.num_buckets, self.num_heads), self.param_dtype)
        relative = kv_positions[:, None, :] - q_positions[:, :, None]             # [b, q, k]
        buckets = t5_relative_position_bucket(
            relative, self.bidirectional, self.num_buckets, self.max_distance)
        values = jnp.take(table, buckets, axis=0)                                 # [b, q, k, h]
        return jnp.transpose(values, (0, 3, 1, 2)).astype(self.dtype)


def document_positions(segment_ids):
    """Positions ``[b, l]`` int32 that restart at 0 where a new document (segment id) begins:
    ids ``[1 1 1 2 2 0]`` -> ``[0 1 2 0 1 0]`` (padding restarts too; it is never attended).
    The positions of packed rows, several documents to a row."""
    segment_ids = jnp.asarray(segment_ids)
    index = jnp.broadcast_to(jnp.arange(segment_ids.shape[1], dtype=jnp.int32), segment_ids.shape)
    previous = jnp.pad(segment_ids[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = jnp.where(segment_ids != previous, index, 0)
    return index - jax.lax.cummax(starts, axis=1)
