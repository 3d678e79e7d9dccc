"""1-D relative attention: the "Rel. Pos. Emb." row of ViT Table 8 (Dosovitskiy et al. 2021,
Appendix D.4).

The paper: "we use 1-dimensional Relative Attention, in which we define the relative distance
[of] all possible pairs of patches. Thus, for every given pair (one as query, and the other as
key/value in the attention mechanism), we have an offset p_q - p_k, where each offset is
associated with an embedding. Then, we simply run extra attention, where we use the original
query (the content of query), but use relative positional embeddings as keys. We then use the
logits from the relative attention as a bias term and add it to the logits of the main attention
(content-based attention) before applying the softmax."

That is the key half of Shaw et al. 2018 ("Self-Attention with Relative Position
Representations", eq. 5, e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z)) without their value
term a^V_ij, in the form of Huang et al. 2018 (Music Transformer, Sec. 3.1): S_rel = Q E_r^T added
to Q K^T before the softmax. The choices made here, each the reading closest to the paper:
  - 1-D offsets: patches are numbered in the raster (row-major) order of the patch sequence, so
    ``p`` is the patch index and ``N`` patches have ``2N - 1`` offsets ``-(N-1) .. N-1``, each with
    its own embedding (no clipping: the paper defines all pairs).
  - The embedding of an offset is a key: one ``head_dim``-wide vector per head (Huang et al.; a
    model-width embedding per offset, split into heads the way the keys are), so that
    ``logits_rel[b, h, q, k] = query[b, q, h, :] . E[offset(q, k), h, :] / sqrt(head_dim)``; the
    ``1 / sqrt(head_dim)`` is the content logits' scale, which Shaw et al. apply to the sum.
    (Shaw et al. share one table across heads; a per-head table can learn that too.)
  - The query is the projected query of the attention it biases ("the original query"), before
    any rotary embedding.
  - Each attention layer has its own table, as in Shaw et al. and Huang et al., whose relative
    attention is part of every attention layer. The paper's table shows relative embeddings in
    its first column only ("Default/Stem"): where an absolute table is added is a question that
    does not arise for an encoding that lives inside the attention.
  - Prefix tokens (a class token) sit at no patch, so they have no offset. Their pairs get three
    more learned keys, also per head, after the ``2N - 1`` offsets: (patch query, prefix key),
    (prefix query, patch key) and (prefix query, prefix key). They keep the prefix token's
    attention content-dependent like every other pair (a fixed 0 would not).

Cost: the queries meet the ``R = 2N - 1 (+ 3)`` keys of the table once, ``[b, q, h, d] x [R, h, d]
-> [b, h, q, R]``, and each (query, key) pair then gathers its offset's logit; no ``[q, k, d]``
tensor is formed.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

Dtype = Any
Initializer = Callable[..., Any]

NUM_PREFIX_RELATIONS = 3  # (patch -> prefix), (prefix -> patch), (prefix -> prefix)


def num_relations(num_positions: int, num_prefix_tokens: int) -> int:
    """Rows of the table: ``2N - 1`` offsets, and three prefix relations when there are prefix
    tokens."""
    return 2 * num_positions - 1 + (NUM_PREFIX_RELATIONS if num_prefix_tokens else 0)


def relative_offset_index(num_positions: int, num_prefix_tokens: int = 0) -> np.ndarray:
    """Static int32 ``[T, T]`` table (``T = num_prefix_tokens + num_positions``, prefix tokens
    first): the row of the relation table for each (query, key) pair.

    Positioned tokens ``p_q``, ``p_k`` (0-based, after the prefix) use row ``p_q - p_k + N - 1``
    (offsets ``-(N-1) .. N-1`` -> rows ``0 .. 2N-2``); a patch query with a prefix key uses row
    ``2N - 1``, a prefix query with a patch key ``2N``, two prefix tokens ``2N + 1``.
    """
    n, p = num_positions, num_prefix_tokens
    if n < 1 or p < 0:
        raise ValueError(f"relative_offset_index needs num_positions >= 1 and "
                         f"num_prefix_tokens >= 0, got {n} and {p}")
    positions = np.arange(n)
    index = np.empty((p + n, p + n), np.int32)
    index[p:, p:] = positions[:, None] - positions[None, :] + (n - 1)   # ViT App. D.4: p_q - p_k
    index[p:, :p] = 2 * n - 1
    index[:p, p:] = 2 * n
    index[:p, :p] = 2 * n + 1
    return index


def scale_query(query):
    """``query / sqrt(d)`` (eq. 1's scale, also models/attention.py's) in ``query``'s dtype,
    divided in float32: one rounding, no scale rounded to bfloat16 first."""
    return (query.astype(jnp.float32) / math.sqrt(query.shape[-1])).astype(query.dtype)


def relative_attention_logits(query, table, index):
    """ViT Appendix D.4 (Shaw et al. 2018, eq. 5, key term; Huang et al. 2018, S_rel): the logits
    of the "extra attention" of the original queries against the relative embeddings as keys,
    float32 ``[b, h, q, k]``, to add to the content logits before the softmax.

    ``query`` ``[b, q, h, d]``; ``table`` ``[R, h, d]``, one key per relation and head;
    ``index`` int ``[q, k]``, the relation of each pair (``relative_offset_index``).
    ``logits[b, h, i, j] = query[b, i, h] . table[index[i, j], h] / sqrt(d)``.
    """
    query = scale_query(query)   # the content logits' scale
    per_relation = jnp.einsum('bqhd,rhd->bhqr', query, table.astype(query.dtype),
                              preferred_element_type=jnp.float32)                  # [b, h, q, R]
    index = jnp.asarray(index)[None, None]                                         # [1, 1, q, k]
    return jnp.take_along_axis(per_relation, index, axis=-1, mode='promise_in_bounds')


class RelativeAttention1D(nn.Module):
    """The relative keys of one attention layer and the logits they give its queries.

    Param ``'rel_embedding'`` ``[num_relations, num_heads, head_dim]`` (logical axes
    ``relpos_buckets``, ``heads``, ``kv``). ``__call__(query [b, T, h, d]) -> [b, h, T, T]``
    float32, with ``T = num_prefix_tokens + num_positions`` (prefix tokens first).
    """

    num_heads: int
    head_dim: int
    num_positions: int
    num_prefix_tokens: int = 0
    embedding_init: Initializer = nn.initializers.normal(stddev=0.02)
    param_dtype: Dtype = jnp.float32

    @nn.compact
    def __call__(self, query):
        tokens = self.num_prefix_tokens + self.num_positions
        if query.shape[1:] != (tokens, self.num_heads, self.head_dim):
            raise ValueError(
                f"RelativeAttention1D: queries of shape [batch, {tokens}, {self.num_heads}, "
                f"{self.head_dim}] expected ({self.num_prefix_tokens} prefix tokens and "
                f"{self.num_positions} positions), got {tuple(query.shape)}; the relative "
                "attention is sized for one sequence length")
        table = self.param(
            'rel_embedding',
            nn.with_logical_partitioning(self.embedding_init, ('relpos_buckets', 'heads', 'kv')),
            (num_relations(self.num_positions, self.num_prefix_tokens), self.num_heads,
             self.head_dim), self.param_dtype)
        index = relative_offset_index(self.num_positions, self.num_prefix_tokens)
        return relative_attention_logits(query, table, index)
