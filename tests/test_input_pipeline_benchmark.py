"""benchmarks/input_pipeline.py and its stand-in datasets (benchmarks/standin_data.py): the
stand-ins are what they claim (ImageNet's JPEG sizes, natural images' spectrum, every paragraph
of the prose kept), they are read through `tfds.data_source` under the catalog's names, and each
recipe's training pipeline is timed with the rates and the cores a host needs computed from the
launch page's estimates."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import input_pipeline, standin_data
from train import recipe_costs


def test_the_imagenet_standin_has_imagenets_mean_jpeg_size_and_sizes():
    examples, about = standin_data.imagenet_examples(8, seed=0)
    sizes = [len(example["image"]) for example in examples]
    assert about["mean_bytes"] == pytest.approx(np.mean(sizes))
    assert abs(about["mean_bytes"] / standin_data.IMAGENET_MEAN_BYTES - 1) < 0.05, about
    assert about["mean_pixels"] == np.mean([h * w for h, w in standin_data.IMAGE_SHAPES])
    assert [e["label"] for e in examples] == list(range(8))


def test_standin_images_have_the_1_over_f_spectrum_of_natural_images():
    """The power spectrum's log-log slope over radial frequency, fitted here, is near -2
    (amplitude 1/f); white noise would give 0."""
    image = standin_data.natural_image(np.random.default_rng(1), 256, 256).astype(float)
    power = np.abs(np.fft.fft2(image.mean(axis=-1) - image.mean())) ** 2
    f = np.hypot(*np.meshgrid(np.fft.fftfreq(256), np.fft.fftfreq(256), indexing="ij"))
    bands = np.geomspace(2 / 256, 0.4, 12)
    centres, means = [], []
    for lo, hi in zip(bands[:-1], bands[1:]):
        ring = (f >= lo) & (f < hi)
        centres.append(np.sqrt(lo * hi))
        means.append(power[ring].mean())
    slope = np.polyfit(np.log(centres), np.log(means), 1)[0]
    assert -2.4 < slope < -1.6, slope


def test_articles_keep_every_paragraph_in_order_at_least_min_chars_each():
    paragraphs = [f"Sentence {i} of the text. " * (i % 5 + 1) for i in range(40)]
    articles = list(standin_data.articles([("doc", "\n".join(paragraphs))], min_chars=300))
    assert len(articles) > 3
    kept = []
    for article in articles:
        assert article["title"].startswith("doc (")
        lines = article["text"].split("\n\n")
        body = [line for line in lines if line.endswith(".")]
        # a heading line before every HEADING_EVERY-th paragraph after the first ones
        assert [i for i, line in enumerate(lines) if not line.endswith(".")] == list(
            range(standin_data.HEADING_EVERY, len(lines), standin_data.HEADING_EVERY + 1))
        assert sum(len(p) for p in body) >= 300 or article is articles[-1]
        kept += body
    assert [p.strip() for p in kept] == [p.strip() for p in paragraphs]


def test_the_benchmark_times_each_recipes_pipeline_on_the_standins(tmp_path, english_lm_env):
    from train import records, run_record
    from train.config import load_config_file

    out = tmp_path / "input.json"
    report = input_pipeline.main(["--smoke", "--seconds", "0.2", "--images", "8", "--batch", "4",
                                  "--core", "-1", "--json", str(out)])
    assert report["standins"][standin_data.IMAGENET]["train"] == 8
    assert report["standins"][standin_data.WMT14]["test"] > 0
    rows = report["rows"]
    assert len(report["ratios"]) == len(rows) * len(recipe_costs.TARGETS)
    for row, spec in zip(rows, input_pipeline.rows(smoke=True)):
        assert row["examples"] == 4 * row["batches"] and row["batches"] >= 2
        assert row["rate"] == pytest.approx(row["examples"] / row["seconds"])
        phase = recipe_costs.phases(load_config_file(spec["config"]))[spec["phase"]]
        assert row["example"] == phase.length
        for target in recipe_costs.TARGETS:
            step = recipe_costs.step_seconds(phase, target, recipe_costs.DEFAULT_MFU)
            assert row["required"][target.name] == pytest.approx(
                phase.batch / step / target.hosts)
            cores = report["ratios"][input_pipeline.ratio_key(row, target.name)]
            assert cores == pytest.approx(row["required"][target.name] / row["rate"])
    bert = load_config_file(rows[1]["config"]).data
    assert rows[2]["overrides"]["data.max_seq_length"] == str(bert.phase2_max_seq_length)
    assert rows[2]["example"] == f"{bert.phase2_max_seq_length} tokens" != rows[1]["example"]
    assert [r["worker_count"] for r in rows] == [0, 0, 0, 0]  # one process: one core's rate
    assert report["shared"] == {}  # the smoke rows' configs differ from the full recipes'
    record = run_record.load(out)
    assert record["metrics"]["table"] == input_pipeline.markdown(report)
    assert "not pinned" in record["metrics"]["table"]
    with pytest.raises(run_record.RecordError, match="stands for `python -m benchmarks.input"):
        records.save(out, "bench_input_pipeline", runs_dir=tmp_path / "runs")


def test_recipes_with_the_same_data_config_share_a_timed_row():
    """BERT-large reads as BERT-base does and the Transformer big as base: their rows take the
    timed rate with their own phases' required rates (a bigger model, slower steps, fewer
    examples a second)."""
    from train.config import load_config_file

    timed = [{"recipe": r.name, "config": r.config, "phase": phase, "rate": 100.0 + phase,
              "example": "x"} for r in recipe_costs.RECIPES
             for phase in ((0, 1) if r.name.startswith("BERT") else (0,))
             if r.name in ("BERT-base, Wikipedia", "Transformer base, WMT 2014 en-de")]
    shared = input_pipeline.shared_rows(timed)
    assert shared == {"BERT-large, Wikipedia": "BERT-base, Wikipedia",
                      "Transformer big, WMT 2014 en-de": "Transformer base, WMT 2014 en-de"}
    rows = input_pipeline.sharing_rows(timed, shared)
    assert [(r["recipe"], r["phase"], r["rate"]) for r in rows] == [
        ("BERT-large, Wikipedia", 0, 100.0), ("BERT-large, Wikipedia", 1, 101.0),
        ("Transformer big, WMT 2014 en-de", 0, 100.0)]
    large = load_config_file("configs/bert/pretrain.py:size=large,data=wikipedia")
    assert rows[1]["required"] == input_pipeline.required_rates(large, 1)
    base = input_pipeline.required_rates(
        load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia"), 1)
    assert all(rows[1]["required"][t] < base[t] for t in base)


def test_targets_whose_hosts_need_the_same_rate_share_a_column():
    rows = [{"required": {"1 node, 8 x H100 SXM": 10.0, "SLURM, 4 nodes x 8 H100 SXM": 10.0,
                          "TPU v5p-64 slice (32 chips, 8 hosts)": 3.0}},
            {"required": {"1 node, 8 x H100 SXM": 5.0, "SLURM, 4 nodes x 8 H100 SXM": 5.0,
                          "TPU v5p-64 slice (32 chips, 8 hosts)": 5.0}}]
    assert input_pipeline.target_columns({"rows": rows}) == [
        ["1 node, 8 x H100 SXM", "SLURM, 4 nodes x 8 H100 SXM"],
        ["TPU v5p-64 slice (32 chips, 8 hosts)"]]
    rows[1]["required"]["SLURM, 4 nodes x 8 H100 SXM"] = 6.0
    assert len(input_pipeline.target_columns({"rows": rows})) == 3
