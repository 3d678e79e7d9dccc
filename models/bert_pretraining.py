"""BERT's pre-training heads (Devlin et al. 2019, Sec. 3.1 and App. A.1) and the model that
carries them.

  - masked LM (``MlmHead``): the final hidden vector of each *selected* position goes through a
    dense layer, GELU and LayerNorm, then is scored against every vocabulary word with the
    word-embedding matrix itself (output weights tied to the input embeddings) plus a per-word
    bias. ``BertForPreTraining`` applies it only at the gathered positions
    (``masked_positions``, about 15% of the tokens), which saves the [length, vocab] logits of
    all the other positions.
  - next sentence prediction (``NspHead``): the pooled output ``tanh(W h_[CLS] + b)`` goes
    through a dense layer to 2 classes (IsNext, NotNext).

Parameter names (``predictions/...``, ``seq_relationship/...``) and their Hugging Face
counterparts are listed in ``models.bert``.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from models.bert import BertConfig, BertModel, dense, dtypes, initializer, layer_norm
from models.layers import ACTIVATIONS, tied_logits


class MlmHead(nn.Module):
    """Masked-LM head: ``LayerNorm(GELU(dense(h))) @ word_embeddings^T + bias``.

    ``__call__(hidden [..., H], word_embeddings [V, H]) -> float32 logits [..., V]``. The output
    projection is the word-embedding table passed in (tied weights, Press & Wolf 2017 as used by
    BERT); the head owns only ``transform``, ``transform_norm`` and the output ``bias`` [V].
    """

    config: BertConfig

    @nn.compact
    def __call__(self, hidden, word_embeddings):
        cfg = self.config
        dtype, param_dtype = dtypes(cfg)
        h = dense(cfg, cfg.hidden_size, ("embed", "mlp"), "transform")(hidden)
        h = layer_norm(cfg, "transform_norm")(ACTIVATIONS["gelu"](h))
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                          (cfg.vocab_size,), param_dtype)
        logits = tied_logits(h, word_embeddings, dtype)  # float32, unrounded
        return logits + bias.astype(jnp.float32)


class NspHead(nn.Module):
    """Next-sentence head: ``pooled [b, H] -> float32 logits [b, 2]`` (0 IsNext, 1 NotNext)."""

    config: BertConfig

    @nn.compact
    def __call__(self, pooled):
        cfg = self.config
        dtype, param_dtype = dtypes(cfg)
        kernel = self.param("kernel",
                            nn.with_logical_partitioning(initializer(cfg), ("embed", "classes")),
                            (cfg.hidden_size, 2), param_dtype)
        bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("classes",)),
                          (2,), param_dtype)
        logits = pooled.astype(dtype) @ kernel.astype(dtype) + bias.astype(dtype)
        return logits.astype(jnp.float32)


def gather_positions(sequence_output, masked_positions):
    """``[b, l, H]``, ``[b, P]`` int -> ``[b, P, H]``: the states at the given positions."""
    return jnp.take_along_axis(sequence_output, masked_positions[..., None].astype(jnp.int32),
                               axis=1)


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM and (optional) next-sentence heads; submodules ``bert``,
    ``predictions`` (MlmHead), ``seq_relationship`` (NspHead, when ``config.nsp``).

    ``__call__(input_ids, token_type_ids=None, attention_mask=None, *, masked_positions [b, P],
    train=False, with_nsp=None) -> {'mlm_logits': [b, P, V], 'nsp_logits': [b, 2]}``; the MLM
    head runs only at ``masked_positions`` (padding entries, e.g. position 0 with weight 0, give
    logits the loss ignores). ``with_nsp`` (default ``config.nsp``) leaves out 'nsp_logits' when
    False (RoBERTa-style training without NSP).
    ``mlm_logits_all_positions`` is the same with the head on every position (``[b, l, V]``), the
    same parameters; it exists for equal-work comparisons. ``hidden_and_mlm_logits`` returns the
    final hidden states beside the logits (what distillation matches).
    """

    config: BertConfig

    def setup(self):
        self.bert = BertModel(self.config)
        self.predictions = MlmHead(self.config)
        if self.config.nsp:
            self.seq_relationship = NspHead(self.config)

    def _word_embeddings(self):
        return self.bert.embeddings.word_embeddings.embedding

    def masked_lm_logits(self, sequence_output, masked_positions):
        """``sequence_output [b, l, H]``, ``masked_positions [b, P]`` -> logits ``[b, P, V]``."""
        if masked_positions.ndim != 2 or masked_positions.shape[0] != sequence_output.shape[0]:
            raise ValueError(f"masked_positions of shape [batch={sequence_output.shape[0]}, "
                             f"num_predictions] expected, got {tuple(masked_positions.shape)}")
        hidden = gather_positions(sequence_output, masked_positions)
        return self.predictions(hidden, self._word_embeddings())

    def _nsp(self, pooled, with_nsp):
        use = self.config.nsp if with_nsp is None else with_nsp
        if use and not self.config.nsp:
            raise ValueError("with_nsp=True but the config has nsp=False (no NSP head was built)")
        return {"nsp_logits": self.seq_relationship(pooled)} if use else {}

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *, masked_positions,
                 train: bool = False, with_nsp: bool | None = None):
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask, train=train)
        return {"mlm_logits": self.masked_lm_logits(sequence_output, masked_positions),
                **self._nsp(pooled, with_nsp)}

    def mlm_logits_all_positions(self, input_ids, token_type_ids=None, attention_mask=None, *,
                                 train: bool = False, with_nsp: bool | None = None):
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask, train=train)
        return {"mlm_logits": self.predictions(sequence_output, self._word_embeddings()),
                **self._nsp(pooled, with_nsp)}


    def hidden_and_mlm_logits(self, input_ids, token_type_ids=None, attention_mask=None, *,
                              masked_positions=None, train: bool = False):
        """``(sequence_output [b, l, H], mlm_logits)``: the logits at ``masked_positions``
        (``[b, P, V]``) or, with None, at every position (``[b, l, V]``); no NSP head."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask, train=train)
        if masked_positions is None:
            return sequence_output, self.predictions(sequence_output, self._word_embeddings())
        return sequence_output, self.masked_lm_logits(sequence_output, masked_positions)


def masked_lm_logits(model: BertForPreTraining, sequence_output, masked_positions):
    """MLM logits ``[b, P, V]`` at ``masked_positions`` from a bound model
    (``model.bind(variables)``); the same computation as inside ``BertForPreTraining``."""
    return model.masked_lm_logits(sequence_output, masked_positions)
