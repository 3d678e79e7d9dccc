"""Dropout keys in training: a new mask at every step, for every example, on every device and
in every microbatch, and after a resume the masks an uninterrupted run draws.

The masks are read where they are drawn (tests/dropout_sites.py `recording_drops`) during
`Trainer.train_step` on a batch of copies of one image, so every difference between two rows'
masks comes from the keys. Planted, every step drawing the same key
(`fold_in(state.rng, 0)` instead of the step) passed every other test: losses still fall and a
resumed run still matches an uninterrupted one.
"""

from __future__ import annotations

import json

import jax
import numpy as np
from conftest import json_report, run_python
from scripts.dropout_masks import distinct_rows, identical_rows, recorded_step, smoke_trainer


def _row_masks(masks: dict) -> set[tuple[str, bytes]]:
    return {(site, row.tobytes()) for site, rows in masks.items() for row in rows}


def test_every_step_row_and_microbatch_draws_its_own_dropout_mask(fashion_mnist_env):
    """Four copies of one image in two microbatches: four different masks at every site; the
    same parameters at the next step: four new ones and another gradient (the loss of the
    zero-initialised head is ln 10 whatever the masks); the first step again: its masks and
    gradient exactly."""
    trainer = smoke_trainer({"data.batch_size": 4, "train.grad_accum_steps": 2})
    batch = identical_rows(trainer)
    found = {}
    state = trainer.init_state()
    metrics, first = recorded_step(trainer, state, batch, found)
    assert first, "no dropout mask was drawn"
    for site, masks in first.items():
        assert masks.shape[0] == 4, site
        assert distinct_rows(masks) == 4, f"{site}: {distinct_rows(masks)} masks for 4 rows"

    state = trainer.init_state()
    again_metrics, again = recorded_step(trainer, state, batch, found)
    assert _row_masks(again) == _row_masks(first), "the same step drew other masks"
    assert again_metrics["grad_norm"][0] == metrics["grad_norm"][0]

    state = trainer.init_state()
    next_metrics, next_step = recorded_step(trainer, state.replace(step=state.step + 1), batch,
                                            found)
    repeated = _row_masks(next_step) & _row_masks(first)
    assert not repeated, f"{len(repeated)} masks of step 0 drawn again at step 1"
    assert next_metrics["grad_norm"][0] != metrics["grad_norm"][0]


def test_copies_of_an_example_on_different_devices_draw_different_masks(fixture_data_root):
    """Eight copies of one image on four data-parallel devices, in two microbatches: eight
    different masks at every site (a key drawn per device alike, e.g. in a shard_map that does
    not fold in the device's index, gives every device the same ones)."""
    report = json_report(run_python(
        ["tests/scripts/dropout_masks.py", "--config.mesh.data=4", "--config.data.batch_size=8",
         "--config.train.grad_accum_steps=2"],
        env={"PAPERS_JAX_DATA": str(fixture_data_root)}, devices=4).stdout)
    assert report["devices"] == 4 and report["rows"] == 8
    assert report["distinct"] and all(n == 8 for n in report["distinct"].values()), report


def test_resumed_run_with_dropout_ends_bit_identical_to_uninterrupted(fashion_mnist_env,
                                                                      tmp_path):
    """With dropout on, so that the step keys matter (the smoke config has none, and neither do
    the other resume tests): a key that depends on anything a checkpoint does not keep (the
    step the process started at, the clock) changes the parameters."""
    overrides = {"train.num_steps": 6, "train.checkpoint_every": 3, "train.log_every": 3,
                 "train.eval_every": 0, "optimizer.warmup_steps": 2,
                 "model.attention_dropout_rate": 0.1}
    straight = smoke_trainer(overrides, tmp_path / "straight")
    straight.run()
    first_half = smoke_trainer(overrides, tmp_path / "resumed")
    first_half.run(until_step=3)
    assert int(first_half.final_state.step) == 3
    second_half = smoke_trainer(overrides, tmp_path / "resumed")
    second_half.run()
    assert int(second_half.final_state.step) == 6
    records = map(json.loads, (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines())
    assert [r["step"] for r in records if r["split"] == "train"] == [3, 6]  # resumed, not redone
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 jax.device_get(second_half.final_state.params),
                 jax.device_get(straight.final_state.params))
