"""Gradient accumulation on 8 devices: every microbatch keeps the batch's data sharding (rows
i::k), so the compiled step moves no rows between devices (no all-gather, all-to-all or
collective-permute: only the gradients' all-reduce), and its gradient is the big batch's."""

from __future__ import annotations

from conftest import json_report, run_python


def test_microbatches_stay_on_their_devices(fixture_data_root):
    result = run_python(["tests/scripts/accumulation_sharding.py", "2"], devices=8,
                        env={"PAPERS_JAX_DATA": str(fixture_data_root)})
    report = json_report(result.stdout)
    assert report["devices"] == 8
    collectives = report["collectives"]
    moved = {name: collectives[name] for name in ("all-gather", "all-to-all",
                                                  "collective-permute")}
    assert moved == {"all-gather": 0, "all-to-all": 0, "collective-permute": 0}, collectives
    assert collectives["all-reduce"] > 0  # the gradients' (a data-parallel step has them)
    assert report["max_gradient_difference"] < 1e-4
