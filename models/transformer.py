"""Encoder-decoder Transformer for translation (Vaswani et al. 2017, "Attention Is All You Need").

The encoder turns source tokens into one vector per token with N blocks of self-attention and a
feed-forward network; the decoder predicts each target token from the previous ones (causal
self-attention), attending to the encoder output (cross-attention) in each of its N blocks.

Token conventions (the model knows only the first; the others are arguments):
  - ``PAD_ID = 0`` is padding, in sources and targets. Padded keys are never attended to.
  - Decoder inputs are the targets shifted right by one, starting with a BOS token (``bos_id``,
    chosen by the tokenizer, must not be 0): ``shift_right([y1 y2 EOS 0], bos) = [BOS y1 y2 0]``.
    The logits at position ``t`` predict target ``t``. Marian (the OPUS-MT models) starts the
    decoder with its padding token instead: ``decoder_start='pad'`` (below).
  - Packed rows (several examples in one row) carry segment ids 1, 2, ... (0 = padding) and
    positions that restart at 0 in every segment; attention never crosses segments.

Position information is chosen by ``posemb`` (Table 3 row (E) compares the first two):
  'sinusoidal'  fixed sin/cos table added to the scaled embeddings (the paper's default).
  'learned'     a trained table per stack added to the embeddings.
  'rope'        rotary queries/keys in every self-attention (not in cross-attention).
  'alibi'       fixed linear distance penalty on self-attention logits (symmetric in the
                encoder, causal in the decoder).
  't5'          learned bucketed relative bias on self-attention logits, one table per stack
                (bidirectional buckets in the encoder, causal ones in the decoder).
  'none'        no position information.

Parameters (``share_embeddings=True``, post-LN): ``shared_embedding`` ``[vocab, embed]`` (also the
output projection, Sec. 3.4), ``encoder/block_i`` and ``decoder/block_i`` (see
``models.layers``), plus ``encoder/norm`` and ``decoder/norm`` for pre-LN, ``*/posemb`` for
'learned', ``*/relative_bias`` for 't5', ``encoder/embedding`` and ``decoder/embedding`` when
the two stacks' embeddings are not shared, ``decoder/logits`` (a kernel ``[embed, vocab]``) when
the output layer is not the decoder's embedding (``tie_output``), and ``decoder/logits_bias``
``[vocab]`` with ``logits_bias``.

What Marian (Junczys-Dowmunt et al. 2018; the OPUS-MT models, ``models.hf_marian``) does
otherwise is an option here, its defaults the paper's:
  ``sinusoid_layout='halves'``  the sines in the first half of the table, the cosines in the
                                second (``models.position.sinusoidal_table``);
  ``activation='swish'``        x * sigmoid(x) in the feed-forward network;
  ``logits_bias=True``          a bias on the output logits (HF's ``final_logits_bias``);
  ``decoder_start='pad'``       the decoder starts from the padding token (HF's
                                ``decoder_start_token_id = pad_token_id``): its embedding row is
                                the start vector, so the decoder cannot tell padding by its id
                                and masks by position instead (the causal mask of right-padded
                                rows, the segment ids of packed ones);
  ``tie_output`` apart from ``share_embeddings``  (HF's ``tie_word_embeddings`` and
                                ``share_encoder_decoder_embeddings``);
  ``mlp_dropout_rate``          the feed-forward hidden units' own rate (``activation_dropout``);
  ``norm_epsilon=1e-5``, ``scale_embeddings`` (``scale_embedding``) and ``max_length``
  (``max_position_embeddings``) as they are.

``remat`` (none | minimal | full) rematerialises every encoder and decoder block in the backward
pass; ``scan_layers`` runs each stack as one ``nn.scan`` (``encoder/blocks``, ``decoder/blocks``
with a leading layer axis instead of ``block_i``), compiled once (``models.stack``). Cached
decoding (``decode=True``) computes no gradients and runs the blocks without remat, in the loop
layout: ``loop_layout`` turns a scanned model and its parameters into the equivalent loop ones,
which ``models.decode.predict`` does by itself.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from models import position
from models.attention import causal_mask, combine_masks, padding_mask, segment_mask
from models.dropout import Dropout
from models.layers import DOT_FLOAT32_OUT, DecoderBlock, EncoderBlock, make_norm, tied_logits
from models.stack import run_blocks, to_layout
from models.transformer_config import (  # noqa: F401  (re-exported with the config)
    DECODER_STARTS, PAD_ID, POSEMB_KINDS, TransformerConfig)


def shift_right(targets, bos_id: int, segmentation=None, *, decoder_start: str = "bos"):
    """Decoder inputs from targets ``[b, t]``: one step later, BOS first, padding kept.

    ``[y1 y2 EOS 0 0] -> [BOS y1 y2 0 0]``. With ``segmentation`` (packed rows) every segment
    starts with BOS: ids ``[1 1 1 2 2 0]``, targets ``[a b E c E 0]`` -> ``[BOS a b BOS c 0]``.
    ``decoder_start`` is the model's (``TransformerConfig.decoder_start``): 'bos' needs a
    ``bos_id`` other than PAD_ID, whose start the decoder would mask as padding; 'pad' (Marian)
    needs ``bos_id == PAD_ID`` (``TransformerConfig.start_id`` gives the right one).
    """
    if decoder_start not in DECODER_STARTS:
        raise ValueError(f"decoder_start={decoder_start!r} is not one of {list(DECODER_STARTS)}")
    if (bos_id == PAD_ID) != (decoder_start == "pad"):
        raise ValueError(
            f"bos_id={bos_id} with decoder_start={decoder_start!r}: a decoder that starts with "
            f"'bos' needs a bos_id other than the padding id {PAD_ID}, one that starts with 'pad' "
            f"(Marian) needs bos_id={PAD_ID}; TransformerConfig.start_id(bos_id) gives it")
    targets = jnp.asarray(targets)
    shifted = jnp.concatenate([jnp.full_like(targets[:, :1], bos_id), targets[:, :-1]], axis=1)
    if segmentation is not None:
        segmentation = jnp.asarray(segmentation)
        previous = jnp.pad(segmentation[:, :-1], ((0, 0), (1, 0)))
        shifted = jnp.where(segmentation != previous, bos_id, shifted)
    return jnp.where(targets != PAD_ID, shifted, PAD_ID).astype(targets.dtype)


def _dtypes(cfg: TransformerConfig):
    return jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)


def _make_embedding(cfg: TransformerConfig, name: str | None = None) -> nn.Embed:
    dtype, param_dtype = _dtypes(cfg)
    # N(0, d^-1/2): after the sqrt(d_model) scaling the inputs have unit variance.
    init = nn.initializers.normal(stddev=cfg.d_model ** -0.5)
    return nn.Embed(cfg.vocab_size, cfg.d_model, dtype=dtype, param_dtype=param_dtype,
                    embedding_init=nn.with_logical_partitioning(init, ("vocab", "embed")),
                    name=name)


def _block_fields(cfg: TransformerConfig) -> dict[str, Any]:
    dtype, param_dtype = _dtypes(cfg)
    return dict(num_heads=cfg.num_heads, head_dim=cfg.qk_dim, value_head_dim=cfg.v_dim,
                mlp_dim=cfg.d_ff, num_kv_heads=cfg.num_kv_heads, activation=cfg.activation,
                norm=cfg.norm, norm_epsilon=cfg.norm_epsilon, norm_position=cfg.norm_position,
                dropout_rate=cfg.dropout_rate, attention_dropout_rate=cfg.attention_dropout_rate,
                mlp_dropout_rate=cfg.mlp_dropout_rate,
                rotary_base=cfg.rope_base if cfg.posemb == "rope" else None,
                use_bias=cfg.use_bias, implementation=cfg.attention_implementation,
                dtype=dtype, param_dtype=param_dtype)


def _embed_tokens(cfg, embedding, tokens, positions, deterministic):
    """Token embedding (times sqrt(d_model)) plus an absolute position encoding, then dropout.

    Must run inside a compact method: it creates the 'posemb' table for posemb='learned'.
    """
    dtype, param_dtype = _dtypes(cfg)
    x = embedding(tokens)
    if cfg.scale_embeddings:  # Vaswani et al. 2017, Sec. 3.4: embeddings times sqrt(d_model).
        x = x * jnp.asarray(math.sqrt(cfg.d_model), dtype)
    if cfg.posemb in ("sinusoidal", "learned"):
        if tokens.shape[1] > cfg.max_length:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds max_length="
                             f"{cfg.max_length} of posemb={cfg.posemb!r}; raise max_length")
        if cfg.posemb == "sinusoidal":
            table = position.SinusoidalPositionEmbedding(cfg.max_length, cfg.d_model,
                                                         layout=cfg.sinusoid_layout, dtype=dtype)
        else:
            table = position.LearnedPositionEmbedding(cfg.max_length, cfg.d_model, dtype=dtype,
                                                      param_dtype=param_dtype, name="posemb")
        x = x + table(positions)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    # Sec. 5.4: dropout on the sums of the embeddings and the positional encodings.
    return Dropout(cfg.dropout_rate)(x, deterministic=deterministic)


def _relative_bias(cfg, q_positions, kv_positions, *, causal: bool):
    """ALiBi or T5 self-attention bias ``[b, h, q, k]`` (float32), else None. Inside compact."""
    if cfg.posemb == "alibi":
        return position.alibi_bias(cfg.num_heads, q_positions, kv_positions, causal=causal)
    if cfg.posemb == "t5":
        _, param_dtype = _dtypes(cfg)
        return position.T5RelativePositionBias(
            cfg.num_heads, num_buckets=cfg.t5_num_buckets, max_distance=cfg.t5_max_distance,
            bidirectional=not causal, dtype=jnp.float32, param_dtype=param_dtype,
            name="relative_bias")(q_positions, kv_positions)
    return None


def _default_positions(tokens, start=0, *, segmentation=None):
    """Positions where none are given: restarting in every example of a packed row
    (`segmentation`), else start, start + 1, ... along the row."""
    if segmentation is not None:
        return position.document_positions(segmentation)
    batch, length = tokens.shape
    return jnp.broadcast_to(start + jnp.arange(length, dtype=jnp.int32), (batch, length))


class Encoder(nn.Module):
    """Source tokens ``[b, s]`` -> encodings ``[b, s, d_model]`` (final-normed for pre-LN)."""

    config: TransformerConfig
    shared_embedding: nn.Module | None = None

    @nn.compact
    def __call__(self, inputs, *, segmentation=None, positions=None, deterministic: bool = True):
        cfg = self.config
        embedding = (self.shared_embedding if self.shared_embedding is not None
                     else _make_embedding(cfg, "embedding"))
        if positions is None:
            positions = _default_positions(inputs, segmentation=segmentation)
        x = _embed_tokens(cfg, embedding, inputs, positions, deterministic)

        valid = inputs != PAD_ID
        mask = combine_masks(padding_mask(valid, valid),
                             None if segmentation is None else segment_mask(segmentation,
                                                                            segmentation))
        bias = _relative_bias(cfg, positions, positions, causal=False)
        x = run_blocks(lambda name: EncoderBlock(**_block_fields(cfg), name=name),
                       cfg.encoder_layers, x, remat=cfg.remat, scan=cfg.scan_layers, mask=mask,
                       bias=bias, positions=positions, deterministic=deterministic)
        if cfg.norm_position == "pre":  # pre-LN stacks end with a norm
            x = make_norm(cfg.norm, epsilon=cfg.norm_epsilon, dtype=x.dtype,
                          param_dtype=_dtypes(cfg)[1], name="norm")(x)
        return x


class Decoder(nn.Module):
    """Decoder inputs ``[b, t]`` (shifted targets) and encodings -> logits ``[b, t, vocab]`` f32.

    ``decode=True`` (autoregressive decoding, unpacked rows only) keeps a cache: the first call
    (the 'cache' collection mutable and empty) takes full-length dummy ``targets`` ``[b, L]`` to
    size it (``L`` = the longest decode); later calls take the next ``targets`` ``[b, 1]`` and
    place them at position ``cache/position_index``. ``cache/slot_positions`` ``[b, L]`` are the
    key positions for ALiBi/T5 biases.
    """

    config: TransformerConfig
    shared_embedding: nn.Module | None = None

    @nn.compact
    def __call__(self, encoded, inputs, targets, *, inputs_segmentation=None,
                 targets_segmentation=None, targets_positions=None, deterministic: bool = True,
                 decode: bool = False):
        cfg = self.config
        if (inputs_segmentation is None) != (targets_segmentation is None):
            raise ValueError("packed sequences need both inputs_segmentation and "
                             "targets_segmentation (or neither)")
        batch, length = targets.shape
        step = None   # while decoding: the position of targets[:, 0]
        if decode:
            if targets_segmentation is not None or targets_positions is not None:
                raise ValueError("decode=True decodes unpacked rows: pass no targets_segmentation "
                                 "or targets_positions")
            filled = self.has_variable("cache", "position_index")
            index = self.variable("cache", "position_index", lambda: jnp.array(0, jnp.int32))
            slots = self.variable("cache", "slot_positions", _default_positions, targets)
            if filled:
                step = index.value
                index.value = step + length
                targets_positions = _default_positions(targets, step)
        if targets_positions is None:
            targets_positions = _default_positions(targets, segmentation=targets_segmentation)

        embedding = (self.shared_embedding if self.shared_embedding is not None
                     else _make_embedding(cfg, "embedding"))
        y = _embed_tokens(cfg, embedding, targets, targets_positions, deterministic)

        valid_inputs = inputs != PAD_ID
        if cfg.decoder_start == "bos":
            valid_targets = targets != PAD_ID
        else:  # the start token is PAD_ID itself: its id does not mark padding (module docstring)
            valid_targets = jnp.ones_like(targets, bool)
        packed = targets_segmentation is not None
        if step is None:   # whole sequences: causal, padding and segment masks
            self_mask = combine_masks(
                causal_mask(length), padding_mask(valid_targets, valid_targets),
                segment_mask(targets_segmentation, targets_segmentation) if packed else None)
            key_positions = targets_positions
        else:              # one step: the attention cache hides the slots not yet written
            self_mask, key_positions = None, slots.value
            valid_targets = jnp.ones_like(valid_targets)
        cross_mask = combine_masks(
            padding_mask(valid_targets, valid_inputs),
            segment_mask(targets_segmentation, inputs_segmentation) if packed else None)
        self_bias = _relative_bias(cfg, targets_positions, key_positions, causal=True)

        if decode and cfg.scan_layers:
            raise ValueError("cached decoding runs the loop layout: decode with "
                             "models.transformer.loop_layout(model, params) (models.decode.predict "
                             "does this itself)")
        y = run_blocks(lambda name: DecoderBlock(**_block_fields(cfg), name=name),
                       cfg.decoder_layers, y, encoded, scan=cfg.scan_layers,
                       remat="none" if decode else cfg.remat,  # cached decoding: no gradients
                       self_mask=self_mask, cross_mask=cross_mask, self_bias=self_bias,
                       positions=targets_positions, deterministic=deterministic, decode=decode)
        if cfg.norm_position == "pre":
            y = make_norm(cfg.norm, epsilon=cfg.norm_epsilon, dtype=y.dtype,
                          param_dtype=_dtypes(cfg)[1], name="norm")(y)

        dtype, param_dtype = _dtypes(cfg)
        if cfg.output_tied:
            logits = tied_logits(y, embedding.embedding, dtype)  # Sec. 3.4: tied, y E^T
        else:
            logits = nn.Dense(
                cfg.vocab_size, use_bias=False, dtype=dtype, param_dtype=param_dtype,
                kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                         ("embed", "vocab")),
                dot_general=DOT_FLOAT32_OUT, name="logits")(y)
        if cfg.logits_bias:  # Marian's final_logits_bias
            bias = self.param("logits_bias", nn.with_logical_partitioning(
                nn.initializers.zeros, ("vocab",)), (cfg.vocab_size,), param_dtype)
            logits = logits + bias.astype(logits.dtype)
        logits = nn.with_logical_constraint(logits, ("batch", "length", "vocab"))
        return logits.astype(jnp.float32)


class Transformer(nn.Module):
    """``Transformer(config)(inputs [b, s], targets [b, t]) -> logits [b, t, vocab]`` (float32).

    ``targets`` are the decoder inputs (``shift_right`` of the target tokens). For packed rows
    pass ``*_segmentation`` (ids >= 1 per example, 0 = padding) and ``*_positions``
    (restarting at 0 per example; ``position.document_positions`` of the segmentation when
    not given). ``train=True`` enables dropout (rng collection 'dropout').
    ``encode`` and ``decode`` run the two halves (``decode=True``: cached decoding, see
    ``Decoder`` and ``models.decode``).
    """

    config: TransformerConfig

    def setup(self):
        cfg = self.config
        self.shared_embedding = _make_embedding(cfg) if cfg.share_embeddings else None
        self.encoder = Encoder(cfg, shared_embedding=self.shared_embedding)
        self.decoder = Decoder(cfg, shared_embedding=self.shared_embedding)

    def encode(self, inputs, *, inputs_segmentation=None, inputs_positions=None,
               train: bool = False):
        return self.encoder(inputs, segmentation=inputs_segmentation, positions=inputs_positions,
                            deterministic=not train)

    def decode(self, encoded, inputs, targets, *, inputs_segmentation=None,
               targets_segmentation=None, targets_positions=None, train: bool = False,
               decode: bool = False):
        return self.decoder(encoded, inputs, targets, inputs_segmentation=inputs_segmentation,
                            targets_segmentation=targets_segmentation,
                            targets_positions=targets_positions, deterministic=not train,
                            decode=decode)

    def __call__(self, inputs, targets, *, inputs_segmentation=None, targets_segmentation=None,
                 inputs_positions=None, targets_positions=None, train: bool = False):
        encoded = self.encode(inputs, inputs_segmentation=inputs_segmentation,
                              inputs_positions=inputs_positions, train=train)
        return self.decode(encoded, inputs, targets, inputs_segmentation=inputs_segmentation,
                           targets_segmentation=targets_segmentation,
                           targets_positions=targets_positions, train=train)


def loop_layout(model: Transformer, params):
    """The loop-layout model and parameters equal to ``model`` (``scan_layers`` or not) with
    ``params``: cached decoding needs them. Unchanged if ``model`` does not scan."""
    cfg = model.config
    if not cfg.scan_layers:
        return model, params
    return (Transformer(dataclasses.replace(cfg, scan_layers=False)),
            with_layer_layout(params, scan=False))


STACKS = ("encoder", "decoder")


def with_layer_layout(params, scan: bool):
    """A ``Transformer``'s parameters with each stack's blocks in the scan layout (``scan=True``:
    one ``blocks`` subtree, leading layer axis) or the loop layout (``block_0 ..``), whichever
    they hold now (``models.stack``); everything else unchanged. Checkpoint converters give
    and take the loop layout."""
    return {**params, **{stack: to_layout(params[stack], scan) for stack in STACKS}}
