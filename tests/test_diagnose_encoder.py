"""python -m train.diagnose_encoder on a smoke pretraining run of the Brown fixture: step 0 is
the trainer's own initial state (a run at learning rate 0 reads the same at every checkpoint),
every report is there, and bad workdirs or steps are refused with a message."""

from __future__ import annotations

import json
import time

import pytest

from train import diagnose_encoder, run_record
from train.config import apply_override, load_config_file
from train.trainer import Trainer

FINETUNE = "configs/bert/finetune.py:task=brown_pos,smoke"


@pytest.fixture
def frozen_run(brown_env, tmp_path):
    """A smoke pretraining run at learning rate 0 (the sweep's `untrained` row), checkpointed
    after each of its 2 steps: its parameters stay the initial ones."""
    config = load_config_file("configs/bert/pretrain.py:smoke,mask=0-0-100")
    for key, value in {"data.names": "('brown',)", "optimizer.learning_rate": "0.0",
                       "optimizer.warmup_steps": "0", "train.num_steps": "2",
                       "train.checkpoint_every": "1", "train.log_every": "1"}.items():
        apply_override(config, key, value)
    workdir = tmp_path / "pretrain"
    trainer = Trainer(config, workdir)
    trainer.run()
    run_record.write_train_record(trainer, command=["python", "-m", "train", "(smoke)"],
                                  started=time.time())
    return workdir


def test_step_zero_is_the_initial_state_and_every_report_is_there(frozen_run, tmp_path, capsys):
    out = tmp_path / "diagnosis.json"
    assert diagnose_encoder.main([str(frozen_run), "--steps", "all", "--batch_size", "8",
                                  "--finetune", FINETUNE, "--plateau", "0", "--out",
                                  str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["command"][:3] == ["python", "-m", "train.diagnose_encoder"]
    # made when, where, from which code (the tables' provenance line reads them)
    assert document["date"].endswith("+00:00") and document["wall_s"] > 0
    assert document["code"]["commit"] and document["machine"]["cpu_count"] >= 1
    assert document["versions"]["jax"]
    (run,) = document["runs"]
    assert run["corruption"] == {"mask": 0.0, "random": 1.0, "keep": 0.0}
    assert [(s["command"][-1], s["end_step"]) for s in run["sessions"]] == [("(smoke)", 2)]
    assert [e["step"] for e in run["train_log"]["entries"]] == [1, 2]
    assert run["train_log"]["left_plateau_step"] == 1     # any accuracy reaches a plateau of 0
    steps = {entry["step"]: entry for entry in run["checkpoints"]}
    assert sorted(steps) == [0, 1, 2]
    initial, last = steps[0], steps[2]
    assert initial["pretrain"]["adam"] is None           # no update before step 1
    assert set(last["pretrain"]["adam"]) >= {"encoder/layer_0", "embeddings/word"}
    # Learning rate 0: the checkpoint of step 2 holds the initial weights, so every measurement
    # agrees with step 0's (which is made from the run's config.seed, not read from a file).
    for part in ("pretrain", "finetune"):
        assert json.dumps(last[part]["layers"]) == json.dumps(initial[part]["layers"])
        assert json.dumps(last[part]["gradients"]) == json.dumps(initial[part]["gradients"])
    assert last["pretrain"]["mlm"] == initial["pretrain"]["mlm"]
    layers = initial["finetune"]["layers"]
    assert [layer["layer"] for layer in layers] == [0, 1, 2]   # the smoke model's 2 layers
    assert all("dropout_noise_to_signal" in layer for layer in layers)
    assert "step 2: MLM accuracy" in capsys.readouterr().err

    # Refusals (in the same test: the pretraining run is its expensive part).
    assert diagnose_encoder.main([str(tmp_path / "nothing"), "--finetune", "none"]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert diagnose_encoder.main([str(frozen_run), "--steps", "7", "--finetune", "none"]) == 2
    assert "no checkpoint of step 7 (saved: [1, 2])" in capsys.readouterr().err
    assert diagnose_encoder.main([str(frozen_run), "--steps", "last", "--finetune", "none"]) == 2
    assert "'last' is not a step" in capsys.readouterr().err
    for extra, message in ((["--steps", ""], "--steps '' names no step"),
                           (["--plateau", "nan"], "--plateau nan must be an accuracy in [0, 1)"),
                           (["--out", str(tmp_path)], f"--out {tmp_path} is a folder"),
                           (["--out", str(tmp_path / "no" / "x.json")], "does not exist"),
                           (["--out", " "], "--out ' ': the path is empty")):
        assert diagnose_encoder.main([str(frozen_run), "--finetune", "none", *extra]) == 2
        assert message in capsys.readouterr().err


def test_an_existing_out_file_is_replaced_only_with_overwrite(tmp_path, capsys):
    """Checked before any run is read: the file kept as it was; with --overwrite the command
    goes on (to the workdir, which holds no run here)."""
    out = tmp_path / "diagnosis.json"
    out.write_text("an earlier diagnosis\n")
    workdir = str(tmp_path / "nothing")
    assert diagnose_encoder.main([workdir, "--finetune", "none", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: --out {out} exists; pass --overwrite to replace "
                                       "it, or give another file\n")
    assert out.read_text() == "an earlier diagnosis\n"
    assert diagnose_encoder.main([workdir, "--finetune", "none", "--out", str(out),
                                  "--overwrite"]) == 2
    assert "holds no run" in capsys.readouterr().err
    assert diagnose_encoder.main([workdir, "--finetune", "none", "--overwrite"]) == 2
    assert "--overwrite replaces an existing --out file: give --out FILE" in \
        capsys.readouterr().err
