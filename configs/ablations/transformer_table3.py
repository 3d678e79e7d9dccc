"""python -m train.sweep --config configs/ablations/transformer_table3.py --workdir workdirs/table3

"Attention Is All You Need" Table 3 on English -> Spanish Bible verses: rows (A) (number of
heads at constant compute, d_k = d_v = d_model / h) and (E) (learned instead of sinusoidal
positions), plus the later encodings RoPE and ALiBi as extra rows, each applied to the CPU-sized
model of configs/transformer/translate.py (configs/transformer/table3.py) and trained with 3
seeds on a reduced budget (`steps`, default 300 of the config's 1,286: about 13 minutes of
training and 2 of beam search a run on a 2-core CPU). Scored by test BLEU and perplexity, with the
paper's dev numbers (English-German newstest2013, 100K steps of the base model) beside them.

Each run is the first `steps` updates of the config's own schedule (eq. 3: inverse square root,
500 warmup steps), so with 300 steps the learning rate is still rising when the run ends. The
schedule is not shortened to fit: eq. 3's peak is d_model^-0.5 * warmup^-0.5, so a 100-step
warmup peaks at 6.3e-3 (2.2x the config's), and there the base model stalled at the unigram
loss (6.64, 6% token accuracy at step 250) where the config's schedule reaches 5.6 / 21% by
step 200.

Variants (`:arg`, comma-separated):
  steps=N      optimizer updates per run (default 300)
  smoke        the config's seconds-long smoke runs, 2 seeds by default, for tests
e.g. `--config configs/ablations/transformer_table3.py:steps=600 --rows base,A1,E`.
"""

from __future__ import annotations

from configs import common
from configs.transformer.table3 import ROWS
from train.sweep_spec import Metric, Stage, Sweep

BASE = "configs/transformer/translate.py"
SWEEP_ROWS = ("base", "A1", "A2", "A3", "A4", "E", "rope", "alibi")


def get_sweep(arg: str | None = None) -> Sweep:
    args = common.parse_arg(arg, steps=300, smoke=False)
    if args.steps < 1:
        raise ValueError(f"steps={args.steps} must be >= 1")
    overrides = {"train.progress_bar": False}  # the log is a file, not a terminal
    if args.smoke:
        config = f"{BASE}:smoke"
        overrides["train.eval_every"] = 0
    else:
        config = BASE
        overrides.update({
            "train.num_steps": args.steps,
            "train.eval_every": 0,             # one eval (loss, perplexity, BLEU) at the end
            "train.checkpoint_every": 100,
        })
    rows = {name: f"row={name}" for name in SWEEP_ROWS}
    return Sweep(
        title="Transformer Table 3, rows (A) and (E) (Bible en -> es"
              f"{', smoke' if args.smoke else ''})",
        stages=(Stage("train", config, overrides),),
        rows=rows,
        metrics=(Metric("bleu", "max"), Metric("perplexity", "min")),
        seeds=2 if args.smoke else 3,
        paper={name: {"bleu": ROWS[name].paper_bleu, "perplexity": ROWS[name].paper_ppl}
               for name in SWEEP_ROWS if name in ROWS},
        paper_note="the base model on English-German newstest2013 (dev) after 100K steps: "
                   "another language pair, scale and budget, so compare how the rows order, "
                   "not the values (perplexities are per wordpiece of different vocabularies).",
    )
