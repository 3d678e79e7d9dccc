"""Beam search that keeps the alive and the finished hypotheses apart: tensor2tensor's
(Vaswani et al. 2018, the code of "Attention Is All You Need"), as Flax's examples/wmt
``decode.py`` and Hugging Face's Flax ``generate`` run it. Same interface and conventions as
``models.beam_search`` (``tokens_to_logits``, stop tokens, padding, per-row limits).

Each example keeps ``k`` alive hypotheses, ranked by their log-probability, and ``k`` finished
ones, ranked by their length-normalised score ``log P(y) / lp(|y|)`` (``penalty``: 'power',
``|y| ** alpha``, Hugging Face's; 'gnmt', Wu et al. 2016). A step extends every alive hypothesis
by every token and takes the ``2k`` most probable extensions (so that ``k`` remain even when
``k`` of them just ended): those that end (a stop token) compete with the finished ones for the
``k`` finished places, the others are the next ``k`` alive ones. In ``models.beam_search`` a
finished hypothesis instead keeps one of the ``k`` beams, so fewer alive ones are extended; the
two searches can end with different translations.

When the search stops (``early_stopping``, Hugging Face's settings):
  False    (its default) when no example's best alive hypothesis, normalised by its length now,
           beats that example's worst finished one (or an example has fewer than ``k``);
  True     as soon as every example has ``k`` finished hypotheses;
  'never'  as False, but the best alive hypothesis normalised by the longest length it could
           reach (its limit) when ``alpha > 0``: the bound that makes the search exact.
and always at ``max_length`` steps. As in Hugging Face's search (and unlike the per-example
stopping of ``models.beam_search``), the whole batch runs until no example can improve, and
every example is updated at every step. ``force_eos`` (Hugging Face's ``forced_eos_token_id``,
on in every Marian config) ends each hypothesis still alive at its example's last step with the
(first) stop token, at log-probability 0. An example that finishes no hypothesis returns its
alive ones.

The padding token is never generated (``suppress_pad``): its logit is removed before the
softmax, as Hugging Face's Marian does (``models.search.log_probs(renormalise=True)``). With a
model's logits within float32 rounding of Hugging Face's, this gives the same translations as
``FlaxMarianMTModel.generate(num_beams=k, length_penalty=alpha, early_stopping=...)``
(tests/test_marian_generate.py); the constant -1e7 that marks an empty or excluded place is
theirs too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.beam_search import LENGTH_PENALTIES, check_penalty, gather_beams
from models.search import (DEFAULT_PAD_ID, TokensToLogits, is_stop, log_probs, row_limits,
                           start_tokens, stop_ids)

EXCLUDED = -1.0e7   # added to a candidate that may not take a place (Hugging Face's constant)
EARLY_STOPPING = (False, True, "never")


def _gather(x, rows, index):
    """``x[b, index[b, j], ...]`` for index ``[b, n]``."""
    return x[rows, index]


def beam_search_t2t(tokens_to_logits: TokensToLogits, cache, *, batch_size: int,
                    beam_size: int, max_length: int, bos_id, eos_id, alpha: float = 1.0,
                    penalty: str = "power", early_stopping: bool | str = False,
                    force_eos: bool = False, pad_id: int = DEFAULT_PAD_ID,
                    suppress_pad: bool = True, row_max_length=None):
    """The alive/finished beam search (module docstring), example ``i`` limited to
    ``row_max_length[i]`` tokens. ``cache`` has ``batch_size * beam_size`` rows, example-major
    (``models.beam_search.repeat_rows``).

    Returns ``tokens`` ``[batch, beam, max_length]`` int32 (padding after the stop token) and
    ``scores`` ``[batch, beam]`` float32, best first: the finished hypotheses and their
    normalised scores, or for an example that finished none its alive hypotheses, normalised
    by their length. Places with a score near -1e7 or below hold no hypothesis.
    """
    check_penalty(penalty, alpha)
    if early_stopping not in EARLY_STOPPING:
        raise ValueError(f"early_stopping={early_stopping!r} is not one of {list(EARLY_STOPPING)}")
    b, k = batch_size, beam_size
    lp = LENGTH_PENALTIES[penalty]
    stops = stop_ids(eos_id)
    limit = row_limits(row_max_length, b, max_length)                           # [b]
    rows = jnp.arange(b)[:, None]

    def improvable(step, alive_logp, finished_score, finished):
        """[b]: whether the example's best alive hypothesis could still take a finished place."""
        if early_stopping == "never" and alpha > 0.0:
            bound = lp(limit, alpha)[:, None]
        else:
            bound = lp(step, alpha)
        best_alive = alive_logp[:, :1] / bound
        worst = jnp.where(finished, jnp.min(finished_score, axis=1, keepdims=True), EXCLUDED)
        return jnp.any(best_alive > worst, axis=1)

    def cond(state):
        step, _, alive_logp, _, finished_score, finished, _ = state
        going = jnp.any((step < limit) & improvable(step, alive_logp, finished_score, finished))
        if early_stopping is True:
            going &= ~jnp.all(finished)
        return (step == 0) | going   # the first step always runs (lp(0) = 0 for 'power')

    def body(state):
        step, alive, alive_logp, finished_seq, finished_score, finished, cache = state
        last = alive[:, :, jnp.maximum(step - 1, 0)]
        last = jnp.where(step == 0, start_tokens(bos_id, b)[:, None], last)
        logits, new_cache = tokens_to_logits(last.reshape(b * k, 1), cache)
        logp = log_probs(logits, pad_id, suppress_pad, renormalise=True).reshape(b, k, -1)
        vocab = logp.shape[-1]
        if force_eos:  # the example's last step: only the stop token, at log-probability 0
            forced = jnp.where(jnp.arange(vocab) == stops[0], 0.0, -jnp.inf)
            logp = jnp.where((step == limit - 1)[:, None, None], forced, logp)
        candidate = (logp + alive_logp[..., None]).reshape(b, k * vocab)
        top_logp, top = jax.lax.top_k(candidate, 2 * k)                          # [b, 2k]
        parents, token = top // vocab, (top % vocab).astype(jnp.int32)
        top_seq = _gather(alive, rows, parents).at[:, :, step].set(token)         # [b, 2k, L]
        ended = is_stop(token, stops)
        # The next alive ones: the k best that did not just end.
        running = top_logp + ended * EXCLUDED
        keep = jax.lax.top_k(running, k)[1]
        new_alive, new_alive_logp = _gather(top_seq, rows, keep), _gather(running, rows, keep)
        # The finished ones: the k best of those kept and those just ended, by normalised score.
        score = top_logp / lp(step + 1, alpha)
        full = jnp.all(finished, axis=1, keepdims=True) & (early_stopping is True)
        score = score + (~ended | full) * EXCLUDED
        merged_seq = jnp.concatenate([finished_seq, top_seq], axis=1)
        merged_score = jnp.concatenate([finished_score, score], axis=1)
        merged_finished = jnp.concatenate([finished, ended], axis=1)
        best = jax.lax.top_k(merged_score, k)[1]
        new_finished_seq = _gather(merged_seq, rows, best)
        new_finished_score = _gather(merged_score, rows, best)
        new_finished = _gather(merged_finished, rows, best)
        new_cache = gather_beams(new_cache, _gather(parents, rows, keep), b, k)
        # An example past its limit keeps what it had.
        active = step < limit                                                    # [b]

        def pick(new, old):
            return jnp.where(active.reshape(-1, *([1] * (new.ndim - 1))), new, old)

        return (step + 1, pick(new_alive, alive), pick(new_alive_logp, alive_logp),
                pick(new_finished_seq, finished_seq), pick(new_finished_score, finished_score),
                pick(new_finished, finished), new_cache)

    # Only the first alive place holds a hypothesis at first (the empty one).
    alive_logp = jnp.tile(jnp.array([0.0] + [EXCLUDED] * (k - 1), jnp.float32), (b, 1))
    empty = jnp.full((b, k, max_length), pad_id, jnp.int32)
    state = (jnp.array(0, jnp.int32), empty, alive_logp, empty,
             jnp.full((b, k), EXCLUDED, jnp.float32), jnp.zeros((b, k), bool), cache)
    step, alive, alive_logp, finished_seq, finished_score, finished, _ = jax.lax.while_loop(
        cond, body, state)
    any_finished = jnp.any(finished, axis=1)
    length = jnp.maximum(jnp.minimum(step, limit), 1)[:, None]
    tokens = jnp.where(any_finished[:, None, None], finished_seq, alive)
    scores = jnp.where(any_finished[:, None], finished_score, alive_logp / lp(length, alpha))
    return tokens, scores
