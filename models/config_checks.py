"""Checks the model configs (``BertConfig``, ``TransformerConfig``, ``DecoderLMConfig``,
``ViTConfig``) share: a field among its allowed values, a size at least its minimum, a positive
constant, a dropout rate in [0, 1), heads that split the model width, and a position encoding the
widths allow. Each raises ValueError naming the field, its value and what it may be."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from models import position
from models.attention import IMPLEMENTATIONS
from models.stack import REMAT_KINDS

DTYPES = ("float32", "bfloat16", "float16")
# The fields every model config has: compute and parameter precision, attention kernel, remat.
SHARED_CHOICES: Mapping[str, Sequence[str]] = {
    "attention_implementation": IMPLEMENTATIONS,
    "dtype": DTYPES,
    "param_dtype": DTYPES,
    "remat": REMAT_KINDS,
}


def check_choices(config: Any, choices: Mapping[str, Sequence[Any]]) -> None:
    """Each ``config.<field>`` of ``choices`` is one of its allowed values."""
    for field, allowed in choices.items():
        value = getattr(config, field)
        if value not in allowed:
            raise ValueError(f"{field}={value!r} is not one of {list(allowed)}")


def check_rates(config: Any, fields: Iterable[str]) -> None:
    """Each ``config.<field>`` is a dropout rate in [0, 1) (1 would drop everything)."""
    for field in fields:
        value = getattr(config, field)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{field}={value} must be in [0, 1)")


def check_at_least(config: Any, least: Mapping[str, int]) -> None:
    """Each ``config.<field>`` is an integer >= its minimum (a size, a count of layers)."""
    for field, minimum in least.items():
        value = getattr(config, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{field}={value!r} must be an integer >= {minimum}")


def check_positive(config: Any, fields: Iterable[str]) -> None:
    """Each ``config.<field>`` is a number > 0 (a norm epsilon, a rotary base)."""
    for field in fields:
        value = getattr(config, field)
        if not value > 0:
            raise ValueError(f"{field}={value} must be > 0")


def check_optional_at_least(config: Any, least: Mapping[str, int]) -> None:
    """Each ``config.<field>`` is None (its default, derived from other fields) or an integer >=
    its minimum."""
    try:
        check_at_least(config, {field: minimum for field, minimum in least.items()
                                if getattr(config, field) is not None})
    except ValueError as error:
        raise ValueError(f"{error} (or None for the default)") from None


def check_heads(config: Any, explicit: Sequence[str] = ("head_dim",)) -> None:
    """``num_heads`` splits ``d_model`` unless every per-head width in ``explicit`` is set, and
    ``num_kv_heads`` (grouped-query attention) divides ``num_heads``. Needs the config's
    ``kv_heads`` property (``num_kv_heads`` or, when None, ``num_heads``)."""
    if (any(getattr(config, field) is None for field in explicit)
            and config.d_model % config.num_heads):
        raise ValueError(f"num_heads={config.num_heads} does not divide d_model={config.d_model}; "
                         f"set {' and '.join(explicit)} explicitly")
    if config.num_heads % config.kv_heads:
        raise ValueError(f"num_kv_heads={config.num_kv_heads} must divide "
                         f"num_heads={config.num_heads}")


def check_position_encoding(config: Any, t5_directions: Sequence[bool]) -> None:
    """The widths ``posemb`` needs: sinusoids pair sines with cosines (even ``d_model``), RoPE
    rotates pairs of a head's dimensions (even ``qk_dim``), and T5's buckets are well defined for
    each attention direction the model has (``t5_directions``: True bidirectional, False
    causal)."""
    if config.posemb == "t5":
        for bidirectional in t5_directions:
            try:
                position.check_t5_buckets(config.t5_num_buckets, config.t5_max_distance,
                                          bidirectional)
            except ValueError as error:
                raise ValueError(f"t5_num_buckets={config.t5_num_buckets}, t5_max_distance="
                                 f"{config.t5_max_distance}: {error}") from None
    if config.posemb == "sinusoidal" and config.d_model % 2:
        raise ValueError(f"posemb='sinusoidal' needs an even d_model, got {config.d_model}")
    if config.posemb == "rope" and config.qk_dim % 2:
        raise ValueError(f"posemb='rope' needs an even head_dim, got {config.qk_dim}")
