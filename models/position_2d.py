"""Position encodings for a grid of image patches (ViT, Dosovitskiy et al. 2021): the 2-D
counterparts of ``models.position``'s absolute tables and learned relative bias.

  - ``sincos_2d_table``: fixed sines and cosines of the column and of the row, side by side.
  - ``Learned2DPositionEmbedding``: a row table and a column table, concatenated (appendix D.4).
  - ``RelativePositionBias2D``: a learned per-head scalar for every 2-D patch offset (the ViT's
    ``relative_bias_2d``; the paper's own relative row is ``models.relative_attention``).

Patches are in row-major order (index ``y * grid_w + x``); 2-D RoPE (``apply_rope`` with
``[b, l, 2]`` positions) and 2-D ALiBi (``alibi_2d_bias``) live beside their 1-D forms in
``models.position``.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from models.position import Dtype, Initializer


def sincos_2d_table(grid_h: int, grid_w: int, dim: int,
                    temperature: float = 10000.0) -> np.ndarray:
    """Fixed 2-D sin-cos encodings for a patch grid, float32 ``[grid_h * grid_w, dim]``.

    Patches are in row-major order (index ``y * grid_w + x``). Layout of the ``dim`` columns, in
    four blocks of ``dim // 4``: ``[sin(x w) | cos(x w) | sin(y w) | cos(y w)]`` with frequencies
    ``w_i = 1 / temperature^(i / (dim/4))``, i.e. each axis gets the frequencies of a 1-D
    sinusoidal table of width ``dim / 2`` (as in MAE; big_vision's "simple ViT" spreads them to
    ``1/temperature`` inclusive, a negligible difference).
    """
    if dim % 4:
        raise ValueError(f'sincos_2d_table needs dim divisible by 4, got dim={dim}.')
    quarter = dim // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter)
    y, x = np.meshgrid(np.arange(grid_h, dtype=np.float64), np.arange(grid_w, dtype=np.float64),
                       indexing='ij')
    x_angles = x.reshape(-1, 1) * omega[None, :]
    y_angles = y.reshape(-1, 1) * omega[None, :]
    table = np.concatenate(
        [np.sin(x_angles), np.cos(x_angles), np.sin(y_angles), np.cos(y_angles)], axis=1)
    return table.astype(np.float32)


class Learned2DPositionEmbedding(nn.Module):
    """ViT appendix D.4 "2-D" embedding: a row table and a column table, concatenated.

    Params ``'row_embedding'`` ``[grid_h, features // 2]`` and ``'col_embedding'``
    ``[grid_w, features // 2]``. Patch ``(y, x)`` gets ``concat(row[y], col[x])``. Returns
    ``[1, grid_h * grid_w, features]`` in row-major patch order, to add to the patch tokens.
    """

    grid_h: int
    grid_w: int
    features: int
    embedding_init: Initializer = nn.initializers.normal(stddev=0.02)
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self):
        if self.features % 2:
            raise ValueError(f'Learned2DPositionEmbedding needs even features, got {self.features}.')
        half = self.features // 2
        init = nn.with_logical_partitioning(self.embedding_init, ('length', 'embed'))
        row = self.param('row_embedding', init, (self.grid_h, half), self.param_dtype)
        col = self.param('col_embedding', init, (self.grid_w, half), self.param_dtype)
        rows = jnp.broadcast_to(row[:, None, :], (self.grid_h, self.grid_w, half))
        cols = jnp.broadcast_to(col[None, :, :], (self.grid_h, self.grid_w, half))
        table = jnp.concatenate([rows, cols], axis=-1).reshape(1, self.grid_h * self.grid_w,
                                                               self.features)
        return table.astype(self.dtype)


def _relative_2d_index(grid_h: int, grid_w: int, num_prefix_tokens: int) -> np.ndarray:
    """Static ``[T, T]`` table of indices into the concatenated bias table (see below)."""
    y, x = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing='ij')
    y, x = y.reshape(-1), x.reshape(-1)
    dy = y[:, None] - y[None, :] + (grid_h - 1)       # query minus key, shifted to >= 0
    dx = x[:, None] - x[None, :] + (grid_w - 1)
    patch_index = dy * (2 * grid_w - 1) + dx
    num_offsets = (2 * grid_h - 1) * (2 * grid_w - 1)
    p, n = num_prefix_tokens, grid_h * grid_w
    index = np.empty((p + n, p + n), dtype=np.int32)
    index[p:, p:] = patch_index
    index[p:, :p] = num_offsets          # patch query -> prefix key
    index[:p, p:] = num_offsets + 1      # prefix query -> patch key
    index[:p, :p] = num_offsets + 2      # prefix query -> prefix key
    return index


class RelativePositionBias2D(nn.Module):
    """Learned per-head attention bias indexed by the 2-D offset between two patches.

    The ViT's ``posemb='relative_bias_2d'`` (the form of Swin's relative position bias, Liu et al.
    2021; not the paper's "Rel. Pos. Emb.", which is ``models.relative_attention``): the logit
    between query patch ``(yq, xq)`` and key patch ``(yk, xk)`` gets
    ``rel_embedding[(dy, dx), head]`` with ``dy = yq - yk`` in
    ``[-(grid_h-1), grid_h-1]`` and ``dx = xq - xk`` in ``[-(grid_w-1), grid_w-1]``.
    Prefix tokens (a class token) have no grid position; they get three learned per-head scalars:
    ``'token_to_prefix'`` (patch query, prefix key), ``'prefix_to_token'`` and
    ``'prefix_to_prefix'`` (created only when ``num_prefix_tokens > 0``).

    ``__call__() -> [1, heads, T, T]`` with ``T = num_prefix_tokens + grid_h * grid_w``; prefix
    tokens come first.
    """

    num_heads: int
    grid_h: int
    grid_w: int
    num_prefix_tokens: int = 0
    embedding_init: Initializer = nn.initializers.normal(stddev=0.02)
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self):
        num_offsets = (2 * self.grid_h - 1) * (2 * self.grid_w - 1)
        table = self.param(
            'rel_embedding',
            nn.with_logical_partitioning(self.embedding_init, ('relpos_buckets', 'heads')),
            (num_offsets, self.num_heads), self.param_dtype)
        if self.num_prefix_tokens:
            head_init = nn.with_logical_partitioning(self.embedding_init, ('heads',))
            extra = [self.param(name, head_init, (self.num_heads,), self.param_dtype)
                     for name in ('token_to_prefix', 'prefix_to_token', 'prefix_to_prefix')]
            table = jnp.concatenate([table, jnp.stack(extra)], axis=0)
        index = _relative_2d_index(self.grid_h, self.grid_w, self.num_prefix_tokens)
        bias = jnp.take(table, jnp.asarray(index), axis=0)                  # [T, T, h]
        return jnp.transpose(bias, (2, 0, 1))[None].astype(self.dtype)
