"""The tables and the plot of a sweep (train/sweep.py): DIR/results.csv, results.md, results.png.

Every row x seed found in DIR whose stages all finished and were recorded (each a result.json)
is reported. Left out of the tables and the plot, and named under the table in results.md:
  - a row x seed with a stage finished but not recorded (a final eval in its metrics.jsonl but no
    result.json: the sweep was stopped in between, or the run was made by hand), whose numbers
    have no record; the sweep's command (not --report_only) records it;
  - given the runs the sweep's current definition plans (train/sweep.py `plan`), a row x seed
    with a stage whose recorded command differs from its planned one, paths aside (a run
    finished before --allow_config_change; train/sweep_runner.py `changes`): one table never
    mixes two definitions.
A row's spread is the sample standard deviation over its seeds (ddof=1; none with one seed).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Sequence

import numpy as np
from etils import epath

from train import storage
from train.run_record import final_eval, final_train
from train.sweep_runner import Run, changes, read_result
from train.sweep_spec import Sweep, SweepError

# The runs that the sweep's current definition plans for a row and a seed (train/sweep.py plan)
Planned = Callable[[str, int], list[Run]]


def collect(sweep: Sweep, sweep_dir: epath.Path) -> list[dict]:
    """One record per row x seed whose stages all finished and were recorded: row, seed,
    {label: value}, wall_s (`gather`, no definition compared)."""
    return gather(sweep, sweep_dir)[0]


def gather(sweep: Sweep, sweep_dir: epath.Path, planned: Planned | None = None
           ) -> tuple[list[dict], list[str]]:
    """The records of `collect`, leaving out (module docstring) the row x seeds not recorded
    and, given `planned`, those trained under another definition; and a line for each of
    those: 'ROW seed K: why; what to do'."""
    records, left_out = [], []
    for row in sweep.rows:
        seed_dirs = [p for p in (sweep_dir / row).glob("seed_*") if p.name[5:].isdigit()]
        for seed_dir in sorted(seed_dirs, key=lambda p: int(p.name[5:])):
            seed = int(seed_dir.name[5:])
            runs = {run.stage: run for run in planned(row, seed)} if planned else {}
            stages, unrecorded, changed = {}, [], []
            for stage in sweep.stages:
                path = seed_dir / stage.name / "result.json"
                if path.exists():
                    stages[stage.name] = read_result(path)
                    changed += [f"{stage.name} {change}" for change in
                                (changes(stages[stage.name], runs[stage.name]) if runs else ())]
                elif final_eval(seed_dir / stage.name) is not None:
                    unrecorded.append(stage.name)
            if len(stages) + len(unrecorded) < len(sweep.stages):
                continue
            if unrecorded:
                left_out.append(f"{row} seed {seed}: finished but not recorded (no result.json "
                                f"in {', '.join(unrecorded)}): the sweep's command without "
                                "--report_only records it")
                continue
            if changed:
                left_out.append(f"{row} seed {seed}: trained under another definition "
                                f"({'; '.join(changed)}): to rerun it, move {seed_dir} aside "
                                f"(e.g. to {seed_dir.name}.old) and run the sweep again")
                continue
            values = {}
            for metric in sweep.metrics:
                stage = metric.stage or sweep.stages[-1].name
                found = (stages[stage]["metrics"] if metric.split == "eval" else
                         _train_values(stages[stage], seed_dir / stage))
                if metric.name not in found:  # a misspelt Metric gave an empty column
                    raise SweepError(f"{seed_dir / stage}: its final {metric.split} record has "
                                     f"no metric {metric.name!r}; it has {sorted(found)}")
                values[sweep.label(metric)] = found[metric.name]
            records.append({"row": row, "seed": seed, "metrics": values,
                            "wall_s": sum(s["wall_s"] for s in stages.values())})
    return records, left_out


def _train_values(result: dict, workdir: epath.Path) -> dict:
    """The last train record's metrics of a finished run: from its run record (in result.json),
    else from its workdir's metrics.jsonl."""
    record = result.get("record") or {}
    found = record.get("metrics", {}).get("train") or final_train(workdir)
    return {k: v for k, v in (found or {}).items() if k not in ("step", "split", "time")}


def summarize(sweep: Sweep, records: list[dict]) -> dict[str, dict]:
    """row -> {'n', label: (mean, std or nan), 'wall_s': mean} over the row's seeds."""
    out = {}
    for row in sweep.rows:
        mine = [r for r in records if r["row"] == row]
        summary = {"n": len(mine)}
        for key in [sweep.label(m) for m in sweep.metrics] + ["wall_s"]:
            values = np.array([r["wall_s"] if key == "wall_s" else r["metrics"][key] for r in mine],
                              dtype=np.float64)
            mean = float(values.mean()) if len(values) else math.nan
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            summary[key] = (mean, std)
        out[row] = summary
    return out


def _best(sweep: Sweep, summary: dict) -> str | None:
    metric = sweep.metrics[0]
    label = sweep.label(metric)
    scored = {row: stats[label][0] for row, stats in summary.items()
              if stats["n"] and not math.isnan(stats[label][0])
              and not sweep.repeated(row, label)}
    if not scored:
        return None
    return (max if metric.better == "max" else min)(scored, key=scored.get)


def write_csv(sweep: Sweep, records: list[dict], path: epath.Path) -> None:
    labels = [sweep.label(m) for m in sweep.metrics]
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(["row", "seed", *labels, "wall_s"])
    for record in records:
        writer.writerow([record["row"], record["seed"],
                         *(repr(record["metrics"][k]) for k in labels),
                         f"{record['wall_s']:.1f}"])
    storage.write_atomically(path, text.getvalue())


def _cell(mean: float, std: float) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.4f}" if math.isnan(std) else f"{mean:.4f} ± {std:.4f}"


def write_markdown(sweep: Sweep, summary: dict, config: str, path: epath.Path,
                   left_out: Sequence[str] = ()) -> None:
    """The table of `summary`; `config`: the sweep's --config and its --config.k=v items, as
    given; `left_out`: a line for each row x seed not in the table (`gather`)."""
    labels = [sweep.label(m) for m in sweep.metrics]
    with_paper = [k for k in labels if any(k in v for v in sweep.paper.values())]
    best = _best(sweep, summary)
    head = ["row", "n"]
    for metric, label in zip(sweep.metrics, labels):
        head.append(f"{label} ({'higher' if metric.better == 'max' else 'lower'} is better)")
        if label in with_paper:
            head.append(f"paper {label}")
    head.append("wall time per seed (s)")
    lines = [f"# {sweep.title}", "",
             f"`python -m train.sweep --config {config}`: mean ± sample std (ddof=1) over seeds "
             f"of each run's final eval; n = seeds finished. Best row by {labels[0]} in bold.", ""]
    if sweep.paper_note:
        lines += [f"Paper numbers: {sweep.paper_note}", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row, stats in summary.items():
        name = f"**{row}**" if row == best else row
        cells = [name, str(stats["n"])]
        for label in labels:
            same = sweep.repeated(row, label)
            cells.append(f"= {same}" if same and stats["n"] else _cell(*stats[label]))
            if label in with_paper:
                value = sweep.paper.get(row, {}).get(label)
                cells.append("-" if value is None else f"{value:.4f}")
        wall = stats["wall_s"][0]
        cells.append("-" if math.isnan(wall) else f"{wall:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    if left_out:
        lines += ["", "Left out of the table (n counts the seeds in it):",
                  *(f"- {line}" for line in left_out)]
    storage.write_atomically(path, "\n".join(lines) + "\n")


def write_plot(sweep: Sweep, records: list[dict], summary: dict, path: epath.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(sweep.rows)
    x = np.arange(len(rows))
    metrics = [(m, sweep.label(m)) for m in sweep.metrics]
    width = max(4.0, 1.1 * len(rows))
    figure, axes = plt.subplots(1, len(metrics), figsize=(width * len(metrics), 4), squeeze=False)
    for ax, (metric, label) in zip(axes[0], metrics):
        shown = [r for r in records if not sweep.repeated(r["row"], label)]
        for n, record in enumerate(shown):  # seeds spread a little sideways
            i = rows.index(record["row"])
            ax.plot(i + 0.04 * (record["seed"] % 5 - 2), record["metrics"][label], "o",
                    color="tab:blue", alpha=0.45, markersize=4, label="seeds" if n == 0 else None)
        means = np.array([np.nan if sweep.repeated(r, label) else summary[r][label][0]
                          for r in rows])
        stds = np.nan_to_num(np.array([summary[r][label][1] for r in rows]))
        ax.errorbar(x, means, yerr=stds, fmt="s", color="tab:blue", capsize=4,
                    label="mean ± std over seeds")
        ax.set_xticks(x, rows, rotation=30, ha="right")
        ax.set_title(f"{label} ({'higher' if metric.better == 'max' else 'lower'} is better)")
        ax.set_ylabel("ours", color="tab:blue")
        ax.grid(axis="y", alpha=0.3)
        handles = ax.get_legend_handles_labels()
        paper = [(i, sweep.paper[r][label]) for i, r in enumerate(rows)
                 if label in sweep.paper.get(r, {})]
        if paper:  # another model, data and budget: its own scale, so that the orders compare
            twin = ax.twinx()
            twin.plot(*zip(*paper), "x", color="tab:red", markersize=9, mew=2, label="paper")
            twin.set_ylabel("paper (right axis)", color="tab:red")
            handles = [a + b for a, b in zip(handles, twin.get_legend_handles_labels())]
        ax.legend(*handles, fontsize="small")
    figure.suptitle(sweep.title)
    figure.tight_layout()
    image = io.BytesIO()  # matplotlib would take a gs:// URL for a local file name
    figure.savefig(image, format="png", dpi=100)
    plt.close(figure)
    storage.write_atomically(path, image.getvalue())


def write_reports(sweep: Sweep, sweep_dir: str | os.PathLike, config: str,
                  overrides: Sequence[str] = (), planned: Planned | None = None
                  ) -> list[epath.Path]:
    """Writes results.csv, .md and .png of the sweep's recorded runs (`gather`: given `planned`,
    those of its current definition only); prints a line for each row x seed left out.
    `config` and `overrides`: the sweep's --config and --config.k=v items, for results.md."""
    sweep_dir = storage.run_path(sweep_dir)
    storage.make_folder(sweep_dir)
    records, left_out = gather(sweep, sweep_dir, planned)
    for line in left_out:
        print(f"[sweep] left out of the tables: {line}")
    summary = summarize(sweep, records)
    paths = [sweep_dir / "results.csv", sweep_dir / "results.md", sweep_dir / "results.png"]
    write_csv(sweep, records, paths[0])
    write_markdown(sweep, summary, " ".join([config, *overrides]), paths[1], left_out)
    write_plot(sweep, records, summary, paths[2])
    return paths
