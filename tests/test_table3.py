"""Table 3 rows of "Attention Is All You Need" as config changes, on the paper's base size."""

from __future__ import annotations

import pytest

import ml_collections

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
    b1 = model_of("size=base,row=B1")
    assert (b1.head_dim, b1.value_head_dim) == (16, 64)
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


# Table 3's params (x 10^6) less the base model's 65, for the rows that change them.
PAPER_PARAM_CHANGE = {"B1": -7, "B2": -5, "C1": -29, "C2": -15, "C3": 15, "C4": -37,
                      "C5": 103, "C6": -12, "C7": 25}


def test_every_row_builds_and_changes_the_parameters_as_the_papers_table():
    """Every row's model is built (shapes only) at every size; on the base size with the
    paper's ~37k shared vocabulary, each row's parameter change from base is Table 3's within
    its rounding and the vocabulary's uncertainty (2.5M: C4 and C5 change d_model, so V x d
    enters); A and D change none, E adds a learned table of max_length positions to the encoder
    and one to the decoder."""
    from models.transformer import TransformerConfig
    from test_transformer import count

    def params(size, row, vocab):
        model = model_of(f"size={size},row={row}").to_dict()
        del model["name"]
        return count(TransformerConfig(vocab_size=vocab, **model))

    for row in [*table3.ROWS, *table3.MODERN_ROWS]:
        assert params("cpu", row, 100) > 0
    base = params("base", "base", 37000)
    table = 2 * model_of("size=base").max_length * 512 / 1e6
    for row in table3.ROWS:
        change = (params("base", row, 37000) - base) / 1e6
        if row in PAPER_PARAM_CHANGE:
            assert abs(change - PAPER_PARAM_CHANGE[row]) < 2.5, (row, change)
        else:
            assert change == (table if row == "E" else 0), (row, change)


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

    sweep = transformer_table3.get_sweep()
    assert list(sweep.rows) == ["base", "A1", "A2", "A3", "A4", "B1", "C1", "D1", "D3", "E"]
    # The swept rows as printed in the paper's Table 3 (dev PPL, BLEU).
    assert {row: (p["perplexity"], p["bleu"]) for row, p in sweep.paper.items()} == {
        row: PAPER_TABLE3[row][:2] for row in sweep.rows}
    assert sweep.seeds == 3 and transformer_table3.get_sweep("smoke").seeds == 2
    (stage,) = sweep.stages
    assert stage.overrides["train.num_steps"] == 3000
    assert stage.overrides["task.decode_every"] == 750  # BLEU four times a run
    configs = {row: load_config_file(f"{stage.config},{arg}") for row, arg in sweep.rows.items()}
    base = configs["base"]
    assert (base.model.d_model, base.model.num_heads, base.data.vocab_size) == (96, 4, 2000)
    assert (base.data.train_split, base.data.eval_split) == ("train[:10%]", "test[:25%]")
    assert [configs[r].model.num_heads for r in ("A1", "A2", "base", "A3", "A4")] == [
        1, 2, 4, 8, 16]
    assert configs["C1"].model.num_layers == 1
    assert configs["D3"].task.label_smoothing == 0.0 and configs["D1"].model.dropout_rate == 0
    # Every run ends its whole schedule: warmup to the peak, then a decay that reaches zero at
    # the sweep's last step (a schedule cut off while it still rises or decays is the defect).
    from train.optimizers import make_optimizer

    steps = stage.overrides["train.num_steps"]
    _, schedule = make_optimizer(base.optimizer, d_model=base.model.d_model, num_steps=steps)
    warmup = base.optimizer.warmup_steps
    assert 0 < warmup < steps // 4
    assert float(schedule(warmup)) == pytest.approx(base.optimizer.learning_rate)
    assert float(schedule(steps // 2)) < base.optimizer.learning_rate
    assert float(schedule(steps)) == pytest.approx(0.0, abs=1e-9)
    assert all(f.requires == (transformer_table3.LEVELLED,) for f in sweep.findings)
    assert {f.row for f in sweep.findings} <= set(sweep.rows)


# Table 3 of Vaswani et al. 2017 as printed: row -> (dev PPL, dev BLEU, params x 10^6 or None).
PAPER_TABLE3 = {
    "base": (4.92, 25.8, 65), "A1": (5.29, 24.9, None), "A2": (5.00, 25.5, None),
    "A3": (4.91, 25.8, None), "A4": (5.01, 25.4, None), "B1": (5.16, 25.1, 58),
    "B2": (5.01, 25.4, 60), "C1": (6.11, 23.7, 36), "C2": (5.19, 25.3, 50),
    "C3": (4.88, 25.5, 80), "C4": (5.75, 24.5, 28), "C5": (4.66, 26.0, 168),
    "C6": (5.12, 25.4, 53), "C7": (4.75, 26.2, 90), "D1": (5.77, 24.6, None),
    "D2": (4.95, 25.5, None), "D3": (4.67, 25.3, None), "D4": (5.47, 25.7, None),
    "E": (4.92, 25.7, None)}


def test_rows_carry_the_papers_numbers():
    """Every row's perplexity, BLEU and parameter count, against the paper's table typed in
    here (a swapped or mistyped number would mislead every comparison the sweep prints)."""
    assert {name: (r.paper_ppl, r.paper_bleu, r.paper_params_m)
            for name, r in table3.ROWS.items()} == PAPER_TABLE3


def _model(**changes):
    model = dict(num_layers=4, d_model=96, d_ff=200, num_heads=6, head_dim=None,
                 value_head_dim=24, num_kv_heads=2, dropout_rate=0.1, posemb="sinusoidal")
    return ml_collections.ConfigDict({"model": {**model, **changes},
                                      "task": {"label_smoothing": 0.1}})


@pytest.mark.parametrize("row, expected", [
    # (A): h heads of d_model / h; a grouped-query kv_heads no longer fits and is reset.
    ("A1", dict(num_heads=1, head_dim=96, value_head_dim=96, num_kv_heads=None)),
    ("A2", dict(num_heads=3, head_dim=32, value_head_dim=32, num_kv_heads=None)),
    ("A3", dict(num_heads=12, head_dim=8, value_head_dim=8, num_kv_heads=None)),
    ("A4", dict(num_heads=24, head_dim=4, value_head_dim=4, num_kv_heads=None)),
    ("B1", dict(head_dim=4, value_head_dim=24)),
    ("B2", dict(head_dim=8, value_head_dim=24)),
    # N scaled by 2/6, 4/6, 8/6 and rounded to nearest: 4 layers -> 1.33, 2.67, 5.33.
    ("C1", dict(num_layers=1)), ("C2", dict(num_layers=3)), ("C3", dict(num_layers=5)),
    ("C4", dict(d_model=48, head_dim=8, value_head_dim=12)),
    ("C5", dict(d_model=192, head_dim=32, value_head_dim=48)),
    ("C6", dict(d_ff=100)), ("C7", dict(d_ff=400)),
    ("D1", dict(dropout_rate=0.0)), ("D2", dict(dropout_rate=0.2)),
    ("E", dict(posemb="learned")), ("rope", dict(posemb="rope")),
])
def test_rows_are_relative_to_a_model_that_is_not_the_base(row, expected):
    """On a 4-layer, 96-wide, 6-head model with grouped-query attention (kv_heads 2), d_k 16
    (d_model / h) and d_v 24 (set), a row changes exactly the fields it names, by the paper's
    ratios (d_k and d_v each from its own value), and nothing else."""
    config = _model()
    table3.apply_row(config, row)
    want = {**_model().model.to_dict(), **expected}
    assert config.model.to_dict() == want
    assert config.task.label_smoothing == 0.1


def test_row_d_label_smoothing_and_heads_that_do_not_divide():
    config = _model()
    table3.apply_row(config, "D4")
    assert config.task.label_smoothing == 0.2 and config.model.to_dict() == _model().model.to_dict()
    with pytest.raises(ValueError, match="row A4: 24 heads do not divide d_model=90"):
        table3.apply_row(_model(d_model=90), "A4")
