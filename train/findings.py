"""Each paper finding a committed sweep tests, judged from the sweep's records: the findings
tables of docs/findings.md (`python -m train.tables`).

A finding (train/sweep_spec.py `Finding`) compares one row's metric with another's (or with
another metric of the same row) seed by seed, as train/sweep_compare.py compares rows: Δ is the
mean of the per-seed differences (perplexity: in % of the second's mean) and s.e. its standard
error s_d / sqrt(n). With n = 3 seeds, a change is called clear when |Δ| >= 2 s.e.
(`CLEAR`), the threshold the reproduction notes use throughout. The verdicts:

  reproduced             the paper's direction, clearly; for a 'level' finding (no
                         difference), the whole interval Δ ± 2 s.e. within ± its tolerance
  direction only         the paper's direction, but within 2 s.e. of no change
  not reproduced         the opposite direction; for 'level', the whole interval beyond the
                         tolerance
  not testable at this scale
                         a requirement of the finding does not hold (a row that never left the
                         plateau, a base row still improving), a row has no runs yet, or (for
                         'level') the interval straddles the tolerance: too noisy to tell

The sentence of the claim, the paper's numbers and the likely reason of a miss are declared
with the finding in its sweep config; the statistic and the verdict are computed here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from train.sweep_compare import (RESULTS, SWEEPS, in_percent, load, missing_runs, scale,
                                 sweep_command)
from train.sweep_spec import Finding, Levelled, Reached, Sweep, SweepError

CLEAR = 2.0  # standard errors: a smaller change is not told apart from seed noise
VERDICTS = ("reproduced", "direction only", "not reproduced", "not testable at this scale")


@dataclasses.dataclass(frozen=True)
class Judgement:
    verdict: str
    delta: float = math.nan       # Δ, in the units of train/sweep_compare.change
    se: float = math.nan
    seeds: int = 0
    reason: str = ""


def paired_change(label: str, first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the per-seed differences first - second (both in seed order,
    the same seeds); accuracies in points, perplexity in % of the second's mean."""
    a, b = scale(label, np.asarray(first, np.float64)), scale(label, np.asarray(second, np.float64))
    if "perplexity" in label:
        a, b = 100 * a / b.mean(), 100 * b / b.mean()
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return float(d.mean()), se


def _pair(runs: dict, finding: Finding, reference: str | None):
    """The two series of the comparison over the seeds both rows have, in seed order."""
    second_row = finding.against or reference
    first, second = runs[finding.row], runs[second_row]
    seeds = np.intersect1d(first["seed"], second["seed"])
    pick = lambda values, metric: np.array(  # noqa: E731
        [values[metric][list(values["seed"]).index(s)] for s in seeds], np.float64)
    return pick(first, finding.metric), pick(second, finding.against_metric or finding.metric), seeds


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
        short = values < target if need.at_least else values > target
        if short.any():
            unit = "%" if in_percent(need.metric) else ""
            return (f"{int(short.sum())} of {len(values)} seeds of `{row}` did not reach "
                    f"{need.metric} {'>=' if need.at_least else '<='} {target:g}{unit}: "
                    f"{need.why}")
    return ""


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
        return Judgement(VERDICTS[3], reason=f"no finished runs of {', '.join(missing)} yet")
    first, other, seeds = _pair(runs, finding, reference)
    delta, se = paired_change(finding.metric, first, other)
    for need in finding.requires:
        if isinstance(need, Reached):
            if any(r not in runs for r in need.rows):
                return Judgement(VERDICTS[3], reason=f"no finished runs of {need.rows} yet")
            why = _reached(need, runs)
        else:
            why = _levelled(need, sweep, results, folder)
        if why:  # the change is shown, measured as it is, but it does not test the paper
            return Judgement(VERDICTS[3], delta, se, len(seeds), why)
    if math.isnan(se):     # one seed: no error to measure the change against
        clear = False
    else:                  # identical differences in every seed (se 0) are clear unless 0
        clear = abs(delta) >= CLEAR * se if se > 0 else delta != 0
    if finding.expect == "level":  # an equivalence test: where does the whole interval lie?
        half = CLEAR * se if not math.isnan(se) else math.inf
        if abs(delta) + half <= finding.tolerance:
            verdict = VERDICTS[0]
        elif abs(delta) - half > finding.tolerance:
            verdict = VERDICTS[2]
        else:
            return Judgement(VERDICTS[3], delta, se, len(seeds),
                             f"Δ ± 2 s.e. reaches both inside and beyond the tolerance "
                             f"± {finding.tolerance:g}: too noisy to tell at this scale")
    else:
        agrees = delta > 0 if finding.expect == "higher" else delta < 0
        verdict = (VERDICTS[0] if clear else VERDICTS[1]) if agrees else VERDICTS[2]
    reason = "" if verdict == VERDICTS[0] else finding.if_not
    return Judgement(verdict, delta, se, len(seeds), reason)


def _statistic(finding: Finding, j: Judgement) -> str:
    if math.isnan(j.delta):
        return "-"
    unit = "%" if "perplexity" in finding.metric else ""
    digits = 1 if unit else 2
    error = "" if math.isnan(j.se) else f" ± {j.se:.{digits}f}"
    ratio = "" if math.isnan(j.se) or j.se == 0 else f", {abs(j.delta) / j.se:.1f} s.e."
    return f"{j.delta:+.{digits}f}{unit}{error} (n = {j.seeds}{ratio})"


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
