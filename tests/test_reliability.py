"""Preemption, kills, corrupt checkpoints and NaNs: real processes, real files, nothing mocked."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import REPO, run_python

from configs.common import optimizer_config, train_config
from train.__main__ import main
from train.checkpointing import Checkpointer
from train.config import apply_override, load_config_file
from train.metrics_writer import SUPERSEDED, _drop_records_after
from train.optimizers import make_optimizer
from train.step_log import NonFiniteError, StepLog
from train.trainer import Trainer, TrainState, make_train_step

STEPS = 30
# Checkpoint every 3 steps and log every step, so a kill lands between checkpoints.
OVERRIDES = [f"--config.train.num_steps={STEPS}", "--config.train.checkpoint_every=3",
             "--config.train.log_every=1", "--config.train.eval_every=0",
             "--config.train.keep_checkpoints=3"]


def cli_args(workdir: Path) -> list[str]:
    return ["-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke", "--workdir",
            str(workdir), *OVERRIDES]


def final_params(workdir: Path, step: int = STEPS):
    checkpointer = Checkpointer(workdir / "checkpoints", save_every=1, keep=1)
    state, _, _ = checkpointer.restore(None, step)
    checkpointer.close()
    return jax.device_get(state["params"])


def assert_bit_identical(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def logged_train_steps(workdir: Path) -> list[int]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if r["split"] == "train"]


def start_and_signal(workdir: Path, env: dict, at_step: int, sig: int) -> subprocess.CompletedProcess:
    """Starts the CLI, waits until it has logged `at_step`, sends `sig`, waits for the exit."""
    full_env = dict(os.environ, JAX_PLATFORMS="cpu", **env)
    process = subprocess.Popen([sys.executable, *cli_args(workdir)], cwd=REPO, env=full_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log, checkpoints = workdir / "metrics.jsonl", workdir / "checkpoints"
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None:
        reached = log.exists() and any(json.loads(line)["step"] >= at_step
                                       for line in log.read_text().splitlines() if line.endswith("}"))
        committed = checkpoints.exists() and any(p.name.isdigit() for p in checkpoints.iterdir())
        if reached and committed:  # so the restart really resumes from between checkpoints
            break
        time.sleep(0.02)
    assert process.poll() is None, f"finished before step {at_step}: {process.communicate()}"
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def uninterrupted(fixture_data_root, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run_python(cli_args(workdir), env={"PAPERS_JAX_DATA": str(fixture_data_root)})
    return final_params(workdir)


def test_sigkill_at_a_random_step_then_resume_is_bit_identical(fixture_data_root, tmp_path,
                                                               uninterrupted):
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    kill_at = random.Random().randint(4, STEPS - 6)
    killed = start_and_signal(tmp_path, env, kill_at, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, f"kill at step {kill_at}"
    resumed = run_python(cli_args(tmp_path), env=env)
    assert "resumed from" in resumed.stderr, f"kill at step {kill_at}"
    assert_bit_identical(final_params(tmp_path), uninterrupted)
    assert logged_train_steps(tmp_path) == list(range(1, STEPS + 1)), f"kill at step {kill_at}"


def test_sigterm_saves_the_current_step_and_exits_cleanly(fixture_data_root, tmp_path,
                                                          uninterrupted):
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    stopped = start_and_signal(tmp_path, env, random.Random().randint(4, STEPS - 6), signal.SIGTERM)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    message = [line for line in stopped.stderr.splitlines() if "received SIGTERM" in line]
    assert message, stopped.stderr[-2000:]
    saved_at = int(message[0].split("checkpoint at step ")[1].split()[0])
    assert saved_at in {int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()}
    record = json.loads((tmp_path / "record.json").read_text())  # the session so far, unfinished
    assert not record["finished"] and record["sessions"][-1]["outcome"] == "stopped by SIGTERM"
    assert record["sessions"][-1]["end_step"] == saved_at
    resumed = run_python(cli_args(tmp_path), env=env)
    assert f"at step {saved_at}" in resumed.stderr
    assert_bit_identical(final_params(tmp_path), uninterrupted)
    assert logged_train_steps(tmp_path) == list(range(1, STEPS + 1))
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["finished"] and [(s["start_step"], s["end_step"]) for s in record["sessions"]] \
        == [(0, saved_at), (saved_at, STEPS)]


def smoke(**overrides):
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def _largest_file(folder: Path) -> Path:
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


@pytest.mark.parametrize("damage", ["truncated file", "missing item"])
def test_corrupt_latest_checkpoint_falls_back_to_the_previous_good_one(
        damage, fashion_mnist_env, tmp_path, capsys):
    straight = Trainer(smoke(), tmp_path / "straight")
    straight.run()
    workdir = tmp_path / "damaged"
    Trainer(smoke(), workdir).run()  # checkpoints at 10 and 20
    newest = workdir / "checkpoints" / "20"
    if damage == "truncated file":
        victim = _largest_file(newest / "state")
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    else:
        for path in sorted((newest / "data").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (newest / "data").rmdir()
    capsys.readouterr()
    again = Trainer(smoke(), workdir)
    again.run()
    err = capsys.readouterr().err
    assert f"checkpoint {newest} cannot be restored" in err
    assert "at step 10" in err
    assert list((workdir / "checkpoints").glob("20.corrupt-*")), "the damaged step is kept aside"
    assert int(again.final_state.step) == 20
    assert_bit_identical(jax.device_get(again.final_state.params),  # the data resumed at step 10
                         jax.device_get(straight.final_state.params))
    assert logged_train_steps(workdir) == [5, 10, 15, 20]  # the redone steps logged once
    superseded = [json.loads(line) for line in (workdir / SUPERSEDED).read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in superseded] == [(15, "train"), (20, "train"),
                                                             (20, "eval")]


def poison_images_at(monkeypatch, bad_step: int) -> None:
    """Test hook around the trainer (never in its step): the images of train step `bad_step`
    become NaN, and so do that step's loss and gradients."""
    original = Trainer.train_step

    def train_step(self, state, local_batch):
        if int(jax.device_get(state.step)) == bad_step:
            local_batch = {**local_batch, "image": np.full_like(local_batch["image"], np.nan)}
        return original(self, state, local_batch)

    monkeypatch.setattr(Trainer, "train_step", train_step)


def test_nan_stops_naming_the_step_and_keeps_the_last_good_checkpoint(fashion_mnist_env, tmp_path,
                                                                     capsys, monkeypatch):
    poison_images_at(monkeypatch, 13)
    code = main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(tmp_path)])
    assert code == 3
    err = capsys.readouterr().err
    assert "non-finite loss at step 13" in err
    assert f"step 10, is kept in {tmp_path / 'checkpoints'}" in err
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10"]
    params = final_params(tmp_path, 10)
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))


def test_nan_stops_before_an_eval_would_run_on_the_bad_weights(fashion_mnist_env, tmp_path,
                                                              capsys, monkeypatch):
    """An eval step that is neither a log nor a checkpoint step checks the flags first: no
    eval (or decoding) of NaN weights, no NaN eval record."""
    poison_images_at(monkeypatch, 13)
    code = main(["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(tmp_path),
                 "--config.train.log_every=20", "--config.train.checkpoint_every=20",
                 "--config.train.eval_every=14"])
    assert code == 3 and "non-finite loss at step 13" in capsys.readouterr().err
    log = tmp_path / "metrics.jsonl"
    records = [json.loads(line) for line in (log.read_text() if log.exists() else "").splitlines()]
    assert [r["step"] for r in records if r["split"] == "eval"] == []


def test_nan_skip_mode_drops_the_update_and_counts_it(fashion_mnist_env, tmp_path, monkeypatch):
    poison_images_at(monkeypatch, 13)
    trainer = Trainer(smoke(**{"train.nonfinite": "skip"}), tmp_path)
    trainer.run()
    assert int(trainer.final_state.step) == 20
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(trainer.final_state.params))
    last = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["split"] == "train"][-1]
    assert last["skipped_steps_total"] == 1.0
    # The window with the skipped step logs its other steps' means, not NaN.
    train = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    window = next(r for r in train if r["step"] > 13)
    assert window["skipped_steps_total"] == 1.0
    assert all(np.isfinite(window[name]) for name in ("loss", "grad_norm", "accuracy")), window


def test_nan_check_would_fail_without_the_handling(fashion_mnist_env, tmp_path, monkeypatch):
    """The injected NaN really reaches the parameters when nothing guards against it."""
    poison_images_at(monkeypatch, 0)
    trainer = Trainer(smoke(**{"train.log_every": 100, "train.checkpoint_every": 100}), tmp_path)
    state = trainer.init_state()
    batch = next(trainer.task.train_iterator(batch_size=32, seed=0, process_index=0,
                                             process_count=1))
    state, metrics = trainer.train_step(state, batch)
    assert float(metrics["finite_loss"][0]) == 0.0
    assert not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state.params))
    with pytest.raises(NonFiniteError, match="non-finite loss at step 0"):
        trainer.run()


def test_batch_not_divisible_by_data_parallel_size_is_named(fixture_data_root, tmp_path):
    result = run_python(["-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke",
                         "--workdir", str(tmp_path / "w"), "--config.mesh.data=8",
                         "--config.data.batch_size=36"],
                        env={"PAPERS_JAX_DATA": str(fixture_data_root)}, devices=8, check=False)
    assert result.returncode == 2
    assert "config.data.batch_size=36 is not divisible by the data-parallel size 8" in result.stderr


class _Quadratic:
    """A one-parameter task, loss mean((x w - y)^2): enough to watch one Adam update."""

    def loss_normalizers(self, batch):
        return {"squares": jnp.asarray(batch["x"].shape[0], jnp.float32)}

    def loss_fn(self, params, batch, rng):
        return {"squares": jnp.sum((batch["x"] * params["w"] - batch["y"]) ** 2)}, {}


def test_a_skipped_step_keeps_adam_but_not_the_schedule_behind():
    """With nonfinite='skip', the step after a skipped one uses the lr that is logged for it,
    schedule(state.step), and Adam's moments and count are those from before the skip."""
    tx, schedule = make_optimizer(optimizer_config(
        name="adam", schedule="linear", learning_rate=1.0, warmup_steps=2, total_steps=10,
        end_learning_rate=0.0, eps=1e-12, clip_norm=0.0))
    step = jax.jit(make_train_step(_Quadratic(), tx, schedule, train_config(nonfinite="skip")))
    params = {"w": jnp.ones(())}
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                       rng=jax.random.key(0))
    batch = {"x": jnp.ones((4,)), "y": jnp.zeros((4,))}
    state, _ = step(state, batch)                    # step 0: lr schedule(0) = 0, moments move
    after_first = state
    nan_batch = {"x": jnp.full((4,), jnp.nan), "y": jnp.zeros((4,))}
    state, metrics = step(state, nan_batch)          # step 1: NaN, skipped
    assert float(metrics["nonfinite_steps"][0]) == 1.0 and int(state.step) == 2
    adam = lambda s: s.opt_state[0]                  # noqa: E731 - ScaleByAdamState
    for new, old in zip(jax.tree.leaves(adam(state)), jax.tree.leaves(adam(after_first))):
        np.testing.assert_array_equal(new, old)
    np.testing.assert_array_equal(state.params["w"], after_first.params["w"])
    w = float(state.params["w"])
    state, metrics = step(state, batch)              # step 2: lr schedule(2) = 1.0
    assert float(metrics["learning_rate"][0]) == float(schedule(2)) == 1.0
    # A constant gradient: bias-corrected m / sqrt(v) = 1 after any number of real updates,
    # so the parameter moves by exactly the lr applied.
    np.testing.assert_allclose(w - float(state.params["w"]), 1.0, rtol=1e-5)


@jax.custom_vjp
def _grad_poison(w, poison):
    """w itself; its gradient gets `poison` added (NaN: a non-finite gradient, finite loss)."""
    return w


_grad_poison.defvjp(lambda w, poison: (w, poison),
                    lambda poison, g: (g + poison, jnp.zeros_like(poison)))


class _PoisonedQuadratic(_Quadratic):
    """_Quadratic whose batch may make only the loss (batch['loss_poison'], held out of the
    gradient) or only the gradient (batch['grad_poison']) non-finite."""

    def loss_fn(self, params, batch, rng):
        w = _grad_poison(params["w"], batch["grad_poison"])
        loss = jnp.sum((batch["x"] * w - batch["y"]) ** 2)
        return {"squares": loss + jax.lax.stop_gradient(batch["loss_poison"])}, {}


@pytest.mark.parametrize("poisoned", ["loss", "grad"])
def test_a_non_finite_loss_alone_or_gradient_alone_is_skipped(poisoned):
    """nonfinite='skip' drops the update when either the loss or the gradients are non-finite,
    not only when both are (NaN images poison both): the parameters and Adam's state stay,
    the step counts as non-finite, and the flags say which of the two it was."""
    tx, schedule = make_optimizer(optimizer_config(
        name="adam", schedule="constant", learning_rate=0.1, warmup_steps=0, total_steps=-1,
        end_learning_rate=0.0, clip_norm=0.0))
    step = jax.jit(make_train_step(_PoisonedQuadratic(), tx, schedule,
                                   train_config(nonfinite="skip")))
    params = {"w": jnp.ones(())}
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                       rng=jax.random.key(0))
    clean = {"x": jnp.ones((4,)), "y": jnp.zeros((4,)), "loss_poison": jnp.zeros(()),
             "grad_poison": jnp.zeros(())}
    state, metrics = step(state, clean)
    assert float(metrics["nonfinite_steps"][0]) == 0.0
    before = state
    bad = dict(clean, **{f"{poisoned}_poison": jnp.asarray(np.nan, jnp.float32)})
    state, metrics = step(state, bad)
    assert float(metrics["nonfinite_steps"][0]) == 1.0 and int(state.step) == 2
    for name in ("loss", "grad_norm"):  # left out of the log window's means: no NaN in them
        assert [float(x) for x in metrics[name]] == [0.0, 0.0]
    assert float(metrics["finite_loss"][0]) == float(poisoned != "loss")
    assert float(metrics["finite_grads"][0]) == float(poisoned != "grad")
    np.testing.assert_array_equal(state.params["w"], before.params["w"])
    adam, lr_schedule = state.opt_state                # only the schedule counts on
    for new, old in zip(jax.tree.leaves(adam), jax.tree.leaves(before.opt_state[0])):
        np.testing.assert_array_equal(new, old)
    assert int(lr_schedule.count) == 2
    state, _ = step(state, clean)                      # and training goes on from there
    assert float(state.params["w"]) < float(before.params["w"])


@pytest.mark.parametrize("finite_loss, finite_grads, which", [
    (0.0, 1.0, "loss"), (1.0, 0.0, "gradient norm"), (0.0, 0.0, "loss")])
def test_stop_mode_names_the_first_non_finite_step_and_what_was_non_finite(finite_loss,
                                                                           finite_grads, which):
    """With nonfinite='stop' the host check raises for a step whose loss alone, or gradient norm
    alone, was non-finite, naming that step (the first bad one) and the last checkpoint; a run
    of finite steps passes. In 'skip' mode the flags are only dropped."""
    def flag(value):
        return jnp.asarray([value, 1.0], jnp.float32)  # (sum, count), as the step returns

    def log_of(steps, skip=False):
        import types

        task = types.SimpleNamespace(flops_per_example_at=lambda step: 0.0,
                                     global_batch_at=lambda step: 1)
        log = StepLog(task, peak_flops=1.0, skip_nonfinite=skip)
        for step, (loss, grads) in steps:
            log.add(step, {"finite_loss": flag(loss), "finite_grads": flag(grads)})
        return log

    kept = "the last good checkpoint, step 5, is kept in /run/checkpoints"
    fine = [(4, (1.0, 1.0)), (5, (1.0, 1.0))]
    bad = [(6, (finite_loss, finite_grads)), (7, (0.0, 1.0))]
    log = log_of(fine)
    log.check_finite(kept)
    log.check_finite(kept)  # the flags were consumed: nothing left to raise about
    with pytest.raises(NonFiniteError) as error:
        log_of(fine + bad).check_finite(kept)
    assert str(error.value).startswith(f"non-finite {which} at step 6; stopping ({kept})")
    log_of(fine + bad, skip=True).check_finite(kept)


def test_an_eval_between_two_logs_keeps_the_steps_of_the_log_window(monkeypatch):
    """The clock restarts after an eval (its time is not train time), but the log line still
    averages, and counts, every step since the last one: the progress bar advances by them."""
    import types

    from train import step_log

    clock = types.SimpleNamespace(now=50.0)
    clock.perf_counter = lambda: clock.now
    monkeypatch.setattr(step_log, "time", clock)

    task = types.SimpleNamespace(flops_per_example_at=lambda step: 1.0,
                                 global_batch_at=lambda step: 2, derived_metrics=lambda v: v,
                                 data_metrics=lambda iterator: {},
                                 derived_data_metrics=lambda counts: {})
    log = StepLog(task, peak_flops=1.0, skip_nonfinite=False)

    def pair(value):
        return jnp.asarray([value, 1.0], jnp.float32)  # (sum, count), as the step returns

    for step, loss in enumerate([1.0, 2.0, 3.0, 4.0, 5.0]):
        log.add(step, {"loss": pair(loss), "finite_loss": pair(1.0), "finite_grads": pair(1.0),
                       "nonfinite_steps": pair(0.0)})
        clock.now += 1.0  # a train step
        if step == 2:
            clock.now += 30.0  # an eval after step 2
            log.restart_clock()
    values, steps = log.flush(None)
    assert steps == 5 and values["loss"] == pytest.approx(3.0)
    # The rates are over the two steps timed since the eval (2 s, batch 2), not all five.
    assert values["steps_per_second"] == pytest.approx(2 / 2.0, rel=1e-12)
    assert values["examples_per_second"] == pytest.approx(2 * 2 / 2.0, rel=1e-12)


def test_a_checkpoint_of_another_optimizer_is_refused_and_nothing_is_lost(fashion_mnist_env,
                                                                         tmp_path, capsys):
    """Clipping turned off (one optimizer state fewer): refused by the workdir check, even with
    --allow_config_change; and where the workdir's config no longer says what its checkpoints
    hold (edited by hand), by the restore, naming the difference. Either way the checkpoints,
    config.json and metrics.jsonl stay as they were, and the original experiment then resumes
    from them (extended to 25 steps)."""
    from train.run_config import REQUESTED_FILE

    command = ["--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(tmp_path)]
    assert main(command) == 0
    kept = {name: (tmp_path / name).read_bytes()
            for name in ("config.json", "metrics.jsonl", REQUESTED_FILE)}
    capsys.readouterr()
    off = [*command, "--allow_config_change", "--config.optimizer.clip_norm=0.0"]
    assert main(off) == 2
    assert "optimizer.clip_norm: 1.0 in the workdir, 0.0 now" in capsys.readouterr().err
    request = json.loads(kept[REQUESTED_FILE])
    request["optimizer"]["clip_norm"] = 0.0  # the workdir's config edited: the restore's check
    (tmp_path / REQUESTED_FILE).write_text(json.dumps(request))
    assert main(off) == 3
    err = capsys.readouterr().err
    assert f"checkpoint {tmp_path / 'checkpoints' / '20'} holds another train state" in err
    assert "in the checkpoint only: opt_state/1/0/count" in err
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["10", "20"]
    (tmp_path / REQUESTED_FILE).write_bytes(kept[REQUESTED_FILE])
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept
    assert not (tmp_path / "metrics.superseded.jsonl").exists()
    assert main([*command, "--config.train.num_steps=25", "--allow_config_change"]) == 0
    assert "resumed from" in capsys.readouterr().err
    assert logged_train_steps(tmp_path) == [5, 10, 15, 20, 25]


def test_records_a_restart_redoes_move_to_the_superseded_log(tmp_path):
    """Resuming from step 10 takes the records after it out of metrics.jsonl; they are appended
    to metrics.superseded.jsonl, not lost (a line cut short by a kill goes to
    metrics.damaged.jsonl: tests/test_metrics_writer.py)."""
    log = tmp_path / "metrics.jsonl"
    records = [json.dumps({"step": step, "split": "train"}) + "\n" for step in (5, 10, 15, 20)]
    log.write_text("".join(records) + '{"step": 25, "spl')
    _drop_records_after(log, 10)
    assert log.read_text() == "".join(records[:2])
    assert (tmp_path / SUPERSEDED).read_text() == "".join(records[2:])
    _drop_records_after(log, 0)                      # a restart from scratch
    assert log.read_text() == ""
    assert (tmp_path / SUPERSEDED).read_text() == "".join(records[2:] + records[:2])
