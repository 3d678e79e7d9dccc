"""What a language model's loss means in the units people compare: perplexity and bits per byte.

  perplexity      exp(mean negative log-likelihood per token, in nats): the effective number of
                  equally likely next tokens (Jelinek et al. 1977). It depends on the tokenizer:
                  a vocabulary with longer tokens has fewer, harder predictions.
  bits per byte   total negative log-likelihood in bits over the UTF-8 bytes of the text scored,
                  nats / (ln 2 x bytes) (the unit of text compression; Graves 2013, "Generating
                  Sequences With Recurrent Neural Networks", Sec. 3.1, reports Hutter Prize
                  Wikipedia in it): the same text costs the same number of bytes under every
                  tokenizer, so models with different vocabularies compare on it.

Both are computed on the host from sums (train/tasks/causal_lm.py sums the nats per token and
per byte; train/kneser_ney.py the baseline's), so one formula serves both.
"""

from __future__ import annotations

import math

MAX_NLL = 50.0  # exp(50) ~ 5e21: past it a perplexity says nothing (an untrained model)


def perplexity(nll_per_token: float) -> float:
    """exp(mean nats per token), capped at exp(MAX_NLL)."""
    return float(math.exp(min(nll_per_token, MAX_NLL)))


def bits_per_byte(nats_per_byte: float) -> float:
    """Mean nats per UTF-8 byte of the scored text, in bits: nats / ln 2."""
    return float(nats_per_byte / math.log(2.0))
