"""models/config_checks.py: the fields every model config shares (precision, attention kernel,
remat, dropout rates) are validated alike by BertConfig, TransformerConfig and ViTConfig."""

from __future__ import annotations

import re
import types

import pytest

from models.config_checks import (SHARED_CHOICES, check_at_least, check_choices, check_positive,
                                  check_rates)
from models.vit import ViTConfig

import tiny_bert
import tiny_transformer


def tiny_vit(**overrides) -> ViTConfig:
    fields = dict(num_classes=10, image_size=(28, 28), patch_size=7, hidden_size=32,
                  num_layers=2, num_heads=4, mlp_dim=64)
    fields.update(overrides)
    return ViTConfig(**fields)


MODEL_CONFIGS = {"bert": tiny_bert.tiny, "transformer": tiny_transformer.tiny, "vit": tiny_vit}


@pytest.mark.parametrize("model", MODEL_CONFIGS)
@pytest.mark.parametrize("field", sorted(SHARED_CHOICES))
def test_every_model_config_checks_the_shared_choices(model, field):
    make = MODEL_CONFIGS[model]
    for value in SHARED_CHOICES[field]:
        assert getattr(make(**{field: value}), field) == value
    message = f"{field}='fp8' is not one of {list(SHARED_CHOICES[field])}"
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**{field: "fp8"})


@pytest.mark.parametrize("model", MODEL_CONFIGS)
@pytest.mark.parametrize("field", ["dropout_rate", "attention_dropout_rate"])
def test_every_model_config_checks_its_dropout_rates(model, field):
    make = MODEL_CONFIGS[model]
    assert getattr(make(**{field: 0.5}), field) == 0.5
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=rf"{field}={bad} must be in \[0, 1\)"):
            make(**{field: bad})


def test_checks_on_any_object():
    config = types.SimpleNamespace(kind="b", rate=0.0)
    check_choices(config, {"kind": ("a", "b")})
    check_rates(config, ["rate"])
    with pytest.raises(ValueError, match=r"kind='b' is not one of \['a'\]"):
        check_choices(config, {"kind": ("a",)})
    config.rate = 1.5
    with pytest.raises(ValueError, match=r"rate=1.5 must be in \[0, 1\)"):
        check_rates(config, ["rate"])


@pytest.mark.parametrize("field, bad, message", [
    ("num_classes", -1, "num_classes=-1 must be an integer >= 0"),  # 0: an encoder (MAE)
    ("num_heads", 0, "num_heads=0 must be an integer >= 1"),
    ("mlp_dim", -1, "mlp_dim=-1 must be an integer >= 1"),
    ("num_layers", -3, "num_layers=-3 must be an integer >= 0"),
    ("head_hidden_size", -2, "head_hidden_size=-2 must be an integer >= 0"),
    ("norm", "batchnorm", "norm='batchnorm' is not one of"),
    ("norm_position", "sandwich", "norm_position='sandwich' is not one of"),
])
def test_vit_config_checks_its_sizes_and_norm(field, bad, message):
    """A ViT with -3 layers used to build with none, 0 classes gave empty logits, 0 heads a
    ZeroDivisionError: each is now a ValueError naming the field."""
    with pytest.raises(ValueError, match=re.escape(message)):
        tiny_vit(**{field: bad})
    assert tiny_vit(num_layers=0, head_hidden_size=0).num_layers == 0


@pytest.mark.parametrize("make, field", [
    (tiny_transformer.tiny, "norm_epsilon"), (tiny_transformer.tiny, "rope_base"),
    (tiny_bert.tiny, "rotary_base"), (tiny_bert.tiny, "layer_norm_eps"),
])
def test_norm_epsilons_and_rotary_bases_must_be_positive(make, field):
    """A negative epsilon makes LayerNorm's rsqrt NaN, a base <= 0 RoPE's frequencies NaN."""
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=re.escape(f"{field}={bad} must be > 0")):
            make(**{field: bad})


def test_positive_and_at_least_on_any_object():
    config = types.SimpleNamespace(size=2, eps=1e-6, flag=True)
    check_at_least(config, {"size": 2})
    check_positive(config, ["eps"])
    with pytest.raises(ValueError, match=r"size=2 must be an integer >= 3"):
        check_at_least(config, {"size": 3})
    with pytest.raises(ValueError, match=r"flag=True must be an integer >= 0"):
        check_at_least(config, {"flag": 0})
    config.eps = float("nan")
    with pytest.raises(ValueError, match=r"eps=nan must be > 0"):
        check_positive(config, ["eps"])
