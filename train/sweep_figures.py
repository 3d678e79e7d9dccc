"""python -m train.sweep_figures [--results DIR] [--out DIR]

Writes the figure of every committed sweep that the docs embed, notebooks/figures/<sweep>.png,
from the runs' records in notebooks/results/<sweep>/ (train/sweep_compare.py): for each metric
the paper reports, ours per row (each seed, and mean ± std; the paper on its own axis) and each
row's change from the reference row, ours (± 1 standard error) beside the paper's; or, for the
length-extrapolation sweep, perplexity against the eval length (`CommittedSweep.figure`). The
figure of a sweep declared in progress (train/sweep_compare.py SWEEPS) names the runs not
recorded yet.
notebooks/ablation_results.ipynb draws the same figures.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import numpy as np

from train import extrapolation_report
from train.sweep_compare import (RESULTS, SWEEPS, change, in_percent, load, missing_runs,
                                  paper_change, scale, shown_metrics)
from train.sweep_spec import Sweep

FIGURES = RESULTS.parent / "figures"


def figure(folder: str, sweep: Sweep, runs: dict):
    """The matplotlib Figure of one sweep, of its kind (`CommittedSweep.figure`): 'rows', one
    line of two panels per metric with paper numbers; 'lengths', perplexity against the eval
    length (train/extrapolation_report.py). Its title names the runs not recorded yet."""
    kind = SWEEPS[folder].figure
    if kind == "rows":
        fig = _rows_figure(folder, sweep, runs)
    elif kind == "lengths":
        fig = extrapolation_report.figure(sweep, runs)
    else:
        raise ValueError(f"{folder}: figure={kind!r} is not a kind of sweep figure; "
                         "use 'rows' or 'lengths' (train/sweep_compare.py SWEEPS)")
    missing = missing_runs(sweep, runs)  # 'ROW seed K', rows in order
    by_row = {}
    for run in missing:
        row, seed = run.rsplit(" seed ", 1)
        by_row.setdefault(row, []).append(seed)
    recorded = len(sweep.rows) * sweep.seeds - len(missing)
    size = {"fontsize": 10} if kind == "lengths" else {}  # as extrapolation_report titles it
    fig.suptitle(sweep.title if not missing else textwrap.fill(
        f"{sweep.title}: {recorded} of {len(sweep.rows) * sweep.seeds} runs recorded so far; "
        "not yet: " + "; ".join(f"{row} (seed {', '.join(seeds)})"
                                for row, seeds in by_row.items()), 150), **size)
    fig.tight_layout()
    return fig


def _rows_figure(folder: str, sweep: Sweep, runs: dict):
    """One line of two panels per metric: ours per row, and each row's change from the
    reference beside the paper's."""
    import matplotlib.pyplot as plt

    reference = SWEEPS[folder].reference
    labels = shown_metrics(sweep)
    rows = list(runs)
    x = np.arange(len(rows))
    # A sweep without a reference row (rows that are not alternatives to one another) has no
    # change panel.
    changes = reference is not None
    fig, axes = plt.subplots(len(labels), 1 + changes, figsize=(13 if changes else 7,
                                                                3.6 * len(labels)), squeeze=False)
    for (ax, *ax_change), label in zip(axes, labels):
        shown = [row for row in rows if not sweep.repeated(row, label)]
        for i, row in enumerate(rows):
            if row not in shown:  # another row's model, measured again: not a point of its own
                continue
            seeds = scale(label, runs[row][label])
            ax.plot(np.full(len(seeds), i), seeds, ".", color="tab:blue", alpha=0.5)
            std = seeds.std(ddof=1) if len(seeds) > 1 else 0
            ax.errorbar(i, seeds.mean(), yerr=std, fmt="s", color="tab:blue", capsize=4)
        ax.set_ylabel(f"ours: {label}", color="tab:blue")
        paper = [(i, scale(label, np.float64(sweep.paper[r][label]))) for i, r in enumerate(rows)
                 if label in sweep.paper.get(r, {})]
        if paper and not changes:  # rows judged each on its own: a share, on the same scale
            ax.plot(*zip(*paper), "x", color="tab:red", markersize=9, mew=2, label="paper")
            ax.legend(fontsize=8)
        elif paper:  # another model, data and budget: its own scale, so that the orders compare
            twin = ax.twinx()
            twin.plot(*zip(*paper), "x", color="tab:red", markersize=9, mew=2)
            twin.set_ylabel("paper (right axis)", color="tab:red")
        ax.set_xticks(x, rows, rotation=20)
        ax.set_title(f"{label} per row (dots: seeds)")
        if not changes:
            continue
        (ax_change,) = ax_change
        if reference not in runs:
            ax_change.set_axis_off()
            continue
        ours = [change(label, runs[r], runs[reference]) if r in shown else (np.nan, np.nan)
                for r in rows]
        theirs = [paper_change(label, sweep, r, reference) for r in rows]
        beside = not np.isnan(theirs).all()  # no paper bars where the paper has no numbers
        ax_change.bar(x - 0.2 * beside, [d for d, _ in ours], 0.4,
                      yerr=np.nan_to_num([s for _, s in ours]), capsize=3, color="tab:blue",
                      label="ours ± 1 s.e.")
        if beside:
            ax_change.bar(x + 0.2, theirs, 0.4, color="tab:red", alpha=0.7, label="paper")
        ax_change.axhline(0, color="gray", lw=0.8)
        unit = ("points" if in_percent(label) or "bleu" in label else
                "% of the reference" if "perplexity" in label else "change")
        ax_change.set(ylabel=unit, title=f"{label}: change from {reference!r}")
        ax_change.set_xticks(x, rows, rotation=20)
        ax_change.legend(fontsize=8)
    return fig


def write_figures(results: Path = RESULTS, out: Path = FIGURES) -> list[Path]:
    """out/<sweep>.png for every committed sweep; FileNotFoundError if one has no records, or a
    complete sweep a run's (`load`); a sweep in progress names its missing runs in the title."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for folder in SWEEPS:
        sweep, runs = load(folder, results)
        fig = figure(folder, sweep, runs)
        paths.append(out / f"{folder}.png")
        fig.savefig(paths[-1], dpi=80, bbox_inches="tight")  # as the notebook shows it
        plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.sweep_figures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="the folder holding each sweep's folder (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=FIGURES,
                        help="where the PNGs go (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        paths = write_figures(args.results, args.out)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
