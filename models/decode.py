"""Autoregressive decoding: greedy and beam search over a key/value cache.

The searches know nothing about the model. They call

    tokens_to_logits(tokens [n, 1] int32, cache) -> (logits [n, vocab], new_cache)

once per generated token, where ``tokens`` are the previous tokens (BOS at the first step) and
``cache`` is any pytree whose arrays have ``n`` rows first (scalars, such as a cache index, are
left alone). ``predict`` builds that function for a ``models.transformer.Transformer``.

Conventions: the padding token (``pad_id``, 0) is never generated (its logit is ignored, since
training never scores it); a hypothesis ends with its EOS token, which is included in the
output, and every later position is padding. Outputs hold the generated tokens only (no BOS).

Beam search keeps, for each example, the ``beam_size`` best hypotheses by the length-normalised
score of Wu et al. 2016 (GNMT), used by Vaswani et al. 2017 with alpha = 0.6:

    score(y) = log P(y) / lp(|y|),   lp(n) = ((5 + n) / 6) ** alpha,

where ``|y|`` counts the generated tokens, EOS included. At each step every unfinished hypothesis
is extended by every token and every finished one is carried over unchanged (keeping its score);
the best ``beam_size`` of all these candidates form the next beam. A hypothesis still unfinished
after its example's limit is kept as it is (scored with ``lp(limit)``). The search stops when
all hypotheses are finished or after ``max_length`` steps. With ``beam_size=1`` it is greedy
search.

Limits per row. Both searches take ``max_length`` (static: the width of the outputs and the
most steps run) and optionally ``row_max_length`` ``[batch]``: example ``i`` generates at most
``row_max_length[i]`` tokens (values above ``max_length`` act as ``max_length``), then only
padding, exactly as if it were decoded alone with ``max_length=row_max_length[i]``. Vaswani et
al. 2017 (Sec. 6.1) let each sentence run to its input length + 50: ``input_length_limits``.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from models.transformer import PAD_ID, Transformer, loop_layout

NEG_INF = -1.0e9   # log-probability of the empty starting beams (finite: no inf - inf)

TokensToLogits = Callable[[jax.Array, Any], tuple[jax.Array, Any]]


def length_penalty(length, alpha: float):
    """Wu et al. 2016, eq. 14: lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha."""
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def input_length_limits(inputs, extra: int, max_length: int, pad_id: int = PAD_ID):
    """Vaswani et al. 2017, Sec. 6.1: each sentence's maximum output length is its input length
    + ``extra`` (50), here capped at ``max_length``. ``inputs`` ``[b, s]``: one sentence a row,
    padded with ``pad_id``; the length counts its real tokens (EOS included, as the output's
    count includes the EOS it generates). Returns ``[b]`` int32."""
    length = jnp.sum(jnp.asarray(inputs) != pad_id, axis=-1, dtype=jnp.int32)
    return jnp.minimum(length + extra, max_length)


def _row_limits(row_max_length, batch_size: int, max_length: int):
    """Each row's step limit, [batch] int32 in [0, max_length] (None: max_length for all)."""
    if row_max_length is None:
        return jnp.full((batch_size,), max_length, jnp.int32)
    limit = jnp.asarray(row_max_length, jnp.int32)
    if limit.shape != (batch_size,):
        raise ValueError(f"row_max_length has shape {limit.shape}; expected ({batch_size},), one "
                         "limit per example")
    return jnp.clip(limit, 0, max_length)


def _log_probs(logits, pad_id: int):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    is_pad = jnp.arange(logp.shape[-1]) == pad_id
    return jnp.where(is_pad, -jnp.inf, logp)


def greedy_search(tokens_to_logits: TokensToLogits, cache, *, batch_size: int, max_length: int,
                  bos_id: int, eos_id: int, pad_id: int = PAD_ID, row_max_length=None):
    """Most probable next token at every step, for ``batch_size`` rows at once; row ``i`` stops
    at EOS or after ``row_max_length[i]`` tokens (module docstring).

    Returns ``tokens`` ``[batch, max_length]`` int32 (EOS included, padding after it or after
    the row's limit) and their summed log-probabilities ``[batch]`` float32.
    """
    limit = _row_limits(row_max_length, batch_size, max_length)

    def cond(state):
        step, _, _, _, finished, _ = state
        return (step < max_length) & ~jnp.all(finished)

    def body(state):
        step, last, tokens, log_prob, finished, cache = state
        logits, cache = tokens_to_logits(last[:, None], cache)
        logp = _log_probs(logits, pad_id)                                        # [b, V]
        token = jnp.argmax(logp, axis=-1).astype(jnp.int32)
        token = jnp.where(finished, pad_id, token)
        gained = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
        log_prob = log_prob + jnp.where(finished, 0.0, gained)
        tokens = tokens.at[:, step].set(token)
        finished = finished | (token == eos_id) | (step + 1 >= limit)
        return step + 1, token, tokens, log_prob, finished, cache

    state = (jnp.array(0, jnp.int32), jnp.full((batch_size,), bos_id, jnp.int32),
             jnp.full((batch_size, max_length), pad_id, jnp.int32),
             jnp.zeros((batch_size,), jnp.float32), limit <= 0, cache)
    _, _, tokens, log_prob, _, _ = jax.lax.while_loop(cond, body, state)
    return tokens, log_prob


def gather_beams(tree, parents, batch_size: int, beam_size: int):
    """Reorders the rows of every array in ``tree`` (``[batch * beam, ...]``, example-major) so
    that new beam ``j`` of example ``i`` takes the row of beam ``parents[i, j]``. Scalars pass."""
    rows = jnp.arange(batch_size)[:, None]

    def gather(x):
        if jnp.ndim(x) == 0:
            return x
        x = x.reshape(batch_size, beam_size, *x.shape[1:])[rows, parents]
        return x.reshape(batch_size * beam_size, *x.shape[2:])

    return jax.tree_util.tree_map(gather, tree)


def beam_search(tokens_to_logits: TokensToLogits, cache, *, batch_size: int, beam_size: int,
                max_length: int, bos_id: int, eos_id: int, alpha: float = 0.6,
                pad_id: int = PAD_ID, row_max_length=None):
    """Beam search with the GNMT length penalty, example ``i`` limited to ``row_max_length[i]``
    tokens (module docstring).

    ``cache`` has ``batch_size * beam_size`` rows, example-major (row ``r`` is beam
    ``r % beam_size`` of example ``r // beam_size``), e.g. made from an encoding repeated with
    ``jnp.repeat(x, beam_size, axis=0)``.

    Returns ``tokens`` ``[batch, beam, max_length]`` int32 (padding after EOS or after the
    example's limit) and ``scores`` ``[batch, beam]`` float32 (length-normalised
    log-probabilities), best first. Slots with a score near
    ``NEG_INF`` (or -inf) hold no real hypothesis (only when there are fewer than ``beam_size``).
    """
    if alpha < 0:
        raise ValueError(f"alpha={alpha} must be >= 0")
    b, k = batch_size, beam_size
    limit = _row_limits(row_max_length, b, max_length)[:, None]                  # [b, 1]

    def cond(state):
        step, _, _, _, _, finished, _ = state
        return (step < max_length) & ~jnp.all(finished)

    def body(state):
        step, last, tokens, log_prob, length, finished, cache = state
        logits, cache = tokens_to_logits(last.reshape(b * k, 1), cache)
        logp = _log_probs(logits, pad_id).reshape(b, k, -1)                      # [b, k, V]
        vocab = logp.shape[-1]
        # Unfinished beams: every extension. Finished beams: one candidate, themselves padded.
        is_pad = jnp.arange(vocab) == pad_id
        carried = jnp.where(is_pad, log_prob[..., None], -jnp.inf)
        candidate = jnp.where(finished[..., None], carried, log_prob[..., None] + logp)
        candidate_length = jnp.where(finished, length, step + 1)                 # [b, k]
        score = candidate / length_penalty(candidate_length, alpha)[..., None]
        _, best = jax.lax.top_k(score.reshape(b, k * vocab), k)                  # [b, k]
        parents, token = best // vocab, (best % vocab).astype(jnp.int32)
        rows = jnp.arange(b)[:, None]
        log_prob = candidate.reshape(b, k * vocab)[rows, best]
        length = candidate_length[rows, parents]
        # At its limit an example's unfinished hypotheses end as they are (length == limit).
        finished = finished[rows, parents] | (token == eos_id) | (step + 1 >= limit)
        tokens = tokens[rows, parents].at[:, :, step].set(token)
        cache = gather_beams(cache, parents, b, k)
        return step + 1, token, tokens, log_prob, length, finished, cache

    # Only beam 0 is live at first, so the first step does not pick k copies of one token.
    log_prob = jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1), jnp.float32), (b, 1))
    state = (jnp.array(0, jnp.int32), jnp.full((b, k), bos_id, jnp.int32),
             jnp.full((b, k, max_length), pad_id, jnp.int32), log_prob,
             jnp.zeros((b, k), jnp.int32), jnp.broadcast_to(limit <= 0, (b, k)), cache)
    _, _, tokens, log_prob, length, _, _ = jax.lax.while_loop(cond, body, state)
    # Hypotheses cut at the limit have length == limit here; beams are sorted by top_k.
    return tokens, log_prob / length_penalty(jnp.maximum(length, 1), alpha)


# ----------------------------------------------------------------------------------------------
# Transformer translation
# ----------------------------------------------------------------------------------------------

def init_cache(model, params, encoded, inputs, max_decode_len: int):
    """The decoding cache of a ``Transformer`` for ``inputs.shape[0]`` rows and up to
    ``max_decode_len`` steps (sized by one decoder pass over dummy targets)."""
    dummy = jnp.zeros((inputs.shape[0], max_decode_len), jnp.int32)
    _, variables = model.apply({"params": params}, encoded, inputs, dummy, decode=True,
                               method=Transformer.decode, mutable=["cache"])
    return variables["cache"]


def make_tokens_to_logits(model, params, encoded, inputs) -> TokensToLogits:
    """The search step of a ``Transformer``: one cached decoder call for the next tokens.

    ``encoded`` ``[n, s, d]`` and ``inputs`` ``[n, s]`` (for the cross-attention padding mask)
    have one row per hypothesis; the cache comes from ``init_cache`` with the same rows.
    """
    def tokens_to_logits(tokens, cache):
        logits, variables = model.apply(
            {"params": params, "cache": cache}, encoded, inputs, tokens, decode=True,
            method=Transformer.decode, mutable=["cache"])
        return logits[:, -1], variables["cache"]

    return tokens_to_logits


def predict(model, params, inputs, *, beam_size: int = 4, alpha: float = 0.6,
            max_decode_len: int, eos_id: int, bos_id: int, row_max_decode_len=None):
    """Translates ``inputs`` ``[b, s]``: encodes once, then greedy (``beam_size=1``) or beam
    search over the decoder's key/value cache.

    ``max_decode_len`` sizes the cache and the outputs; ``row_max_decode_len`` ``[b]``
    (optional) limits each example on its own, e.g. to its input length + 50 as in the paper
    (``input_length_limits``). Returns the best hypothesis per example, ``tokens``
    ``[b, max_decode_len]`` (EOS included, padding after), and its score ``[b]``
    (length-normalised log-probability for beam search, plain log-probability for greedy).
    Jit it by closing over ``model``: ``jax.jit(lambda p, x: predict(model, p, x, ...))``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    model, params = loop_layout(model, params)   # the cache is per block (scan_layers: unstack)
    batch = inputs.shape[0]
    encoded = model.apply({"params": params}, inputs, method=Transformer.encode)
    if beam_size > 1:   # one copy of every example per beam, example-major
        encoded = jnp.repeat(encoded, beam_size, axis=0)
        inputs = jnp.repeat(inputs, beam_size, axis=0)
    cache = init_cache(model, params, encoded, inputs, max_decode_len)
    tokens_to_logits = make_tokens_to_logits(model, params, encoded, inputs)
    if beam_size == 1:
        return greedy_search(tokens_to_logits, cache, batch_size=batch,
                             max_length=max_decode_len, bos_id=bos_id, eos_id=eos_id,
                             row_max_length=row_max_decode_len)
    tokens, scores = beam_search(tokens_to_logits, cache, batch_size=batch, beam_size=beam_size,
                                 max_length=max_decode_len, bos_id=bos_id, eos_id=eos_id,
                                 alpha=alpha, row_max_length=row_max_decode_len)
    return tokens[:, 0], scores[:, 0]
