"""The configuration of the encoder-decoder Transformer (models/transformer.py): every
architectural choice, checked when it is built, the paper's sizes by name (`from_size`), and the
names of the choices it offers. models/transformer.py's docstring says what each choice does;
`from models.transformer import TransformerConfig` is the usual way in."""

from __future__ import annotations

import dataclasses
from typing import Any

from models import position
from models.config_checks import (SHARED_CHOICES, check_at_least, check_choices, check_heads,
                                  check_optional_at_least, check_position_encoding,
                                  check_positive, check_rates)
from models.layers import ACTIVATIONS, NORM_KINDS, NORM_POSITIONS
from models.sizes import TRANSFORMER_SIZES

PAD_ID = 0
POSEMB_KINDS = ("sinusoidal", "learned", "rope", "alibi", "t5", "none")
DECODER_STARTS = ("bos", "pad")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Every architectural choice of the encoder-decoder; Table 3 names in brackets."""

    vocab_size: int                         # shared source/target vocabulary, PAD_ID included
    num_layers: int = 6                     # [N] blocks in the encoder and in the decoder
    d_model: int = 512                      # [d_model]
    d_ff: int = 2048                        # [d_ff] feed-forward hidden width
    num_heads: int = 8                      # [h]
    head_dim: int | None = None             # [d_k] query/key width per head; None: d_model // h
    value_head_dim: int | None = None       # [d_v] value width per head; None: d_model // h
    num_kv_heads: int | None = None         # key/value heads (grouped-query); None: num_heads
    num_encoder_layers: int | None = None   # None: num_layers
    num_decoder_layers: int | None = None   # None: num_layers
    dropout_rate: float = 0.1               # [P_drop] embeddings and every sublayer output
    attention_dropout_rate: float = 0.0     # on attention probabilities
    mlp_dropout_rate: float | None = None   # feed-forward hidden units; None: dropout_rate
    activation: str = "relu"                # feed-forward non-linearity (eq. 2: ReLU)
    norm: str = "layernorm"
    norm_epsilon: float = 1e-6
    norm_position: str = "post"             # 'post': the paper's LayerNorm(x + Sublayer(x))
    posemb: str = "sinusoidal"
    max_length: int = 512                   # rows of the 'sinusoidal' / 'learned' tables
    sinusoid_layout: str = "interleaved"    # 'interleaved' (Sec. 3.5) | 'halves' (Marian)
    rope_base: float = 10000.0
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    share_embeddings: bool = True           # one matrix: source, target and output (Sec. 3.4)
    tie_output: bool | None = None          # the decoder's embedding is the output layer;
                                            # None: as share_embeddings
    logits_bias: bool = False               # a learned bias on the logits (Marian)
    decoder_start: str = "bos"              # the decoder's first input: 'bos' (a token of its
                                            # own) | 'pad' (PAD_ID's row: Marian)
    scale_embeddings: bool = True           # multiply embeddings by sqrt(d_model) (Sec. 3.4)
    use_bias: bool = True                   # biases in attention and feed-forward projections
    attention_implementation: str = "xla"
    dtype: str = "float32"                  # compute dtype
    param_dtype: str = "float32"            # parameter (and optimizer state) dtype
    remat: str = "none"                     # none | minimal | full (models.stack)
    scan_layers: bool = False               # nn.scan over each stack's blocks (models.stack)

    @classmethod
    def from_size(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """A paper size ('base' or 'big', Table 3) with fields overridden, e.g. vocab_size."""
        if name not in TRANSFORMER_SIZES:
            raise ValueError(f"unknown Transformer size {name!r}; "
                             f"known: {sorted(TRANSFORMER_SIZES)}")
        return cls(**{**TRANSFORMER_SIZES[name], **overrides})

    def __post_init__(self):
        check_at_least(self, {"vocab_size": 1, "num_layers": 1, "d_model": 1, "d_ff": 1,
                              "num_heads": 1, "max_length": 1})
        check_optional_at_least(self, {"head_dim": 1, "value_head_dim": 1, "num_kv_heads": 1,
                                       "num_encoder_layers": 0, "num_decoder_layers": 0})
        check_heads(self, explicit=("head_dim", "value_head_dim"))
        check_choices(self, {"posemb": POSEMB_KINDS, "activation": tuple(ACTIVATIONS),
                             "norm": NORM_KINDS, "norm_position": NORM_POSITIONS,
                             "sinusoid_layout": position.SINUSOID_LAYOUTS,
                             "decoder_start": DECODER_STARTS, **SHARED_CHOICES})
        check_rates(self, ("dropout_rate", "attention_dropout_rate"))
        if self.mlp_dropout_rate is not None:
            check_rates(self, ("mlp_dropout_rate",))
        check_positive(self, ("norm_epsilon", "rope_base"))
        # the encoder's T5 buckets are bidirectional, the decoder's causal
        check_position_encoding(self, t5_directions=(True, False))
        if self.attention_implementation == "cudnn" and self.qk_dim != self.v_dim:
            raise ValueError(f"attention_implementation='cudnn' needs head_dim == value_head_dim, "
                             f"got {self.qk_dim} and {self.v_dim}")

    @property
    def qk_dim(self) -> int:
        return self.d_model // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def v_dim(self) -> int:
        default = self.d_model // self.num_heads
        return default if self.value_head_dim is None else self.value_head_dim

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def output_tied(self) -> bool:
        """Whether the logits are the decoder's input embedding transposed (Sec. 3.4)."""
        return self.share_embeddings if self.tie_output is None else self.tie_output

    def start_id(self, bos_id: int) -> int:
        """The decoder's first input: the tokenizer's ``bos_id``, or PAD_ID when
        ``decoder_start='pad'`` (Marian)."""
        return PAD_ID if self.decoder_start == "pad" else bos_id

    @property
    def encoder_layers(self) -> int:
        return self.num_layers if self.num_encoder_layers is None else self.num_encoder_layers

    @property
    def decoder_layers(self) -> int:
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers
