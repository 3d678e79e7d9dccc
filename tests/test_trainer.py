"""The training system: sharded steps equal single-device ones, accumulation, resume, the CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import json_report, run_python, run_two_processes, start_two_processes

from data.testing import install_fashion_mnist_fixture
from train.config import apply_override, load_config_file
from train.trainer import Trainer


def smoke_config(**overrides):
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in overrides.items():
        apply_override(config, key, str(value))
    return config


def _params(npz) -> dict[str, np.ndarray]:
    return {k: npz[k] for k in npz.files if k.startswith("param/")}


def _assert_same_parameters(actual, expected) -> None:
    """The parameters of two runs that differ only in the order of their sums: each array within
    1e-3 of the other in relative norm.

    Not element by element: where a gradient is near zero, Adam divides rounding noise by a
    tiny second moment and turns it into a step of up to the learning rate, so a few values
    differ by ~1e-5 from one order of the sums to another (seen on one CPU: 3e-6 and 1.6e-5, one
    or two of 2,048; a small bias 2.2e-4 apart in relative norm). A key bias is left out
    altogether: softmax ignores what it adds (q . b_k is the same for every key of a query), so
    its whole gradient is such noise. A batch read
    twice or skipped moves every value by about the learning rate (1.5e-3) for each step after
    it, a relative change of 1e-2 or more."""
    assert sorted(_params(actual)) == sorted(_params(expected))
    for name, value in _params(expected).items():
        if not name.endswith("attention/key/bias"):
            difference = np.linalg.norm(actual[name] - value) / np.linalg.norm(value)
            assert difference < 1e-3, f"{name}: relative difference {difference:.2e}"


def test_8_device_mesh_matches_one_device(fixture_data_root, tmp_path):
    """data=2, fsdp=2, tensor=2 on 8 forced CPU devices: same losses and parameters as 1 device."""
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    single, sharded = tmp_path / "single.npz", tmp_path / "sharded.npz"
    run_python(["tests/scripts/train_steps.py", str(single)], env=env, devices=1)
    run_python(["tests/scripts/train_steps.py", str(sharded), "--config.mesh.data=2",
                "--config.mesh.fsdp=2", "--config.mesh.tensor=2"], env=env, devices=8)
    single, sharded = np.load(single), np.load(sharded)
    assert int(single["devices"]) == 1 and int(sharded["devices"]) == 8
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=1e-5)
    # The zero-initialised head starts at exactly ln(10) and the warmup's first lr is 0, so the
    # first steps can tie; by the last one the parameters have moved.
    assert single["losses"][-1] != single["losses"][0]
    _assert_same_parameters(sharded, single)


def test_two_processes_match_one_process_with_the_same_devices(fixture_data_root, tmp_path):
    """2 processes x 2 CPU devices (gloo collectives, a local coordinator), each feeding its own
    half of every batch, end with the same parameters as 1 process with 4 devices."""
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    mesh = ["--config.mesh.data=2", "--config.mesh.fsdp=2"]
    single = tmp_path / "single.npz"
    run_python(["tests/scripts/train_steps.py", str(single), *mesh], env=env, devices=4)
    multi = tmp_path / "multi.npz"
    run_two_processes(["tests/scripts/train_steps.py", str(multi), *mesh], env=env)
    single, multi = np.load(single), np.load(multi)
    assert int(multi["devices"]) == int(single["devices"]) == 4
    np.testing.assert_allclose(multi["losses"], single["losses"], rtol=1e-5)
    _assert_same_parameters(multi, single)


def test_two_processes_checkpoint_and_resume_as_one_uninterrupted_run(fixture_data_root,
                                                                      tmp_path):
    """2 processes x 2 devices train to step 10 (an orbax multi-host checkpoint, each process's
    data position with it), stop, and a second pair of processes resumes to step 20: the same
    parameters as 1 process with 4 devices training the 20 steps straight through."""
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    mesh = ["--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.train.progress_bar=false"]
    straight = tmp_path / "straight.npz"
    run_python(["tests/scripts/train_steps.py", str(straight), *mesh,
                f"--workdir={tmp_path / 'straight'}"], env=env, devices=4)
    resumed = tmp_path / "resumed.npz"
    workdir = f"--workdir={tmp_path / 'resumed'}"
    run_two_processes(["tests/scripts/train_steps.py", str(resumed), *mesh, workdir,
                       "--until=10"], env=env)
    assert sorted(os.listdir(tmp_path / "resumed" / "checkpoints" / "10" / "data")) == [
        "commit_success.txt", "process_0-of-2.json", "process_1-of-2.json"]
    (_, stderr), _ = run_two_processes(["tests/scripts/train_steps.py", str(resumed), *mesh,
                                        workdir], env=env)
    assert "at step 10" in stderr  # process 0 resumed (a fresh start would match too)
    straight, resumed = np.load(straight), np.load(resumed)
    _assert_same_parameters(resumed, straight)


def test_a_signal_to_one_process_stops_both_after_the_same_step_saved(fixture_data_root,
                                                                      tmp_path):
    """SIGTERM to process 1 alone, mid-run: both processes stop after the same step, save it
    together (each its data state) and return, where each stopping on its own signals left
    them waiting for ever in each other's collectives."""
    workdir = tmp_path / "w"
    processes = start_two_processes([
        "tests/scripts/train_steps.py", str(tmp_path / "out.npz"), f"--workdir={workdir}",
        "--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.train.progress_bar=false",
        "--config.train.num_steps=100000", "--config.train.log_every=5",
        "--config.train.eval_every=0", "--config.train.checkpoint_every=100000"],
        env={"PAPERS_JAX_DATA": str(fixture_data_root)})
    try:
        deadline = time.monotonic() + 240
        while not _train_records(workdir) and time.monotonic() < deadline:
            ended = [p for p in processes if p.poll() is not None]
            assert not ended, ended[0].communicate()[1][-3000:]
            time.sleep(0.5)
        assert _train_records(workdir), "no train step was logged in 240 s"
        os.kill(processes[1].pid, signal.SIGTERM)
        outputs = [p.communicate(timeout=120) for p in processes]
    except subprocess.TimeoutExpired:
        raise AssertionError("the processes did not stop together after SIGTERM to one")
    finally:
        for process in processes:
            process.kill()
    assert [p.returncode for p in processes] == [0, 0], outputs[0][1][-3000:]
    reports = [json_report(stdout) for stdout, _ in outputs]
    step = reports[0]["step"]
    assert [(r["process"], r["step"], r["interrupted"]) for r in reports] == [
        (0, step, "SIGTERM"), (1, step, "SIGTERM")]
    assert 5 <= step < 100000
    assert os.listdir(workdir / "checkpoints") == [str(step)]
    assert sorted(os.listdir(workdir / "checkpoints" / str(step) / "data")) == [
        "commit_success.txt", "process_0-of-2.json", "process_1-of-2.json"]
    assert f"received SIGTERM: saved checkpoint at step {step}" in outputs[0][1]


def _train_records(workdir) -> list[dict]:
    path = workdir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if '"train"' in line]


def test_resume_on_another_mesh_and_device_count(fixture_data_root, tmp_path):
    """Trained to step 10 on 8 devices (data=8), resumed to step 20 on 4 (fsdp=2, tensor=2: the
    parameters and optimizer state sharded anew): the parameters of an uninterrupted 20-step run
    on the 8 devices. (Meshes against one device is the first test's. The reference is not one
    device because over 20 steps at the smoke schedule's full lr, Adam turns the rounding noise of
    another batch split into differences of up to ~2e-5 in a few elements; the resume itself
    matches the 8-device run to ~1e-7.)"""
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    script = "tests/scripts/train_steps.py"
    straight, moved = tmp_path / "straight.npz", tmp_path / "moved.npz"
    run_python([script, str(straight), f"--workdir={tmp_path / 'straight'}",
                "--config.mesh.data=8"], env=env, devices=8)
    workdir = f"--workdir={tmp_path / 'moved'}"
    run_python([script, str(moved), workdir, "--until=10", "--config.mesh.data=8"], env=env,
               devices=8)
    resumed = run_python([script, str(moved), workdir, "--config.mesh.fsdp=2",
                          "--config.mesh.tensor=2"], env=env, devices=4)
    assert "at step 10" in resumed.stderr  # it resumed (a fresh start would match too)
    straight, moved = np.load(straight), np.load(moved)
    _assert_same_parameters(moved, straight)


def test_state_is_sharded_by_the_logical_rules(fixture_data_root):
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    code = ("from tests.scripts.train_steps import *\n"
            "config = load_config_file('configs/vit/fashion_mnist.py:smoke')\n"
            "apply_override(config, 'mesh.fsdp', '2'); apply_override(config, 'mesh.tensor', '2')\n"
            "t = Trainer(config, '/unused')\n"
            "s = t.state_shardings.params['block_0']\n"
            "print(tuple(s['mlp']['wi']['kernel'].spec), tuple(s['attention']['query']['kernel'].spec))\n"
            "print(tuple(t.state_shardings.opt_state[1][0].mu['block_0']['mlp']['wi']['kernel'].spec))\n"
            "apply_override(config, 'mesh.fsdp', '1'); apply_override(config, 'mesh.tensor', '8')\n"
            "try:\n"
            "    Trainer(config, '/unused')\n"
            "except Exception as error:\n"
            "    print(type(error).__name__, error)\n")
    out = run_python(["-c", code], env=env, devices=8).stdout.split("\n")
    assert out[0] == "('fsdp', 'tensor') ('fsdp', 'tensor', None)"  # embed->fsdp, mlp/heads->tensor
    assert out[1] == "('fsdp', 'tensor')"  # the optimizer state is sharded like the parameters
    # the smoke ViT's 2 heads over tensor=8: named before any compile, as a config error
    assert out[2].startswith("ConfigError params['block_0']['attention']"), out[2]
    assert "_heads') of 2 is split over mesh tensor=8 (8 shares)" in out[2], out[2]


def _adam_first_moment(opt_state):
    """The parameter-shaped `mu` of the (single) Adam state in an optax state tree."""
    (adam,) = [node for node in jax.tree.leaves(
        opt_state, is_leaf=lambda n: isinstance(n, optax.ScaleByAdamState))
        if isinstance(node, optax.ScaleByAdamState)]
    return adam.mu


def test_gradient_accumulation_equals_one_big_batch(fashion_mnist_env):
    """One step on a batch with some examples masked out (a different number in each of the 4
    microbatches), with and without accumulation: the gradient the optimizer receives equals
    d(mean cross-entropy over the real examples)/d(params), computed here by plain autodiff of
    the model's logits over the whole batch at once. The gradient is read back exactly from
    Adam's first moment after its first update (mu = (1 - b1) g; no clipping in between), and
    `grad_norm` must be its norm. Comparing parameters alone would not do: the smoke warmup's
    first lr is 0, and Adam ignores a global gradient scale (a wrong normalisation)."""
    mask = np.ones(32, np.float32)
    mask[[0, 1, 2, 9, 17]] = 0.0  # microbatch weights 5, 7, 7, 8: the total, 27, is not 32
    results = []
    for accum in (1, 4):
        trainer = Trainer(smoke_config(**{"train.grad_accum_steps": accum, "data.augment": "none",
                                          "optimizer.clip_norm": 0.0}), "/unused")
        state = trainer.init_state()
        batch = next(trainer.task.train_iterator(batch_size=32, seed=0, process_index=0,
                                                 process_count=1))
        batch = {**batch, "mask": mask}
        init_params = jax.device_get(state.params)
        state, metrics = trainer.train_step(state, batch)
        grads = jax.tree.map(lambda m: np.asarray(m) / (1.0 - trainer.config.optimizer.b1),
                             jax.device_get(_adam_first_moment(state.opt_state)))
        results.append((jax.device_get(state.params), jax.device_get(metrics), grads))

    def mean_loss(params):  # the reference: the whole batch, one weighted mean
        logits = trainer.task.model.apply({"params": params}, batch["image"], train=True,
                                          rngs={"dropout": jax.random.PRNGKey(0)})
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["label"][:, None], -1)[:, 0]
        return jnp.sum(nll * mask) / mask.sum()

    loss, want = jax.value_and_grad(mean_loss)(init_params)
    want_norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in jax.tree.leaves(want))))
    biggest = max(float(np.max(np.abs(g))) for g in jax.tree.leaves(want))
    for params, metrics, grads in results:
        assert metrics["loss"][1] == 1  # the step's objective: the mean over the real examples
        np.testing.assert_allclose(metrics["loss"][0], loss, rtol=1e-5)
        assert metrics["accuracy"][1] == 27
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3,
                                                             atol=1e-5 * biggest),
                     grads, jax.device_get(want))
        np.testing.assert_allclose(metrics["grad_norm"][0], want_norm, rtol=1e-4)
    (params_1, metrics_1, _), (params_4, metrics_4, _) = results
    np.testing.assert_allclose(metrics_4["loss"][0], metrics_1["loss"][0], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 params_4, params_1)


def test_resumed_run_ends_bit_identical_to_uninterrupted(fashion_mnist_env, tmp_path):
    straight = Trainer(smoke_config(), tmp_path / "straight")
    straight.run()
    first_half = Trainer(smoke_config(), tmp_path / "resumed")
    first_half.run(until_step=10)
    assert int(first_half.final_state.step) == 10
    second_half = Trainer(smoke_config(), tmp_path / "resumed")
    second_half.run()
    assert int(second_half.final_state.step) == 20
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                 jax.device_get(second_half.final_state.params),
                 jax.device_get(straight.final_state.params))
    steps = [json.loads(line)["step"] for line in
             (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    assert steps == [5, 10, 15, 20]  # logging continues without gaps or repeats


def test_a_step_is_saved_before_its_eval_runs(fashion_mnist_env, tmp_path, monkeypatch):
    """An eval that fails (out of memory, a decoding bug) at a step that is also checkpointed
    loses no training: the checkpoint is written first."""
    from train.checkpointing import checkpoint_steps

    trainer = Trainer(smoke_config(**{"train.eval_every": 10, "train.checkpoint_every": 10}),
                      tmp_path / "w")

    def fail(*args, **kwargs):
        raise RuntimeError("eval out of memory")

    monkeypatch.setattr(trainer, "evaluate_state", fail)
    with pytest.raises(RuntimeError, match="eval out of memory"):
        trainer.run()
    assert checkpoint_steps(tmp_path / "w") == [10]


def _warnings(stderr: str) -> list[str]:
    """The lines of a run's stderr that warn (absl's WARNING:..., Python's ...Warning: ...)."""
    return [line for line in stderr.splitlines() if re.search("warning", line, re.IGNORECASE)]


def test_cli_end_to_end_on_real_fixture(tmp_path):
    """The smoke run on a data root holding only the raw files, as after a fetch: it prepares
    the dataset, saying so, trains, and ends with the final eval and where its outputs are; no
    library warns on the way (they would be noise to a user, or hide a real warning)."""
    install_fashion_mnist_fixture(tmp_path / "data")
    workdir = tmp_path / "run"
    env = {"PAPERS_JAX_DATA": str(tmp_path / "data")}
    args = ["-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke", "--workdir", str(workdir)]
    result = run_python(args, env=env)
    assert _warnings(result.stderr) == []
    lines = result.stdout.splitlines()
    assert lines[0].startswith("fashion_mnist_local/1.0.0: preparing the TFDS dataset")
    assert lines[1].startswith("fashion_mnist_local/1.0.0: prepared (train 2,000, test 1,000")
    assert re.fullmatch(r"final eval \(test split\): accuracy 0\.\d{4}, loss \d\.\d{4}", lines[2])
    assert lines[3:] == [f"logs: {workdir}/metrics.jsonl, {workdir}/tensorboard; checkpoints: "
                         f"{workdir}/checkpoints; record: {workdir}/record.json"]
    assert json.loads((workdir / "config.json").read_text())["model"]["hidden_size"] == 32
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train] == [5, 10, 15, 20] and [r["step"] for r in evals] == [10, 20]
    for key in ("loss", "accuracy", "grad_norm", "learning_rate", "examples_per_second", "mfu"):
        assert np.isfinite(train[-1][key]), key
    assert 0.0 <= evals[-1]["accuracy"] <= 1.0
    assert list((workdir / "tensorboard").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == ["10", "20"]

    again = run_python(args + ["--config.train.num_steps=25"], env=env, check=False)
    assert again.returncode == 2 and "train.num_steps: 20 in the workdir, 25 now" in again.stderr
    resumed = run_python(args + ["--config.train.num_steps=25", "--allow_config_change"], env=env)
    assert "resumed from" in resumed.stderr and "at step 20" in resumed.stderr
    assert _warnings(resumed.stderr) == []
    assert json.loads((workdir / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 25


def test_mfu_divides_by_the_per_device_peak_times_the_devices(fixture_data_root, tmp_path,
                                                              monkeypatch):
    """On a mesh of 2 forced CPU devices with train.peak_flops = 1e12 (per device), the logged
    mfu is examples_per_second x flops_per_example / (2 x 1e12): the model FLOPs of a step over
    the peak of all the devices (the clock's time cancels out of the ratio), and the start-up
    line names that 2e12 peak."""
    from train.tasks.classify import ClassificationTask

    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    overrides = {"mesh.data": 2, "train.peak_flops": 1e12, "train.num_steps": 6,
                 "train.log_every": 3, "train.eval_every": 0, "train.checkpoint_every": 6}
    result = run_python(["tests/scripts/train_steps.py", str(tmp_path / "out.npz"),
                         f"--workdir={tmp_path / 'run'}",
                         *[f"--config.{k}={v}" for k, v in overrides.items()]], env=env,
                        devices=2)
    assert int(np.load(tmp_path / "out.npz")["devices"]) == 2
    assert "peak 2e+03 GFLOP/s (config.train.peak_flops)" in result.stdout + result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
               .splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [3, 6]
    monkeypatch.setenv("PAPERS_JAX_DATA", env["PAPERS_JAX_DATA"])
    flops_per_example = ClassificationTask(smoke_config(**overrides)).flops_per_example()
    assert flops_per_example > 0
    # the first window's rates are of its steps after the first, whose compilation (seconds,
    # against milliseconds a step) would make them a hundredth of the next window's
    assert train[0]["steps_per_second"] > 0.2 * train[1]["steps_per_second"], train
    for record in train:
        assert record["examples_per_second"] == pytest.approx(
            smoke_config().data.batch_size * record["steps_per_second"], rel=1e-9)
        assert record["mfu"] == pytest.approx(
            record["examples_per_second"] * flops_per_example / (2 * 1e12), rel=1e-9)


def test_a_run_with_worker_processes_trains_as_one_without(fixture_data_root, tmp_path):
    """data.worker_count=2: the smoke run's batches made in two grain processes give the same
    training losses as in this process (the image pipeline seeds by batch), and nothing warns
    on the way, the workers' exit included."""
    env = {"PAPERS_JAX_DATA": str(fixture_data_root)}
    losses = {}
    for workers in (0, 2):
        workdir = tmp_path / f"run_{workers}"
        result = run_python(["-m", "train", "--config", "configs/vit/fashion_mnist.py:smoke",
                             "--workdir", str(workdir), f"--config.data.worker_count={workers}"],
                            env=env)
        assert _warnings(result.stderr) == [] and "Exception ignored" not in result.stderr
        records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text()
                   .splitlines()]
        losses[workers] = [r["loss"] for r in records if r["split"] == "train"]
    assert len(losses[0]) == 4 and losses[2] == pytest.approx(losses[0], rel=1e-6)
