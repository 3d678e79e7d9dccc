"""train/recipe_costs.py: the recipes' phases from their configs, and the step times, total
times and accelerator-hours of docs/launch.md against a plain computation of the same formula;
the XLA flags the launch page names are ones the pinned jaxlib accepts."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

from train import flops, recipe_costs as rc
from train.config import load_config_file


def test_phases_follow_the_configs():
    """BERT: 900,000 steps of 1,024 x 128 tokens, then 100,000 of 256 x 512 (App. A.2); ViT: 300
    epochs of ImageNet's 1,281,167 images in batches of 4,096; Transformer: 128 rows of 208."""
    bert = rc.phases(load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia"))
    assert [(p.steps, p.batch, p.length) for p in bert] == [
        (900_000, 1024, "128 tokens"), (100_000, 256, "512 tokens")]
    assert bert[1].flops_per_example > 4 * bert[0].flops_per_example * 0.9  # 4x the tokens
    vit = rc.phases(load_config_file("configs/vit/imagenet.py"))
    assert [(p.steps, p.batch) for p in vit] == [(math.ceil(300 * 1_281_167 / 4096), 4096)]
    wmt = rc.phases(load_config_file("configs/transformer/translate.py:size=big,data=wmt14"))
    assert [(p.steps, p.batch) for p in wmt] == [(300_000, 128)]


def test_costs_are_the_flops_over_the_devices_peak_at_the_mfu():
    """BERT-base on one 8-GPU node at 40%: each phase's step is its FLOPs (batch x the FLOPs
    model's per-example count) over 8 x 989 TFLOP/s x 0.4; the run is the steps' sum; the
    accelerator-hours do not depend on the device count (the same chips share the same work)."""
    config = load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia")
    run = rc.phases(config)
    node, cluster, pod = rc.TARGETS
    peak = 989e12
    assert node.peak == cluster.peak == peak and pod.peak == 459e12
    for phase in run:
        assert rc.step_seconds(phase, node, 0.4) == pytest.approx(
            phase.batch * phase.flops_per_example / (8 * peak * 0.4))
    total = sum(p.steps * p.batch * p.flops_per_example for p in run) / (8 * peak * 0.4)
    assert rc.run_seconds(run, node, 0.4) == pytest.approx(total)
    hours = [rc.run_seconds(run, t, 0.4) * t.devices / 3600 for t in (node, cluster)]
    assert hours[0] == pytest.approx(hours[1])
    assert rc.run_seconds(run, node, 0.2) == pytest.approx(2 * total)


def test_the_tables_say_what_is_estimated():
    costs = rc.costs_table(0.3)
    assert costs.startswith("Estimated at MFU 30% of the bf16 peaks per device (H100 SXM 989 "
                            "TFLOP/s, TPU v5p 459 TFLOP/s)")
    assert "Not measured" in costs
    rows = [line for line in costs.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(rc.RECIPES) * len(rc.TARGETS)
    assert rc._flops(7.16e13) == "71.6 TFLOP" and rc._flops(7.22e19) == "72.2 EFLOP"
    assert rc.duration(0.023) == "23 ms" and rc.duration(22_800) == "6.3 h"
    assert rc.duration(3 * 86_400) == "3.0 days"


class _Records:
    def __init__(self, **records):
        self.records = records

    def get(self, name):
        return self.records.get(name)


def _gpu_record(mfu, device_kind="NVIDIA H100 80GB HBM3", step_memory=None):
    row = {"label": "ours", "step_s": 0.1135, "mfu": mfu, "step_memory_bytes": step_memory}
    return {"metrics": {"model": "vit", "size": "B/16", "shape": "224x224, 197 tokens",
                        "batch": 256, "dtype": "bfloat16", "attention": "xla", "rows": [row]},
            "machine": {"device_kind": device_kind,
                        "device_memory": [{"peak_bytes_in_use": 3 * 2**30}]}}


def test_a_measurement_set_up_unlike_its_recipe_says_how():
    """BERT's recipe has dropout 0.1 in attention too; a step measured without it, with cuDNN
    attention and on another jax, is shown with each difference (a planted mismatch)."""
    import importlib.metadata
    config = load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia")
    assert config.model.attention_dropout_rate == 0.1
    report = {"dropout": 0.1, "attention_dropout": 0.0, "attention": "auto",
              "dtype": "bfloat16", "jax": "0.0.1"}
    assert rc.differences(config, report) == [
        "attention dropout 0 (recipe 0.1)",
        "cuDNN attention if `auto` could run it there (the record does not say), where the "
        "recipe, with attention dropout, falls back to XLA's",
        f"jax 0.0.1 (this checkout pins {importlib.metadata.version('jax')})"]
    # The record's "ours" row says which kernel its compiled step called.
    for ran, said in (("cudnn", ["cuDNN attention, where the recipe, with attention dropout, "
                                 "falls back to XLA's"]), ("xla", [])):
        report["rows"] = [{"label": "ours", "attention_ran": ran}]
        assert rc.differences(config, report)[1:-1] == said, ran
    del report["rows"]
    report.update(attention_dropout=0.1, jax=importlib.metadata.version("jax"))
    assert rc.differences(config, report) == []
    report.update(prng="rbg")  # benchmarks.train_step --prng rbg: not the trainer's generator
    assert rc.differences(config, report) == ["rbg dropout bits (the trainer's: threefry2x32)"]


def _measured_rows(table: str) -> dict[str, list[str]]:
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines()[2:]]
    return {cells[0]: cells for cells in rows}


def test_the_measured_table_projects_the_recipe_at_the_measured_mfu():
    """ViT-B/16 from scratch at a measured MFU of 20%: all its training FLOPs over 8 x 989
    TFLOP/s x 0.2 (300 epochs of ImageNet, computed here apart), beside the 40% estimate;
    BERT-base's two phases (seq 128, then 512) both at its record's MFU; a missing record says
    so; a record from another GPU is refused, its MFU not carried."""
    vit_name = rc.MEASURED["ViT-B/16, ImageNet, from scratch"]
    bert_name = rc.MEASURED["BERT-base, Wikipedia"]
    vit = rc.phases(load_config_file("configs/vit/imagenet.py"))
    total = sum(p.steps * p.batch * p.flops_per_example for p in vit)
    table = rc.measured_table(_Records(**{vit_name: _gpu_record(0.2)}))
    rows = _measured_rows(table)
    cells = rows["ViT-B/16, ImageNet, from scratch"]
    assert "224x224, 197 tokens, batch 256" in cells[1]
    assert cells[2] == "nothing"  # the test record gives no dropout or jax version to compare
    assert cells[3:6] == ["114 ms", "20.0%", "3.0 GiB (the process's, all rows)"]
    assert cells[6] == rc.duration(total / (8 * 989e12 * 0.2))
    assert cells[7] == rc.duration(total / (8 * 989e12 * 0.4))
    assert cells[6] != cells[7]
    assert "not recorded yet" in rows["BERT-base, Wikipedia"][1]
    bert = rc.phases(load_config_file("configs/bert/pretrain.py:size=base,data=wikipedia"))
    assert len(bert) == 2
    bert_total = sum(p.steps * p.batch * p.flops_per_example for p in bert)
    both = _measured_rows(rc.measured_table(_Records(**{vit_name: _gpu_record(0.2),
                                                        bert_name: _gpu_record(
                                                            0.1, step_memory=2**31)})))
    assert both["BERT-base, Wikipedia"][6] == rc.duration(bert_total / (8 * 989e12 * 0.1))
    assert both["BERT-base, Wikipedia"][5] == "2.0 GiB"  # its compiled step's, not the process's
    assert "not recorded yet" in rc.measured_table(_Records())
    with pytest.raises(ValueError, match=r"ran on 'NVIDIA A100-SXM4-80GB', not the 'NVIDIA "
                                         r"H100 80GB HBM3'"):
        rc.measured_table(_Records(**{vit_name: _gpu_record(0.2, "NVIDIA A100-SXM4-80GB")}))


def test_the_command_prints_the_tables_at_another_mfu(capsys):
    assert rc.main(["--mfu", "0.25"]) == 0
    assert "MFU 25%" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        rc.main(["--mfu", "1.5"])
    assert stop.value.code == 2 and "--mfu 1.5 must be in (0, 1]" in capsys.readouterr().err


def _page_flags() -> list[str]:
    text = (REPO / "docs" / "launch.md").read_text()
    return sorted(set(re.findall(r"--xla_[a-z0-9_]+=[^\s\"']+", text)))


def _xla_accepts(flags: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags))
    return subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.ones(2).sum()"],
                          env=env, capture_output=True, text=True, timeout=300)


def test_every_xla_flag_on_the_launch_page_exists_in_the_pinned_jaxlib():
    """XLA parses every flag in XLA_FLAGS at start-up, the GPU ones on a CPU too, and stops on
    one it does not know: so the page names no flag a reader's jaxlib would reject."""
    flags = _page_flags()
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags and len(flags) >= 4
    result = _xla_accepts(flags)
    assert result.returncode == 0, result.stderr[-2000:]
    misspelt = _xla_accepts(["--xla_gpu_enable_latency_hidding_scheduler=true"])
    assert misspelt.returncode != 0 and "Unknown flag" in misspelt.stderr


def test_the_page_launches_every_recipe_config():
    text = (REPO / "docs" / "launch.md").read_text()
    for config in ("configs/bert/pretrain.py:size=base,data=wikipedia", "configs/vit/imagenet.py",
                   "configs/vit/imagenet.py:stage=finetune",
                   "configs/transformer/translate.py:size=base,data=wmt14"):
        assert f"--config {config}" in text, config
    assert "srun --nodes=4 --ntasks-per-node=8 --gpus-per-node=8" in text
    assert "tpu-vm ssh NAME" in text and "--worker=all" in text
    assert flops.spec_peak_flops("TPU v5") == 459e12
