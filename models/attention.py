"""Scaled dot-product attention, multi-head / grouped-query attention, and attention masks.

Shapes (letters used throughout):
  b batch, q query length, k key/value length, h query heads, g = h // kv_heads, d head dim.
  query ``[b, q, h, d]``, key / value ``[b, k, kv_heads, d]``, output ``[b, q, h, d]``.

Masks are boolean, ``True`` = "this query may attend to this key", with a shape broadcastable to
``[b, h, q, k]`` (models/attention_masks.py makes them; imported here too). Combine several with
``combine_masks``. Biases are additive float logits broadcastable to ``[b, h, q, k]`` (ALiBi, T5,
2-D relative: see ``models.position``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.attention_masks import (causal_mask, combine_masks, padding_mask,  # noqa: F401
                                    segment_mask, sliding_window_mask)  # re-exported
from models.cudnn_attention import (cudnn_attention, cudnn_attention_blocker, even_lengths,
                                    log_fallback)
from models.dropout import dropout
from models.position import apply_rope
from models.relative_attention import RelativeAttention1D, scale_query

Dtype = Any
Initializer = Callable[..., Any]

# 'xla': the explicit einsums below (the reference); 'cudnn': cuDNN's fused flash attention;
# 'auto': cuDNN where it can compute the call, else 'xla' (see `cudnn_attention_blocker`).
IMPLEMENTATIONS = ('xla', 'cudnn', 'auto')


# ----------------------------------------------------------------------------------------------
# Dot-product attention
# ----------------------------------------------------------------------------------------------

def _group_query_heads(query, num_kv_heads: int):
    """``[b, q, h, d] -> [b, q, kv_heads, g, d]``: query head ``i`` is in group ``i // g``."""
    b, q, h, d = query.shape
    if h % num_kv_heads:
        raise ValueError(f'Number of query heads ({h}) must be a multiple of the number of '
                         f'key/value heads ({num_kv_heads}).')
    return query.reshape(b, q, num_kv_heads, h // num_kv_heads, d)


def attention_weights(query, key, *, bias=None, mask=None):
    """Attention probabilities ``softmax(Q K^T / sqrt(d) + bias)``, float32 ``[b, h, q, k]``.

    Masked-out pairs get probability 0. A query whose keys are all masked gets an all-zero row
    (rather than the NaN of a softmax over nothing), so padding queries produce zero outputs.
    Grouped-query attention: query head ``i`` is compared with key head ``i // (h // kv_heads)``.
    """
    b, q_len, h, _ = query.shape
    k_len, num_kv_heads = key.shape[1], key.shape[2]
    # Vaswani et al. 2017, eq. 1: Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V. The scale
    # is applied to Q ([b, q, h, d]), which is smaller than the logits ([b, h, q, k]) once q > d,
    # in float32: sqrt(d) rounded to bf16 would bias the temperature (d = 24: by 0.15%).
    query = scale_query(query)
    if num_kv_heads == h:  # multi-head: plain 4-D contractions, no group axis to lay out
        return _normalise(jnp.einsum('bqhd,bkhd->bhqk', query, key,
                                     preferred_element_type=jnp.float32), bias, mask)
    grouped = _group_query_heads(query, num_kv_heads)
    logits = jnp.einsum('bqngd,bknd->bngqk', grouped, key, preferred_element_type=jnp.float32)
    return _normalise(logits.reshape(b, h, q_len, k_len), bias, mask)


def _normalise(logits, bias, mask):
    """Softmax over keys of float32 ``logits + bias``, masked pairs 0 (see attention_weights)."""
    if bias is not None:
        logits = logits + jnp.asarray(bias, jnp.float32)
    if mask is None:
        return jax.nn.softmax(logits, axis=-1)
    # A finite fill (not -inf) keeps fully masked rows finite; they are zeroed just below.
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    return jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)


def dot_product_attention(query, key, value, *, bias=None, mask=None, dropout_rate: float = 0.0,
                          dropout_rng=None, deterministic: bool = True,
                          implementation: str = 'xla', dtype: Dtype | None = None):
    """Scaled dot-product attention with optional grouped-query heads; returns ``[b, q, h, d_v]``.

    Args:
      query: ``[b, q, h, d]``.
      key: ``[b, k, kv_heads, d]`` with ``h % kv_heads == 0`` (``kv_heads == h``: multi-head;
        ``1 < kv_heads < h``: grouped-query; ``kv_heads == 1``: multi-query).
      value: ``[b, k, kv_heads, d_v]``; the output is ``[b, q, h, d_v]`` (``d_v == d`` for cudnn).
      bias: additive float logits broadcastable to ``[b, h, q, k]``.
      mask: bool, broadcastable to ``[b, h, q, k]``, True = may attend. A masked pair's
        probability is exactly 0, but 0 x NaN is NaN: a key or value that is not finite (e.g.
        a padding token at a position past a learned table) reaches every query of its row,
        masked or not, so the inputs at masked positions must be finite too.
      dropout_rate, dropout_rng, deterministic: dropout on the attention probabilities
        (Vaswani et al. 2017 apply dropout to sublayer outputs; attention-probability dropout
        is the standard companion used by their code and BERT), one independent keep decision
        per ``[b, h, q, k]`` element (``models/dropout.py``). Needs ``dropout_rng`` when active.
      implementation: ``'xla'`` (explicit einsums, this file; the reference), ``'cudnn'``
        (fused flash attention via ``jax.nn.dot_product_attention``: NVIDIA GPUs, fp16/bf16
        only, no probability dropout, odd lengths padded by one in training; a call it cannot
        compute raises a ValueError naming why, see ``cudnn_attention_blocker``) or ``'auto'``
        (cuDNN where it can compute the call, else the 'xla' einsums, logged once per reason: a
        warning on a GPU, info elsewhere).
      dtype: compute dtype of the matmuls; default: the promoted dtype of query/key/value.
        The softmax is always computed in float32. The 'xla' path adds ``bias`` in float32;
        the cuDNN kernel takes it in the compute dtype, so there a bias (ALiBi, T5, relative)
        is rounded to bf16/fp16 first (ALiBi at distance 300 with slope 0.5 is -150, where bf16
        steps by 1: neighbouring keys get the same bias).
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f'Unknown attention implementation {implementation!r}; allowed values: '
                         f'{", ".join(repr(i) for i in IMPLEMENTATIONS)}.')
    dropout_active = dropout_rate > 0.0 and not deterministic
    if dtype is None:
        dtype = jnp.result_type(query, key, value)
    query, key, value = (jnp.asarray(t, dtype) for t in (query, key, value))

    if implementation != 'xla':
        training = not deterministic
        blocker = cudnn_attention_blocker(
            dtype, query.shape[-1], value.shape[-1],
            dropout_rate=dropout_rate if dropout_active else 0.0, training=training,
            lengths=even_lengths((query.shape[1], key.shape[1]), training))
        if blocker is None:
            try:
                return cudnn_attention(query, key, value, bias, mask, dtype,
                                       pad_to_even=training)
            except NotImplementedError as error:  # a rule of this jax the blocker does not know
                blocker = f"jax refused it ({error})".replace("\n", " ")
        if implementation == 'cudnn':
            raise ValueError(f"implementation='cudnn' cannot compute this attention: {blocker}. "
                             "Change that, or use implementation='xla' (or 'auto', which falls "
                             "back to 'xla' where cuDNN cannot run).")
        log_fallback(blocker)

    probs = attention_weights(query, key, bias=bias, mask=mask)                  # [b, h, q, k]
    if dropout_active:
        if dropout_rng is None:
            raise ValueError('dot_product_attention: dropout is active but dropout_rng is None.')
        probs = dropout(probs, dropout_rate, dropout_rng)
    b, q_len, h, _ = query.shape
    num_kv_heads = key.shape[2]
    probs = probs.astype(dtype)
    if num_kv_heads == h:
        return jnp.einsum('bhqk,bkhd->bqhd', probs, value)
    probs = probs.reshape(b, num_kv_heads, h // num_kv_heads, q_len, -1)
    out = jnp.einsum('bngqk,bknd->bqngd', probs, value)
    return out.reshape(b, q_len, h, value.shape[-1])


def _heads_major(x):
    """``[b, len, heads, d] <-> [b, heads, len, d]``: the decoding cache is kept heads-major, so
    that each step's contractions (``attention_weights``, ``dot_product_attention``: batch over
    ``b`` and ``heads``) read it in place; stored as the projections give it, XLA copied the
    whole cache into that order at every step of every layer."""
    return jnp.swapaxes(x, 1, 2)


# ----------------------------------------------------------------------------------------------
# Multi-head attention module
# ----------------------------------------------------------------------------------------------

class Projection(nn.Module):
    """A linear map contracting the last `num_contracted` input axes into `features` axes.

    Like ``nn.DenseGeneral``, but the kernel is created at its full rank ([in..., out...]) so its
    logical axis names apply under a mesh (DenseGeneral initialises a flattened 2-D kernel and
    reshapes it, which a sharding constraint on the 3-D names rejects). The initialiser still
    sees the flattened [fan_in, fan_out] shape, so variance scaling uses the true fan-in/out.
    """

    features: tuple[int, ...]
    num_contracted: int
    kernel_names: tuple[str | None, ...]
    bias_names: tuple[str | None, ...]
    use_bias: bool = True
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    kernel_init: Initializer = nn.initializers.xavier_uniform()
    bias_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x):
        in_shape = x.shape[x.ndim - self.num_contracted:]
        shape = (*in_shape, *self.features)

        def init(rng, shape, dtype):
            flat = (math.prod(in_shape), math.prod(self.features))
            return self.kernel_init(rng, flat, dtype).reshape(shape)

        kernel = self.param('kernel', nn.with_logical_partitioning(init, self.kernel_names),
                            shape, self.param_dtype)
        x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
        # One 2-D matmul: [..., fan_in] @ [fan_in, fan_out]. Both reshapes only merge adjacent
        # axes (free), whereas a contraction over several axes at once is turned by XLA into a
        # transposed copy of the kernel (every step) before its matmul and gradients.
        batch_shape = x.shape[:x.ndim - self.num_contracted]
        y = x.reshape(*batch_shape, math.prod(in_shape)) @ kernel.reshape(
            math.prod(in_shape), math.prod(self.features))
        y = y.reshape(*batch_shape, *self.features)
        if self.use_bias:
            bias = self.param('bias', nn.with_logical_partitioning(self.bias_init, self.bias_names),
                              self.features, self.param_dtype)
            y = y + bias.astype(self.dtype)
        return y


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017, Sec. 3.2.2) with grouped-query key/value heads.

    Projections: ``query`` ``[embed, heads, kv]``, ``key`` / ``value`` ``[embed, kv_heads, kv]``,
    ``out`` ``[heads, kv, embed]`` (``kv`` = ``head_dim``). Each head attends in its own
    ``head_dim``-wide subspace; the heads' outputs are concatenated and projected back.
    Grouped-query attention (Ainslie et al. 2023) shares each key/value head between
    ``num_heads // num_kv_heads`` query heads, shrinking the key/value projections (and a
    decoding cache); ``num_kv_heads=1`` is multi-query attention (Shazeer 2019).

    Kernels default to Glorot/Xavier uniform over the flattened ``[fan_in, fan_out]`` matrix
    (as the ViT reference code does), biases to zero. ``out_kernel_init`` (default: the same)
    initialises the output projection on its own: GPT-2 shrinks the projections that write
    into the residual stream (``models.decoder_lm``).

    ``__call__(inputs_q [b, q, e], inputs_kv [b, k, e] | None, *, mask, bias, q_positions,
    kv_positions, deterministic, decode) -> [b, q, out_features]``. ``inputs_kv=None`` means
    self-attention. Positions (``[b, len]`` int, default ``arange``) are only used for RoPE;
    ``[b, len, k]`` positions rotate ``k`` equal parts of each head by ``k`` position axes (axial
    RoPE, e.g. the row and column of an image patch; see ``models.position.apply_rope``).
    ``value_head_dim`` (``d_v``, default ``head_dim``) may differ from ``head_dim`` (``d_k``), as
    in Vaswani et al. 2017, Table 3 row (B) (the 'xla' implementation only).

    Autoregressive key/value cache (``decode=True``, self-attention only), in the ``'cache'``
    collection: ``cached_key`` / ``cached_value`` ``[b, kv_heads, max_len, d]`` (heads-major) and
    ``cache_index`` (int32 scalar, the number of filled slots).
      - The first call with ``decode=True`` (the collection being mutable and still empty) sizes
        the cache from its full-length ``inputs_q`` ``[b, max_len, e]``, fills it with zeros and
        otherwise computes ordinary attention with the given mask.
      - Every later call appends its ``q`` new keys/values (usually ``q = 1``) at ``cache_index``
        and lets query ``i`` see the slots ``<= cache_index + i`` (AND the caller's ``mask`` and
        ``bias``, which must then cover all ``max_len`` key slots). RoPE positions default to
        ``cache_index + arange(q)``; keys are stored already rotated. Writing past ``max_len``
        is not detected (``dynamic_update_slice`` clamps), so size the cache for the longest
        decode.
    With ``decode=False`` (the default) no cache is read or written.

    Relative attention (``relative_positions`` N > 0; self-attention over
    ``relative_prefix_tokens`` unpositioned tokens then N positioned ones, no cache): the layer's
    own relative keys (``models.relative_attention``, submodule ``'relative_attention'``) give
    logits from the projected queries, added to ``bias`` (ViT Table 8's "Rel. Pos. Emb.").

    Attention maps: ``apply(..., mutable=['intermediates'])`` also returns, under
    ``['intermediates'][...]['attention_weights']``, a 1-tuple holding this layer's probabilities
    ``attention_weights(query, key, bias=bias, mask=mask)`` ``[b, h, q, k]`` (after RoPE, before
    dropout). Nothing is computed or stored otherwise.
    """

    num_heads: int
    head_dim: int
    num_kv_heads: int | None = None
    out_features: int | None = None
    dropout_rate: float = 0.0
    use_bias: bool = True
    rotary_base: float | None = None
    implementation: str = 'xla'
    value_head_dim: int | None = None
    relative_positions: int = 0        # >0: 1-D relative attention over that many tokens
    relative_prefix_tokens: int = 0    # ... after this many unpositioned ones (a class token)
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    kernel_init: Initializer = nn.initializers.xavier_uniform()
    out_kernel_init: Initializer | None = None   # the 'out' projection's; None: kernel_init
    bias_init: Initializer = nn.initializers.zeros

    def _projection(self, features, axis, kernel_names, bias_names, name):
        kernel_init = self.kernel_init
        if name == 'out' and self.out_kernel_init is not None:
            kernel_init = self.out_kernel_init
        return Projection(
            features=features if isinstance(features, tuple) else (features,),
            num_contracted=len(axis) if isinstance(axis, tuple) else 1,
            kernel_names=kernel_names, bias_names=bias_names, use_bias=self.use_bias,
            dtype=self.dtype, param_dtype=self.param_dtype, kernel_init=kernel_init,
            bias_init=self.bias_init, name=name)

    @nn.compact
    def __call__(self, inputs_q, inputs_kv=None, *, mask=None, bias=None, q_positions=None,
                 kv_positions=None, deterministic: bool = True, decode: bool = False):
        num_kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        if num_kv_heads < 1 or self.num_heads % num_kv_heads:
            raise ValueError(f'MultiHeadAttention: num_heads ({self.num_heads}) must be a '
                             f'multiple of num_kv_heads ({num_kv_heads}).')
        value_head_dim = self.head_dim if self.value_head_dim is None else self.value_head_dim
        self_attention = inputs_kv is None
        if decode and not self_attention:
            raise ValueError('MultiHeadAttention: decode=True (the key/value cache) is for '
                             'self-attention only; pass inputs_kv=None.')
        if self_attention:
            inputs_kv = inputs_q
        out_features = inputs_q.shape[-1] if self.out_features is None else self.out_features

        # 1. Project to per-head queries, keys and values.
        heads_qkv = ('batch', 'length', 'heads', 'kv')
        kv_heads_qkv = ('batch', 'length', 'kv_heads', 'kv')
        query = self._projection((self.num_heads, self.head_dim), -1, ('embed', 'heads', 'kv'),
                                 ('heads', 'kv'), 'query')(inputs_q)
        key = self._projection((num_kv_heads, self.head_dim), -1, ('embed', 'kv_heads', 'kv'),
                               ('kv_heads', 'kv'), 'key')(inputs_kv)
        value = self._projection((num_kv_heads, value_head_dim), -1, ('embed', 'kv_heads', 'kv'),
                                 ('kv_heads', 'kv'), 'value')(inputs_kv)
        query = nn.with_logical_constraint(query, heads_qkv)
        key = nn.with_logical_constraint(key, kv_heads_qkv)
        value = nn.with_logical_constraint(value, kv_heads_qkv)

        # ViT App. D.4: the original queries against the relative keys, a bias on the logits.
        if self.relative_positions:
            if not self_attention or decode:
                raise ValueError('MultiHeadAttention: relative attention (relative_positions > 0) '
                                 'is for self-attention over one whole sequence, without the '
                                 'decoding cache; pass inputs_kv=None and decode=False.')
            relative = RelativeAttention1D(
                self.num_heads, self.head_dim, self.relative_positions,
                self.relative_prefix_tokens, param_dtype=self.param_dtype,
                name='relative_attention')(query)
            bias = relative if bias is None else relative + bias

        # Decoding: the cache exists after the first (sizing) call; new tokens start at its index.
        cache = None
        if decode:
            filled = self.has_variable('cache', 'cached_key')
            cache = (self.variable('cache', 'cached_key', jnp.zeros, _heads_major(key).shape,
                                   key.dtype),
                     self.variable('cache', 'cached_value', jnp.zeros,
                                   _heads_major(value).shape, value.dtype),
                     self.variable('cache', 'cache_index', lambda: jnp.array(0, jnp.int32)))
            if not filled:
                cache = None   # the sizing call: attend normally below
        start = 0 if cache is None else cache[2].value

        # 2. Rotary position embedding, applied to queries and keys only.
        if self.rotary_base is not None:
            batch = inputs_q.shape[0]
            if q_positions is None:
                q_positions = jnp.broadcast_to(start + jnp.arange(inputs_q.shape[1]),
                                               (batch, inputs_q.shape[1]))
            if kv_positions is None:
                kv_positions = q_positions if self_attention else jnp.broadcast_to(
                    jnp.arange(inputs_kv.shape[1]), (batch, inputs_kv.shape[1]))
            query = apply_rope(query, q_positions, self.rotary_base)
            key = apply_rope(key, kv_positions, self.rotary_base)

        # Decoding: write the new keys/values at `start`, attend over every filled slot.
        if cache is not None:
            cached_key, cached_value, cache_index = cache
            q_len, max_len = inputs_q.shape[1], cached_key.value.shape[2]
            cached_key.value = jax.lax.dynamic_update_slice(
                cached_key.value, _heads_major(key).astype(cached_key.value.dtype),
                (0, 0, start, 0))
            cached_value.value = jax.lax.dynamic_update_slice(
                cached_value.value, _heads_major(value).astype(cached_value.value.dtype),
                (0, 0, start, 0))
            key, value = _heads_major(cached_key.value), _heads_major(cached_value.value)
            cache_index.value = start + q_len
            mask = combine_masks(mask, causal_mask(q_len, max_len, offset=start))

        # Inspection, off by default: only when 'intermediates' is mutable (apply(...,
        # mutable=['intermediates']) or capture_intermediates=True) are the probabilities
        # (before dropout) recomputed and recorded; parameters and outputs never change.
        if self.is_mutable_collection('intermediates'):
            self.sow('intermediates', 'attention_weights',
                     attention_weights(query, key, bias=bias, mask=mask))

        # 3. Attend, per head.
        dropout_rng = None
        if self.dropout_rate > 0.0 and not deterministic:
            dropout_rng = self.make_rng('dropout')
        out = dot_product_attention(
            query, key, value, bias=bias, mask=mask, dropout_rate=self.dropout_rate,
            dropout_rng=dropout_rng, deterministic=deterministic,
            implementation=self.implementation, dtype=self.dtype)
        out = nn.with_logical_constraint(out, heads_qkv)

        # 4. Concatenate the heads and project back: one contraction over (heads, kv).
        out = self._projection(out_features, (-2, -1), ('heads', 'kv', 'embed'), ('embed',),
                               'out')(out)
        return nn.with_logical_constraint(out, ('batch', 'length', 'embed'))
