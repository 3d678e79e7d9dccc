"""BERT's fine-tuning heads (Devlin et al. 2019, Sec. 4 and Fig. 4).

Every task adds one small output layer to the pre-trained encoder and fine-tunes everything. The
encoder is the submodule ``bert`` (a pre-trained ``BertModel``'s parameters drop in as
``params['bert']``); the added layer is named as in HF's heads: ``classifier``
(``BertForSequenceClassification``, ``BertForTokenClassification``, ``BertForMultipleChoice``) or
``qa_outputs`` (``BertForQuestionAnswering``).

Feature-based mode (Sec. 5.3, Table 7; ``features``): the encoder is frozen and fixed features
(some layers' hidden states) feed a small trained classifier, ``feature_hidden`` or
``bilstm_0``/``bilstm_1`` in front of ``classifier``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.bert import BertConfig, BertModel, dense
from models.dropout import Dropout
from models.layers import ACTIVATIONS

FEATURE_MODES = ("none", "last", "second_to_last", "sum_last_four", "concat_last_four")
TOKEN_FEATURE_HEADS = ("bilstm", "mlp")


def feature_width(config: BertConfig, features: str) -> int:
    """Width of the features of ``features`` mode (4H for 'concat_last_four', else H)."""
    return 4 * config.hidden_size if features == "concat_last_four" else config.hidden_size


def check_features(config: BertConfig, features: str) -> None:
    """ValueError when ``features`` is unknown or needs more layers than the encoder has."""
    if features not in FEATURE_MODES:
        raise ValueError(f"features={features!r} is not one of {list(FEATURE_MODES)}")
    needed = {"second_to_last": 2, "sum_last_four": 4, "concat_last_four": 4}.get(features, 1)
    if config.num_layers < needed:
        raise ValueError(f"features={features!r} needs at least {needed} encoder layers, the "
                         f"model has num_layers={config.num_layers}")


def combine_hidden_states(hidden_states, features: str):
    """BERT Table 7's feature choices from ``hidden_states`` (embeddings first, then each layer's
    output): 'last' h_L, 'second_to_last' h_{L-1}, 'sum_last_four' h_{L-3} + ... + h_L,
    'concat_last_four' [h_{L-3}; ...; h_L] along the feature axis."""
    if features == "last":
        return hidden_states[-1]
    if features == "second_to_last":
        return hidden_states[-2]
    if features == "sum_last_four":
        return sum(hidden_states[-4:])
    if features == "concat_last_four":
        return jnp.concatenate(hidden_states[-4:], axis=-1)
    raise ValueError(f"features={features!r} is not one of {list(FEATURE_MODES[1:])}")


def _frozen_features(bert: BertModel, features: str, input_ids, token_type_ids, attention_mask):
    """The fixed features of the frozen encoder: no dropout, no gradient into ``bert``."""
    _, _, states = bert(input_ids, token_type_ids, attention_mask, train=False,
                        output_hidden_states=True)
    return jax.lax.stop_gradient(combine_hidden_states(states, features))


class BiLSTM(nn.Module):
    """One bidirectional LSTM layer: ``[b, l, d] -> [b, l, 2 * hidden]`` (forward; backward).

    ``lengths [b]``: the real tokens of each row come first; the backward LSTM starts at each
    row's last real token, and outputs past the length are not used downstream.
    """

    hidden: int

    def _cell(self, name: str) -> nn.OptimizedLSTMCell:
        """flax's LSTM cell with its own initialisers, given logical axis names (a gate's input
        kernel [d, hidden], recurrent kernel [hidden, hidden], bias [hidden]) so it shards by the
        same rules as every other parameter (train/partitioning.py)."""
        named = nn.with_logical_partitioning
        return nn.OptimizedLSTMCell(
            self.hidden, kernel_init=named(nn.initializers.lecun_normal(), ("embed", "mlp")),
            recurrent_kernel_init=named(nn.initializers.orthogonal(), (None, "mlp")),
            bias_init=named(nn.initializers.zeros_init(), ("mlp",)), name=name)

    @nn.compact
    def __call__(self, x, lengths):
        forward = nn.RNN(self._cell("forward_cell"), name="forward")
        backward = nn.RNN(self._cell("backward_cell"), name="backward")
        return nn.Bidirectional(forward, backward)(x, seq_lengths=lengths)


class _Head(nn.Module):
    """What every head shares: the encoder ``bert`` and dropout at the encoder's rate."""

    config: BertConfig

    def _encoder(self) -> BertModel:
        return BertModel(self.config, name="bert")

    def _dense(self, features: int, name: str, names=("embed", "classes")) -> nn.Dense:
        return dense(self.config, features, names, name)

    def _dropout(self, x, train: bool):
        return Dropout(self.config.dropout_rate)(x, deterministic=not train)


class BertForSequenceClassification(_Head):
    """One label per sequence (or sentence pair, told apart by ``token_type_ids``).

    Fine-tuning (``features='none'``, BERT Fig. 4a/b): ``pooled [b, H]`` -> dropout -> dense
    ``classifier`` -> float32 logits ``[b, num_labels]``.
    Feature-based (``features`` in FEATURE_MODES): the frozen encoder's combined hidden states,
    averaged over the real tokens (``attention_mask``; MiniLM's sentence embedding is such a
    mean), -> dense ``feature_hidden`` (``head_hidden`` units, GELU) -> dropout -> ``classifier``.
    ``__call__(input_ids [b, l], token_type_ids=None, attention_mask=None, *, train=False)``.
    """

    num_labels: int = 2
    features: str = "none"
    head_hidden: int = 256

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 train: bool = False):
        check_features(self.config, self.features)
        if self.features == "none":
            _, x = self._encoder()(input_ids, token_type_ids, attention_mask, train=train)
        else:
            h = _frozen_features(self._encoder(), self.features, input_ids, token_type_ids,
                                 attention_mask)
            weights = (jnp.ones(input_ids.shape, h.dtype) if attention_mask is None
                       else jnp.asarray(attention_mask, h.dtype))
            x = (h * weights[..., None]).sum(1) / jnp.maximum(weights.sum(1), 1.0)[:, None]
            x = ACTIVATIONS["gelu"](self._dense(self.head_hidden, "feature_hidden",
                                                ("embed", "mlp"))(x))
        x = self._dropout(x, train)
        return self._dense(self.num_labels, "classifier")(x).astype(jnp.float32)


class BertForTokenClassification(_Head):
    """One label per token (BERT Fig. 4d, e.g. NER or POS tags on each word's first piece).

    Fine-tuning: ``sequence_output [b, l, H]`` -> dropout -> dense ``classifier`` -> float32
    logits ``[b, l, num_labels]``.
    Feature-based: the frozen encoder's combined hidden states -> ``feature_head``:
      'bilstm'  a two-layer bidirectional LSTM (``head_hidden`` units each way), BERT Sec. 5.3's
                classifier; padding is excluded through the sequence lengths of
                ``attention_mask`` (real tokens must come first);
      'mlp'     one hidden dense layer (``head_hidden``, GELU) per token, a cheaper stand-in;
    then dropout -> ``classifier``.
    """

    num_labels: int = 2
    features: str = "none"
    head_hidden: int = 256
    feature_head: str = "bilstm"

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 train: bool = False):
        check_features(self.config, self.features)
        if self.feature_head not in TOKEN_FEATURE_HEADS:
            raise ValueError(f"feature_head={self.feature_head!r} is not one of "
                             f"{list(TOKEN_FEATURE_HEADS)}")
        if self.features == "none":
            x, _ = self._encoder()(input_ids, token_type_ids, attention_mask, train=train)
        else:
            x = _frozen_features(self._encoder(), self.features, input_ids, token_type_ids,
                                 attention_mask)
            if self.feature_head == "mlp":
                x = ACTIVATIONS["gelu"](self._dense(self.head_hidden, "feature_hidden",
                                                    ("embed", "mlp"))(x))
            else:
                lengths = (jnp.full(input_ids.shape[:1], input_ids.shape[1], jnp.int32)
                           if attention_mask is None
                           else jnp.asarray(attention_mask, jnp.int32).sum(-1))
                for i in range(2):
                    x = BiLSTM(self.head_hidden, name=f"bilstm_{i}")(x, lengths)
        x = self._dropout(x, train)
        return self._dense(self.num_labels, "classifier")(x).astype(jnp.float32)


class BertForQuestionAnswering(_Head):
    """Extractive QA (BERT Sec. 4.2, Fig. 4c): a start and an end vector scored against every
    token, i.e. dense ``qa_outputs`` ``H -> 2`` on ``sequence_output``.

    ``__call__(...) -> (start_logits [b, l], end_logits [b, l])``, float32. Decode with
    ``models.spans.best_span``.
    """

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 train: bool = False):
        x, _ = self._encoder()(input_ids, token_type_ids, attention_mask, train=train)
        logits = self._dense(2, "qa_outputs")(x).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]


class BertForMultipleChoice(_Head):
    """Choose one of C continuations (BERT Sec. 4.4, SWAG): each choice is its own sequence
    ``[CLS] context [SEP] choice [SEP]``; the choices are flattened into the batch, and
    ``pooled`` -> dropout -> dense ``classifier`` (``H -> 1``) scores each one.

    ``__call__(input_ids [b, C, l], token_type_ids [b, C, l] = None, attention_mask = None, *,
    train=False) -> float32 logits [b, C]`` (softmax over the choices).
    """

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 train: bool = False):
        if input_ids.ndim != 3:
            raise ValueError(f"input_ids of shape [batch, choices, length] expected, got "
                             f"{tuple(input_ids.shape)}")
        batch, choices, length = input_ids.shape
        flat = lambda x: None if x is None else jnp.reshape(x, (batch * choices, length))  # noqa: E731
        _, pooled = self._encoder()(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                              train=train)
        scores = self._dense(1, "classifier")(self._dropout(pooled, train))
        return scores.reshape(batch, choices).astype(jnp.float32)
