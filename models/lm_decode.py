"""Decoding a decoder-only LM (``models.decoder_lm``): a batch of prompts of different lengths
is read in one call (the prefill), then the search library's per-token loop continues every row
over the key/value cache: greedy, sampling (``models.search``, ``models.sampling``) or beam
search (``models.beam_search``), with stop tokens and per-row limits.

    tokens, scores = generate(model, params, prompts, prompt_lengths, max_new_tokens=50,
                              eos_id=eos, sampling=Sampling(temperature=0.8, top_p=0.95),
                              rng=jax.random.PRNGKey(0))

Prompts of different lengths: left padding. The prompts arrive right-padded (``[b, P]`` and
their lengths, as a tokenizer gives them); ``left_align`` moves each to the right end of its
row, so that every row's last prompt token sits in slot ``P - 1``; padding carries segment id 0
(attends to nothing, never attended to) and positions count from each row's first real token,
so each row decodes exactly as it would alone. Why not per-row prefix forcing (start every row
at the shortest prompt's end and force each row's remaining prompt tokens one step at a time):
left padding reads all prompts in one model call of ``P - 1`` tokens, wide matmuls that stream
the weights once, instead of up to ``P - min(length)`` single-token steps that each stream them
again, and every later step writes one cache slot shared by all rows (the attention cache has
one index). Its price is cache room and attention work on the padding slots (at most ``P -
min(length)`` per row).

The cache: ``P + max_new_tokens - 1`` slots (the last generated token is never fed back). The
prefill writes slots ``0 .. P - 2``, every prompt but its last token, and the loop starts by
feeding each row's last prompt token (the search's start token), whose logits give the first
new token. The whole of ``generate`` is jittable end to end (close over ``model`` and the
settings): ``jax.jit(lambda p, x, n: generate(model, p, x, n, max_new_tokens=32, eos_id=2))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from models.beam_search import beam_search, repeat_rows
from models.decoder_lm import loop_layout
from models.sampling import Sampling
from models.search import DEFAULT_PAD_ID, TokensToLogits, greedy_search, sample_search


def left_align(prompts, prompt_lengths, pad_id: int = DEFAULT_PAD_ID):
    """Right-padded prompts ``[b, P]`` with their lengths ``[b]`` -> (tokens, positions,
    segment_ids), each ``[b, P]`` int32: every prompt moved to the right end of its row,
    ``pad_id`` before it with position 0 and segment id 0; its own tokens at positions
    0 .. length - 1 with segment id 1."""
    prompts = jnp.asarray(prompts, jnp.int32)
    width = prompts.shape[1]
    lengths = jnp.asarray(prompt_lengths, jnp.int32)
    source = jnp.arange(width, dtype=jnp.int32)[None, :] - (width - lengths)[:, None]
    real = source >= 0
    tokens = jnp.take_along_axis(prompts, jnp.maximum(source, 0), axis=1)
    return (jnp.where(real, tokens, pad_id), jnp.where(real, source, 0),
            real.astype(jnp.int32))


def init_cache(model, params, batch_size: int, cache_length: int):
    """An empty decoding cache of ``model`` for ``batch_size`` rows of ``cache_length`` slots.

    The cache-sizing call of ``models.decoder_lm`` writes nothing, so its zeros are made from
    the shapes alone (``jax.eval_shape``: no model pass). ValueError when a 'learned' position
    table is shorter than ``cache_length``.
    """
    dummy = jnp.zeros((batch_size, cache_length), jnp.int32)
    shapes = jax.eval_shape(lambda p: model.apply({"params": p}, dummy, decode=True,
                                                  hidden_only=True, mutable=["cache"])[1],
                            params)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes["cache"])


def prefill(model, params, cache, tokens, positions, segment_ids):
    """The cache with ``tokens`` ``[b, q]`` (their positions and segment ids) written into its
    next ``q`` slots, in one model call; the output layer is not computed."""
    _, variables = model.apply({"params": params, "cache": cache}, tokens, positions=positions,
                               segment_ids=segment_ids, decode=True, hidden_only=True,
                               mutable=["cache"])
    return variables["cache"]


def make_tokens_to_logits(model, params) -> TokensToLogits:
    """The search step of a ``DecoderLM``: the next tokens ``[n, 1]`` go into the cache at each
    row's next position; returns their logits ``[n, vocab]`` and the new cache."""
    def tokens_to_logits(tokens, cache):
        logits, variables = model.apply({"params": params, "cache": cache}, tokens, decode=True,
                                        mutable=["cache"])
        return logits[:, -1], variables["cache"]

    return tokens_to_logits


def _check_lengths(prompt_lengths, batch: int, width: int):
    if jnp.shape(prompt_lengths) != (batch,):
        raise ValueError(f"prompt_lengths has shape {jnp.shape(prompt_lengths)}; expected "
                         f"({batch},), one length per prompt")
    if isinstance(prompt_lengths, jax.core.Tracer):
        return   # traced under jit: the values are not known here
    lengths = np.asarray(prompt_lengths)
    if lengths.min() < 1 or lengths.max() > width:
        raise ValueError(f"prompt_lengths {lengths.tolist()} must lie in [1, {width}]: every "
                         "prompt needs at least one token (e.g. BOS) and fits its row")


def generate(model, params, prompts, prompt_lengths=None, *, max_new_tokens: int,
             eos_id: int | Sequence[int], pad_id: int = DEFAULT_PAD_ID, suppress_pad: bool = True,
             beam_size: int = 1, alpha: float = 0.6, sampling: Sampling | None = None, rng=None,
             row_max_new_tokens=None):
    """Continues each prompt by up to ``max_new_tokens`` tokens (module docstring).

    ``prompts`` ``[b, P]`` right-padded, ``prompt_lengths`` ``[b]`` (None: all ``P``; each at
    least 1). Greedy by default; ``sampling`` (with a ``rng`` key) draws the tokens;
    ``beam_size > 1`` runs beam search with the length penalty ``alpha``. ``eos_id`` (one or
    several stop tokens), ``pad_id``, ``suppress_pad`` and ``row_max_new_tokens`` ``[b]`` as in
    ``models.search`` (a vocabulary without a padding token, such as GPT-2's, passes
    ``suppress_pad=False``). Returns the new tokens ``[b, max_new_tokens]`` int32 (the stop
    token included, ``pad_id`` after it) and their scores ``[b]`` (log-probability; for beam
    search length-normalised), the best beam for beam search.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1")
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    if sampling is not None and beam_size != 1:
        raise ValueError(f"sampling draws one continuation per prompt: use beam_size=1, not "
                         f"{beam_size}")
    model, params = loop_layout(model, params)   # the cache is per block (scan_layers: unstack)
    prompts = jnp.asarray(prompts, jnp.int32)
    batch, width = prompts.shape
    if prompt_lengths is None:
        prompt_lengths = jnp.full((batch,), width, jnp.int32)
    _check_lengths(prompt_lengths, batch, width)
    tokens, positions, segment_ids = left_align(prompts, prompt_lengths, pad_id)
    cache = init_cache(model, params, batch, width + max_new_tokens - 1)
    if width > 1:
        cache = prefill(model, params, cache, tokens[:, :-1], positions[:, :-1],
                        segment_ids[:, :-1])
    step = make_tokens_to_logits(model, params)
    search = dict(max_length=max_new_tokens, bos_id=tokens[:, -1], eos_id=eos_id, pad_id=pad_id,
                  suppress_pad=suppress_pad, row_max_length=row_max_new_tokens)
    if sampling is not None:
        return sample_search(step, cache, sampling, rng, batch_size=batch, **search)
    if beam_size == 1:
        return greedy_search(step, cache, batch_size=batch, **search)
    new, scores = beam_search(step, repeat_rows(cache, beam_size), batch_size=batch,
                              beam_size=beam_size, alpha=alpha, **search)
    return new[:, 0], scores[:, 0]
