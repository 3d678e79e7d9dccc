"""python -m train.sweep_figures writes the figures the docs embed, from the committed sweep
records; the committed PNGs are what it writes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from train import sweep_figures
from train.sweep_compare import SWEEPS

REPO = Path(__file__).resolve().parents[1]
FIGURE_LINK = re.compile(r"!\[[^\]]*\]\(([^)]*notebooks/figures/[^)]+)\)")


def test_the_committed_figures_are_what_the_command_writes_from_the_records(tmp_path):
    assert sweep_figures.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{f}.png" for f in SWEEPS)
    for folder in SWEEPS:
        written = matplotlib.image.imread(tmp_path / f"{folder}.png")
        committed = matplotlib.image.imread(REPO / "notebooks" / "figures" / f"{folder}.png")
        assert written.shape == committed.shape and np.array_equal(written, committed), (
            f"notebooks/figures/{folder}.png is not what its records draw: "
            "`python -m train.sweep_figures` writes it again")


def test_the_docs_embed_only_figures_the_command_writes():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
    embedded = {Path(link).name for page in pages for link in FIGURE_LINK.findall(page.read_text())}
    assert embedded and embedded <= {f"{folder}.png" for folder in SWEEPS}, embedded
    assert "python -m train.sweep_figures" in (REPO / "docs" / "reproductions.md").read_text()


def test_a_sweep_without_records_is_an_error_naming_the_command(tmp_path, capsys):
    assert sweep_figures.main(["--results", str(tmp_path), "--out", str(tmp_path / "f")]) == 2
    error = capsys.readouterr().err
    assert "holds no finished run of the sweep configs/ablations/vit_posemb.py" in error
    assert ("python -m train.sweep --config configs/ablations/vit_posemb.py --workdir "
            "workdirs/vit_table8") in error
    assert not (tmp_path / "f" / "vit_table8.png").exists()


def test_a_sweep_with_a_run_missing_is_an_error_naming_the_run(tmp_path, capsys):
    """A figure drawn without one seed of one row would look complete: no figure, the run named."""
    results = tmp_path / "results"
    shutil.copytree(REPO / "notebooks" / "results", results)
    (results / "vit_table8" / "learned_2d" / "seed_2" / "train" / "result.json").unlink()
    assert sweep_figures.main(["--results", str(results), "--out", str(tmp_path / "f")]) == 2
    error = capsys.readouterr().err
    assert (f"{results / 'vit_table8'} has no finished record of 1 of the sweep's 39 "
            "runs (learned_2d seed 2)") in error
    assert not (tmp_path / "f" / "vit_table8.png").exists()


def test_a_sweep_in_progress_draws_its_records_and_names_the_runs_not_recorded(tmp_path):
    """While a committed sweep is declared in progress, its figure shows the rows recorded and
    its title names every run missing; declared complete, the same records are an error."""
    import dataclasses

    import matplotlib
    matplotlib.use("Agg")

    from train.sweep_compare import load, missing_runs

    results = tmp_path / "results"
    shutil.copytree(REPO / "notebooks" / "results" / "bert_table8", results / "bert_table8")
    (results / "bert_table8" / "80-0-20" / "seed_1" / "classify" / "result.json").unlink()
    in_progress = dataclasses.replace(SWEEPS["bert_table8"], in_progress=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(SWEEPS, "bert_table8", in_progress)
        sweep, runs = load("bert_table8", results)
        assert missing_runs(sweep, runs) == ["80-0-20 seed 1"]
        title = sweep_figures.figure("bert_table8", sweep, runs)._suptitle.get_text()
    assert "20 of 21 runs recorded so far; not yet: 80-0-20 (seed 1)" in title
    with pytest.raises(FileNotFoundError, match=r"80-0-20 seed 1"):
        load("bert_table8", results)


def test_a_sweep_without_a_reference_row_draws_no_change_panel():
    """DistilBERT Table 1's rows are tasks, each student judged against its own teacher: one
    panel per metric with the paper's share on the same axis, no blank change panel and no
    second scale."""
    import matplotlib
    matplotlib.use("Agg")

    from train.sweep_compare import load

    assert SWEEPS["distilbert_table1"].reference is None
    sweep, runs = load("distilbert_table1")
    fig = sweep_figures.figure("distilbert_table1", sweep, runs)
    assert [ax.get_title() for ax in fig.axes] == ["score_of_teacher per row (dots: seeds)"]
    assert all(ax.axison for ax in fig.axes)
    (ax,) = fig.axes
    paper = [line for line in ax.get_lines() if line.get_label() == "paper"]
    assert len(paper) == 1 and np.allclose(paper[0].get_ydata(), 100 * 77.0 / 79.5)


def test_a_sweep_without_paper_numbers_draws_every_metric_it_measures():
    """The limited-labels sweep tests a claim of the lecture notes that no table of the paper
    measures: its figure still shows each metric per row and each row's change from the
    reference, in the metric's own units, rather than no panel at all."""
    import matplotlib
    matplotlib.use("Agg")

    from train.sweep_compare import CommittedSweep
    from train.sweep_spec import load_sweep_file

    sweep = load_sweep_file(str(REPO / "configs" / "ablations" / "mae_limited_labels.py"))
    assert not sweep.paper
    labels = [sweep.label(m) for m in sweep.metrics]
    seeds = np.arange(3)
    runs = {"mae": {"seed": seeds, **{label: np.array([0.7, 0.72, 0.71]) for label in labels}},
            "untrained": {"seed": seeds, **{label: np.array([0.6, 0.61, 0.62])
                                            for label in labels}}}
    committed = CommittedSweep("limited", "configs/ablations/mae_limited_labels.py", "untrained")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(SWEEPS, "limited", committed)
        fig = sweep_figures.figure("limited", sweep, runs)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [title for label in labels for title in (
        f"{label} per row (dots: seeds)", f"{label}: change from 'untrained'")]
    units = [ax.get_ylabel() for ax in fig.axes[1::2]]
    assert units == ["points" if "accuracy" in label else "change" for label in labels]
    bars = fig.axes[1].patches  # the 1%-label accuracy: mae's change from untrained, in points
    assert np.isclose(bars[0].get_height(), 100 * (0.71 - 0.61))


def test_the_extrapolation_sweep_draws_perplexity_against_length():
    """`figure='lengths'` (the train-short-test-long sweep): one line per encoding through the
    seeds' mean at each eval length, the paper's lines beside it, and the runs not recorded named
    in the title as for the other kind; an unknown kind is refused with the two known."""
    import dataclasses

    import matplotlib
    matplotlib.use("Agg")

    from train.sweep_compare import missing_runs
    from train.sweep_spec import load_sweep_file

    sweep = load_sweep_file(str(REPO / SWEEPS["lm_extrapolation"].config))
    lengths = (64, 128, 256, 512)
    runs = {row: {"seed": np.arange(3), **{f"perplexity_{n}": np.array([1.0, 2.0, 3.0]) * (i + n)
                                           for n in lengths}}
            for i, row in enumerate(sweep.rows)}
    del runs["rope"]
    in_progress = dataclasses.replace(SWEEPS["lm_extrapolation"], in_progress=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(SWEEPS, "lm_extrapolation", in_progress)
        fig = sweep_figures.figure("lm_extrapolation", sweep, runs)
        with pytest.raises(ValueError, match="figure='bars' is not a kind of sweep figure; use "
                                             "'rows' or 'lengths'"):
            patch.setitem(SWEEPS, "lm_extrapolation",
                          dataclasses.replace(in_progress, figure="bars"))
            sweep_figures.figure("lm_extrapolation", sweep, runs)
    ours, paper = fig.axes
    assert ours.get_title() == "ours: trained on 64 tokens"
    lines = {line.get_label().split(" (")[0]: line for line in ours.get_lines()}
    assert sorted(lines) == sorted(set(sweep.rows) - {"rope"})
    i = list(sweep.rows).index("alibi")
    assert np.allclose(lines["alibi"].get_ydata(), [2.0 * (i + n) for n in lengths])
    assert {line.get_label() for line in paper.get_lines()} == set(sweep.paper)
    missing = ", ".join(str(s) for s in range(3))
    assert f"15 of 18 runs recorded so far; not yet: rope (seed {missing})" in " ".join(
        fig._suptitle.get_text().split())
    assert missing_runs(sweep, runs) == [f"rope seed {s}" for s in range(3)]


def test_a_seed_the_sweep_does_not_declare_is_refused(tmp_path):
    """A fourth seed's records in a committed 3-seed sweep would join its row's mean while the
    others are of three: refused, naming the run."""
    from train.sweep_compare import load
    from train.sweep_spec import SweepError

    results = tmp_path / "results"
    shutil.copytree(REPO / "notebooks" / "results" / "bert_table8", results / "bert_table8")
    row = results / "bert_table8" / "80-0-20"
    shutil.copytree(row / "seed_2", row / "seed_3")
    with pytest.raises(SweepError, match=r"80-0-20 seed 3; declare seeds=4"):
        load("bert_table8", results)
