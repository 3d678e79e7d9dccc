"""The DeiT Table 3 sweep (configs/ablations/deit_table3.py): its rows' configs, the paper's
numbers, and its findings judged on made-up per-seed results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sweep_helpers import run_config

from train import findings
from train import sweep as sweep_lib

TABLE3 = "configs/ablations/deit_table3.py"


def test_the_rows_are_table3s_distillations_of_one_student():
    sweep = sweep_lib.load_sweep_file(f"{TABLE3}:teacher=/t/convnet")
    assert list(sweep.rows) == ["none", "soft", "hard", "hard_token"] and sweep.seeds == 3
    assert [sweep.label(m) for m in sweep.metrics] == [
        "accuracy", "class_accuracy", "distill_accuracy", "teacher_accuracy"]
    assert sweep.paper["hard_token"] == {"class_accuracy": pytest.approx(0.830),
                                         "distill_accuracy": pytest.approx(0.831),
                                         "accuracy": pytest.approx(0.834)}
    want = {"none": ("none", False, 0.0), "soft": ("soft", False, 0.1),
            "hard": ("hard", False, 0.5), "hard_token": ("hard", True, 0.5)}
    for row in sweep.rows:
        (run,) = sweep_lib.plan(sweep, Path("w"), [row], [2], [])
        config = run_config(run)
        assert config.task.name == "deit" and config.distill.teacher == "/t/convnet"
        assert (config.distill.kind, config.model.distill_token,
                config.distill.alpha) == want[row]
        assert config.seed == 2 and config.model.pool == "cls"
        assert config.model.drop_path_rate == 0.0 and config.train.ema_decay == 0.0
        assert config.train.num_steps == 1800  # the budget the docstring adds up


def test_steps_are_each_rows_budget_and_a_smoke_run_keeps_its_own():
    sweep = sweep_lib.load_sweep_file(f"{TABLE3}:teacher=/t/convnet,steps=600")
    (run,) = sweep_lib.plan(sweep, Path("w"), ["hard"], [0], [])
    assert run_config(run).train.num_steps == 600
    smoke = sweep_lib.load_sweep_file(f"{TABLE3}:teacher=/t/convnet,smoke")
    (run,) = sweep_lib.plan(smoke, Path("w"), ["hard"], [0], [])
    assert run_config(run).train.num_steps == 20
    smoke = sweep_lib.load_sweep_file(f"{TABLE3}:teacher=/t/convnet,smoke,steps=7")
    (run,) = sweep_lib.plan(smoke, Path("w"), ["hard"], [0], [])
    assert run_config(run).train.num_steps == 7
    with pytest.raises(ValueError, match="steps=0 must be >= 1"):
        sweep_lib.load_sweep_file(f"{TABLE3}:steps=0")


def _seeds(**rows) -> dict:
    out = {}
    for row, values in rows.items():
        out[row] = {label: np.array(v, np.float64) for label, v in values.items()}
        out[row]["seed"] = np.arange(len(next(iter(values.values()))))
    return out


def test_the_findings_compare_the_rows_and_heads_seed_by_seed():
    sweep = sweep_lib.load_sweep_file(f"{TABLE3}:teacher=/t/convnet")
    low, mid, high, top = [0.85, 0.86, 0.855], [0.86, 0.87, 0.865], [0.87, 0.88, 0.875], \
        [0.88, 0.89, 0.885]
    teacher = [0.87, 0.87, 0.87]
    row = {"class_accuracy": high, "distill_accuracy": high, "teacher_accuracy": teacher}
    runs = _seeds(none={**row, "accuracy": low}, soft={**row, "accuracy": mid},
                  hard={**row, "accuracy": high},
                  hard_token={**row, "accuracy": top})
    judged = [findings.judge(f, sweep, runs, "none", None, "deit_table3") for f in sweep.findings]
    assert [j.verdict for j in judged] == ["reproduced"] * 5, [j.reason for j in judged]
    runs["hard_token"]["accuracy"] = np.array(high)  # the averaged heads no better than one
    verdicts = [findings.judge(f, sweep, runs, "none", None, "deit_table3").verdict
                for f in sweep.findings]
    assert verdicts[2] != "reproduced" and verdicts[3] != "reproduced"
