"""Which token to emit from next-token logits: the most probable one, or a draw from the model's
distribution reshaped by temperature, top-k and top-p (nucleus) filtering.

Drawing from the model's own distribution (ancestral sampling) lets the long tail of unlikely
tokens in, a few at a time, and the text degenerates; always taking the most probable token
(greedy) repeats itself. The three usual reshapings sit between them and are applied in this
order (Hugging Face's order too), each to the result of the one before:

  temperature  ``p_i ~ exp(z_i / T)`` (the Boltzmann distribution at temperature T; Ackley,
               Hinton & Sejnowski 1985). ``T < 1`` sharpens, ``T > 1`` flattens, and as ``T -> 0``
               it tends to the argmax: ``temperature=0`` means greedy here.
  top-k        keep the ``k`` most probable tokens and renormalise (Fan, Lewis & Dauphin 2018,
               "Hierarchical Neural Story Generation"). ``top_k=0`` keeps all.
  top-p        keep the smallest set of most probable tokens whose probabilities sum to at least
               ``p`` and renormalise (nucleus sampling; Holtzman et al. 2020, "The Curious Case
               of Neural Text Degeneration", Sec. 3.1, eqs. 2-3). ``top_p=1`` keeps all.

Ties: the filters compare each logit with the last kept one, so a token tied with it is kept too
(with distinct logits exactly ``k`` tokens, or exactly the nucleus, remain).

Every setting is a Python number (static under ``jax.jit``); the draws take a ``jax.random`` key.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp


FLOAT32_TINY = float(jnp.finfo(jnp.float32).tiny)  # the least temperature a device divides by


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How to draw each token: ``temperature`` (0 = greedy), ``top_k`` (0 = off), ``top_p``
    (1 = off); module docstring."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"temperature={self.temperature!r} must be a finite number >= 0 "
                             "(0 = greedy)")
        if 0 < self.temperature < FLOAT32_TINY:  # XLA flushes it to 0: logits / 0
            raise ValueError(f"temperature={self.temperature!r} is below float32's smallest "
                             f"normal number ({FLOAT32_TINY:.3g}), which the devices read as 0: "
                             "use 0 for greedy decoding")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k={self.top_k!r} must be an integer >= 0 (0 = keep every "
                             "token)")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1] (1 = keep every token)")

    @property
    def greedy(self) -> bool:
        """Temperature 0: the argmax, no draw."""
        return self.temperature == 0


def filter_logits(logits, sampling: Sampling):
    """float32 logits ``[..., vocab]`` of the reshaped distribution: shifted by their maximum
    (which changes no probability) and divided by the temperature, ``-inf`` outside the top-k
    and the nucleus (module docstring). Not for ``temperature=0``."""
    if sampling.greedy:
        raise ValueError("temperature=0 is greedy decoding: there is no distribution to filter")
    z = jnp.asarray(logits, jnp.float32)
    # The most probable token at 0 before the division (the distribution is the same): a tiny
    # temperature then sends the others to -inf, never every token (nor the best to +inf).
    z = (z - jnp.max(z, axis=-1, keepdims=True)) / jnp.float32(sampling.temperature)
    vocab = z.shape[-1]
    k = min(sampling.top_k, vocab) if sampling.top_k else vocab
    if k == vocab and sampling.top_p == 1:
        return z
    ranked = jax.lax.top_k(z, k)[0]                                   # [..., k] descending
    if k < vocab:
        # Fan et al. 2018: keep the k most probable tokens.
        z = jnp.where(z >= ranked[..., k - 1:], z, -jnp.inf)
    if sampling.top_p < 1:
        # Holtzman et al. 2020, eq. 2: the smallest prefix of the ranked tokens with mass >= p.
        # Token i is in it when the mass ranked before it is still < p (the first always is).
        # Ranked over what top-k kept, every token tied with its k-th included (so all of the
        # vocabulary is sorted: those ties can run past k).
        ranked = jnp.sort(z, axis=-1)[..., ::-1] if k < vocab else ranked
        probs = jax.nn.softmax(ranked, axis=-1)                       # top-k renormalised
        before = jnp.cumsum(probs, axis=-1) - probs
        count = jnp.sum(before < sampling.top_p, axis=-1, keepdims=True)
        threshold = jnp.take_along_axis(ranked, jnp.maximum(count, 1) - 1, axis=-1)
        z = jnp.where(z >= threshold, z, -jnp.inf)
    return z


def sampling_probabilities(logits, sampling: Sampling):
    """The distribution tokens are drawn from, ``[..., vocab]`` float32 (eq. 3 of Holtzman et al.
    2020: the kept probabilities renormalised); temperature 0 puts all mass on the argmax."""
    if sampling.greedy:
        logits = jnp.asarray(logits)
        return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)
    return jax.nn.softmax(filter_logits(logits, sampling), axis=-1)


def choose_tokens(logits, sampling: Sampling | None, rng=None):
    """int32 tokens ``[...]`` from logits ``[..., vocab]``: the argmax when ``sampling`` is None
    or greedy, else one independent draw per row from ``sampling_probabilities`` with ``rng``."""
    if sampling is None or sampling.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if rng is None:
        raise ValueError("sampling needs a jax.random key (rng)")
    return jax.random.categorical(rng, filter_logits(logits, sampling), axis=-1).astype(jnp.int32)
