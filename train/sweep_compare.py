"""Each row of a committed sweep against its reference row and against the paper: the sweep
tables of the docs (`python -m train.tables`), notebooks/ablation_results.ipynb and the figures
of train/sweep_figures.py, all from the runs' records in notebooks/results/<sweep>/.

A row's spread is the sample standard deviation over its seeds (ddof=1). Its change from the
reference row is the difference of the means, in points for accuracies (shown in %) and BLEU and
in percent of the reference's mean for perplexity, whose scale depends on the vocabulary. Seed k
of every row runs with the same seed (data order, initialization key), so the rows are compared
seed by seed: with d_k the row's value minus the reference's for seed k, the change is the mean
of the d_k and its standard error s_d / sqrt(n) (s_d their sample standard deviation, n the
seeds both rows have).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from train.run_record import REPO
from train.sweep_report import collect
from train.sweep_spec import Sweep, SweepError, load_sweep_file

RESULTS = REPO / "notebooks" / "results"


@dataclasses.dataclass(frozen=True)
class CommittedSweep:
    folder: str      # notebooks/results/<folder>/: the runs' result.json, results.csv, ...
    config: str      # the sweep config that defines its rows, metrics and paper numbers
    # The row every other is compared with; None where the rows are not alternatives to one
    # another (e.g. one row per task, each compared within itself by its findings): the table
    # then shows no Δ columns, only the paper's value beside ours.
    reference: str | None
    # Being run (rows added or rerun): the notebook and figures show the runs recorded so far and
    # name the others; a complete sweep with a run missing stays an error. Set back to False in
    # the commit that brings the last records.
    in_progress: bool = False
    # Its figure (train/sweep_figures.py): 'rows', one panel per metric with a point per row;
    # 'lengths', perplexity against the eval length with a line per row (the metrics are
    # perplexity_<length>, train/extrapolation_report.py).
    figure: str = "rows"
    # The rows are compared at equal wall clock (each row's steps set from measured rates before
    # the runs): the table shows each row's measured wall time, so a reader sees how equal the
    # budgets came out.
    wall_clock: bool = False


SWEEPS = {s.folder: s for s in (
    CommittedSweep("vit_table8", "configs/ablations/vit_posemb.py", "none"),
    CommittedSweep("transformer_table3", "configs/ablations/transformer_table3.py", "base"),
    CommittedSweep("bert_table8", "configs/ablations/bert_table8.py", "80-10-10"),
    CommittedSweep("distilbert_table1", "configs/ablations/distilbert_table1.py", None),
    CommittedSweep("distilbert_table4", "configs/ablations/distilbert_table4.py", "triple"),
    CommittedSweep("mae_limited_labels", "configs/ablations/mae_limited_labels.py", "untrained"),
    CommittedSweep("mae_mask_ratio", "configs/ablations/mae_mask_ratio.py", "mask_75"),
    CommittedSweep("mae_table1", "configs/ablations/mae_table1.py", "default"),
    CommittedSweep("deit_table3", "configs/ablations/deit_table3.py", "none"),
    CommittedSweep("lm_extrapolation", "configs/ablations/lm_extrapolation.py", "sinusoidal",
                   figure="lengths"),
    CommittedSweep("mae_pipeline", "configs/ablations/mae_pipeline.py", "scratch",
                   wall_clock=True),
)}


def runs_of(sweep: Sweep, records: list[dict]) -> dict:
    """{row: {label: values over seeds, 'seed': seeds, 'wall_s': each run's seconds over its
    stages}} of a sweep's finished runs (the records of train/sweep_report.collect), rows in the
    sweep's order, those without a run left out."""
    labels = [sweep.label(m) for m in sweep.metrics]
    runs = {}
    for row in sweep.rows:
        mine = [r for r in records if r["row"] == row]
        if mine:
            runs[row] = {label: np.array([r["metrics"][label] for r in mine]) for label in labels}
            runs[row]["seed"] = np.array([r["seed"] for r in mine])
            runs[row]["wall_s"] = np.array([r["wall_s"] for r in mine], np.float64)
    return runs


def sweep_command(folder: str) -> str:
    """The command that runs (or resumes, running only what is missing) a committed sweep."""
    return f"python -m train.sweep --config {SWEEPS[folder].config} --workdir workdirs/{folder}"


def load(folder: str, results: str | Path = RESULTS, *,
         allow_missing: bool | None = None) -> tuple[Sweep, dict]:
    """The sweep's declaration and its finished runs, {row: {label: values over seeds, 'seed':
    seeds}}, read from each run's result.json. Raises FileNotFoundError when there are none, or
    (unless `allow_missing`; by default, unless the sweep is declared `in_progress`) when any run
    of the sweep's rows x seeds has no finished record: a table or figure with a row or seed
    silently left out would read as complete. Whoever allows them names them
    (`missing_runs`), as `markdown_table` and train/sweep_figures.py do. A run of a seed the sweep
    does not declare is a SweepError (it would join its row's mean unannounced)."""
    committed = SWEEPS[folder]
    sweep = load_sweep_file(str(REPO / committed.config))
    directory = Path(results) / folder
    records = collect(sweep, directory) if directory.is_dir() else []
    if not records:
        raise FileNotFoundError(
            f"{directory} holds no finished run of the sweep {committed.config}: "
            f"`{sweep_command(folder)}` makes them (then copy workdirs/{folder} to {directory}, "
            f"or point RESULTS at the folder holding it as {folder}/)")
    runs = runs_of(sweep, records)
    extra = [f"{row} seed {seed}" for row in runs for seed in runs[row]["seed"]
             if seed >= sweep.seeds]
    if extra:  # they would join their rows' means, and the seeds column would not say so
        raise SweepError(f"{directory} holds runs of seeds its sweep ({committed.config}) does "
                         f"not declare: {', '.join(extra)}; declare seeds={sweep.seeds + 1} or "
                         "more there, or remove them")
    missing = missing_runs(sweep, runs)
    if allow_missing is None:
        allow_missing = committed.in_progress
    if missing and not allow_missing:
        raise FileNotFoundError(
            f"{directory} has no finished record of {len(missing)} of the sweep's "
            f"{len(sweep.rows) * sweep.seeds} runs ({', '.join(missing)}): "
            f"`{sweep_command(folder)}`, with a copy of {directory} as workdirs/{folder}, runs "
            "only those (then copy it back)")
    return sweep, runs


def missing_runs(sweep: Sweep, runs: dict) -> list[str]:
    """'ROW seed K' for each run of the sweep's rows x seeds 0 .. sweep.seeds - 1 that `runs`
    (as `load` returns them) does not hold."""
    return [f"{row} seed {seed}" for row in sweep.rows for seed in range(sweep.seeds)
            if row not in runs or seed not in runs[row]["seed"]]


def in_percent(label: str) -> bool:
    """Accuracies and a distillation's scores (fractions: `score`, `teacher_score`, the share
    `score_of_teacher`) are shown in %; BLEU, perplexity and losses as they are."""
    return "accuracy" in label or "score" in label


def scale(label: str, values):
    """The values of `label` in the units the tables show (in_percent)."""
    return 100 * values if in_percent(label) else values


def by_seed(row: dict, base: dict, label: str, base_label: str | None = None):
    """`label` of `row` and `base_label` (default: the same) of `base` over the seeds both
    have, each in seed order (paired by the seed itself, not by position), and those seeds."""
    seeds = np.intersect1d(row["seed"], base["seed"])

    def pick(runs: dict, key: str) -> np.ndarray:
        index = {int(s): i for i, s in enumerate(runs["seed"])}
        return np.array([runs[key][index[int(s)]] for s in seeds], np.float64)
    return pick(row, label), pick(base, base_label or label), seeds


def paired_change(label: str, first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the per-seed differences first - second (both in seed order,
    the same seeds; nan error with one seed); accuracies in points, perplexity in % of the
    second's mean."""
    a, b = scale(label, np.asarray(first, np.float64)), scale(label, np.asarray(second, np.float64))
    if "perplexity" in label:
        a, b = 100 * a / b.mean(), 100 * b / b.mean()
    d = a - b
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else math.nan
    return float(d.mean()), se


def change(label: str, row: dict, base: dict) -> tuple[float, float]:
    """The row's change from the reference row over the seeds both have, paired by seed, and
    its standard error (`paired_change`)."""
    return paired_change(label, *by_seed(row, base, label)[:2])


def paper_change(label: str, sweep, row: str, base: str) -> float:
    """The paper's change of `row` from its reference, in the units of `change`: from the
    paper's numbers of `base`, or of the row's own baseline in the paper where the sweep names
    one (`Sweep.paper_reference`); nan if it has none."""
    start = sweep.paper_reference.get(row, {}).get(label,
                                                   sweep.paper.get(base, {}).get(label))
    if label not in sweep.paper.get(row, {}) or start is None:
        return math.nan
    a = scale(label, np.float64(sweep.paper[row][label]))
    b = scale(label, np.float64(start))
    return float(100 * (a / b - 1) if "perplexity" in label else a - b)


def _digits(label: str) -> int:
    return 1 if "perplexity" in label else 3 if "loss" in label or "mse" in label else 2


def _mean_std(values: np.ndarray, digits: int) -> str:
    """'mean ± sample std' at `digits` decimals; the mean alone for a single value."""
    spread = f" ± {values.std(ddof=1):.{digits}f}" if values.size > 1 else ""
    return f"{values.mean():.{digits}f}{spread}"


def _value(label: str, values) -> str:
    return _mean_std(scale(label, np.asarray(values, np.float64)), _digits(label))


def _delta(label: str, delta: float, se: float) -> str:
    unit = "%" if "perplexity" in label else ""
    digits = 1 if unit else _digits(label)
    error = "" if math.isnan(se) else f" ± {se:.{digits}f}"
    return f"{delta:+.{digits}f}{unit}{error}"


def _minutes(seconds) -> str:
    """Mean (± sample std) of runs' wall times in minutes; '-' where a result.json's is not a
    number."""
    minutes = np.asarray(seconds, np.float64) / 60
    return "-" if np.isnan(minutes).any() else _mean_std(minutes, 1)


def _best(sweep: Sweep, runs: dict) -> str:
    label = sweep.label(sweep.metrics[0])
    means = {row: float(np.mean(values[label])) for row, values in runs.items()
             if not sweep.repeated(row, label)}
    return (max if sweep.metrics[0].better == "max" else min)(means, key=means.get)


def provenance(folder: str, sweep: Sweep, runs: dict, results: str | Path = RESULTS) -> str:
    """Where the table's numbers are recorded (each stage of each of `runs`, as `load` gives
    them: a result.json each, train/sweep_report.collect), and what the records say of machine
    and code."""
    paths = [Path(results) / folder / row / f"seed_{seed}" / stage.name / "result.json"
             for row in runs for seed in runs[row]["seed"] for stage in sweep.stages]
    records = [r["record"] for r in (json.loads(p.read_text()) for p in paths) if "record" in r]
    where = (f"{len(paths)} run{'' if len(paths) == 1 else 's'}, each recorded in "
             f"`notebooks/results/{folder}/<row>/seed_<k>/<stage>/result.json`")
    if not records:
        return (f"{where}; these runs predate run records: their result.json holds no machine, "
                "date or code version.")
    machines = sorted({f"{r['machine']['cpu']} ({r['machine']['usable_cpus']} of "
                       f"{r['machine']['cpu_count']} cores, {r['machine']['backend']})"
                       for r in records})
    commits = sorted({str(r["code"]["commit"])[:10] for r in records})
    dates = sorted(r["date"][:10] for r in records)
    dirty = sum(r["code"]["dirty"] is True for r in records)
    unflagged = sum("xla_flags" not in r["machine"] for r in records)
    caveats = "".join([
        f"; {dirty} of them made with uncommitted changes to that code" if dirty else "",
        f"; {unflagged} of them from before records kept the XLA flags (how many threads ran "
        "is not recorded)" if unflagged else ""])
    return (f"{where}; {len(records)} with their run record: {', '.join(machines)}, "
            f"{dates[0]} to {dates[-1]}, code {', '.join(commits)}{caveats}.")


def shown_metrics(sweep: Sweep) -> list[str]:
    """The metrics a sweep's table and figure compare with the reference row: those the paper
    reports, or every metric of a sweep with no paper numbers (a claim that no table of the
    paper measures)."""
    labels = [sweep.label(m) for m in sweep.metrics]
    with_paper = [label for label in labels if any(label in v for v in sweep.paper.values())]
    return with_paper or labels


def markdown_table(folder: str, sweep: Sweep, runs: dict, results: str | Path = RESULTS) -> str:
    """Mean ± sample std over seeds per row; for every metric the paper reports, the row's
    change from the reference (± its standard error) beside the paper's value and change, or,
    for a sweep without a reference row, the paper's value alone."""
    reference = SWEEPS[folder].reference
    labels = [sweep.label(m) for m in sweep.metrics]
    with_paper = {label for label in labels if any(label in v for v in sweep.paper.values())}
    compared = set() if reference is None else set(shown_metrics(sweep))
    head = ["row", "seeds"]
    for label in labels:
        head.append(f"{label} ({'higher' if _better(sweep, label) == 'max' else 'lower'} "
                    "is better)")
        if label in compared:
            head.append(f"Δ vs `{reference}` ± s.e.")
        if label in with_paper:
            head.append(f"paper {label}" + ("" if reference is None else " (Δ)"))
    wall_clock = SWEEPS[folder].wall_clock
    if wall_clock:
        head.append("wall time per seed (min)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best = _best(sweep, runs)
    for row, values in runs.items():
        cells = [f"**`{row}`**" if row == best else f"`{row}`", str(len(values["seed"]))]
        for label in labels:
            same = sweep.repeated(row, label)
            cells.append(f"= `{same}`" if same else _value(label, values[label]))
            if label in compared:
                cells.append("-" if same or row == reference or reference not in runs else
                             _delta(label, *change(label, values, runs[reference])))
            if label not in with_paper:
                continue
            paper = sweep.paper.get(row, {}).get(label)
            if paper is None:
                cells.append("-")
            else:
                value = f"{scale(label, paper):.2f}"
                shift = paper_change(label, sweep, row, reference)
                cells.append(value if row == reference or math.isnan(shift) else
                             f"{value} ({_delta(label, shift, math.nan)})")
        if wall_clock:
            cells.append(_minutes(values["wall_s"]))
        lines.append("| " + " | ".join(cells) + " |")
    percent = "; accuracies in %" if any(in_percent(label) for label in labels) else ""
    relative = (f" (perplexity: in % of `{reference}`'s)"
                if any("perplexity" in label for label in compared) else "")
    delta = ("" if reference is None else
             f" Δ: the row minus `{reference}`, paired by seed, ± the standard error of the "
             f"per-seed differences{relative}.")
    wall = (" Wall time: each run's measured total over its stages, start-up and compilation "
            "included, the budget the rows are compared at." if wall_clock else "")
    notes = [f"**{sweep.title}** (`{sweep_command(folder)}`): mean ± sample std over "
             f"seeds{percent}.{delta} Best row by {labels[0]} in bold.{wall}"]
    if sweep.paper_note:
        notes.append(f"Paper: {sweep.paper_note}")
    missing = missing_runs(sweep, runs)
    if missing:
        notes.append(f"Not recorded yet, so not in the table: {', '.join(missing)}.")
    notes.append(provenance(folder, sweep, runs, results))
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def _better(sweep: Sweep, label: str) -> str:
    return next(m.better for m in sweep.metrics if sweep.label(m) == label)
