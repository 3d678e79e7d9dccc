"""The output layers compute in the model's dtype but hand the softmax float32 logits that were
never rounded to it: in bfloat16 the logits are the float32 product of the bfloat16 hidden
states and weights (tied or not), for the decoder-only LM, the Transformer and BERT's MLM head.
Rounded to bfloat16 first, every logit would be one of bfloat16's values (steps of 1/128 of its
scale), a per-token error of the loss of about 0.02 nats at GPT-2's vocabulary."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_bert import tiny as tiny_bert
from tiny_lm import VOCAB, random_params, tiny as tiny_lm, tokens
from tiny_transformer import init, tiny as tiny_transformer, words

from models.bert_pretraining import MlmHead
from models.decoder_lm import DecoderLM
from models.transformer import Transformer

BF16 = jnp.bfloat16


def _unrounded(logits) -> bool:
    """Whether some float32 logit is not a bfloat16 value (a rounded output would all be)."""
    logits = np.asarray(logits)
    assert logits.dtype == np.float32
    return bool(np.any(logits != np.asarray(jnp.asarray(logits).astype(BF16).astype(jnp.float32))))


@pytest.mark.parametrize("tied", [True, False])
def test_the_lm_s_logits_are_the_float32_product_of_its_bf16_factors(tied):
    cfg = tiny_lm(dtype="bfloat16", tie_embeddings=tied)
    params = random_params(tiny_lm(tie_embeddings=tied))
    x = tokens(np.random.default_rng(0), 2, 8)
    model = DecoderLM(cfg)
    logits = model.apply({"params": params}, x)
    hidden = model.apply({"params": params}, x, hidden_only=True).astype(BF16)
    table = params["embedding"]["embedding"] if tied else params["logits"]["kernel"].T
    expected = np.asarray(hidden, np.float32) @ np.asarray(jnp.asarray(table).astype(BF16),
                                                           np.float32).T
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    assert _unrounded(logits) and logits.shape == (2, 8, VOCAB)


@pytest.mark.parametrize("tied", [True, False])
def test_the_transformer_s_logits_are_not_rounded_to_bf16(tied):
    rng = np.random.default_rng(1)
    inputs, targets = words(rng, 2, 7), words(rng, 2, 9)
    variables = init(tiny_transformer(tie_output=tied), inputs, targets)
    logits = Transformer(tiny_transformer(dtype="bfloat16", tie_output=tied)).apply(
        nn.meta.unbox(variables), inputs, targets)
    assert _unrounded(logits)


def test_bert_s_mlm_logits_are_not_rounded_to_bf16():
    cfg = tiny_bert(dtype="bfloat16")
    rng = np.random.default_rng(2)
    hidden = jnp.asarray(rng.standard_normal((2, 5, cfg.hidden_size)), jnp.float32)
    table = jnp.asarray(rng.standard_normal((cfg.vocab_size, cfg.hidden_size)), jnp.float32)
    head = MlmHead(cfg)
    variables = head.init(jax.random.PRNGKey(0), hidden, table)
    assert _unrounded(head.apply(variables, hidden, table))
