"""The loop of autoregressive decoding, one token per step for every row: greedy search and
sampling. Shared by every model (``models.decode`` for the encoder-decoder Transformer,
``models.lm_decode`` for the decoder-only LM); beam search is ``models.beam_search``.

The searches know nothing about the model. They call

    tokens_to_logits(tokens [n, 1] int32, cache) -> (logits [n, vocab], new_cache)

once per generated token, where ``tokens`` are the previous tokens (the start token at the first
step: BOS, or the last token of each prompt) and ``cache`` is any pytree whose arrays have ``n``
rows first (scalars, such as a cache index, are left alone). The whole search is one
``jax.lax.while_loop``: the cache keeps its shape, nothing is compiled per token and nothing
returns to the host until the end, so it runs under ``jax.jit`` as one program.

Conventions, the same in every search:
  - Stop tokens (``eos_id``: one id or several): a row ends with the first stop token it emits,
    which is included in the output; every later position is padding (``pad_id``).
  - ``suppress_pad=True``: the padding token is never generated (its logit is ignored, since
    training never scores it: the project's vocabularies). A vocabulary without a padding token
    of its own (GPT-2's) passes ``suppress_pad=False`` and a ``pad_id`` to fill with.
  - Outputs hold the generated tokens only (no start token, no prompt).
  - Limits per row: ``max_length`` (static: the width of the outputs and the most steps run) and
    optionally ``row_max_length`` ``[batch]``: row ``i`` generates at most ``row_max_length[i]``
    tokens (values above ``max_length`` act as ``max_length``), then only padding, exactly as if
    it were decoded alone with ``max_length=row_max_length[i]``. The search stops when every row
    has ended.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, Callable

import jax
import jax.numpy as jnp

from models.sampling import Sampling, choose_tokens

DEFAULT_PAD_ID = 0   # the project's vocabularies pad with 0

TokensToLogits = Callable[[jax.Array, Any], tuple[jax.Array, Any]]


def stop_ids(eos_id: int | Sequence[int]) -> jax.Array:
    """The stop tokens as a 1-D int32 array, from one id or a non-empty sequence of ids."""
    ids = [eos_id] if isinstance(eos_id, numbers.Integral) else list(eos_id)
    if not ids or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0
                          for i in ids):
        raise ValueError(f"eos_id={eos_id!r}: give one token id or a non-empty sequence of "
                         "token ids (integers >= 0)")
    return jnp.asarray([int(i) for i in ids], jnp.int32)


def is_stop(tokens, stops) -> jax.Array:
    """Whether each token is one of the stop tokens ``stops`` (``stop_ids``)."""
    return jnp.any(tokens[..., None] == stops, axis=-1)


def row_limits(row_max_length, batch_size: int, max_length: int):
    """Each row's step limit, [batch] int32 in [0, max_length] (None: max_length for all)."""
    if row_max_length is None:
        return jnp.full((batch_size,), max_length, jnp.int32)
    limit = jnp.asarray(row_max_length, jnp.int32)
    if limit.shape != (batch_size,):
        raise ValueError(f"row_max_length has shape {limit.shape}; expected ({batch_size},), one "
                         "limit per example")
    return jnp.clip(limit, 0, max_length)


def start_tokens(bos_id, batch_size: int):
    """The tokens fed at the first step, [batch] int32: one id for every row (BOS) or one per row
    (the last token of each prompt)."""
    start = jnp.asarray(bos_id, jnp.int32)
    if start.ndim == 0:
        return jnp.full((batch_size,), start, jnp.int32)
    if start.shape != (batch_size,):
        raise ValueError(f"bos_id has shape {start.shape}; give one id or ({batch_size},), one "
                         "start token per row")
    return start


def log_probs(logits, pad_id: int, suppress_pad: bool, renormalise: bool = False):
    """float32 log-softmax of ``logits`` ``[..., vocab]``; the padding token's is -inf when
    ``suppress_pad`` (it is never chosen). ``renormalise``: the padding logit is removed before
    the softmax, so the other tokens' probabilities sum to 1 (Hugging Face's Marian); otherwise
    after it, the others keep the probabilities the model gives them."""
    logits = logits.astype(jnp.float32)
    is_pad = jnp.arange(logits.shape[-1]) == pad_id
    if suppress_pad and renormalise:
        return jax.nn.log_softmax(jnp.where(is_pad, -jnp.inf, logits), axis=-1)
    logp = jax.nn.log_softmax(logits, axis=-1)
    if not suppress_pad:
        return logp
    return jnp.where(is_pad, -jnp.inf, logp)


def greedy_search(tokens_to_logits: TokensToLogits, cache, *, batch_size: int, max_length: int,
                  bos_id, eos_id, pad_id: int = DEFAULT_PAD_ID, suppress_pad: bool = True,
                  row_max_length=None):
    """The most probable next token at every step (module docstring for the arguments).

    Returns ``tokens`` ``[batch, max_length]`` int32 (the stop token included, padding after it
    or after the row's limit) and their summed log-probabilities ``[batch]`` float32.
    """
    return sample_search(tokens_to_logits, cache, Sampling(temperature=0.0), None,
                         batch_size=batch_size, max_length=max_length, bos_id=bos_id,
                         eos_id=eos_id, pad_id=pad_id, suppress_pad=suppress_pad,
                         row_max_length=row_max_length)


def sample_search(tokens_to_logits: TokensToLogits, cache, sampling: Sampling, rng, *,
                  batch_size: int, max_length: int, bos_id, eos_id,
                  pad_id: int = DEFAULT_PAD_ID, suppress_pad: bool = True, row_max_length=None):
    """Each next token drawn as ``sampling`` says (``models.sampling``; temperature 0 is
    greedy), with the key ``jax.random.fold_in(rng, step)`` at each step.

    Returns ``tokens`` ``[batch, max_length]`` int32 as ``greedy_search`` and the summed
    log-probabilities of the drawn tokens under the model itself (temperature 1, unfiltered:
    the score of the text, not of the draw) ``[batch]`` float32.
    """
    if not sampling.greedy and rng is None:
        raise ValueError("sampling needs a jax.random key (rng)")
    stops = stop_ids(eos_id)
    limit = row_limits(row_max_length, batch_size, max_length)

    def cond(state):
        step, _, _, _, finished, _ = state
        return (step < max_length) & ~jnp.all(finished)

    def body(state):
        step, last, tokens, log_prob, finished, cache = state
        logits, cache = tokens_to_logits(last[:, None], cache)
        logp = log_probs(logits, pad_id, suppress_pad)                           # [b, V]
        key = None if sampling.greedy else jax.random.fold_in(rng, step)
        token = jnp.where(finished, pad_id, choose_tokens(logp, sampling, key))
        gained = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
        log_prob = log_prob + jnp.where(finished, 0.0, gained)
        tokens = tokens.at[:, step].set(token)
        finished = finished | is_stop(token, stops) | (step + 1 >= limit)
        return step + 1, token, tokens, log_prob, finished, cache

    state = (jnp.array(0, jnp.int32), start_tokens(bos_id, batch_size),
             jnp.full((batch_size, max_length), pad_id, jnp.int32),
             jnp.zeros((batch_size,), jnp.float32), limit <= 0, cache)
    _, _, tokens, log_prob, _, _ = jax.lax.while_loop(cond, body, state)
    return tokens, log_prob
