"""The configuration of a ViT (models/vit.py): every architectural choice, checked when it is
built, and the names of the choices it offers (position encodings, Table 8's modes, pooling).
models/vit.py's docstring says what each choice does; `from models.vit import ViTConfig` is the
usual way in."""

from __future__ import annotations

import dataclasses

from models.config_checks import SHARED_CHOICES, check_at_least, check_choices, check_rates
from models.layers import ACTIVATIONS, NORM_KINDS, NORM_POSITIONS

POSEMB_KINDS = ("none", "learned_1d", "learned_2d", "sincos_2d", "relative", "relative_bias_2d",
                "rope_2d", "alibi_2d")
POSEMB_MODES = ("stem", "every_layer", "every_layer_shared")   # Table 8's columns
TABLE_POSEMBS = ("learned_1d", "learned_2d", "sincos_2d")       # tables added to the tokens
POOL_KINDS = ("cls", "mean")
# Position encodings the encoder can apply to a subset of the patches (`keep_ids`, `masked`):
# a table added once (gathered at the kept patches), RoPE's per-token positions, or none.
PER_PATCH_POSEMBS = ("none", *TABLE_POSEMBS, "rope_2d")


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Every architectural choice of a ViT; built from `config.model` by the trainer."""

    num_classes: int                   # 0: no classifier, the encoded tokens are returned
    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    posemb: str = "learned_1d"
    posemb_mode: str = "stem"          # stem | every_layer | every_layer_shared (Table 8's columns)
    pool: str = "cls"
    head_hidden_size: int = 0          # >0: tanh pre-logits layer (the paper's pre-training head)
    probe_norm: bool = False           # standardise the pooled features with fixed statistics
                                       # before the head (a linear probe's BatchNorm, ProbeNorm)
    stem_channels: int = 0             # >0: hybrid input, patches cut from a 3x3-conv feature map
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    activation: str = "gelu"
    norm: str = "layernorm"
    norm_position: str = "pre"
    layer_norm_eps: float = 1e-6       # epsilon of every norm (1e-6: the ViT paper's code; HF's
                                       # ViT checkpoints use 1e-12)
    attention_implementation: str = "xla"
    dtype: str = "float32"             # compute dtype
    param_dtype: str = "float32"       # parameter (and optimizer state) dtype
    remat: str = "none"                # none | minimal | full (models.stack)
    scan_layers: bool = False          # nn.scan over the blocks (models.stack)
    distill_token: bool = False        # DeiT: a distillation token and head beside the class
                                       # token's; the model returns (class, distillation) logits
    drop_path_rate: float = 0.0        # stochastic depth: the last block's rate (linear in depth)

    def __post_init__(self):
        if not isinstance(self.image_size, (tuple, list)):
            raise ValueError(f"image_size={self.image_size!r} must be (height, width), e.g. "
                             f"({self.image_size}, {self.image_size}) for a square image")
        object.__setattr__(self, "image_size", tuple(int(s) for s in self.image_size))
        if len(self.image_size) != 2:
            raise ValueError(f"image_size={self.image_size} must be (height, width)")
        height, width = self.image_size
        if self.patch_size <= 0 or height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"patch_size={self.patch_size} does not divide image_size={self.image_size}; "
                f"choose a patch size that divides both {height} and {width}")
        check_at_least(self, {"num_classes": 0, "hidden_size": 1, "num_heads": 1, "mlp_dim": 1,
                              "num_layers": 0, "head_hidden_size": 0, "stem_channels": 0})
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads} does not divide "
                             f"hidden_size={self.hidden_size}")
        check_choices(self, {"posemb": POSEMB_KINDS, "posemb_mode": POSEMB_MODES,
                             "pool": POOL_KINDS,
                             "activation": tuple(ACTIVATIONS), "norm": NORM_KINDS,
                             "norm_position": NORM_POSITIONS, **SHARED_CHOICES})
        check_rates(self, ("dropout_rate", "attention_dropout_rate", "drop_path_rate"))
        self._check_deit()
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps={self.layer_norm_eps} must be > 0")
        if self.posemb == "learned_2d" and self.hidden_size % 2:
            raise ValueError(f"posemb='learned_2d' needs an even hidden_size, got {self.hidden_size}")
        if self.posemb == "sincos_2d" and self.hidden_size % 4:
            raise ValueError(f"posemb='sincos_2d' needs hidden_size divisible by 4, got "
                             f"{self.hidden_size}")
        self._check_posemb_mode()
        if self.num_classes == 0 and (self.head_hidden_size or self.probe_norm):
            raise ValueError(f"head_hidden_size={self.head_hidden_size} and probe_norm="
                             f"{self.probe_norm} belong to the classifier, but num_classes=0 has "
                             "none (an encoder); set them to 0 and False")
        head_dim = self.hidden_size // self.num_heads
        if self.posemb == "rope_2d" and head_dim % 4:
            raise ValueError(f"posemb='rope_2d' rotates two even halves of each head, so it needs "
                             f"hidden_size / num_heads divisible by 4, got {head_dim}; change "
                             f"hidden_size or num_heads")

    def _check_posemb_mode(self):
        if self.posemb_mode == "stem":
            return
        if self.posemb not in TABLE_POSEMBS:
            what = ("adds no position information" if self.posemb == "none" else
                    "has no table to add: it acts inside every attention layer already")
            raise ValueError(
                f"posemb_mode={self.posemb_mode!r} adds a position table to the input of every "
                f"layer, but posemb={self.posemb!r} {what}; use posemb_mode='stem', or a posemb "
                f"with a table: {list(TABLE_POSEMBS)}")
        if self.posemb == "sincos_2d" and self.posemb_mode == "every_layer":
            raise ValueError(
                "posemb='sincos_2d' is one fixed table, the same in every layer, so "
                "posemb_mode='every_layer' (a table learned for each layer) does not apply; use "
                "posemb_mode='every_layer_shared' to add it at every layer")

    def _check_deit(self):
        if self.distill_token and self.pool != "cls":
            raise ValueError("distill_token=True puts the distillation token beside the class "
                             f"token (DeiT Sec. 4), but pool={self.pool!r} has none; use "
                             "pool='cls'")
        if self.distill_token and self.head_hidden_size:
            raise ValueError(f"distill_token=True: DeiT's two heads are linear classifiers (Sec. "
                             f"5.1), head_hidden_size={self.head_hidden_size} would add a "
                             "pre-logits layer; set it to 0")
        if self.drop_path_rate and self.scan_layers:
            raise ValueError(f"drop_path_rate={self.drop_path_rate} gives every block its own "
                             "rate, but scan_layers=True runs one block for all of them; set "
                             "scan_layers=False (or drop_path_rate=0)")

    @property
    def grid(self) -> tuple[int, int]:
        return (self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size)

    @property
    def num_prefix_tokens(self) -> int:
        """The tokens before the patches: the class token, and DeiT's distillation token."""
        return (1 + self.distill_token) if self.pool == "cls" else 0

    def check_per_patch(self) -> None:
        """ValueError unless the encoder can run on a subset of its patches or with mask tokens
        in their places (`ViT.__call__`'s keep_ids and masked; module docstring)."""
        if self.posemb not in PER_PATCH_POSEMBS or self.posemb_mode != "stem":
            raise ValueError(
                f"posemb={self.posemb!r} with posemb_mode={self.posemb_mode!r} cannot encode a "
                f"subset of the patches: use one of {list(PER_PATCH_POSEMBS)} with "
                "posemb_mode='stem'")
        if self.stem_channels:
            raise ValueError(
                f"stem_channels={self.stem_channels}: the 3x3 convolution stem would let a "
                "visible patch see the border pixels of its masked neighbours; set it to 0")
