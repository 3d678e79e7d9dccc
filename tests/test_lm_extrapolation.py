"""The "train short, test long" sweep (configs/ablations/lm_extrapolation.py): its rows and evals,
the paper's numbers and findings, its smoke runs end to end, and the report
(train/extrapolation_report.py) with its figure and verdicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sweep_helpers import run_config, run_sweep

from configs.ablations import lm_extrapolation as lx
from models import position
from train import extrapolation_report, sweep as sweep_lib

CONFIG = "configs/ablations/lm_extrapolation.py"


def test_every_encoding_trains_at_one_length_and_is_scored_at_four():
    from models.decoder_lm import POSEMB_KINDS

    sweep = sweep_lib.load_sweep_file(CONFIG)
    assert sorted(sweep.rows) == sorted(POSEMB_KINDS) and sweep.seeds == 3
    assert [sweep.label(m) for m in sweep.metrics] == [
        "perplexity_64", "perplexity_128", "perplexity_256", "perplexity_512"]
    for row in sweep.rows:
        config = run_config(sweep_lib.plan(sweep, Path("w"), [row], [0], [])[0])
        assert config.model.posemb == row and config.data.max_length == 64
        assert tuple(config.task.eval_lengths) == (64, 128, 256, 512)
        assert config.model.max_length == 512  # the learned table covers the longest eval
        assert config.task.eval_tokens == 0      # the whole split, not Austen and Brown alone
        assert config.model.scale_embeddings     # the paper's fairseq models scale them
        # ... drawn with std 1 / sqrt(d): a token's scaled embedding (norm std d) outweighs a row
        # of the sinusoid table, so the sinusoidal model does not start as a model of positions.
        d = config.model.d_model
        assert config.model.embedding_std == pytest.approx(d ** -0.5)
        sinusoid = np.linalg.norm(position.sinusoidal_table(8, d)[5])
        assert config.model.embedding_std * d > 1.3 * sinusoid
        # Every T5 bucket an eval meets (distances up to 511) is one that training (0..63) met,
        # the last (all longer distances) included.
        def buckets(length):
            return set(np.asarray(position.t5_relative_position_bucket(
                -np.arange(length), bidirectional=False, num_buckets=config.model.t5_num_buckets,
                max_distance=config.model.t5_max_distance)).tolist())

        assert buckets(512) <= buckets(config.data.max_length)
        assert config.model.t5_num_buckets - 1 in buckets(config.data.max_length)
    # The paper's Table 3 (L = 1,024) at 1,024 / 2,024 / 4,024 / 8,024 tokens.
    assert sweep.paper["alibi"] == {"perplexity_64": 18.66, "perplexity_128": 18.05,
                                    "perplexity_256": 17.95, "perplexity_512": 17.96}
    assert sweep.paper["sinusoidal"]["perplexity_512"] == 284.88
    assert {f.against_metric for f in sweep.findings} == {"perplexity_64", ""}


def _runs(values: dict[str, tuple[float, ...]], noise: float = 0.01) -> dict:
    """Three seeds per row around `values` (perplexity at 1x .. 8x), seeds 0, 1, 2."""
    rng = np.random.default_rng(0)
    runs = {}
    for row, curve in values.items():
        runs[row] = {f"perplexity_{64 * m}": np.array(curve[i]) * (1 + noise * rng.normal(size=3))
                     for i, m in enumerate((1, 2, 4, 8))}
        runs[row]["seed"] = np.arange(3)
    return runs


def test_the_papers_findings_are_judged_from_the_runs(tmp_path):
    sweep = sweep_lib.load_sweep_file(CONFIG)
    like_paper = _runs({"sinusoidal": (60, 90, 200, 400), "learned": (61, 300, 900, 2000),
                        "rope": (59, 70, 90, 120), "t5": (58, 57, 60, 70),
                        "alibi": (57, 55, 54, 54), "none": (65, 66, 70, 80)})
    text = extrapolation_report.findings_markdown(sweep, like_paper, tmp_path / "sweep")
    verdicts = [line.rsplit("|", 2)[1].strip() for line in text.splitlines()[2:]]
    assert verdicts == ["reproduced"] * len(sweep.findings)
    flat = _runs({row: (60, 60, 60, 60) for row in sweep.rows}, noise=0.0)
    flat["sinusoidal"]["perplexity_512"] = flat["sinusoidal"]["perplexity_64"] * [0.9, 0.8, 0.85]
    text = extrapolation_report.findings_markdown(sweep, flat, tmp_path / "sweep")
    sinusoidal = next(line for line in text.splitlines() if "Sinusoidal positions" in line)
    assert "not reproduced" in sinusoidal and "at 64 tokens a model has little" in sinusoidal


def test_the_smoke_sweep_runs_and_reports(english_lm_data_root, tmp_path):
    workdir = tmp_path / "sweep"
    run_sweep(workdir, english_lm_data_root, "--rows", "learned,alibi", "--seeds", "1",
              config=f"{CONFIG}:smoke")
    paths = extrapolation_report.report(workdir, f"{CONFIG}:smoke")
    assert paths[0].stat().length > 10_000  # a PNG with two lines
    text = paths[1].read_text()
    assert "Not finished yet, so left out: sinusoidal seed 0, sinusoidal seed 1" in text
    assert "learned seed 1" in text and "learned seed 0" not in text
    sweep = sweep_lib.load_sweep_file(f"{CONFIG}:smoke")
    runs = extrapolation_report.runs_of(sweep, extrapolation_report.collect(sweep, workdir))
    assert sorted(runs) == ["alibi", "learned"]
    for row in runs.values():  # every length scored
        assert all(np.all(np.isfinite(row[f"perplexity_{n}"])) for n in (16, 32, 64, 128))
        assert list(row["seed"]) == [0]
    with pytest.raises(FileNotFoundError, match="holds no finished run"):
        extrapolation_report.report(tmp_path / "empty", f"{CONFIG}:smoke")
    assert lx.perplexity_at(8) == "perplexity_512"
