"""BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers").

A stack of post-LN Transformer encoder blocks over WordPiece tokens. The input of token ``i`` is
the sum of three embeddings, normalised (Sec. 3, Fig. 2):

    E_i = LayerNorm(word[token_i] + position[i] + segment[type_i]),  then dropout.

Pre-training has two heads (Sec. 3.1, App. A.1):
  - masked LM: the final hidden vector of each *selected* position goes through a dense layer,
    GELU and LayerNorm, then is scored against every vocabulary word with the word-embedding
    matrix itself (output weights tied to the input embeddings) plus a per-word bias. The head is
    applied only at the gathered positions (``masked_positions``, about 15% of the tokens), which
    saves the [length, vocab] logits of all the other positions.
  - next sentence prediction: the pooled output ``tanh(W h_[CLS] + b)`` goes through a dense
    layer to 2 classes (IsNext, NotNext).

``posemb`` chooses the position encoding (an ablation axis; BERT itself uses 'learned'):
  'learned'     one trained vector per position, at most ``max_position_embeddings`` (BERT).
  'sinusoidal'  the fixed table of Vaswani et al. 2017, same length limit, no parameters.
  'rope'        rotary queries/keys in every layer (Su et al. 2021); no table, no length limit.
  'alibi'       symmetric linear distance bias on the logits (Press et al. 2022); no limit.
  'none'        no position information at all.

``remat`` (none | minimal | full) rematerialises each encoder layer in the backward pass
(gradient checkpointing): less activation memory for more compute, the same parameters, outputs
and gradients. ``scan_layers`` runs the encoder as one ``nn.scan`` over a layer whose parameters
have a leading axis of size L (``encoder/layers/...`` instead of ``encoder/layer_0`` ..
``layer_{L-1}``): one compiled layer instead of L. Both are described in ``models.stack``; ``models.hf_bert`` and
fine-tuning convert between the two layouts.

Initialisation follows BERT: every dense kernel and embedding table ~ truncated normal with
``initializer_range`` (0.02, cut at two standard deviations, as TensorFlow's
``truncated_normal_initializer``), biases 0, LayerNorm scale 1 and bias 0. The feed-forward hidden
activations are not dropped (BERT drops embeddings, attention probabilities and each sublayer's
output only).

Parameter names and the Hugging Face ``BertForPreTraining`` tensors they map onto, 1:1. A bare
``BertModel`` has the same tree without the leading ``bert/``, and HF ``BertModel`` the same names
without the leading ``bert.``. Below, each block gives our path prefix -> the HF name prefix;
``n`` heads, ``d`` head dim, ``H = n d``, ``F`` mlp dim, ``i`` the layer index. "to HF": ``=`` as
is; ``T`` kernel.T (our dense kernels are ``[in, out]``, HF ``nn.Linear.weight`` is ``[out,
in]``); ``RT`` ``kernel.reshape(H, H).T``; ``R`` ``bias.reshape(H)``.

  bert/embeddings/  ->  bert.embeddings.
    word_embeddings/embedding        [V, H]    word_embeddings.weight                    =
    position_embeddings/embedding    [P, H]    position_embeddings.weight                =
    token_type_embeddings/embedding  [T, H]    token_type_embeddings.weight              =
    norm/scale, bias                 [H]       LayerNorm.weight, .bias                   =
  bert/encoder/layer_i/  ->  bert.encoder.layer.i.
    attention/query/kernel           [H, n, d] attention.self.query.weight               RT
    attention/query/bias             [n, d]    attention.self.query.bias                 R
    attention/key/kernel, bias       (same)    attention.self.key.weight, .bias          RT, R
    attention/value/kernel, bias     (same)    attention.self.value.weight, .bias        RT, R
    attention/out/kernel             [n, d, H] attention.output.dense.weight             RT
    attention/out/bias               [H]       attention.output.dense.bias               =
    norm_attention/scale, bias       [H]       attention.output.LayerNorm.weight, .bias  =
    mlp/wi/kernel, bias              [H, F]    intermediate.dense.weight, .bias          T, =
    mlp/wo/kernel, bias              [F, H]    output.dense.weight, .bias                T, =
    norm_mlp/scale, bias             [H]       output.LayerNorm.weight, .bias            =
  bert/pooler/  ->  bert.pooler.
    dense/kernel, bias               [H, H]    dense.weight, .bias                       T, =
  predictions/  ->  cls.predictions.
    transform/kernel, bias           [H, H]    transform.dense.weight, .bias             T, =
    transform_norm/scale, bias       [H]       transform.LayerNorm.weight, .bias         =
    bias                             [V]       bias (also decoder.bias, the same tensor) =
    (tied, no parameter)                       decoder.weight = word_embeddings.weight
  seq_relationship/  ->  cls.seq_relationship.
    kernel, bias                     [H, 2]    weight, bias                              T, =

``position_embeddings`` exists only with posemb 'learned' (HF has no other kind), and
``seq_relationship`` only with ``nsp=True``. Head layout: ``reshape(H, H)`` of a ``[H, n, d]``
kernel puts head ``h``'s feature ``j`` in column ``h * d + j``, which is how HF splits its ``H``
outputs into heads (``view(..., n, d)``); the output kernel ``[n, d, H]`` reshapes to
``[n * d, H]`` with rows in the same order. The inverse (HF to ours) is ``w.T.reshape(H, n, d)``,
``b.reshape(n, d)`` and ``w.T.reshape(n, d, H)``. HF LayerNorm ``weight`` is our ``scale``. HF's
``embeddings.position_ids`` / ``token_type_ids`` are buffers, not parameters. HF's
``hidden_act='gelu'`` is the exact (erf) GELU used here, and its ``layer_norm_eps`` is 1e-12.

The pre-training heads and ``BertForPreTraining`` are in ``models.bert_pretraining``, the
fine-tuning heads (Sec. 4, Fig. 4) in ``models.bert_heads``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from models import position
from models.attention import MultiHeadAttention
from models.config_checks import SHARED_CHOICES, check_choices, check_positive, check_rates
from models.dropout import Dropout
from models.layers import EncoderBlock, FeedForward, make_norm
from models.sizes import BERT_SIZES
from models.stack import run_blocks, to_layout

POSEMB_KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
LAYER_PREFIX, SCAN_NAME = "layer_", "layers"  # encoder submodules: loop / scan (models.stack)
TABLE_POSEMBS = ("learned", "sinusoidal")  # bounded by max_position_embeddings

Initializer = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Every architectural choice of a BERT; defaults are BERT-base uncased."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2               # segments; 0: no segment embeddings (DistilBERT)
    dropout_rate: float = 0.1              # embeddings and every sublayer output
    attention_dropout_rate: float = 0.1    # attention probabilities
    layer_norm_eps: float = 1e-12
    posemb: str = "learned"
    rotary_base: float = 10000.0           # posemb='rope' only
    initializer_range: float = 0.02        # std of the truncated-normal kernels and embeddings
    nsp: bool = True                       # BertForPreTraining builds the NSP head
    pooler: bool = True                    # False: no pooler, pooled = h_[CLS] (DistilBERT)
    attention_implementation: str = "xla"
    dtype: str = "float32"                 # compute dtype
    param_dtype: str = "float32"           # parameter (and optimizer state) dtype
    remat: str = "none"                    # none | minimal | full (models.stack)
    scan_layers: bool = False              # nn.scan over the layers (models.stack)

    def __post_init__(self):
        for field in ("vocab_size", "hidden_size", "num_heads", "mlp_dim",
                      "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{field}={value!r} must be a positive integer")
        for field in ("num_layers", "type_vocab_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{field}={value!r} must be a non-negative integer")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads} does not divide "
                             f"hidden_size={self.hidden_size}")
        check_rates(self, ("dropout_rate", "attention_dropout_rate"))
        check_positive(self, ("layer_norm_eps", "initializer_range", "rotary_base"))
        check_choices(self, {"posemb": POSEMB_KINDS, **SHARED_CHOICES})
        if self.posemb == "rope" and self.head_dim % 2:
            raise ValueError(f"posemb='rope' needs an even head dimension, got hidden_size/"
                             f"num_heads = {self.hidden_size}/{self.num_heads} = {self.head_dim}")
        if self.posemb == "sinusoidal" and self.hidden_size % 2:
            raise ValueError(f"posemb='sinusoidal' needs an even hidden_size, got "
                             f"{self.hidden_size}")

    @classmethod
    def from_size(cls, size: str, **overrides) -> "BertConfig":
        """``BertConfig.from_size('base', posemb='rope')``: a ``models.sizes.BERT_SIZES`` entry."""
        if size not in BERT_SIZES:
            raise ValueError(f"unknown BERT size {size!r}; known: {list(BERT_SIZES)}")
        return cls(**{**BERT_SIZES[size], **overrides})

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def check_length(self, length: int) -> None:
        """Raises when ``length`` tokens do not fit the position table (learned / sinusoidal)."""
        if self.posemb in TABLE_POSEMBS and length > self.max_position_embeddings:
            raise ValueError(
                f"sequence length {length} exceeds max_position_embeddings="
                f"{self.max_position_embeddings} (posemb={self.posemb!r} has one row per "
                "position); truncate the inputs or raise max_position_embeddings")


def initializer(cfg: BertConfig) -> Initializer:
    """BERT's (TF reference) truncated_normal_initializer(stddev=initializer_range), cut at 2
    standard deviations: every dense kernel and embedding table of the model and its heads."""
    return nn.initializers.truncated_normal(stddev=cfg.initializer_range)


def dtypes(cfg: BertConfig):
    """(compute dtype, parameter dtype) of the config."""
    return jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)


def dense(cfg: BertConfig, features: int, names: tuple[str, str], name: str) -> nn.Dense:
    """A dense layer as BERT initialises it (truncated-normal kernel, zero bias), its kernel's
    logical axes ``names``; the fine-tuning heads (``models.bert_heads``) use it too."""
    dtype, param_dtype = dtypes(cfg)
    return nn.Dense(features, dtype=dtype, param_dtype=param_dtype, name=name,
                    kernel_init=nn.with_logical_partitioning(initializer(cfg), names),
                    bias_init=nn.with_logical_partitioning(nn.initializers.zeros, names[1:]))


def layer_norm(cfg: BertConfig, name: str | None = None) -> nn.Module:
    """BERT's LayerNorm (``layer_norm_eps``, the config's dtypes)."""
    dtype, param_dtype = dtypes(cfg)
    return make_norm("layernorm", epsilon=cfg.layer_norm_eps, dtype=dtype,
                     param_dtype=param_dtype, name=name)


class BertEmbeddings(nn.Module):
    """``LayerNorm(word + position + segment)`` then dropout: ``[b, l] ids -> [b, l, H]``.

    Submodules ``word_embeddings``, ``token_type_embeddings`` (not with ``type_vocab_size=0``:
    DistilBERT drops the segment embeddings, and ``token_type_ids`` are then not read),
    ``position_embeddings`` (posemb 'learned' only), ``norm``. ``positions`` ``[b, l]`` index
    the position table.
    """

    config: BertConfig

    def setup(self):
        cfg = self.config
        dtype, param_dtype = dtypes(cfg)
        self.word_embeddings = nn.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=param_dtype,
            embedding_init=nn.with_logical_partitioning(initializer(cfg), ("vocab", "embed")))
        if cfg.type_vocab_size:
            self.token_type_embeddings = nn.Embed(
                cfg.type_vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=param_dtype,
                embedding_init=nn.with_logical_partitioning(initializer(cfg),
                                                            ("type_vocab", "embed")))
        if cfg.posemb == "learned":
            self.position_embeddings = position.LearnedPositionEmbedding(
                cfg.max_position_embeddings, cfg.hidden_size, embedding_init=initializer(cfg),
                dtype=dtype, param_dtype=param_dtype)
        self.norm = layer_norm(cfg)
        self.dropout = Dropout(cfg.dropout_rate)

    def __call__(self, input_ids, token_type_ids, positions, *, deterministic: bool = True):
        cfg = self.config
        cfg.check_length(input_ids.shape[-1])
        # Devlin et al. 2019, Fig. 2: input = token + segment + position embeddings.
        x = self.word_embeddings(input_ids)
        if cfg.type_vocab_size:
            x = x + self.token_type_embeddings(token_type_ids)
        if cfg.posemb == "learned":
            x = x + self.position_embeddings(positions)
        elif cfg.posemb == "sinusoidal":
            table = position.sinusoidal_table(cfg.max_position_embeddings, cfg.hidden_size)
            x = x + jnp.take(jnp.asarray(table), positions, axis=0).astype(x.dtype)
        x = self.norm(x)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
        return self.dropout(x, deterministic=deterministic)


class BertLayer(EncoderBlock):
    """A post-LN ``EncoderBlock`` with BERT's initialiser and no FFN-hidden dropout.

    Same submodules and forward pass as ``EncoderBlock`` (``attention``, ``norm_attention``,
    ``mlp``, ``norm_mlp``); only the kernels' initialiser and the feed-forward's inner dropout
    differ from the generic block.
    """

    kernel_init: Initializer = nn.initializers.xavier_uniform()

    def _attention(self, name, rotary_base):
        return MultiHeadAttention(
            num_heads=self.num_heads, head_dim=self.head_dim, num_kv_heads=self.num_kv_heads,
            dropout_rate=self.attention_dropout_rate, use_bias=self.use_bias,
            rotary_base=rotary_base, implementation=self.implementation,
            relative_positions=self.relative_positions,
            relative_prefix_tokens=self.relative_prefix_tokens, dtype=self.dtype,
            param_dtype=self.param_dtype, kernel_init=self.kernel_init, name=name)

    def _mlp(self):
        return FeedForward(hidden_dim=self.mlp_dim, activation=self.activation, dropout_rate=0.0,
                           use_bias=self.use_bias, dtype=self.dtype,
                           param_dtype=self.param_dtype, kernel_init=self.kernel_init, name="mlp")


class BertEncoder(nn.Module):
    """``num_layers`` post-LN blocks with exact GELU: ``[b, l, H] -> [b, l, H]``.

    ``mask`` (bool, broadcastable to ``[b, heads, l, l]``), ``bias`` (ALiBi) and ``positions``
    (RoPE) go to every layer. ``return_all=True`` returns the tuple of the input and every
    layer's output (``num_layers + 1`` arrays) instead of the last output only. The layers run
    under ``config.remat`` and ``config.scan_layers`` (``models.stack``): submodules
    ``layer_0 .. layer_{L-1}``, or one scanned ``layers``.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, x, *, mask=None, bias=None, positions=None, deterministic: bool = True,
                 return_all: bool = False):
        cfg = self.config
        dtype, param_dtype = dtypes(cfg)

        def layer(name):
            return BertLayer(
                num_heads=cfg.num_heads, head_dim=cfg.head_dim, mlp_dim=cfg.mlp_dim,
                activation="gelu", norm="layernorm", norm_epsilon=cfg.layer_norm_eps,
                norm_position="post", dropout_rate=cfg.dropout_rate,
                attention_dropout_rate=cfg.attention_dropout_rate,
                rotary_base=cfg.rotary_base if cfg.posemb == "rope" else None,
                implementation=cfg.attention_implementation, dtype=dtype,
                param_dtype=param_dtype, kernel_init=initializer(cfg), name=name)

        return run_blocks(layer, cfg.num_layers, x, remat=cfg.remat, scan=cfg.scan_layers,
                          prefix=LAYER_PREFIX, scan_name=SCAN_NAME, return_all=return_all,
                          mask=mask, bias=bias, positions=positions, deterministic=deterministic)


class BertPooler(nn.Module):
    """``tanh(dense(h_[CLS]))``: the first token's final state, ``[b, l, H] -> [b, H]``."""

    config: BertConfig

    @nn.compact
    def __call__(self, sequence_output):
        cls = sequence_output[:, 0]
        return jnp.tanh(dense(self.config, self.config.hidden_size, ("embed", "mlp"),
                              "dense")(cls))


class BertModel(nn.Module):
    """The BERT encoder with its pooler (``config.pooler``; without it, as DistilBERT, the pooled
    output is the first token's final state h_[CLS] itself, which the heads then read).

    ``__call__(input_ids [b, l] int, token_type_ids [b, l] | None, attention_mask [b, l] |
    None, *, train) -> (sequence_output [b, l, H], pooled [b, H])``. ``token_type_ids`` default
    to 0 (segment A), ``attention_mask`` (1 real token, 0 padding) to all real. Padding keys are
    hidden from every query, so real tokens never see padding; padding positions still get
    (meaningless) outputs, as in BERT. ``train=True`` enables dropout (rng ``'dropout'``).
    ``output_hidden_states=True`` adds a third output, the tuple of ``num_layers + 1`` hidden
    states ``[b, l, H]``: index 0 the embeddings, index i the output of layer i (so index -1 is
    ``sequence_output``), as HF's ``hidden_states``; the default outputs are unchanged.
    """

    config: BertConfig

    def setup(self):
        self.embeddings = BertEmbeddings(self.config)
        self.encoder = BertEncoder(self.config)
        if self.config.pooler:
            self.pooler = BertPooler(self.config)

    def _pooled(self, sequence_output):
        return self.pooler(sequence_output) if self.config.pooler else sequence_output[:, 0]

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 train: bool = False, output_hidden_states: bool = False):
        cfg = self.config
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids of shape [batch, length] expected, got "
                             f"{tuple(input_ids.shape)}")
        batch, length = input_ids.shape
        cfg.check_length(length)
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        positions = jnp.broadcast_to(jnp.arange(length), (batch, length))

        mask = bias = None
        if attention_mask is not None:
            # Key padding mask [b, 1, 1, l]: every query sees exactly the real tokens.
            mask = jnp.asarray(attention_mask).astype(bool)[:, None, None, :]
        if cfg.posemb == "alibi":
            bias = position.alibi_bias(cfg.num_heads, positions, positions, causal=False)

        x = self.embeddings(input_ids, token_type_ids, positions, deterministic=not train)
        if output_hidden_states:
            states = self.encoder(x, mask=mask, bias=bias, positions=positions,
                                  deterministic=not train, return_all=True)
            return states[-1], self._pooled(states[-1]), states
        x = self.encoder(x, mask=mask, bias=bias, positions=positions, deterministic=not train)
        return x, self._pooled(x)


def with_layer_layout(params: Mapping[str, Any], scan: bool) -> dict[str, Any]:
    """A ``BertModel``'s parameters (or a ``BertForPreTraining``'s / a fine-tuning model's, with
    the encoder under ``bert``) with the encoder in the scan layout (``scan=True``: one
    ``encoder/layers`` subtree, leading layer axis) or the loop layout (``layer_0 ..``), whichever
    they hold now (``models.stack``). Everything else is unchanged."""
    if "bert" in params:
        return {**params, "bert": with_layer_layout(params["bert"], scan)}
    if "encoder" not in params:  # (no encoder: left to the caller)
        return dict(params)
    return {**params, "encoder": to_layout(params["encoder"], scan, LAYER_PREFIX, SCAN_NAME)}
