"""Decoder-only Transformer language model: GPT (Radford et al. 2018, "Improving Language
Understanding by Generative Pre-Training") and GPT-2 (Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners").

The decoder of Vaswani et al. 2017 without its cross-attention: token embeddings, a stack of
blocks of causal self-attention and a feed-forward network (``models.layers.EncoderBlock`` under
a causal mask), and an output layer over the vocabulary. The logits at position ``t`` predict
token ``t + 1``; the caller shifts (targets ``tokens[:, 1:]``). No token id is special here.

GPT-2's choices are the defaults (``DecoderLMConfig.from_size('small')`` .. ``'xl'`` are its four
sizes, ``models.sizes.GPT2_SIZES``): pre-LN blocks with a final LayerNorm (Radford et al. 2019,
Sec. 2.3; GPT-1 was post-LN, ``norm_position='post'``, no final norm), LayerNorm epsilon 1e-5,
the tanh approximation of GELU, biases everywhere, 1,024 learned positions, the output layer tied
to the token embeddings (``tie_embeddings``; untied: a bias-free ``logits`` layer), every kernel
and embedding ~ N(0, 0.02^2) and the two projections that write into the residual stream in
each block (attention ``out``, feed-forward ``wo``) ~ N(0, (0.02 / sqrt(2 L))^2) for L blocks
(Sec. 2.3: "scale the weights of residual layers at initialization by 1/sqrt(N)", N = 2 L
residual layers; ``scale_residual_init``). ``embedding_std`` sets the token embeddings' std
apart: fairseq's Transformer LMs (Press et al. 2022's) draw them ~ N(0, 1 / d_model) and scale
them by sqrt(d_model) (``scale_embeddings``), so that a token's embedding (norm sqrt(d_model))
outweighs a sinusoid row (norm sqrt(d_model / 2)). Dropout, at GPT-2's sites: the embedding
sum, every sublayer output, the attention probabilities; not the feed-forward hidden layer.

``posemb`` chooses the position information (the "train short, test long" ablation compares them;
Press, Smith & Lewis 2022):
  'learned'     a trained table of ``max_length`` rows added to the embeddings (GPT-2). It cannot
                extrapolate: a sequence (or a decoding cache) longer than ``max_length`` raises a
                ValueError naming both lengths. An extrapolation study must stop 'learned' at its
                table, or train a longer table whose rows past the training length stay at
                their initialisation (a different model; say which).
  'sinusoidal'  the fixed sin/cos table of Vaswani et al. 2017, computed to the length at hand
                (the sequence or decoding cache, or ``max_length`` if longer): no length is
                refused (Press et al. show that it extrapolates badly), but an explicit position
                past that table reads a row of NaN, as 'learned' does past its own.
  'rope'        rotary queries and keys (Su et al. 2021); 'alibi' the causal linear bias (Press
                et al. 2022); 't5' the learned causal bucketed bias, one table for the stack
                (Raffel et al. 2020); 'none' no position information (NoPE: a causal mask alone
                still lets a model infer positions, Haviv et al. 2022). None of these has a limit.

Packed rows: several documents in one row carry ``segment_ids`` 1, 2, ... (0 = padding) and
``positions`` that restart at 0 in every document (``document_positions`` computes them from
the segment ids when not given); no token attends across documents or to padding.

Parameters: ``embedding`` ``[vocab, embed]``, ``posemb`` (learned), ``relative_bias`` (t5),
``block_0 .. block_{L-1}`` (``attention/{query,key,value,out}``, ``norm_attention``, ``mlp/{wi,
wo}``, ``norm_mlp``; see ``models.layers``), ``norm`` (pre-LN) and ``logits`` (untied).
``remat`` and ``scan_layers`` (one ``blocks`` subtree with a leading layer axis) as in
``models.stack``; ``with_layer_layout`` converts between the two layouts.

Key/value cache (``decode=True``; the loop layout only: ``loop_layout``). The first call, with
the 'cache' collection mutable and empty, sizes every cache from its ``tokens`` ``[b, L]`` (L =
the most tokens the cache will hold) and otherwise runs as usual. Each later call appends its
``q`` tokens at slot ``cache/slot_index`` for every row at once, with their ``positions``
(default: each row's ``cache/next_position`` onwards) and ``segment_ids`` (default 1; 0 marks a
padding token, which attends to nothing and is never attended to). A query sees the filled
slots up to itself whose segment id equals its own, so a left-padded batch of prompts decodes
each row as if it were alone (``models.lm_decode``). ``cache/slot_positions`` hold the key
positions of the ALiBi / T5 biases; RoPE keys are cached already rotated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import position
from models.position import document_positions  # noqa: F401  (re-exported)
from models.attention import MultiHeadAttention, causal_mask, combine_masks, segment_mask
from models.config_checks import (SHARED_CHOICES, check_at_least, check_choices, check_heads,
                                  check_optional_at_least, check_position_encoding,
                                  check_positive, check_rates)
from models.dropout import Dropout
from models.layers import (ACTIVATIONS, DOT_FLOAT32_OUT, NORM_KINDS, NORM_POSITIONS,
                           EncoderBlock, FeedForward, make_norm, tied_logits)
from models.sizes import GPT2_SIZES
from models.stack import run_blocks, to_layout

POSEMB_KINDS = ("learned", "sinusoidal", "rope", "alibi", "t5", "none")
BLOCK_PREFIX, SCAN_NAME = "block_", "blocks"   # the stack's submodules: loop / scan

Initializer = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class DecoderLMConfig:
    """Every architectural choice of a decoder-only LM; the defaults are GPT-2's (module
    docstring) but the sizes, which ``from_size`` fills in."""

    vocab_size: int
    num_layers: int = 12
    d_model: int = 768
    d_ff: int = 3072                        # feed-forward hidden width
    num_heads: int = 12
    head_dim: int | None = None             # query/key/value width per head; None: d_model // h
    num_kv_heads: int | None = None         # key/value heads (grouped-query); None: num_heads
    dropout_rate: float = 0.1               # embeddings and every sublayer output (GPT-2 0.1)
    attention_dropout_rate: float = 0.1     # attention probabilities (GPT-2 0.1)
    activation: str = "gelu_tanh"           # GPT-2's 'gelu_new'
    norm: str = "layernorm"
    norm_epsilon: float = 1e-5
    norm_position: str = "pre"              # 'pre': GPT-2; 'post': GPT-1
    posemb: str = "learned"
    max_length: int = 1024                  # rows of the 'learned' table (the most positions)
    rope_base: float = 10000.0
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    tie_embeddings: bool = True             # output layer = token embeddings transposed
    scale_embeddings: bool = False          # embeddings times sqrt(d_model) (Vaswani et al.)
    use_bias: bool = True                   # biases in attention and feed-forward projections
    initializer_range: float = 0.02         # std of every kernel and embedding at init
    embedding_std: float | None = None      # token embeddings' std at init; None: the above
    scale_residual_init: bool = True        # residual projections' std / sqrt(2 num_layers)
    attention_implementation: str = "xla"
    dtype: str = "float32"                  # compute dtype
    param_dtype: str = "float32"            # parameter (and optimizer state) dtype
    remat: str = "none"                     # none | minimal | full (models.stack)
    scan_layers: bool = False               # nn.scan over the blocks (models.stack)

    @classmethod
    def from_size(cls, name: str, **overrides: Any) -> "DecoderLMConfig":
        """A GPT-2 size ('small', 'medium', 'large', 'xl'; ``models.sizes.GPT2_SIZES``, GPT-2's
        vocabulary and position table included) with fields overridden."""
        if name not in GPT2_SIZES:
            raise ValueError(f"unknown GPT-2 size {name!r}; known: {list(GPT2_SIZES)}")
        return cls(**{**GPT2_SIZES[name], **overrides})

    def __post_init__(self):
        check_at_least(self, {"vocab_size": 1, "num_layers": 1, "d_model": 1, "d_ff": 1,
                              "num_heads": 1, "max_length": 1})
        check_optional_at_least(self, {"head_dim": 1, "num_kv_heads": 1})
        if self.embedding_std is not None:  # None: initializer_range
            check_positive(self, ("embedding_std",))
        check_heads(self, explicit=("head_dim",))
        check_choices(self, {"posemb": POSEMB_KINDS, "activation": tuple(ACTIVATIONS),
                             "norm": NORM_KINDS, "norm_position": NORM_POSITIONS,
                             **SHARED_CHOICES})
        check_rates(self, ("dropout_rate", "attention_dropout_rate"))
        check_positive(self, ("norm_epsilon", "rope_base", "initializer_range"))
        check_position_encoding(self, t5_directions=(False,))  # causal attention only

    @property
    def qk_dim(self) -> int:
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    def check_length(self, length: int) -> None:
        """Raises when ``length`` positions do not fit the learned table (module docstring)."""
        if self.posemb == "learned" and length > self.max_length:
            raise ValueError(
                f"{length} positions exceed max_length={self.max_length} of posemb='learned' "
                "(one trained row per position; it cannot extrapolate): shorten the sequence or "
                "the decoding (prompt + new tokens), or use a config with a longer table")


def _dtypes(cfg: DecoderLMConfig):
    return jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)


def _initializers(cfg: DecoderLMConfig) -> tuple[Initializer, Initializer]:
    """(every kernel's, the residual projections') initialiser (module docstring)."""
    std = cfg.initializer_range
    # Radford et al. 2019, Sec. 2.3: residual layers scaled by 1/sqrt(N), N = 2 per block.
    out_std = std / math.sqrt(2 * cfg.num_layers) if cfg.scale_residual_init else std
    return nn.initializers.normal(stddev=std), nn.initializers.normal(stddev=out_std)


class DecoderLMBlock(EncoderBlock):
    """An ``EncoderBlock`` (run under a causal mask) with GPT-2's initialisers and no dropout on
    the feed-forward hidden layer: same submodules and forward pass otherwise."""

    kernel_init: Initializer = nn.initializers.normal(stddev=0.02)
    out_kernel_init: Initializer = nn.initializers.normal(stddev=0.02)

    def _attention(self, name, rotary_base):
        return MultiHeadAttention(
            num_heads=self.num_heads, head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            dropout_rate=self.attention_dropout_rate, use_bias=self.use_bias,
            rotary_base=rotary_base, implementation=self.implementation, dtype=self.dtype,
            param_dtype=self.param_dtype, kernel_init=self.kernel_init,
            out_kernel_init=self.out_kernel_init, name=name)

    def _mlp(self):
        return FeedForward(hidden_dim=self.mlp_dim, activation=self.activation, dropout_rate=0.0,
                           use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype,
                           kernel_init=self.kernel_init, out_kernel_init=self.out_kernel_init,
                           name="mlp")


class DecoderLM(nn.Module):
    """``DecoderLM(config)(tokens [b, l], *, segment_ids, positions, train, decode,
    hidden_only) -> logits [b, l, vocab]`` float32 (``hidden_only``: the final hidden states
    ``[b, l, d_model]`` instead, e.g. to fill a decoding cache without the output layer).

    ``segment_ids`` ``[b, l]`` (packed documents, 0 = padding) and ``positions`` ``[b, l]``
    (default: ``document_positions(segment_ids)``, or ``arange`` without segment ids) as in the
    module docstring, where ``decode=True`` (the key/value cache) is described too.
    ``train=True`` enables dropout (rng collection 'dropout').
    """

    config: DecoderLMConfig

    @nn.compact
    def __call__(self, tokens, *, segment_ids=None, positions=None, train: bool = False,
                 decode: bool = False, hidden_only: bool = False):
        cfg = self.config
        if tokens.ndim != 2:
            raise ValueError(f"tokens of shape [batch, length] expected, got {tuple(tokens.shape)}")
        length = tokens.shape[1]
        if decode and cfg.scan_layers:
            raise ValueError("cached decoding runs the loop layout: decode with "
                             "models.decoder_lm.loop_layout(model, params) (models.lm_decode "
                             "does this itself)")
        keys = self._cache(tokens, positions, segment_ids) if decode else None
        if keys is not None:
            positions, segment_ids, key_positions, key_segments = keys
            # The attention cache adds the causal part (slots up to each query's own).
            mask = segment_mask(segment_ids, key_segments)
        else:   # whole sequences, or the cache-sizing call (the cache holds `length` positions)
            cfg.check_length(length)
            if positions is None:
                positions = (document_positions(segment_ids) if segment_ids is not None else
                             jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), tokens.shape))
            mask = combine_masks(causal_mask(length), None if segment_ids is None
                                 else segment_mask(segment_ids, segment_ids))
            key_positions = positions

        embedding = self._embedding()
        x = self._embed(embedding, tokens, positions, train)
        dtype, param_dtype = _dtypes(cfg)
        kernel_init, out_kernel_init = _initializers(cfg)
        bias = self._relative_bias(positions, key_positions)
        x = run_blocks(
            lambda name: DecoderLMBlock(
                num_heads=cfg.num_heads, head_dim=cfg.qk_dim, mlp_dim=cfg.d_ff,
                num_kv_heads=cfg.num_kv_heads, activation=cfg.activation, norm=cfg.norm,
                norm_epsilon=cfg.norm_epsilon, norm_position=cfg.norm_position,
                dropout_rate=cfg.dropout_rate, attention_dropout_rate=cfg.attention_dropout_rate,
                rotary_base=cfg.rope_base if cfg.posemb == "rope" else None,
                use_bias=cfg.use_bias, implementation=cfg.attention_implementation, dtype=dtype,
                param_dtype=param_dtype, kernel_init=kernel_init,
                out_kernel_init=out_kernel_init, name=name),
            cfg.num_layers, x, remat="none" if decode else cfg.remat, scan=cfg.scan_layers,
            prefix=BLOCK_PREFIX, scan_name=SCAN_NAME, mask=mask, bias=bias, positions=positions,
            deterministic=not train, decode=decode)
        if cfg.norm_position == "pre":  # pre-LN stacks end with a norm (GPT-2's ln_f)
            x = make_norm(cfg.norm, epsilon=cfg.norm_epsilon, dtype=dtype,
                          param_dtype=param_dtype, name="norm")(x)
        if hidden_only:
            return x
        if cfg.tie_embeddings:
            logits = tied_logits(x, embedding.embedding, dtype)  # Press & Wolf: h E^T
        else:
            logits = nn.Dense(cfg.vocab_size, use_bias=False, dtype=dtype, param_dtype=param_dtype,
                              kernel_init=nn.with_logical_partitioning(kernel_init,
                                                                       ("embed", "vocab")),
                              dot_general=DOT_FLOAT32_OUT, name="logits")(x)
        logits = nn.with_logical_constraint(logits, ("batch", "length", "vocab"))
        return logits.astype(jnp.float32)

    def _cache(self, tokens, positions, segment_ids):
        """The model's part of the decoding cache (module docstring). None at the sizing call;
        afterwards (positions, segment_ids) of the new tokens and (positions, segment ids) of
        every slot, the new ones written in."""
        batch, length = tokens.shape
        filled = self.has_variable("cache", "slot_index")
        index = self.variable("cache", "slot_index", lambda: jnp.array(0, jnp.int32))
        slot_positions = self.variable("cache", "slot_positions", jnp.zeros, (batch, length),
                                       jnp.int32)
        slot_segments = self.variable("cache", "slot_segments", jnp.zeros, (batch, length),
                                      jnp.int32)
        next_position = self.variable("cache", "next_position", jnp.zeros, (batch,), jnp.int32)
        if not filled:
            return None
        if positions is None:
            positions = next_position.value[:, None] + jnp.arange(length, dtype=jnp.int32)
        if segment_ids is None:
            segment_ids = jnp.ones((batch, length), jnp.int32)
        positions = jnp.asarray(positions, jnp.int32)
        segment_ids = jnp.asarray(segment_ids, jnp.int32)
        start = index.value
        slot_positions.value = jax.lax.dynamic_update_slice(slot_positions.value, positions,
                                                            (0, start))
        slot_segments.value = jax.lax.dynamic_update_slice(slot_segments.value, segment_ids,
                                                           (0, start))
        index.value = start + length
        after_real = jnp.max(jnp.where(segment_ids > 0, positions + 1, 0), axis=1)
        next_position.value = jnp.maximum(next_position.value, after_real)
        return positions, segment_ids, slot_positions.value, slot_segments.value

    def _embedding(self) -> nn.Embed:
        cfg = self.config
        dtype, param_dtype = _dtypes(cfg)
        std = cfg.initializer_range if cfg.embedding_std is None else cfg.embedding_std
        init = nn.initializers.normal(stddev=std)
        return nn.Embed(cfg.vocab_size, cfg.d_model, dtype=dtype, param_dtype=param_dtype,
                        embedding_init=nn.with_logical_partitioning(init, ("vocab", "embed")),
                        name="embedding")

    def _embed(self, embedding, tokens, positions, train):
        """Token embeddings plus an absolute position encoding, then dropout."""
        cfg = self.config
        dtype, param_dtype = _dtypes(cfg)
        x = embedding(tokens)
        if cfg.scale_embeddings:   # Vaswani et al. 2017, Sec. 3.4: times sqrt(d_model)
            x = x * jnp.asarray(math.sqrt(cfg.d_model), dtype)
        if cfg.posemb == "learned":
            x = x + position.LearnedPositionEmbedding(
                cfg.max_length, cfg.d_model, dtype=dtype, param_dtype=param_dtype,
                embedding_init=nn.initializers.normal(stddev=cfg.initializer_range),
                name="posemb")(positions)
        elif cfg.posemb == "sinusoidal":
            # Any length: rows up to the longest sequence or cache at hand (or max_length).
            rows = max(self._key_length(tokens), cfg.max_length)
            x = x + position.SinusoidalPositionEmbedding(rows, cfg.d_model, dtype=dtype)(positions)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        return Dropout(cfg.dropout_rate)(x, deterministic=not train)

    def _key_length(self, tokens) -> int:
        if self.has_variable("cache", "slot_positions"):
            return self.get_variable("cache", "slot_positions").shape[1]
        return tokens.shape[1]

    def _relative_bias(self, q_positions, kv_positions):
        """ALiBi or T5 causal bias ``[b, h, q, k]`` (float32), else None."""
        cfg = self.config
        if cfg.posemb == "alibi":
            return position.alibi_bias(cfg.num_heads, q_positions, kv_positions, causal=True)
        if cfg.posemb == "t5":
            return position.T5RelativePositionBias(
                cfg.num_heads, num_buckets=cfg.t5_num_buckets, max_distance=cfg.t5_max_distance,
                bidirectional=False, dtype=jnp.float32, param_dtype=_dtypes(cfg)[1],
                name="relative_bias")(q_positions, kv_positions)
        return None


def with_layer_layout(params: Mapping[str, Any], scan: bool) -> dict[str, Any]:
    """A ``DecoderLM``'s parameters with the blocks in the scan layout (``scan=True``: one
    ``blocks`` subtree, leading layer axis) or the loop layout (``block_0 ..``), whichever they
    hold now (``models.stack``). Everything else is unchanged."""
    return to_layout(params, scan, BLOCK_PREFIX, SCAN_NAME)


def loop_layout(model: DecoderLM, params):
    """The loop-layout model and parameters equal to ``model`` with ``params`` (cached
    decoding needs them); unchanged if ``model`` does not scan."""
    if not model.config.scan_layers:
        return model, params
    return (DecoderLM(dataclasses.replace(model.config, scan_layers=False)),
            with_layer_layout(params, scan=False))
