"""Checks the model configs (``BertConfig``, ``TransformerConfig``, ``ViTConfig``) share: a field
among its allowed values, a size at least its minimum, a positive constant, a dropout rate in
[0, 1). Each raises ValueError naming the field, its value and what it may be."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

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
