"""The rows of Table 3 of "Attention Is All You Need" (variations on the base model), as config
changes, with the paper's numbers (newstest2013 dev, English-German, 100K steps).

The paper changes a 512-wide, 6-layer, 8-head model. A row here is applied to whatever model a
config starts from, *relative* to it: row (A) with h = 4x base heads keeps
d_k = d_v = d_model / h (the paper's constant-compute choice), row (C) doubles or halves
d_model and d_ff as the paper does around 512 / 2048, and scales N by the paper's ratios
2/6, 4/6, 8/6. On the base size itself the rows are exactly the paper's.

    apply_row(config, "A3")  # 16 heads with d_k = d_v = d_model / 16 on the base model
"""

from __future__ import annotations

import dataclasses

import ml_collections


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    description: str           # what changes, in the paper's notation
    paper_ppl: float           # perplexity per wordpiece on the dev set
    paper_bleu: float          # dev BLEU
    paper_params_m: float | None = None  # parameters x 10^6 when the paper lists them


BASE = Row("base", "N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, eps_ls=0.1",
           4.92, 25.8, 65)

ROWS: dict[str, Row] = {r.name: r for r in (
    BASE,
    Row("A1", "h=1, d_k=d_v=d_model", 5.29, 24.9),
    Row("A2", "h=base/2, d_k=d_v=d_model/h", 5.00, 25.5),
    Row("A3", "h=2 base, d_k=d_v=d_model/h", 4.91, 25.8),
    Row("A4", "h=4 base, d_k=d_v=d_model/h", 5.01, 25.4),
    Row("B1", "d_k=base d_k/4 (d_v unchanged)", 5.16, 25.1, 58),
    Row("B2", "d_k=base d_k/2 (d_v unchanged)", 5.01, 25.4, 60),
    Row("C1", "N=2/6 base", 6.11, 23.7, 36),
    Row("C2", "N=4/6 base", 5.19, 25.3, 50),
    Row("C3", "N=8/6 base", 4.88, 25.5, 80),
    Row("C4", "d_model/2, d_k=d_v halved", 5.75, 24.5, 28),
    Row("C5", "2 d_model, d_k=d_v doubled", 4.66, 26.0, 168),
    Row("C6", "d_ff/2", 5.12, 25.4, 53),
    Row("C7", "2 d_ff", 4.75, 26.2, 90),
    Row("D1", "P_drop=0.0", 5.77, 24.6),
    Row("D2", "P_drop=0.2", 4.95, 25.5),
    Row("D3", "eps_ls=0.0", 4.67, 25.3),
    Row("D4", "eps_ls=0.2", 5.47, 25.7),
    Row("E", "learned positional embedding instead of sinusoids", 4.92, 25.7),
)}

# Rows beyond the paper: the position encodings that came after it (same model otherwise).
MODERN_ROWS = {
    "rope": "rotary queries and keys (Su et al. 2021) instead of sinusoids",
    "alibi": "linear attention biases (Press et al. 2022) instead of sinusoids",
    "t5": "learned relative position buckets (Raffel et al. 2020) instead of sinusoids",
}


def _head_dims(model: ml_collections.ConfigDict) -> tuple[int, int]:
    default = model.d_model // model.num_heads
    return (model.head_dim or default), (model.value_head_dim or default)


def apply_row(config: ml_collections.ConfigDict, row: str) -> None:
    """Changes `config.model` / `config.task` in place as Table 3 row `row` (or a modern one)."""
    model = config.model
    if row == "base":
        return
    if row in MODERN_ROWS:
        model.posemb = row
        return
    if row not in ROWS:
        raise ValueError(f"unknown Table 3 row {row!r}; rows: {sorted(ROWS)} and "
                         f"{sorted(MODERN_ROWS)}")
    d_k, d_v = _head_dims(model)
    if row.startswith("A"):
        heads = {"A1": 1, "A2": model.num_heads // 2, "A3": model.num_heads * 2,
                 "A4": model.num_heads * 4}[row]
        if heads < 1 or model.d_model % heads:
            raise ValueError(f"row {row}: {heads} heads do not divide d_model={model.d_model}")
        model.update(num_heads=heads, head_dim=model.d_model // heads,
                     value_head_dim=model.d_model // heads, num_kv_heads=None)
    elif row in ("B1", "B2"):
        model.update(head_dim=max(1, d_k // (4 if row == "B1" else 2)), value_head_dim=d_v)
    elif row in ("C1", "C2", "C3"):
        ratio = {"C1": 2 / 6, "C2": 4 / 6, "C3": 8 / 6}[row]
        model.num_layers = max(1, round(model.num_layers * ratio))
    elif row in ("C4", "C5"):
        factor = 0.5 if row == "C4" else 2.0
        model.update(d_model=int(model.d_model * factor), head_dim=int(d_k * factor),
                     value_head_dim=int(d_v * factor))
    elif row in ("C6", "C7"):
        model.d_ff = int(model.d_ff * (0.5 if row == "C6" else 2.0))
    elif row in ("D1", "D2"):
        model.dropout_rate = 0.0 if row == "D1" else 0.2
    elif row in ("D3", "D4"):
        config.task.label_smoothing = 0.0 if row == "D3" else 0.2
    elif row == "E":
        model.posemb = "learned"
