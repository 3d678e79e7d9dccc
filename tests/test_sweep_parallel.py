"""python -m train.sweep --parallel N: several runs at once, each pinned to its own CPUs
(train/sweep_runner.py), later stages still waiting for their own."""

from __future__ import annotations

import json
import os

import pytest
from sweep_helpers import STAGE2_CONFIG, TWO_STAGE_SWEEP, run_sweep

from train import sweep_runner
from train.sweep_spec import SweepError


def test_cpu_shares_split_the_usable_cpus_and_refuse_more_runs_than_cpus(monkeypatch):
    monkeypatch.setattr(sweep_runner.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4},
                        raising=False)
    monkeypatch.setattr(sweep_runner.os, "sched_setaffinity", lambda pid, cpus: None,
                        raising=False)
    assert sweep_runner.cpu_shares(1) == [None]  # one run at a time: not pinned
    assert sweep_runner.cpu_shares(2) == [(0, 1, 2), (3, 4)]
    assert sweep_runner.cpu_shares(5) == [(0,), (1,), (2,), (3,), (4,)]
    with pytest.raises(SweepError, match="--parallel 6 needs at least 6 CPUs; this "
                       r"process may use 5 .*use --parallel 5 or fewer"):
        sweep_runner.cpu_shares(6)
    with pytest.raises(SweepError, match="--parallel 0 must be >= 1"):
        sweep_runner.cpu_shares(0)


def test_a_run_on_one_core_is_single_threaded_and_the_others_keep_their_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    flags = sweep_runner._environment((3,))["XLA_FLAGS"].split()
    assert flags == ["--xla_backend_optimization_level=0", sweep_runner.SINGLE_THREAD_FLAG]
    monkeypatch.setenv("XLA_FLAGS", sweep_runner.SINGLE_THREAD_FLAG)  # not added twice
    assert sweep_runner._environment((3,))["XLA_FLAGS"] == sweep_runner.SINGLE_THREAD_FLAG
    assert sweep_runner._environment((2, 3)) is None and sweep_runner._environment(None) is None


PARALLEL_SWEEP = TWO_STAGE_SWEEP.replace('{{"bad": {{"model.num_heads": 3}}, "ok": {{}}}}',
                                         '{{"a": {{}}, "b": {{"train.num_steps": 12}}}}')


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable CPUs and Linux CPU affinity")
def test_parallel_runs_share_the_cpus_and_later_stages_wait_for_theirs(fixture_data_root,
                                                                       tmp_path):
    assert PARALLEL_SWEEP != TWO_STAGE_SWEEP
    (tmp_path / "stage2.py").write_text(STAGE2_CONFIG)
    config = tmp_path / "sweep_config.py"
    config.write_text(PARALLEL_SWEEP.format(stage2=str(tmp_path / "stage2.py")))
    workdir = tmp_path / "sweep"
    result = run_sweep(workdir, fixture_data_root, "--parallel", "2", config=str(config))
    assert "[sweep] start a/seed_0/pretrain on cpus 0" in result.stdout
    assert "[sweep] start b/seed_0/pretrain on cpus 1" in result.stdout
    attempts = {}
    for row in ("a", "b"):
        for stage in ("pretrain", "finetune"):
            run = workdir / row / "seed_0" / stage
            attempts[row, stage] = json.loads((run / "sweep_attempts.jsonl").read_text())
            machine = json.loads((run / "result.json").read_text())["record"]["machine"]
            assert machine["usable_cpus"] == 1, (row, stage)
            assert sweep_runner.SINGLE_THREAD_FLAG in machine["xla_flags"].split()
        # Stage 2 of a row starts only once its stage 1 has finished, whatever slot is free.
        pretrain, finetune = attempts[row, "pretrain"], attempts[row, "finetune"]
        assert pretrain["start"] + pretrain["wall_s"] <= finetune["start"]
    a, b = attempts["a", "pretrain"], attempts["b", "pretrain"]
    assert b["start"] < a["start"] + a["wall_s"]  # the two rows' first stages overlapped
    assert "4/4 runs done" in result.stdout
