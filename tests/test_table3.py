"""Table 3 rows of "Attention Is All You Need" as config changes, on the paper's base size."""

from __future__ import annotations

import pytest

from configs.transformer import table3
from train.config import load_config_file

CONFIG = "configs/transformer/translate.py"


def model_of(arg):
    return load_config_file(f"{CONFIG}:{arg}").model


@pytest.mark.parametrize("row,heads,d_k,d_v", [
    ("A1", 1, 512, 512), ("A2", 4, 128, 128), ("A3", 16, 32, 32), ("A4", 32, 16, 16)])
def test_row_a_on_base_is_the_papers(row, heads, d_k, d_v):
    model = model_of(f"size=base,row={row}")
    assert (model.num_heads, model.head_dim, model.value_head_dim, model.d_model) == (
        heads, d_k, d_v, 512)


def test_row_a_on_the_smoke_model_gives_four_head_counts():
    """The smoke sweep's A rows differ (with 2 base heads, A1 and A2 both had 1)."""
    heads = [model_of(f"smoke,row={row}").num_heads for row in ("A1", "A2", "base", "A3", "A4")]
    assert heads == [1, 2, 4, 8, 16]


def test_rows_b_c_d_e_on_base_are_the_papers():
    assert (model_of("size=base,row=B1").head_dim, model_of("size=base,row=B1").value_head_dim) == (16, 64)
    assert model_of("size=base,row=B2").head_dim == 32
    assert [model_of(f"size=base,row=C{i}").num_layers for i in (1, 2, 3)] == [2, 4, 8]
    c4, c5 = model_of("size=base,row=C4"), model_of("size=base,row=C5")
    assert (c4.d_model, c4.head_dim, c4.value_head_dim) == (256, 32, 32)
    assert (c5.d_model, c5.head_dim, c5.value_head_dim) == (1024, 128, 128)
    assert [model_of(f"size=base,row=C{i}").d_ff for i in (6, 7)] == [1024, 4096]
    assert [model_of(f"size=base,row=D{i}").dropout_rate for i in (1, 2)] == [0.0, 0.2]
    assert [load_config_file(f"{CONFIG}:size=base,row=D{i}").task.label_smoothing
            for i in (3, 4)] == [0.0, 0.2]
    assert model_of("size=base,row=E").posemb == "learned"
    assert model_of("size=base").posemb == "sinusoidal"
    assert model_of("row=rope").posemb == "rope" and model_of("row=alibi").posemb == "alibi"


def test_every_row_builds_a_valid_model_at_every_size():
    from models.transformer import TransformerConfig

    for size in ("cpu", "base"):
        for row in [*table3.ROWS, *table3.MODERN_ROWS]:
            model = model_of(f"size={size},row={row}").to_dict()
            del model["name"]
            TransformerConfig(vocab_size=100, **model)  # raises on an inconsistent row


def test_unknown_row_names_the_allowed_ones():
    from train.config import ConfigError

    with pytest.raises(ConfigError, match="unknown Table 3 row 'F'"):
        load_config_file(f"{CONFIG}:row=F")
    # A row that sets the position encoding and posemb= conflict; with other rows posemb= applies.
    with pytest.raises(ConfigError, match="posemb=sinusoidal and row=E both choose"):
        load_config_file(f"{CONFIG}:row=E,posemb=sinusoidal")
    assert load_config_file(f"{CONFIG}:row=A1,posemb=rope").model.posemb == "rope"


def test_the_table3_sweep_declares_loadable_rows_and_the_papers_numbers():
    from configs.ablations import transformer_table3

    sweep = transformer_table3.get_sweep("steps=50")
    assert list(sweep.rows) == ["base", "A1", "A2", "A3", "A4", "E", "rope", "alibi"]
    assert sweep.paper["A1"] == {"bleu": 24.9, "perplexity": 5.29}
    assert "rope" not in sweep.paper  # no paper number for the later encodings
    (stage,) = sweep.stages
    assert stage.overrides["train.num_steps"] == 50
    assert "optimizer.warmup_steps" not in stage.overrides  # the config's schedule, truncated
    for arg in sweep.rows.values():
        load_config_file(f"{stage.config}:{arg}")
