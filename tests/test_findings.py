"""train/findings.py: each paper finding's verdict follows from the paired statistic of its
runs, computed here independently with the statistics module; requirements that fail make a
finding untestable with a reason; sweep configs cannot declare a finding they cannot judge."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from train import findings
from train.sweep_spec import (Finding, Levelled, Metric, Reached, Sensitive, Stage, Sweep,
                              SweepError)

ROWS = {"ref": "posemb=none", "a": "posemb=learned_1d", "b": "posemb=sincos_2d"}


def _sweep(*declared: Finding) -> Sweep:
    return Sweep(title="t", stages=(Stage("train", "configs/vit/fashion_mnist.py"),), rows=ROWS,
                 metrics=(Metric("accuracy"), Metric("perplexity", "min")), findings=declared)


def _runs(**rows):
    """{row: {'accuracy': [...], 'perplexity': [...], 'seed': [0, 1, 2]}} from per-seed lists."""
    out = {}
    for row, (accuracy, perplexity) in rows.items():
        out[row] = {"accuracy": np.array(accuracy), "perplexity": np.array(perplexity),
                    "seed": np.arange(len(accuracy))}
    return out


def _paired(a, b):
    d = [100 * (x - y) for x, y in zip(a, b)]
    return statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d))


def _judge(finding, runs, tmp_path=None):
    sweep = _sweep(finding)
    return findings.judge(finding, sweep, runs, "ref", tmp_path, "sweep")


REF = [0.800, 0.810, 0.790]


def test_a_change_is_clear_from_students_t_at_one_sided_95_percent():
    """The quantiles of a printed t table (one-sided 0.05): 6.314 (1 degree of freedom),
    2.920 (2), 2.132 (4); a change of 2.5 s.e. over 3 seeds is not clear."""
    assert [round(findings.critical_t(n), 3) for n in (2, 3, 5)] == [6.314, 2.920, 2.132]
    with pytest.raises(ValueError, match="at least two seeds"):
        findings.critical_t(1)


@pytest.mark.parametrize("a, expect, verdict", [
    ([0.830, 0.845, 0.818], "higher", "reproduced"),       # +3.1 points, every seed
    ([0.810, 0.828, 0.794], "higher", "direction only"),   # +1.07 ± 0.41: 2.63 s.e. < 2.92
    ([0.806, 0.800, 0.800], "higher", "direction only"),   # +0.2 ± 0.6
    ([0.830, 0.845, 0.818], "lower", "not reproduced"),    # the opposite, clearly
    ([0.806, 0.800, 0.800], "lower", "inconclusive"),      # the opposite, not clearly
])
def test_a_directional_finding_is_judged_by_the_paired_change(a, expect, verdict):
    finding = Finding("a beats ref", metric="accuracy", row="a", expect=expect, paper="p")
    j = _judge(finding, _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5])))
    delta, se = _paired(a, REF)
    assert (j.delta, j.se, j.seeds) == (pytest.approx(delta), pytest.approx(se), 3)
    clear = abs(delta) >= 2.920 * se
    assert clear == (verdict in ("reproduced", "not reproduced"))
    assert j.verdict == verdict
    if verdict == "inconclusive":
        assert "the opposite direction, but within noise" in j.reason


def test_perplexity_changes_are_in_percent_of_the_second_rows_mean():
    ref, a = [10.0, 11.0, 12.0], [9.0, 9.9, 11.1]
    finding = Finding("a lowers perplexity", metric="perplexity", row="a", expect="lower",
                      paper="p")
    j = _judge(finding, _runs(ref=(REF, ref), a=(REF, a)))
    d = [100 * (x - y) / statistics.mean(ref) for x, y in zip(a, ref)]
    assert j.delta == pytest.approx(statistics.mean(d))
    assert j.se == pytest.approx(statistics.stdev(d) / math.sqrt(3))
    assert j.verdict == "reproduced"


@pytest.mark.parametrize("a, verdict, why", [
    ([0.802, 0.811, 0.789], "reproduced", ""),            # +0.07 ± 0.07: inside ± 1
    ([0.840, 0.852, 0.829], "not reproduced", ""),        # +4.0 ± 0.1: all beyond ± 1
    ([0.790, 0.830, 0.795], "inconclusive", "(Δ itself is inside it)"),  # +0.5 ± 1.3: straddles ± 1
    ([0.8095, 0.8205, 0.800], "inconclusive", "[+0.92, +1.08]"),  # +1.0 ± 0.03
])
def test_a_level_finding_is_an_equivalence_test_within_its_tolerance(a, verdict, why):
    finding = Finding("a is level with ref", metric="accuracy", row="a", expect="level",
                      tolerance=1.0, paper="p")
    j = _judge(finding, _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5])))
    delta, se = _paired(a, REF)
    inside, outside = abs(delta) + 2.920 * se <= 1.0, abs(delta) - 2.920 * se > 1.0
    assert verdict == ("reproduced" if inside else "not reproduced" if outside else
                       "inconclusive")
    assert j.verdict == verdict and why in j.reason


def test_every_verdict_short_of_reproduced_carries_the_findings_likely_reason():
    for a, expect in (([0.790, 0.830, 0.795], "level"), ([0.806, 0.800, 0.800], "higher"),
                      ([0.840, 0.852, 0.829], "level"), ([0.802, 0.811, 0.789], "higher")):
        finding = Finding("a vs ref", metric="accuracy", row="a", expect=expect, paper="p",
                          tolerance=1.0 if expect == "level" else 0.0, if_not="too few steps")
        j = _judge(finding, _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5])))
        assert j.verdict != "reproduced" and j.reason.endswith("too few steps"), (a, j)


def test_one_seed_is_never_judged():
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p")
    j = _judge(finding, _runs(ref=([0.5], [5]), a=([0.9], [5])))
    assert (j.verdict, j.seeds) == ("not testable at this scale", 1) and math.isnan(j.se)
    assert "one seed (of the sweep's 3)" in j.reason
    assert j.delta == pytest.approx(40.0)  # still measured and shown


def test_seeds_are_paired_by_the_seed_not_by_position():
    runs = _runs(ref=(REF, [5, 5, 5]), a=([0.830, 0.845, 0.818], [5, 5, 5]))
    runs["a"] = {k: v[::-1] for k, v in runs["a"].items()}  # listed as seeds 2, 1, 0
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p")
    delta, se = _paired([0.830, 0.845, 0.818], REF)
    j = _judge(finding, runs)
    assert (j.delta, j.se) == (pytest.approx(delta), pytest.approx(se))
    from train.sweep_compare import change
    assert change("accuracy", runs["a"], runs["ref"]) == (pytest.approx(delta),
                                                          pytest.approx(se))


def test_a_level_finding_needs_a_metric_that_separates_the_baseline():
    """Sensitive: 'a within a point of ref' tests nothing when ref itself is within a point of
    an untrained baseline."""
    rows = {**ROWS, "untrained": "posemb=none"}
    need = Sensitive("ref", "untrained", why="pretraining barely matters here")
    finding = Finding("a is level with ref", metric="accuracy", row="a", expect="level",
                      tolerance=1.0, paper="p", requires=(need,))
    sweep = Sweep(title="t", stages=(Stage("train", "configs/vit/fashion_mnist.py"),), rows=rows,
                  metrics=(Metric("accuracy"),), findings=(finding,))
    a = [0.802, 0.811, 0.789]
    for untrained, verdict in (([0.795, 0.806, 0.783], "not testable at this scale"),  # +0.5
                               ([0.700, 0.712, 0.690], "reproduced")):                # +10
        runs = _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5]), untrained=(untrained, [5, 5, 5]))
        j = findings.judge(finding, sweep, runs, "ref", None, "sweep")
        assert j.verdict == verdict, j.reason
    assert "`ref` differs from `untrained` by only +0.53 ± 0.09 in accuracy" in findings.judge(
        finding, sweep, _runs(ref=(REF, [5] * 3), a=(a, [5] * 3),
                              untrained=([0.795, 0.806, 0.783], [5] * 3)),
        "ref", None, "sweep").reason
    with pytest.raises(SweepError, match="Sensitive applies to a 'level' finding"):
        Sweep(title="t", stages=sweep.stages, rows=rows, metrics=sweep.metrics,
              findings=(Finding("x", metric="accuracy", row="a", expect="higher", paper="p",
                                requires=(need,)),))


def test_a_comparison_of_two_metrics_of_one_row_pairs_its_seeds():
    """against_metric: e.g. an LM's perplexity at 8x its training length against 1x."""
    sweep = Sweep(title="t", stages=(Stage("train", "configs/vit/fashion_mnist.py"),), rows=ROWS,
                  metrics=(Metric("perplexity", "min"), Metric("perplexity_8x", "min")))
    finding = Finding("a does not grow", metric="perplexity_8x", row="a", against="a",
                      against_metric="perplexity", expect="level", tolerance=5.0, paper="p")
    runs = {"ref": {"perplexity": np.ones(3), "perplexity_8x": np.ones(3), "seed": np.arange(3)},
            "a": {"perplexity": np.array([20.0, 21.0, 22.0]),
                  "perplexity_8x": np.array([20.5, 21.2, 22.1]), "seed": np.arange(3)}}
    j = findings.judge(finding, sweep, runs, "ref", None, "sweep")
    d = [100 * (x - y) / 21.0 for x, y in zip([20.5, 21.2, 22.1], [20.0, 21.0, 22.0])]
    assert j.delta == pytest.approx(statistics.mean(d)) and j.verdict == "reproduced"


def test_an_unmet_requirement_makes_the_finding_untestable_with_its_reason():
    need = Reached("accuracy", 0.7, ("a",), why="never left the plateau")
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p",
                      requires=(need,))
    runs = _runs(ref=(REF, [5, 5, 5]), a=([0.95, 0.06, 0.05], [5, 5, 5]))
    j = _judge(finding, runs)
    assert j.verdict == "not testable at this scale"
    assert "2 of 3 seeds of `a`" in j.reason and "never left the plateau" in j.reason
    # The change is still measured and shown (points, paired by seed), only not judged.
    d = 100 * (np.array([0.95, 0.06, 0.05]) - np.array(REF))
    assert (j.delta, j.seeds) == (pytest.approx(d.mean()), 3)
    assert j.se == pytest.approx(d.std(ddof=1) / math.sqrt(3))
    runs["a"]["accuracy"] = np.array([0.95, 0.96, 0.94])
    assert _judge(finding, runs).verdict == "reproduced"


def _write_history(tmp_path, row, seed, evals):
    path = tmp_path / "sweep" / row / f"seed_{seed}" / "train" / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"metrics": {"evals": [{"step": s, "accuracy": v} for s, v in evals]}}
    path.write_text(json.dumps({"row": row, "seed": seed, "record": record}))


def test_a_row_still_improving_makes_the_finding_untestable(tmp_path):
    need = Levelled("ref", "accuracy", tolerance=0.5, last=0.25)
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p",
                      requires=(need,))
    runs = _runs(ref=(REF, [5, 5, 5]), a=([0.830, 0.845, 0.818], [5, 5, 5]))
    assert "no eval history" in _judge(finding, runs, tmp_path).reason
    for seed in range(3):  # seed 1 gains 2 points over its last quarter (steps 750 -> 1000)
        last = 0.80 if seed != 1 else 0.82
        _write_history(tmp_path, "ref", seed, [(250, 0.6), (500, 0.75), (750, 0.80),
                                               (1000, last)])
    j = _judge(finding, runs, tmp_path)
    assert j.verdict == "not testable at this scale"
    assert "+2.00% over its last 250 of 1000 steps (levelled off means within 0.5%)" in j.reason
    _write_history(tmp_path, "ref", 1, [(250, 0.6), (500, 0.75), (750, 0.80), (1000, 0.803)])
    assert _judge(finding, runs, tmp_path).verdict == "reproduced"


def test_rows_without_runs_are_untestable():
    finding = Finding("b beats ref", metric="accuracy", row="b", expect="higher", paper="p")
    j = _judge(finding, _runs(ref=(REF, [5, 5, 5])))
    assert j.verdict == "not testable at this scale" and "no finished runs of b" in j.reason


@pytest.mark.parametrize("finding, message", [
    (Finding("x", metric="accuracy", row="c", expect="higher", paper="p"), "'c', which is not a row"),
    (Finding("x", metric="bleu", row="a", expect="higher", paper="p"), "names the metric 'bleu'"),
    (Finding("x", metric="accuracy", row="a", expect="higher", paper="p",
             requires=(Reached("accuracy", 0.5, ("zz",), "w"),)), "'zz', which is not a row"),
])
def test_a_sweep_refuses_a_finding_it_cannot_judge(finding, message):
    with pytest.raises(SweepError, match=message):
        _sweep(finding)


@pytest.mark.parametrize("kwargs, message", [
    (dict(expect="level"), "a 'level' finding needs tolerance > 0"),
    (dict(expect="higher", tolerance=1.0), "a 'level' finding needs tolerance > 0"),
    (dict(expect="better"), "expect='better' is not one of"),
])
def test_a_finding_states_a_direction_or_a_tolerance(kwargs, message):
    with pytest.raises(SweepError, match=message):
        Finding("x", metric="accuracy", row="a", paper="p", **kwargs)


def test_the_findings_table_shows_each_verdict_and_counts_them(tmp_path):
    """The rendered table of a committed sweep: one line per declared finding, its verdict in
    bold, and the count of verdicts under it."""
    from train.sweep_compare import SWEEPS, load
    for folder in SWEEPS:
        text = findings.markdown_table(folder)
        sweep, _ = load(folder, allow_missing=True)
        if not sweep.findings:
            assert "declares no findings" in text
            continue
        lines = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
        assert len(lines) == 1 + len(sweep.findings), folder
        verdicts = [line.split("| **")[1].split("**")[0] for line in lines[1:]]
        assert set(verdicts) <= set(findings.VERDICTS)
        for verdict in set(verdicts):
            assert f"{verdicts.count(verdict)} {verdict}" in text.splitlines()[-1]


def test_a_non_finite_metric_is_never_judged():
    """A NaN (or Inf) among the seeds' metrics makes Δ or its s.e. NaN: the finding is not
    testable, naming why, where a NaN s.e. used to count as a clear change (and a NaN seed as
    one that reached its requirement's threshold)."""
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="lower", paper="p")
    j = _judge(finding, _runs(ref=(REF, [5, 5, 5]), a=([0.9, float("nan"), 0.9], [5, 5, 5])))
    assert j.verdict == "not testable at this scale" and "not finite" in j.reason
    need = Reached("accuracy", 0.7, ("a",), why="never left the plateau")
    required = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p",
                       requires=(need,))
    j = _judge(required, _runs(ref=(REF, [5, 5, 5]), a=([0.95, float("nan"), 0.94], [5, 5, 5])))
    assert "1 of 3 seeds of `a` did not reach" in j.reason


def test_the_statistic_rounds_the_ratio_down_and_a_level_finding_shows_none():
    """The shown ratio |Δ| / s.e. is rounded down alike in the statistic and in the reason (one
    number, never clear-looking where the verdict is not); a level finding, judged by its
    interval against the tolerance, shows no ratio."""
    a = [0.781, 0.807, 0.789]  # the opposite of 'higher', within noise
    finding = Finding("a beats ref", metric="accuracy", row="a", expect="higher", paper="p")
    j = _judge(finding, _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5])))
    delta, se = _paired(a, REF)
    shown = f"{math.floor(100 * abs(delta) / se) / 100:.2f} s.e."
    assert j.verdict == "inconclusive" and shown in j.reason
    assert shown in findings._statistic(finding, j)
    level = Finding("a is ref", metric="accuracy", row="a", expect="level", tolerance=5.0,
                    paper="p")
    j = _judge(level, _runs(ref=(REF, [5, 5, 5]), a=(a, [5, 5, 5])))
    assert findings._statistic(level, j) == f"{j.delta:+.2f} ± {j.se:.2f} (n = 3)"
