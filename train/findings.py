"""Each paper finding a committed sweep tests, judged from the sweep's records: the findings
tables of docs/findings.md (`python -m train.tables`).

A finding (train/sweep_spec.py `Finding`) compares one row's metric with another's (or with
another metric of the same row) seed by seed, as train/sweep_compare.py compares rows: Δ is the
mean of the per-seed differences (perplexity: in % of the second's mean) and s.e. its standard
error s_d / sqrt(n). A change is called clear when |Δ| >= t s.e., t the one-sided 95% quantile
of Student's t with n - 1 degrees of freedom (`critical_t`: 2.92 with 3 seeds, 6.31 with 2):
a paired t-test at 5% in the direction tested. The verdicts:

  reproduced             the paper's direction, clearly; for a 'level' finding (no
                         difference), the whole interval Δ ± t s.e. (a 90% interval: two
                         one-sided tests at 5%) within ± its tolerance
  direction only         the paper's direction, but not clearly
  not reproduced         the opposite direction, clearly; for 'level', the whole interval
                         beyond the tolerance
  inconclusive           the opposite direction, but not clearly; for 'level', an interval that
                         straddles the tolerance (the reason gives it, and on which side Δ is)
  not testable at this scale
                         a requirement of the finding does not hold (a row that never left the
                         plateau, a base row still improving, a metric that does not separate
                         pretrained from untrained), a row has no runs yet, or one seed only

The sentence of the claim, the paper's numbers and the likely reason of a miss are declared
with the finding in its sweep config; the statistic and the verdict are computed here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import scipy.stats

from train.sweep_compare import (RESULTS, SWEEPS, by_seed, in_percent, load, missing_runs,
                                 paired_change, scale, sweep_command)
from train.sweep_spec import Finding, Levelled, Reached, Sensitive, Sweep, SweepError

CONFIDENCE = 0.95  # one-sided: a clear change is one seed noise makes less than 5% of the time
VERDICTS = ("reproduced", "direction only", "not reproduced", "inconclusive",
            "not testable at this scale")
REPRODUCED, DIRECTION, NOT_REPRODUCED, INCONCLUSIVE, UNTESTABLE = VERDICTS


def critical_t(n: int) -> float:
    """How many standard errors a paired change over n seeds must reach to be clear: Student's
    t quantile at CONFIDENCE with n - 1 degrees of freedom (2.920 for n = 3)."""
    if n < 2:
        raise ValueError(f"n={n}: a standard error needs at least two seeds")
    return float(scipy.stats.t.ppf(CONFIDENCE, n - 1))


@dataclasses.dataclass(frozen=True)
class Judgement:
    verdict: str
    delta: float = math.nan       # Δ, in the units of train/sweep_compare.change
    se: float = math.nan
    seeds: int = 0
    reason: str = ""


def _pair(runs: dict, finding: Finding, reference: str | None):
    """The two series of the comparison over the seeds both rows have, in seed order."""
    second_row = finding.against or reference
    return by_seed(runs[finding.row], runs[second_row], finding.metric,
                   finding.against_metric or finding.metric)


def _eval_histories(results: Path, folder: str, row: str, stage: str) -> list[list[dict]] | None:
    """The eval records of each seed's run of `row` (from result.json's run record), or None
    when a run holds none (runs that predate run records)."""
    histories = []
    for path in sorted((results / folder / row).glob(f"seed_*/{stage}/result.json")):
        record = json.loads(path.read_text()).get("record")
        if not record:
            return None
        histories.append(record["metrics"]["evals"])
    return histories or None


def _levelled(need: Levelled, sweep: Sweep, results: Path, folder: str) -> str:
    """'' when `need` holds, else the reason it does not (or cannot be checked)."""
    stage = next(m.stage for m in sweep.metrics if sweep.label(m) == need.metric) or \
        sweep.stages[-1].name
    name = need.metric.split(".")[-1]
    histories = _eval_histories(results, folder, need.row, stage)
    if histories is None:
        return (f"`{need.row}`'s runs hold no eval history (they predate run records), so "
                f"whether its {name} had levelled off is unknown")
    for seed, evals in enumerate(histories):
        evals = [e for e in evals if name in e]
        if len(evals) < 2:
            return f"`{need.row}` has fewer than two evals of {name}: no trend to check"
        final, steps = evals[-1], evals[-1]["step"]
        earlier = min(evals, key=lambda e: abs(e["step"] - (1 - need.last) * steps))
        rise = final[name] - earlier[name]
        unit = ""
        if "perplexity" in name:
            rise, unit = 100 * rise / earlier[name], "%"  # relative: % of the earlier value
        elif in_percent(name):
            rise, unit = rise * 100, "%"
        if abs(rise) > need.tolerance or earlier is final:
            return (f"`{need.row}` (seed index {seed}) was still changing: {name} moved "
                    f"{rise:+.2f}{unit} over its last {steps - earlier['step']} of {steps} steps "
                    f"(levelled off means within {need.tolerance:g}{unit})")
    return ""


def _reached(need: Reached, runs: dict) -> str:
    for row in need.rows:
        values = scale(need.metric, runs[row][need.metric])
        target = scale(need.metric, np.float64(need.value))
        short = ~(values >= target) if need.at_least else ~(values <= target)  # NaN: short
        if short.any():
            unit = "%" if in_percent(need.metric) else ""
            return (f"{int(short.sum())} of {len(values)} seeds of `{row}` did not reach "
                    f"{need.metric} {'>=' if need.at_least else '<='} {target:g}{unit}: "
                    f"{need.why}")
    return ""


def _sensitive(need: Sensitive, finding: Finding, runs: dict) -> str:
    """'' when `need.row` differs from `need.baseline` on the finding's metric by clearly more
    than the finding's tolerance (the interval's near end beyond it), else the reason."""
    a, b, seeds = by_seed(runs[need.row], runs[need.baseline], finding.metric)
    delta, se = paired_change(finding.metric, a, b)
    near = abs(delta) - (critical_t(len(seeds)) * se if len(seeds) > 1 else math.inf)
    if near > finding.tolerance:
        return ""
    return (f"`{need.row}` differs from `{need.baseline}` by only {delta:+.2f} ± {se:.2f} in "
            f"{finding.metric}, not clearly more than the tolerance ± {finding.tolerance:g}: "
            f"{need.why}")


def _requirement(need, finding: Finding, sweep: Sweep, runs: dict, results: Path,
                 folder: str) -> str:
    """'' when `need` holds, else the reason the finding cannot be tested."""
    rows = need.rows if isinstance(need, Reached) else \
        (need.row, need.baseline) if isinstance(need, Sensitive) else (need.row,)
    if any(r not in runs for r in rows):
        return f"no finished runs of {', '.join(r for r in rows if r not in runs)} yet"
    if isinstance(need, Reached):
        return _reached(need, runs)
    if isinstance(need, Sensitive):
        return _sensitive(need, finding, runs)
    return _levelled(need, sweep, results, folder)


def judge(finding: Finding, sweep: Sweep, runs: dict, reference: str | None, results: Path,
          folder: str) -> Judgement:
    """The verdict on one finding from the runs of its sweep (train/sweep_compare.load)."""
    second = finding.against or reference
    if second is None:  # else it would read as a row without runs: untestable, silently
        raise SweepError(f"{folder}: the finding {finding.claim!r} names no row to compare "
                         "with, and its sweep has no reference row (train/sweep_compare.py "
                         "SWEEPS): give the Finding `against=ROW`")
    missing = [r for r in (finding.row, second) if r not in runs]
    if missing:
        return Judgement(UNTESTABLE, reason=f"no finished runs of {', '.join(missing)} yet")
    first, other, seeds = _pair(runs, finding, reference)
    delta, se = paired_change(finding.metric, first, other)
    n = len(seeds)
    for need in finding.requires:
        why = _requirement(need, finding, sweep, runs, results, folder)
        if why:  # the change is shown, measured as it is, but it does not test the paper
            return Judgement(UNTESTABLE, delta, se, n, why)
    if n >= 2 and not (math.isfinite(delta) and math.isfinite(se)):
        return Judgement(UNTESTABLE, delta, se, n,
                         f"a seed's {finding.metric} is not finite (NaN or Inf in its record)")
    if n < 2:
        return Judgement(UNTESTABLE, delta, se, n,
                         f"one seed (of the sweep's {sweep.seeds}): no seed-to-seed spread to "
                         "tell the change from noise")
    t = critical_t(n)
    if finding.expect == "level":  # an equivalence test: where does the whole interval lie?
        low, high = delta - t * se, delta + t * se
        if abs(delta) + t * se <= finding.tolerance:
            verdict = REPRODUCED
        elif abs(delta) - t * se > finding.tolerance:
            verdict = NOT_REPRODUCED
        else:
            where = "inside" if abs(delta) <= finding.tolerance else "beyond"
            return Judgement(INCONCLUSIVE, delta, se, n,
                             f"Δ ± {t:.2f} s.e. = [{low:+.2f}, {high:+.2f}] reaches both inside "
                             f"and beyond the tolerance ± {finding.tolerance:g} (Δ itself is "
                             f"{where} it)" + (f"; {finding.if_not}" if finding.if_not else ""))
    else:  # identical differences in every seed (se 0) are clear unless 0
        clear = abs(delta) >= t * se if se > 0 else delta != 0
        agrees = delta > 0 if finding.expect == "higher" else delta < 0
        if agrees:
            verdict = REPRODUCED if clear else DIRECTION
        elif clear:
            verdict = NOT_REPRODUCED
        else:
            reason = ("no change at all" if delta == 0 else
                      f"the opposite direction, but within noise ({_ratio(delta, se)} s.e., "
                      f"clear from {t:.2f})")
            return Judgement(INCONCLUSIVE, delta, se, n,
                             reason + (f"; {finding.if_not}" if finding.if_not else ""))
    return Judgement(verdict, delta, se, n, "" if verdict == REPRODUCED else finding.if_not)


def _statistic(finding: Finding, j: Judgement) -> str:
    """'+1.23 ± 0.40 (n = 3, 3.07 s.e.; clear from 2.92)': the ratio rounded down, so that it
    never reads as clear where the verdict says it is not."""
    if math.isnan(j.delta):
        return "-"
    unit = "%" if "perplexity" in finding.metric else ""
    digits = 2  # also in % of perplexity: a small s.e. of a perplexity ratio is not 0.0
    error = "" if math.isnan(j.se) else f" ± {j.se:.{digits}f}"
    ratio = ""  # (a level finding's test is its interval against the tolerance: no ratio)
    if not math.isnan(j.se) and j.se > 0 and finding.expect != "level":
        ratio = f", {_ratio(j.delta, j.se)} s.e.; clear from {critical_t(j.seeds):.2f}"
    return f"{j.delta:+.{digits}f}{unit}{error} (n = {j.seeds}{ratio})"


def _ratio(delta: float, se: float) -> str:
    """|delta| / se to two decimals, rounded down: it never reads as clear where it is not."""
    return f"{math.floor(100 * abs(delta) / se) / 100:.2f}"


def _comparison(finding: Finding, reference: str | None) -> str:
    second = finding.against or reference
    if finding.against_metric:
        return (f"`{finding.row}` {finding.metric} vs `{second}` {finding.against_metric}")
    return f"{finding.metric}: `{finding.row}` vs `{second}`"


def markdown_table(folder: str, results: str | Path = RESULTS) -> str:
    """The findings table of one committed sweep: claim, the paper's numbers, the comparison,
    ours (paired Δ ± s.e.), the verdict and its reason."""
    results = Path(results)  # local path: the repository's committed results
    committed = SWEEPS[folder]
    try:
        sweep, runs = load(folder, results, allow_missing=True)  # judged on the seeds there are
    except FileNotFoundError:
        return (f"(not recorded yet: `{sweep_command(folder)}`, then copy workdirs/{folder} to "
                f"notebooks/results/{folder})")
    if not sweep.findings:
        return f"(`{committed.config}` declares no findings)"
    lines = ["| the paper's finding | paper | compared | ours: Δ ± s.e. | verdict | why |",
             "|---|---|---|---|---|---|"]
    counts = {v: 0 for v in VERDICTS}
    for finding in sweep.findings:
        j = judge(finding, sweep, runs, committed.reference, results, folder)
        counts[j.verdict] += 1
        cells = [finding.claim, finding.paper, _comparison(finding, committed.reference),
                 _statistic(finding, j), f"**{j.verdict}**", j.reason or "-"]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    missing = missing_runs(sweep, runs)
    gaps = f" Runs not recorded yet: {', '.join(missing)}." if missing else ""
    return "\n".join(lines) + f"\n\n{sweep.title}: {summary}.{gaps}"
