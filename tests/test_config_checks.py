"""models/config_checks.py: the fields every model config shares (precision, attention kernel,
remat, dropout rates) are validated alike by BertConfig, TransformerConfig and ViTConfig, and the
heads and position encodings alike by TransformerConfig and DecoderLMConfig."""

from __future__ import annotations

import re
import types

import pytest

from models.config_checks import (SHARED_CHOICES, check_at_least, check_choices, check_heads,
                                  check_optional_at_least, check_position_encoding,
                                  check_positive, check_rates)

import tiny_bert
import tiny_lm
import tiny_transformer
from tiny_vit import small as tiny_vit


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


def test_optional_sizes_heads_and_position_encoding_on_any_object():
    config = types.SimpleNamespace(head_dim=None, num_kv_heads=2, d_model=12, num_heads=4,
                                   kv_heads=2, posemb="rope", qk_dim=3, t5_num_buckets=3,
                                   t5_max_distance=8)
    check_optional_at_least(config, {"head_dim": 1, "num_kv_heads": 1})
    with pytest.raises(ValueError, match=r"num_kv_heads=2 must be an integer >= 3 \(or None for "
                                         r"the default\)"):
        check_optional_at_least(config, {"head_dim": 5, "num_kv_heads": 3})
    check_heads(config)
    config.num_heads = 5
    with pytest.raises(ValueError, match=r"num_heads=5 does not divide d_model=12; set head_dim "
                                         r"and value_head_dim explicitly"):
        check_heads(config, explicit=("head_dim", "value_head_dim"))
    config.head_dim = 4  # every per-head width given: d_model need not split
    with pytest.raises(ValueError, match=r"num_kv_heads=2 must divide num_heads=5"):
        check_heads(config)
    with pytest.raises(ValueError, match=r"posemb='rope' needs an even head_dim, got 3"):
        check_position_encoding(config, t5_directions=())
    config.posemb = "t5"  # 3 buckets: enough causal ones (2), too few bidirectional ones (4)
    check_position_encoding(config, t5_directions=(False,))
    with pytest.raises(ValueError, match=r"t5_num_buckets=3, t5_max_distance=8: bidirectional"):
        check_position_encoding(config, t5_directions=(False, True))


@pytest.mark.parametrize("make", [tiny_transformer.tiny, tiny_lm.tiny],
                         ids=["transformer", "decoder_lm"])
@pytest.mark.parametrize("overrides, message", [
    (dict(num_heads=5), "num_heads=5 does not divide d_model=32; set head_dim"),
    (dict(num_kv_heads=3), "num_kv_heads=3 must divide num_heads=4"),
    (dict(num_kv_heads=0), "num_kv_heads=0 must be an integer >= 1"),
    (dict(head_dim=0), "head_dim=0 must be an integer >= 1"),
    (dict(max_length=0), "max_length=0 must be an integer >= 1"),
    (dict(posemb="rope", num_heads=1, head_dim=5), "posemb='rope' needs an even head_dim, got 5"),
    (dict(posemb="sinusoidal", d_model=33, num_heads=3), "needs an even d_model, got 33"),
    (dict(posemb="t5", t5_num_buckets=1), "t5_num_buckets=1, t5_max_distance=128: "),
])
def test_encoder_decoder_and_decoder_only_check_heads_and_positions_alike(make, overrides,
                                                                          message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make(**overrides)


def test_t5_buckets_are_checked_for_each_direction_the_model_has():
    """The encoder-decoder has bidirectional (encoder) and causal (decoder) buckets, the
    decoder-only model causal ones alone: 3 buckets are too few for the first, enough for the
    second."""
    with pytest.raises(ValueError, match="bidirectional T5 buckets need num_buckets >= 4"):
        tiny_transformer.tiny(posemb="t5", t5_num_buckets=3, t5_max_distance=8)
    assert tiny_lm.tiny(posemb="t5", t5_num_buckets=3, t5_max_distance=8).t5_num_buckets == 3
