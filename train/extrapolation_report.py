"""python -m train.extrapolation_report WORKDIR [--config FILE[:ARG]] [--out DIR]

The length-extrapolation sweep (configs/ablations/lm_extrapolation.py, "Train Short, Test Long",
Press et al. 2022) from its runs' records in WORKDIR (train/sweep_report.collect):
  DIR/extrapolation.png   perplexity against the eval length, one line per position encoding
                          (the mean over seeds, the seeds' range as a band), and beside it the
                          paper's lines at its nearest lengths (its Table 3, trained on 1,024)
  DIR/findings.md         each of the paper's findings the sweep declares, judged seed by seed
                          (train/findings.py: reproduced / direction only / not reproduced /
                          inconclusive / not testable at this scale)
DIR defaults to WORKDIR; either may be a gs:// URL (train/storage.py). A row or seed without a
finished run is left out and named.

The committed sweep (notebooks/results/lm_extrapolation, train/sweep_compare.py SWEEPS) draws
the same figure through train/sweep_figures.py and judges the same findings in docs/findings.md;
this report works on any workdir, a sweep being run included.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys

import numpy as np
from etils import epath

from train import findings, storage
from train.config import ConfigError
from train.sweep_compare import SWEEPS, missing_runs, runs_of
from train.sweep_report import collect
from train.sweep_spec import Sweep, load_sweep_file

CONFIG = "configs/ablations/lm_extrapolation.py"
REFERENCE = SWEEPS["lm_extrapolation"].reference  # the findings' default second row
_LENGTH = re.compile(r"^perplexity_(\d+)$")


def lengths_of(sweep: Sweep) -> list[tuple[int, str]]:
    """(eval length, metric label) of every perplexity metric of the sweep, shortest first."""
    found = [(int(m.group(1)), label) for label in (sweep.label(x) for x in sweep.metrics)
             if (m := _LENGTH.match(label))]
    if not found:
        raise ValueError(f"{sweep.title}: no perplexity_<length> metric to plot")
    return sorted(found)


def figure(sweep: Sweep, runs: dict):
    """The matplotlib Figure (module docstring)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    lengths = lengths_of(sweep)
    x = [n for n, _ in lengths]
    colors = {row: f"C{i}" for i, row in enumerate(sweep.rows)}  # one colour a row, both panels
    panels = 2 if sweep.paper else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.2), squeeze=False)
    ours = axes[0][0]
    for row, values in runs.items():
        seeds = np.stack([values[label] for _, label in lengths], axis=1)  # [seeds, lengths]
        n = len(seeds)
        ours.plot(x, seeds.mean(0), "o-", color=colors[row],
                  label=f"{row} ({n} seed{'s' if n > 1 else ''})")
        ours.fill_between(x, seeds.min(0), seeds.max(0), color=colors[row], alpha=0.2)
    ours.set(xscale="log", yscale="log", xlabel="eval length (tokens)",
             ylabel="validation perplexity", title=f"ours: trained on {x[0]} tokens")
    ours.set_xticks(x, [str(n) for n in x])
    ours.xaxis.set_tick_params(which="minor", bottom=False, labelbottom=False)
    ours.legend(fontsize=8)
    if sweep.paper:
        paper = axes[0][1]
        multiples = [n // x[0] for n in x]
        for row, values in sweep.paper.items():
            paper.plot(multiples, [values[label] for _, label in lengths], "x--",
                       color=colors[row], label=row)
        paper.set(xscale="log", yscale="log", xlabel="eval length / training length",
                  ylabel="perplexity", title="Press et al. 2022, Table 3 (WikiText-103)")
        paper.set_xticks(multiples, [f"{m}x" for m in multiples])
        paper.xaxis.set_tick_params(which="minor", bottom=False, labelbottom=False)
        paper.legend(fontsize=8)
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 130, not 1.3 x 10^2
    for ax in fig.axes:
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    fig.suptitle(sweep.title, fontsize=10)
    fig.tight_layout()
    return fig


def findings_markdown(sweep: Sweep, runs: dict, workdir: epath.Path) -> str:
    """One line per declared finding: the claim, the paper's numbers, ours (Δ ± s.e. in % of
    the second series' mean, n seeds) and the verdict (train/findings.py)."""
    lines = ["| finding | paper | ours: Δ ± s.e. (seeds) | verdict |", "|---|---|---|---|"]
    for finding in sweep.findings:
        j = findings.judge(finding, sweep, runs, REFERENCE, workdir.parent, workdir.name)
        ours = "-" if np.isnan(j.delta) else f"{j.delta:+.1f}% ± {j.se:.1f} ({j.seeds})"
        verdict = j.verdict + (f": {j.reason}" if j.reason else "")
        lines.append(f"| {finding.claim} | {finding.paper} | {ours} | {verdict} |")
    return "\n".join(lines) + "\n"


def report(workdir: str | os.PathLike, config: str = CONFIG,
           out: str | os.PathLike | None = None) -> list[epath.Path]:
    """Writes the figure and the findings (module docstring); returns their paths.
    FileNotFoundError when the workdir holds no finished run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workdir = storage.run_path(workdir)
    sweep = load_sweep_file(config)
    runs = runs_of(sweep, collect(sweep, workdir) if workdir.is_dir() else [])
    if not runs:
        raise FileNotFoundError(f"{workdir} holds no finished run of {config}: `python -m "
                                f"train.sweep --config {config} --workdir {workdir}` makes them")
    out = workdir if out is None else storage.run_path(out)
    storage.make_folder(out)
    fig = figure(sweep, runs)
    paths = [out / "extrapolation.png", out / "findings.md"]
    image = io.BytesIO()  # matplotlib would take a gs:// URL for a local file name
    fig.savefig(image, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    storage.write_atomically(paths[0], image.getvalue())
    missing = missing_runs(sweep, runs)
    note = f"\nNot finished yet, so left out: {', '.join(missing)}.\n" if missing else ""
    storage.write_atomically(paths[1], findings_markdown(sweep, runs, workdir) + note)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.extrapolation_report",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", help="the sweep's --workdir (a folder or gs:// URL)")
    parser.add_argument("--config", default=CONFIG, help="the sweep config (default %(default)s)")
    parser.add_argument("--out", help="where to write (default: the workdir)")
    args = parser.parse_args(argv)
    try:
        paths = report(args.workdir, args.config, args.out)
    except (FileNotFoundError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(os.fspath(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
