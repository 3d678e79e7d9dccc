"""Beam search with the GNMT length penalty, over any model's ``tokens_to_logits`` and cache
(the interface and conventions of ``models.search``: stop tokens, padding, per-row limits).

Beam search keeps, for each example, the ``beam_size`` best hypotheses by the length-normalised
score of Wu et al. 2016 (GNMT), used by Vaswani et al. 2017 with alpha = 0.6:

    score(y) = log P(y) / lp(|y|),   lp(n) = ((5 + n) / 6) ** alpha,

where ``|y|`` counts the generated tokens, the stop token included (``penalty='power'``:
lp(n) = n ** alpha instead, Hugging Face's and fairseq's). At each step every
unfinished hypothesis is extended by every token and every finished one is carried over
unchanged (keeping its score); the best ``beam_size`` of all these candidates form the next
beam. A hypothesis still unfinished after its example's limit is kept as it is (scored with
``lp(limit)``). The search stops when all hypotheses are finished or after ``max_length`` steps.
With ``beam_size=1`` it is greedy search. ``models.beam_search_t2t`` keeps the finished
hypotheses apart from the alive ones instead (tensor2tensor's search, and Hugging Face's).

The cache holds ``batch * beam`` rows, example-major (row ``r`` is beam ``r % beam_size`` of
example ``r // beam_size``): ``repeat_rows`` makes it from a cache of one row per example.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.search import (DEFAULT_PAD_ID, TokensToLogits, is_stop, log_probs, row_limits,
                           start_tokens, stop_ids)

NEG_INF = -1.0e9   # log-probability of the empty starting beams (finite: no inf - inf)


def length_penalty(length, alpha: float):
    """Wu et al. 2016, eq. 14: lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha."""
    return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


def power_length_penalty(length, alpha: float):
    """lp(Y) = |Y|^alpha: Hugging Face's ``length_penalty`` (its beam scorers divide the summed
    log-probability by ``length ** length_penalty``) and fairseq's ``--lenpen``; alpha = 1 ranks
    hypotheses by their mean log-probability per token."""
    return jnp.asarray(length, jnp.float32) ** alpha


# beam search's penalty= -> lp(length, alpha)
LENGTH_PENALTIES = {"gnmt": length_penalty, "power": power_length_penalty}


def check_penalty(penalty: str, alpha: float) -> None:
    if penalty not in LENGTH_PENALTIES:
        raise ValueError(f"penalty={penalty!r} is not one of {list(LENGTH_PENALTIES)}")
    if alpha < 0:
        raise ValueError(f"alpha={alpha} must be >= 0")


def repeat_rows(tree, beam_size: int):
    """Every array of ``tree`` with each row repeated ``beam_size`` times, example-major
    (``jnp.repeat(x, beam_size, axis=0)``); scalars pass."""
    return jax.tree_util.tree_map(
        lambda x: x if jnp.ndim(x) == 0 else jnp.repeat(x, beam_size, axis=0), tree)


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
                max_length: int, bos_id, eos_id, alpha: float = 0.6, penalty: str = "gnmt",
                pad_id: int = DEFAULT_PAD_ID, suppress_pad: bool = True, row_max_length=None):
    """Beam search with the GNMT length penalty (or ``penalty='power'``), example ``i`` limited
    to ``row_max_length[i]`` tokens (module docstring; ``bos_id``, ``eos_id``, ``pad_id``,
    ``suppress_pad`` as in ``models.search``: ``bos_id`` one id or one per example).

    ``cache`` has ``batch_size * beam_size`` rows, example-major (``repeat_rows``).

    Returns ``tokens`` ``[batch, beam, max_length]`` int32 (padding after the stop token or after
    the example's limit) and ``scores`` ``[batch, beam]`` float32 (length-normalised
    log-probabilities), best first. Slots with a score near ``NEG_INF`` (or -inf) hold no real
    hypothesis (only when there are fewer than ``beam_size``).
    """
    check_penalty(penalty, alpha)
    lp = LENGTH_PENALTIES[penalty]
    b, k = batch_size, beam_size
    stops = stop_ids(eos_id)
    limit = row_limits(row_max_length, b, max_length)[:, None]                   # [b, 1]

    def cond(state):
        step, _, _, _, _, finished, _ = state
        return (step < max_length) & ~jnp.all(finished)

    def body(state):
        step, last, tokens, log_prob, length, finished, cache = state
        logits, cache = tokens_to_logits(last.reshape(b * k, 1), cache)
        logp = log_probs(logits, pad_id, suppress_pad).reshape(b, k, -1)         # [b, k, V]
        vocab = logp.shape[-1]
        # Unfinished beams: every extension. Finished beams: one candidate, themselves padded.
        is_pad = jnp.arange(vocab) == pad_id
        carried = jnp.where(is_pad, log_prob[..., None], -jnp.inf)
        candidate = jnp.where(finished[..., None], carried, log_prob[..., None] + logp)
        candidate_length = jnp.where(finished, length, step + 1)                 # [b, k]
        # (a row with limit 0 starts finished at length 0: power's lp(0) would be 0, 0/0 NaN)
        score = candidate / lp(jnp.maximum(candidate_length, 1), alpha)[..., None]
        _, best = jax.lax.top_k(score.reshape(b, k * vocab), k)                  # [b, k]
        parents, token = best // vocab, (best % vocab).astype(jnp.int32)
        rows = jnp.arange(b)[:, None]
        log_prob = candidate.reshape(b, k * vocab)[rows, best]
        length = candidate_length[rows, parents]
        # At its limit an example's unfinished hypotheses end as they are (length == limit).
        finished = finished[rows, parents] | is_stop(token, stops) | (step + 1 >= limit)
        tokens = tokens[rows, parents].at[:, :, step].set(token)
        cache = gather_beams(cache, parents, b, k)
        return step + 1, token, tokens, log_prob, length, finished, cache

    # Only beam 0 is live at first, so the first step does not pick k copies of one token.
    log_prob = jnp.tile(jnp.array([0.0] + [NEG_INF] * (k - 1), jnp.float32), (b, 1))
    start = jnp.broadcast_to(start_tokens(bos_id, b)[:, None], (b, k))
    state = (jnp.array(0, jnp.int32), start,
             jnp.full((b, k, max_length), pad_id, jnp.int32), log_prob,
             jnp.zeros((b, k), jnp.int32), jnp.broadcast_to(limit <= 0, (b, k)), cache)
    _, _, tokens, log_prob, length, _, _ = jax.lax.while_loop(cond, body, state)
    # Hypotheses cut at the limit have length == limit here; beams are sorted by top_k.
    return tokens, log_prob / lp(jnp.maximum(length, 1), alpha)
