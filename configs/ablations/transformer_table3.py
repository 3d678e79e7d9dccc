"""python -m train.sweep --config configs/ablations/transformer_table3.py --workdir workdirs/table3

"Attention Is All You Need" Table 3 on English -> Spanish Bible verses: rows (A) (number of
heads at constant compute, d_k = d_v = d_model / h), (B) (a smaller key size), (C) (fewer
layers), (D) (no dropout, no label smoothing) and (E) (learned instead of sinusoidal
positions), each applied to the `size=small` model of configs/transformer/translate.py
(d_model 96, 3 + 3 layers, 4 heads, a 2,000-piece vocabulary, a tenth of the training pairs;
configs/transformer/table3.py says how a row changes it) and trained with 3 seeds. Scored by
BLEU and perplexity on a quarter of the test split, with the paper's dev numbers
(English-German newstest2013, 100K steps of the base model) beside them.

Every run goes through its whole schedule: a linear warmup, the peak, and a cosine decay that
reaches zero at the last step (eq. 3's inverse-square-root decay never ends, so a run of
minutes could not finish it), and translates the test quarter every quarter of its steps, so
that the findings can require what the paper's models had: a base model that had levelled off
(`Levelled` below: its perplexity within 3% over the last quarter of its steps, in every seed).
Perplexity, not BLEU: as the learning rate anneals to zero the last quarter's small steps add
about a BLEU point at every scale tried, even where the perplexity has stopped moving, so BLEU
cannot say whether a model has finished learning. Earlier versions are in the git history:
the first 300 steps of the cpu-sized model, which ended while the learning rate was still
rising, and 1,200 steps warming up for 100 on a quarter of the pairs, after which the base row
was still rising and its one-layer row doubled its BLEU. Base runs of 2,400 steps on a quarter
of the pairs were still 9% down in perplexity over their last quarter, and on a tenth of the
pairs one seed of three was still 3.1% down (configs/transformer/translate.py says how the
preset was recalibrated). Row (C)'s narrower model
(d_model 48) is left out to keep within the budget, and the later position encodings are
compared where they matter, on length extrapolation (configs/ablations/lm_extrapolation.py).

Variants (`:arg`, comma-separated):
  steps=N      optimizer updates per run (default: the preset's 3,000); BLEU every N / 4 steps
  smoke        the config's seconds-long smoke runs, 2 seeds by default, for tests
e.g. `--config configs/ablations/transformer_table3.py --rows base,A1,E`.
"""

from __future__ import annotations

from configs import common
from configs.transformer.table3 import ROWS
from configs.transformer.translate import SMALL
from train.sweep_spec import Finding, Levelled, Metric, Stage, Sweep

BASE = "configs/transformer/translate.py"
SWEEP_ROWS = ("base", "A1", "A2", "A3", "A4", "B1", "C1", "D1", "D3", "E")

# The findings compare rows of models that had finished learning: the base row's perplexity
# moved by at most 3% over the last quarter of its steps, in every seed.
LEVELLED = Levelled("base", "perplexity", tolerance=3.0, last=0.25)


def _paper(row: str, metric: str = "bleu") -> str:
    """'BLEU 24.9 vs 25.8 (-0.90)' or 'PPL 4.67 vs 4.92 (-5.1%)': a row of Table 3 against the
    base model's, perplexity in % of base's as ours is (train/sweep_compare.paired_change)."""
    if metric == "bleu":
        value, base = ROWS[row].paper_bleu, ROWS["base"].paper_bleu
        return f"BLEU {value:g} vs {base:g} ({value - base:+.2f})"
    value, base = ROWS[row].paper_ppl, ROWS["base"].paper_ppl
    return f"PPL {value:g} vs {base:g} ({100 * (value / base - 1):+.1f}%)"


def _finding(claim: str, row: str, expect: str, if_not: str, metric: str = "bleu",
             tolerance: float = 0.0) -> Finding:
    return Finding(claim, metric=metric, row=row, expect=expect, paper=_paper(row, metric),
                   tolerance=tolerance, if_not=if_not, requires=(LEVELLED,))


# Sec. 6.2 on Table 3, and Sec. 5.4 on label smoothing.
FINDINGS = (
    _finding("Single-head attention is worse than multi-head (A)", "A1", "lower",
             "with d_model 96 one head of width 96 can still attend where four do, and short "
             "verses leave few distant dependencies to split between heads"),
    _finding("Too many heads hurt: 16 heads of width 6 are worse than 4 of width 24 (A)", "A4",
             "lower", "the paper's drop is 0.4 BLEU, inside our seed-to-seed spread"),
    _finding("A smaller key size d_k hurts (B)", "B1", "lower",
             "keys of width 6 may still suffice to match the few positions a verse has"),
    _finding("A smaller key size d_k hurts perplexity too (B)", "B1", "higher",
             "keys of width 6 may still suffice to match the few positions a verse has",
             metric="perplexity"),
    _finding("Bigger models are better: 1 layer instead of 3 is worse (C)", "C1", "lower",
             "one layer learns faster (BLEU 12 to 13 at step 750, base 7) and base is still "
             "closing in at the end; in perplexity the deeper model is the better (5% lower)"),
    _finding("Bigger models are better in perplexity too: 1 layer instead of 3 is higher (C)",
             "C1", "higher", "one layer learns faster, and 3,000 steps may end before the "
             "deeper model's advantage shows", metric="perplexity"),
    _finding("Dropout helps against over-fitting: none is worse (D)", "D1", "lower",
             "BLEU scores only each step's most likely token, which over-fitting can leave in "
             "place while it ruins the probabilities (the perplexity finding below)"),
    _finding("Without dropout the model over-fits: its test perplexity is higher (D)", "D1",
             "higher", "label smoothing, kept in D1, may already hold back the over-fitting "
             "that D3 and E show at this budget", metric="perplexity"),
    _finding("Label smoothing hurts perplexity: none gives a lower one (Sec. 5.4, D)", "D3",
             "lower", "without smoothing the model over-fits a tenth of the pairs: its test "
             "perplexity turns up after step 1,500 or 2,250 while its training perplexity "
             "keeps falling", metric="perplexity"),
    _finding("Label smoothing improves BLEU: none is worse (Sec. 5.4, D)", "D3", "lower",
             "the paper's difference is 0.5 BLEU, inside our seed-to-seed spread"),
    _finding("Learned positional embeddings do as well as sinusoids (E; within half a point)",
             "E", "level", "verses of a few dozen tokens leave the learned table's far rows "
             "barely trained", tolerance=0.5),
    _finding("Learned positional embeddings reach the sinusoids' perplexity (E; within 2%, "
             "about 0.1 of the paper's 4.92)", "E", "level", "the learned table's far rows "
             "barely train on verses of a few dozen tokens, and the model over-fits a little "
             "(test perplexity turns up after step 2,250 in every seed); even at its best it is "
             "18% to 20% above base", metric="perplexity", tolerance=2.0),
)


def get_sweep(arg: str | None = None) -> Sweep:
    args = common.parse_arg(arg, steps=SMALL["train"]["num_steps"], smoke=False)
    if args.steps < 4:
        raise ValueError(f"steps={args.steps} must be >= 4 (BLEU is measured every steps / 4)")
    overrides = {"train.progress_bar": False}  # the log is a file, not a terminal
    if args.smoke:
        config = f"{BASE}:smoke"
        overrides["train.eval_every"] = 0
    else:
        config = f"{BASE}:size=small"
        overrides.update({
            "train.num_steps": args.steps,
            "task.decode_every": args.steps // 4,  # BLEU at 1/4, 1/2, 3/4 and the end
            "train.eval_every": 0,                 # loss and perplexity at the same evals
            "train.checkpoint_every": args.steps // 4,
        })
    return Sweep(
        title="Transformer Table 3, rows (A) to (E) (Bible en -> es"
              f"{', smoke' if args.smoke else ''})",
        stages=(Stage("train", config, overrides),),
        rows={name: f"row={name}" for name in SWEEP_ROWS},
        metrics=(Metric("bleu", "max"), Metric("perplexity", "min")),
        seeds=2 if args.smoke else 3,
        paper={name: {"bleu": ROWS[name].paper_bleu, "perplexity": ROWS[name].paper_ppl}
               for name in SWEEP_ROWS if name in ROWS},
        paper_note="the base model on English-German newstest2013 (dev) after 100K steps: "
                   "another language pair, scale and budget, so compare how the rows order, "
                   "not the values (perplexities are per wordpiece of different vocabularies).",
        findings=() if args.smoke else FINDINGS,
    )
