"""Transformer building blocks: feed-forward network, normalisation, encoder and decoder blocks.

A block is a stack of sublayers, each wrapped in a residual connection and a normalisation:
  - post-norm (Vaswani et al. 2017, the original Transformer and BERT):
        x = Norm(x + Dropout(Sublayer(x)))
  - pre-norm (Xiong et al. 2020; GPT-2, ViT, T5):
        x = x + Dropout(Sublayer(Norm(x)))
    Pre-norm keeps an un-normalised residual path from input to output, so gradients are well
    behaved at initialisation and training needs little or no learning-rate warmup. Its stack
    must end with one more Norm (the model adds it, not the block).

With ``drop_path_rate`` > 0 each residual branch is also dropped whole per example in training
(stochastic depth, Huang et al. 2016; models/dropout.py ``DropPath``): ``x + DropPath(Dropout(
Sublayer(Norm(x))))``, post-norm ``Norm(x + DropPath(Dropout(Sublayer(x))))``. The model gives
each block its rate (``stochastic_depth_rates``: rising over the depth).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.attention import MultiHeadAttention
from models.dropout import DropPath, Dropout

Dtype = Any
Initializer = Callable[..., Any]

ACTIVATIONS = {
    'relu': jax.nn.relu,                                        # Vaswani et al. 2017, eq. 2
    # Hendrycks & Gimpel 2016: GELU(x) = x * Phi(x), Phi the standard normal CDF (via erf).
    'gelu': lambda x: jax.nn.gelu(x, approximate=False),        # BERT, HF's ViT
    # Hendrycks & Gimpel 2016: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    'gelu_tanh': lambda x: jax.nn.gelu(x, approximate=True),    # GPT-2, BERT's and ViT's own code
    # Ramachandran et al. 2017 (Swish, beta = 1), Elfwing et al. 2018 (SiLU): x * sigmoid(x).
    'swish': jax.nn.silu,                                       # Marian (the OPUS-MT models)
}
NORM_KINDS = ('layernorm', 'rmsnorm')
NORM_POSITIONS = ('pre', 'post')


class FeedForward(nn.Module):
    """Position-wise feed-forward network, ``wo(Dropout(act(wi(x))))``.

    Vaswani et al. 2017, Sec. 3.3: the same two-layer MLP is applied to every position
    independently, widening to ``hidden_dim`` (``d_ff``, typically 4x the model width) and back.
    Params ``'wi'`` (``[embed, mlp]``) and ``'wo'`` (``[mlp, embed]``). Kernels default to
    Glorot/Xavier uniform (``out_kernel_init``, default the same, for ``'wo'`` alone), biases to
    zero. ``__call__(x [..., embed], deterministic) -> same shape``.
    """

    hidden_dim: int
    activation: str = 'gelu'
    dropout_rate: float = 0.0
    use_bias: bool = True
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    kernel_init: Initializer = nn.initializers.xavier_uniform()
    out_kernel_init: Initializer | None = None
    bias_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f'Unknown activation {self.activation!r}; allowed values: '
                             f'{", ".join(repr(a) for a in ACTIVATIONS)}.')

        def dense(features, kernel_names, kernel_init, name):
            return nn.Dense(
                features, use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
                kernel_init=nn.with_logical_partitioning(kernel_init, kernel_names),
                bias_init=nn.with_logical_partitioning(self.bias_init, kernel_names[1:]),
                name=name)

        width = x.shape[-1]
        h = dense(self.hidden_dim, ('embed', 'mlp'), self.kernel_init, 'wi')(x)
        h = ACTIVATIONS[self.activation](h)
        h = nn.with_logical_constraint(h, ('batch', 'length', 'mlp'))
        h = Dropout(self.dropout_rate)(h, deterministic=deterministic)
        out_init = self.kernel_init if self.out_kernel_init is None else self.out_kernel_init
        out = dense(width, ('mlp', 'embed'), out_init, 'wo')(h)
        return nn.with_logical_constraint(out, ('batch', 'length', 'embed'))


# A dot product with bf16 (or any) inputs whose result stays in float32: an output layer's
# logits go to the softmax and the loss unrounded (XLA accumulates in float32 either way).
DOT_FLOAT32_OUT = functools.partial(jax.lax.dot_general, preferred_element_type=jnp.float32)


def tied_logits(hidden, table, dtype: Dtype):
    """Logits ``hidden E^T`` ``[..., V]`` of a tied output layer (Press & Wolf 2017): the
    product in `dtype`, its result in float32 (`DOT_FLOAT32_OUT`)."""
    return jnp.einsum("...d,vd->...v", hidden.astype(dtype), jnp.asarray(table).astype(dtype),
                      preferred_element_type=jnp.float32)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def standardize(x, epsilon: float):
    """``(x - mean) / sqrt(var + epsilon)`` over the last axis, with the exact (two-pass)
    variance ``var = mean((x - mean)^2)``, which stays accurate when ``|mean| >> std``.

    Its derivative is given in closed form (below) rather than traced through the two
    reductions: the same values, but a compact backward pass. Traced, the chain of residual-
    stream gradients through a deep pre-LN stack was fused by XLA:CPU into per-layer fusions
    that each recompute the sum over all later layers (a quadratic cost: the gradient of a
    12-layer ViT-B took about 1.5x as long as with this rule). A ``custom_jvp`` (not a
    ``custom_vjp``) so forward-mode and higher-order derivatives still work.
    """
    return _standardize(x, epsilon)[0]


def _standardize(x, epsilon):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    rstd = jax.lax.rsqrt(jnp.mean(jnp.square(centred), axis=-1, keepdims=True) + epsilon)
    return centred * rstd, rstd


@standardize.defjvp
def _standardize_jvp(epsilon, primals, tangents):
    # y = (x - m) r with r = (v + eps)^-1/2: dy = P(r dx), P(a) = a - mean(a) - y mean(y a).
    # P is its own transpose, so the backward pass is r P(g), the textbook LayerNorm gradient.
    (x,), (dx,) = primals, tangents
    y, rstd = _standardize(x, epsilon)
    scaled = rstd * dx
    dy = (scaled - jnp.mean(scaled, axis=-1, keepdims=True)
          - y * jnp.mean(y * scaled, axis=-1, keepdims=True))
    return y, dy


class LayerNorm(nn.Module):
    """Layer normalisation (Ba et al. 2016) over the last axis, computed in float32:
    ``scale * standardize(x) + bias``, returned in ``dtype``; params ``'scale'`` and ``'bias'``
    (``[features]``, ``param_dtype``), laid out as Flax's ``nn.LayerNorm``'s, so checkpoints and
    imported weights load into either."""

    epsilon: float = 1e-6
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    scale_init: Initializer = nn.initializers.ones
    bias_init: Initializer = nn.initializers.zeros

    @nn.compact
    def __call__(self, x):
        features = x.shape[-1]
        scale = self.param('scale', self.scale_init, (features,), self.param_dtype)
        bias = self.param('bias', self.bias_init, (features,), self.param_dtype)
        y = standardize(jnp.asarray(x, jnp.float32), self.epsilon)
        y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
        return y.astype(self.dtype)


def make_norm(kind: str, *, epsilon: float = 1e-6, dtype: Dtype = jnp.float32,
              param_dtype: Dtype = jnp.float32, name: str | None = None) -> nn.Module:
    """A normalisation over the last (feature) axis, computed in float32.

    ``'layernorm'`` (Ba et al. 2016): ``gamma * (x - mean) / sqrt(var + eps) + beta``; params
    ``'scale'`` and ``'bias'``. ``'rmsnorm'`` (Zhang & Sennrich 2019): ``gamma * x /
    sqrt(mean(x^2) + eps)``, no centring and no bias; param ``'scale'`` (Flax's ``nn.RMSNorm``).
    The LayerNorm is ``LayerNorm`` above (exact variance, closed-form derivative).
    """
    ones = nn.with_logical_partitioning(nn.initializers.ones, ('embed',))
    zeros = nn.with_logical_partitioning(nn.initializers.zeros, ('embed',))
    if kind == 'layernorm':
        return LayerNorm(epsilon=epsilon, dtype=dtype, param_dtype=param_dtype,
                         scale_init=ones, bias_init=zeros, name=name)
    if kind == 'rmsnorm':
        return nn.RMSNorm(epsilon=epsilon, dtype=dtype, param_dtype=param_dtype, scale_init=ones,
                          name=name)
    raise ValueError(f'Unknown norm {kind!r}; allowed values: '
                     f'{", ".join(repr(k) for k in NORM_KINDS)}.')


class _BlockConfig(nn.Module):
    """Fields shared by ``EncoderBlock`` and ``DecoderBlock``, and their residual wrapper."""

    num_heads: int
    head_dim: int
    mlp_dim: int
    num_kv_heads: int | None = None
    activation: str = 'gelu'
    norm: str = 'layernorm'
    norm_epsilon: float = 1e-6
    norm_position: str = 'pre'
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    rotary_base: float | None = None
    use_bias: bool = True
    implementation: str = 'xla'
    dtype: Dtype = jnp.float32
    param_dtype: Dtype = jnp.float32
    value_head_dim: int | None = None      # d_v; None: head_dim (see MultiHeadAttention)
    mlp_dropout_rate: float | None = None  # the FFN's hidden units; None: dropout_rate
    relative_positions: int = 0            # >0: 1-D relative self-attention (EncoderBlock only)
    relative_prefix_tokens: int = 0        # unpositioned tokens before those positions
    drop_path_rate: float = 0.0            # stochastic depth of both residual branches

    def _check(self):
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(f'Unknown norm_position {self.norm_position!r}; allowed values: '
                             f'{", ".join(repr(p) for p in NORM_POSITIONS)}.')

    def _norm(self, name):
        return make_norm(self.norm, epsilon=self.norm_epsilon, dtype=self.dtype,
                         param_dtype=self.param_dtype, name=name)

    def _attention(self, name, rotary_base):
        return MultiHeadAttention(
            num_heads=self.num_heads, head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            dropout_rate=self.attention_dropout_rate, use_bias=self.use_bias,
            rotary_base=rotary_base, implementation=self.implementation,
            value_head_dim=self.value_head_dim, relative_positions=self.relative_positions,
            relative_prefix_tokens=self.relative_prefix_tokens, dtype=self.dtype,
            param_dtype=self.param_dtype, name=name)

    def _mlp(self):
        rate = self.dropout_rate if self.mlp_dropout_rate is None else self.mlp_dropout_rate
        return FeedForward(hidden_dim=self.mlp_dim, activation=self.activation,
                           dropout_rate=rate, use_bias=self.use_bias,
                           dtype=self.dtype, param_dtype=self.param_dtype, name='mlp')

    def _residual(self, x, sublayer, norm, deterministic):
        """One residual sublayer, pre- or post-norm; ``sublayer`` maps ``[b, l, e]`` to same."""
        dropout = Dropout(self.dropout_rate)

        def branch(h):  # the sublayer's output, dropped per element, then whole per example
            h = dropout(sublayer(h), deterministic=deterministic)
            if self.drop_path_rate:
                h = DropPath(self.drop_path_rate)(h, deterministic=deterministic)
            return h

        if self.norm_position == 'pre':
            # Xiong et al. 2020: x + Sublayer(LayerNorm(x)).
            y = x + branch(norm(x))
        else:
            # Vaswani et al. 2017, Sec. 5.4 / 3.1: LayerNorm(x + Dropout(Sublayer(x))).
            y = norm(x + branch(x))
        return nn.with_logical_constraint(y, ('batch', 'length', 'embed'))


class EncoderBlock(_BlockConfig):
    """Self-attention then feed-forward, each as a residual sublayer (see module docstring).

    Submodules: ``'attention'``, ``'mlp'``, ``'norm_attention'``, ``'norm_mlp'``.
    ``__call__(x [b, l, e], *, mask, bias, positions, deterministic, decode) -> [b, l, e]``;
    ``mask`` / ``bias`` go to the attention, ``positions`` ``[b, l]`` drive RoPE if enabled
    (``[b, l, k]``: axial RoPE over ``k`` position axes, e.g. a ViT's patch row and column).
    ``dropout_rate`` drops each sublayer output and the FFN hidden activations (those at
    ``mlp_dropout_rate`` when set: Marian's ``activation_dropout``); ``attention_dropout_rate``
    drops attention probabilities. ``relative_positions`` > 0 gives the self-attention its own
    1-D relative keys (``models.relative_attention``).

    With a causal ``mask`` this is also the block of a decoder-only model (GPT; Radford et al.
    2018, 2019: the Transformer decoder without its cross-attention, ``models.decoder_lm``), and
    ``decode=True`` then runs the self-attention with its key/value cache (see
    ``MultiHeadAttention``): after the cache-sizing call ``x`` holds only the new tokens and
    ``mask`` / ``bias`` cover every cache slot.
    """

    @nn.compact
    def __call__(self, x, *, mask=None, bias=None, positions=None, deterministic: bool = True,
                 decode: bool = False):
        self._check()
        attention = self._attention('attention', self.rotary_base)
        x = self._residual(
            x, lambda h: attention(h, mask=mask, bias=bias, q_positions=positions,
                                   deterministic=deterministic, decode=decode),
            self._norm('norm_attention'), deterministic)
        mlp = self._mlp()
        return self._residual(x, lambda h: mlp(h, deterministic=deterministic),
                              self._norm('norm_mlp'), deterministic)


class DecoderBlock(_BlockConfig):
    """Masked self-attention, cross-attention over the encoder output, then feed-forward.

    Vaswani et al. 2017, Sec. 3.1: the queries of the cross-attention come from the decoder,
    keys and values from the encoder output ``encoded``. Submodules: ``'self_attention'``,
    ``'cross_attention'``, ``'mlp'``, ``'norm_self'``, ``'norm_cross'``, ``'norm_mlp'``.

    ``__call__(x [b, t, e], encoded [b, s, e], *, self_mask, cross_mask, self_bias, positions,
    encoded_positions, deterministic, decode) -> [b, t, e]``. The caller passes a causal
    ``self_mask``. ``decode=True`` runs the self-attention with its key/value cache (see
    ``MultiHeadAttention``): after the cache-sizing call, ``x`` holds only the new tokens,
    ``positions`` (RoPE) are theirs, and ``self_mask`` / ``self_bias`` cover all cache slots.
    With ``rotary_base`` set, RoPE is applied in the self-attention only (decoder positions);
    set ``rotary_cross_attention=True`` to also rotate cross-attention queries by ``positions``
    and keys by ``encoded_positions``. In pre-norm, ``encoded`` is expected already normalised
    (the encoder stack's final norm).
    """

    rotary_cross_attention: bool = False

    @nn.compact
    def __call__(self, x, encoded, *, self_mask=None, cross_mask=None, self_bias=None,
                 positions=None, encoded_positions=None, deterministic: bool = True,
                 decode: bool = False):
        self._check()
        if self.relative_positions:
            raise ValueError('DecoderBlock: relative_positions is for EncoderBlock (relative '
                             'attention has no decoding cache); set it to 0.')
        self_attention = self._attention('self_attention', self.rotary_base)
        x = self._residual(
            x, lambda h: self_attention(h, mask=self_mask, bias=self_bias, q_positions=positions,
                                        deterministic=deterministic, decode=decode),
            self._norm('norm_self'), deterministic)
        cross_attention = self._attention(
            'cross_attention', self.rotary_base if self.rotary_cross_attention else None)
        x = self._residual(
            x, lambda h: cross_attention(h, encoded, mask=cross_mask, q_positions=positions,
                                         kv_positions=encoded_positions,
                                         deterministic=deterministic),
            self._norm('norm_cross'), deterministic)
        mlp = self._mlp()
        return self._residual(x, lambda h: mlp(h, deterministic=deterministic),
                              self._norm('norm_mlp'), deterministic)
