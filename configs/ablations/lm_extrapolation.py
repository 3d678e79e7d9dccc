"""python -m train.sweep --config configs/ablations/lm_extrapolation.py --workdir workdirs/lm_extrapolation

"Train Short, Test Long" (Press, Smith & Lewis, ICLR 2022) at CPU scale: the CPU language model
of configs/lm/english.py trained on rows of L = 64 tokens with each position encoding
(sinusoidal, learned, RoPE, T5 bias, ALiBi, none), 3 seeds each, and its validation perplexity
measured at 1x, 2x, 4x and 8x the training length (64, 128, 256, 512 tokens): the whole
validation split cut into rows of each length (train/tasks/causal_lm.py), so only the context
the model sees changes. (The split is stored corpus by corpus, so a prefix of it would score
Austen and Brown alone.)

Three settings differ from configs/lm/english.py, all for every row, to test the paper's setup:
  - token embeddings drawn with std 1 / sqrt(d_model) (`model.embedding_std`) and multiplied by
    sqrt(d_model) (`model.scale_embeddings`), as the paper's fairseq models have them: a token's
    embedding then has norm sqrt(d_model) = 11.3, above a row of the sinusoid table (norm
    sqrt(d_model / 2) = 8). With english.py's std 0.02 a token's embedding has norm 0.23
    (2.6 scaled), a third of a sinusoid row's, and the sinusoidal model would start as a model
    of positions with tokens as a faint signal (a first, unrecorded seed of this sweep with the
    scaling alone had sinusoidal far behind every other encoding already at 1x);
  - T5's 32 causal buckets reach a distance of 32 (`model.t5_max_distance`), not 128: trained
    on distances up to 63, every bucket a distance can reach, the last (every distance from 32
    on) included, then learns a bias, as in the paper, whose rows of 1,024 tokens reach past
    T5's 128. With 128, the buckets of distances past about 70 would keep their initial
    values, and the 2x-8x columns would measure untrained parameters.

Learned positions: every model is built with a 512-row table (`model.max_length`), trained on
positions 0..63 only; the rows past 63 stay at their initialisation (shrunk by AdamW's decay),
and the 2x..8x columns measure exactly that untrained table (the paper has no learned row).

Budget: 1,200 steps of 32 x 64 tokens (2.5M tokens, about 0.4 epochs) plus the four evals of
the whole validation split (367k tokens at each length, forward only: about a fifth of
training's compute). Measured: about 12 minutes a run (11.4 to 14.4) on one core of the 2-core
CPU, single-threaded, so the 6 rows x 3 seeds = 18 runs take under 2 hours two at a time
(`--parallel 2`: each run pinned to its own core). The sweep resumes, so it can run in parts
(`--rows alibi,rope`, `--seeds 1`).
The figure (perplexity against eval length, one line per encoding, the seeds as a band):
`python -m train.extrapolation_report workdirs/lm_extrapolation` (with the findings judged).

The paper's numbers beside ours are its WikiText-103 models trained on L = 1,024 (App. A,
Table 3) at its evaluated lengths nearest 1x, 2x, 4x and 8x: 1,024, 2,024, 4,024 and 8,024
tokens (a 247M-parameter model, word-level vocabulary of 267k): compare how each encoding's
perplexity changes with length, not the values. The paper has no learned or no-encoding row.

Variants (`:arg`, comma-separated):
  steps=N      optimizer updates per run (default 1200)
  smoke        seconds-long runs (rows of 16 tokens, evals at 16..128), 2 seeds, for tests
"""

from __future__ import annotations

from configs import common
from configs.lm import english
from train.sweep_spec import Finding, Metric, Stage, Sweep

BASE = "configs/lm/english.py"
TRAIN_LENGTH = 64
# T5's causal buckets (32, english.py's): 16 exact ones, then log-spaced up to this distance, the
# last bucket holding every distance beyond; below TRAIN_LENGTH, so that every bucket trains.
T5_MAX_DISTANCE = 32
MULTIPLES = (1, 2, 4, 8)

ROWS = {kind: f"posemb={kind}" for kind in ("sinusoidal", "learned", "rope", "t5", "alibi", "none")}

# Press et al. 2022, App. A, Table 3 (trained on L = 1,024, WikiText-103 validation perplexity)
# at inputs 1,024 / 2,024 / 4,024 / 8,024, as the columns of 1x / 2x / 4x / 8x.
PAPER_TABLE3 = {
    "sinusoidal": (19.34, 51.09, 144.00, 284.88),
    "rope": (19.33, 31.17, 44.30, 64.91),
    "t5": (18.80, 18.34, 19.44, 25.79),
    "alibi": (18.66, 18.05, 17.95, 17.96),
}


def perplexity_at(multiple: int, train_length: int = TRAIN_LENGTH) -> str:
    """The metric of the perplexity at `multiple` x the training length, e.g. 'perplexity_512'."""
    return f"perplexity_{multiple * train_length}"


def _paper(row: str, first: int, against_row: str, second: int) -> str:
    a = PAPER_TABLE3[row][MULTIPLES.index(first)]
    b = PAPER_TABLE3[against_row][MULTIPLES.index(second)]
    return (f"{row} at {first}x {a:.2f} vs {against_row} at {second}x {b:.2f} "
            f"({100 * (a / b - 1):+.0f}%)")


def _grows(row: str, expect: str, claim: str, if_not: str = "") -> Finding:
    """`row`'s perplexity at 8x against its own at 1x."""
    return Finding(claim, metric=perplexity_at(8), row=row, against=row,
                   against_metric=perplexity_at(1), expect=expect, paper=_paper(row, 8, row, 1),
                   if_not=if_not)


def _at_8x(row: str, against: str, expect: str, claim: str, if_not: str = "") -> Finding:
    return Finding(claim, metric=perplexity_at(8), row=row, against=against, expect=expect,
                   paper=_paper(row, 8, against, 8), if_not=if_not)


SHORT = ("at 64 tokens a model has little beyond its training length to misuse; the paper's "
         "extrapolation failures grow with the positions never seen")
FINDINGS = (
    _grows("alibi", "lower", "ALiBi's perplexity does not grow with length: at 8x the training "
                             "length it is lower than at 1x (more context, no unseen distance)",
           if_not="a small model may not use the longer context; level would still agree with "
                  "the paper's claim that it does not grow"),
    _grows("sinusoidal", "higher", "Sinusoidal positions extrapolate badly: perplexity at 8x the "
                                   "training length is higher than at 1x", if_not=SHORT),
    _grows("rope", "higher", "RoPE degrades with length too (perplexity at 8x above 1x)",
           if_not=SHORT),
    _grows("t5", "higher", "The T5 bias degrades with length too (perplexity at 8x above 1x)",
           if_not="T5's last bucket, one learned bias per head for every distance from 32 on, "
                  "meets the longer rows' distances as it met 32..63 in training"),
    _at_8x("rope", "sinusoidal", "lower", "RoPE degrades less than sinusoidal positions "
                                          "(lower perplexity at 8x)", if_not=SHORT),
    _at_8x("t5", "sinusoidal", "lower", "The T5 bias degrades less than sinusoidal positions "
                                        "(lower perplexity at 8x)", if_not=SHORT),
    _at_8x("alibi", "rope", "lower", "ALiBi beats RoPE at 8x the training length"),
    _at_8x("alibi", "t5", "lower", "ALiBi beats the T5 bias at 8x the training length",
           if_not="T5's last bucket holds every distance from 32 on with one learned bias "
                  "per head, which at 64 training tokens can still act as ALiBi's penalty does"),
)


def get_sweep(arg: str | None = None) -> Sweep:
    args = common.parse_arg(arg, steps=1200, smoke=False)
    if args.steps < 1:
        raise ValueError(f"steps={args.steps} must be >= 1")
    length = 16 if args.smoke else TRAIN_LENGTH
    lengths = tuple(m * length for m in MULTIPLES)
    overrides = {
        "train.progress_bar": False,          # the log is a file, not a terminal
        "data.max_length": length,
        "model.max_length": lengths[-1],      # the learned table covers every eval length
        "task.eval_lengths": lengths,
        "train.eval_every": 0,                # one eval, at the end
    }
    if args.smoke:
        config = f"{BASE}:smoke"
        overrides["task.eval_tokens"] = 400
    else:
        config = BASE
        overrides.update({"train.num_steps": args.steps,
                          "optimizer.warmup_steps": min(100, args.steps // 6),
                          "train.checkpoint_every": 400, "task.eval_tokens": 0})
    d_model = english.get_config("smoke" if args.smoke else None).model.d_model
    overrides.update({"model.scale_embeddings": True, "model.embedding_std": d_model ** -0.5,
                      "model.t5_max_distance": T5_MAX_DISTANCE})
    return Sweep(
        title=f"Train short, test long: position encodings of a causal LM trained on "
              f"{length} tokens (english_lm{', smoke' if args.smoke else ''})",
        stages=(Stage("train", config, overrides),),
        rows=ROWS,
        metrics=tuple(Metric(f"perplexity_{n}", "min") for n in lengths),
        seeds=2 if args.smoke else 3,
        paper={} if args.smoke else {
            row: {perplexity_at(m): value for m, value in zip(MULTIPLES, values)}
            for row, values in PAPER_TABLE3.items()},
        paper_note="Press et al. 2022, App. A Table 3: WikiText-103 validation perplexity of "
                   "models trained on 1,024 tokens, at 1,024 / 2,024 / 4,024 / 8,024 tokens as "
                   "our 1x / 2x / 4x / 8x columns; another model, vocabulary and corpus: compare "
                   "the growth with length, not the values.",
        findings=() if args.smoke else FINDINGS,
    )
