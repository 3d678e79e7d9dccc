"""models/config_checks.py: the fields every model config shares (precision, attention kernel,
remat, dropout rates) are validated alike by BertConfig, TransformerConfig and ViTConfig."""

from __future__ import annotations

import re
import types

import pytest

from models.config_checks import SHARED_CHOICES, check_choices, check_rates
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
