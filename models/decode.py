"""Decoding the encoder-decoder Transformer (``models.transformer``): encode the source once,
then greedy search, sampling or beam search over the decoder's key/value cache.

The searches are the model-agnostic library shared with the decoder-only LM
(``models.lm_decode``): ``models.search`` (the per-token loop: greedy and sampling, stop tokens,
per-row limits), ``models.sampling`` (temperature, top-k, top-p), ``models.beam_search`` (the
GNMT length penalty) and ``models.beam_search_t2t`` (alive and finished hypotheses apart, as
tensor2tensor and Hugging Face search). This file builds their ``tokens_to_logits`` step and
cache for a ``Transformer``: every search starts from BOS (from PAD_ID for a model with
``decoder_start='pad'``, Marian's), padding (``PAD_ID``) is never generated.

Limits per row: Vaswani et al. 2017 (Sec. 6.1) let each sentence run to its input length + 50:
``input_length_limits`` gives ``row_max_decode_len``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from models.beam_search import beam_search
from models.beam_search_t2t import beam_search_t2t
from models.sampling import Sampling
from models.search import TokensToLogits, greedy_search, sample_search
from models.transformer import PAD_ID, Transformer, loop_layout


def input_length_limits(inputs, extra: int, max_length: int, pad_id: int = PAD_ID):
    """Vaswani et al. 2017, Sec. 6.1: each sentence's maximum output length is its input length
    + ``extra`` (50), here capped at ``max_length``. ``inputs`` ``[b, s]``: one sentence a row,
    padded with ``pad_id``; the length counts its real tokens (EOS included, as the output's
    count includes the EOS it generates). Returns ``[b]`` int32."""
    length = jnp.sum(jnp.asarray(inputs) != pad_id, axis=-1, dtype=jnp.int32)
    return jnp.minimum(length + extra, max_length)


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


BEAM_SEARCHES = ("pooled", "t2t")


def predict(model, params, inputs, *, beam_size: int = 4, alpha: float = 0.6,
            max_decode_len: int, eos_id: int | Sequence[int], bos_id: int,
            row_max_decode_len=None, sampling: Sampling | None = None, rng=None,
            search: str = "pooled", penalty: str = "gnmt", early_stopping: bool | str = False,
            force_eos: bool = False):
    """Translates ``inputs`` ``[b, s]``: encodes once, then greedy (``beam_size=1``), beam
    search or, with ``sampling`` (``models.sampling``; ``beam_size=1``, a ``rng`` key), sampling
    over the decoder's key/value cache. ``eos_id``: one stop token or several; ``bos_id`` the
    decoder's first input (``model.config.start_id(tokenizer_bos)``).

    Beam search: ``search`` 'pooled' (``models.beam_search``: finished hypotheses keep their
    beam) or 't2t' (``models.beam_search_t2t``: alive and finished apart, with its
    ``early_stopping`` and ``force_eos``); ``penalty`` 'gnmt' (Wu et al. 2016) or 'power'
    (``length ** alpha``). Hugging Face's Marian ``generate(num_beams=k, length_penalty=a)`` is
    ``search='t2t', penalty='power', alpha=a, force_eos=True``.

    ``max_decode_len`` sizes the cache and the outputs; ``row_max_decode_len`` ``[b]``
    (optional) limits each example on its own, e.g. to its input length + 50 as in the paper
    (``input_length_limits``). Returns the best hypothesis per example, ``tokens``
    ``[b, max_decode_len]`` (EOS included, padding after), and its score ``[b]``
    (length-normalised log-probability for beam search, plain log-probability otherwise).
    Jit it by closing over ``model``: ``jax.jit(lambda p, x: predict(model, p, x, ...))``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size} must be >= 1")
    if sampling is not None and beam_size != 1:
        raise ValueError(f"sampling draws one hypothesis per example: use beam_size=1, not "
                         f"{beam_size}")
    if search not in BEAM_SEARCHES:
        raise ValueError(f"search={search!r} is not one of {list(BEAM_SEARCHES)}")
    if search == "pooled" and (early_stopping is not False or force_eos):
        raise ValueError("early_stopping and force_eos belong to search='t2t' (the pooled "
                         "search stops when every hypothesis has ended)")
    if beam_size == 1 and (early_stopping is not False or force_eos):
        raise ValueError("early_stopping and force_eos belong to the t2t beam search: greedy "
                         "decoding and sampling (beam_size=1) would ignore them; leave them "
                         "unset or use beam_size > 1")
    if (bos_id == PAD_ID) != (model.config.decoder_start == "pad"):
        raise ValueError(f"bos_id={bos_id} does not start a decoder with decoder_start="
                         f"{model.config.decoder_start!r}; pass model.config.start_id(bos_id)")
    model, params = loop_layout(model, params)   # the cache is per block (scan_layers: unstack)
    batch = inputs.shape[0]
    encoded = model.apply({"params": params}, inputs, method=Transformer.encode)
    if beam_size > 1:   # one copy of every example per beam, example-major
        encoded = jnp.repeat(encoded, beam_size, axis=0)
        inputs = jnp.repeat(inputs, beam_size, axis=0)
    cache = init_cache(model, params, encoded, inputs, max_decode_len)
    tokens_to_logits = make_tokens_to_logits(model, params, encoded, inputs)
    limits = dict(max_length=max_decode_len, bos_id=bos_id, eos_id=eos_id, pad_id=PAD_ID,
                  row_max_length=row_max_decode_len)
    if sampling is not None:
        return sample_search(tokens_to_logits, cache, sampling, rng, batch_size=batch, **limits)
    if beam_size == 1:
        return greedy_search(tokens_to_logits, cache, batch_size=batch, **limits)
    if search == "t2t":
        tokens, scores = beam_search_t2t(tokens_to_logits, cache, batch_size=batch,
                                         beam_size=beam_size, alpha=alpha, penalty=penalty,
                                         early_stopping=early_stopping, force_eos=force_eos,
                                         **limits)
    else:
        tokens, scores = beam_search(tokens_to_logits, cache, batch_size=batch,
                                     beam_size=beam_size, alpha=alpha, penalty=penalty, **limits)
    return tokens[:, 0], scores[:, 0]
