"""Checkpoint averaging (Vaswani et al. 2017, Sec. 6.1; train/checkpoint_averaging.py): the
average is the NumPy mean of the saved parameters, the trainer's final eval is of it, and a
resumed run averages the same checkpoints as an uninterrupted one."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from train.checkpoint_averaging import average_params, steps_to_average
from train import evaluate as evaluate_cli
from train.checkpointing import CheckpointError, Checkpointer, checkpoint_steps, load_params
from train.config import ConfigError, apply_override, load_config_file
from train.predict import load_run
from train.run_weights import final_eval_weights, load_weights
from train.train_step import TrainState
from train.trainer import Trainer


def test_steps_to_average_are_the_last_ones():
    assert steps_to_average([4, 12, 8, 20, 16], 3) == [12, 16, 20]
    assert steps_to_average([4, 8], 5) == [4, 8]  # fewer saved: all of them
    with pytest.raises(ValueError, match="count=0 must be >= 1"):
        steps_to_average([4], 0)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_average_is_the_mean_of_the_saved_parameters(tmp_path, dtype):
    """Three saved states of random parameters (and an optimizer state that is not averaged):
    the average of the last two is their NumPy mean, in the parameters' dtype."""
    rng = np.random.default_rng(0)
    saved = []
    with Checkpointer(tmp_path / "ckpt", save_every=1, keep=5, async_save=False) as ckpt:
        for step in (1, 2, 3):
            params = {"dense": {"kernel": jnp.asarray(rng.normal(size=(3, 4)), dtype),
                                "bias": jnp.asarray(rng.normal(size=(4,)), dtype)}}
            state = TrainState(step=jnp.asarray(step, jnp.int32), params=params,
                               opt_state={"mu": jnp.full((3,), float(step))},
                               rng=jax.random.PRNGKey(0))
            ckpt.save(step, state, {"step": step})
            saved.append(jax.tree.map(lambda x: np.asarray(x, np.float64), params))
        ckpt.wait()
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state)
        average = average_params(ckpt, abstract, [2, 3])
    want = jax.tree.map(lambda a, b: (a + b) / 2, saved[1], saved[2])
    for path, value in traverse_util.flatten_dict(average).items():
        assert value.dtype == dtype
        expected = traverse_util.flatten_dict(want)[path]
        tolerance = 1e-6 if dtype == jnp.float32 else 1e-2
        np.testing.assert_allclose(np.asarray(value, np.float64), expected, rtol=tolerance,
                                   atol=tolerance)


def _config(**overrides):
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    for key, value in {"train.checkpoint_every": 5, "train.keep_checkpoints": 3,
                       "train.average_checkpoints": 3, "train.eval_every": 0,
                       **overrides}.items():
        apply_override(config, key, str(value))
    return config


def _evals(workdir) -> list[dict]:
    return [entry for line in (workdir / "metrics.jsonl").read_text().splitlines()
            if (entry := json.loads(line))["split"] == "eval"]


def test_the_final_eval_is_of_the_average_and_a_resumed_run_averages_alike(fashion_mnist_env,
                                                                            tmp_path):
    """The smoke ViT (20 steps, a checkpoint every 5, the last 3 averaged): the final eval is
    logged once, with averaged_checkpoints=3, and equals an eval of the NumPy mean of the
    parameters saved at steps 10, 15 and 20 (not of the final ones); a run stopped at step 12
    and resumed ends with the same final eval; a run restarted after the end evaluates the
    average again."""
    straight = Trainer(_config(), tmp_path / "straight")
    final = straight.run()
    assert final["averaged_checkpoints"] == 3
    assert [e["step"] for e in _evals(tmp_path / "straight")] == [20]

    saved = [load_params(tmp_path / "straight", step) for step in (10, 15, 20)]
    mean = jax.tree.map(lambda *xs: np.mean(np.stack(xs), axis=0), *saved)
    by_hand = straight.evaluate(jax.device_put(mean))
    assert by_hand["loss"] == pytest.approx(final["loss"], rel=1e-5)
    assert by_hand["accuracy"] == pytest.approx(final["accuracy"], rel=1e-5)
    last = straight.evaluate(straight.final_state.params)
    assert last["loss"] != pytest.approx(final["loss"], rel=1e-5)  # the average, not the last

    # python -m train.evaluate and train.predict read the weights the final eval scored
    told = []
    _, scored = evaluate_cli.evaluate(tmp_path / "straight", log=told.append)
    assert scored["loss"] == pytest.approx(final["loss"], rel=1e-5)
    assert scored["averaged_checkpoints"] == 3
    assert "weights: the average of the last 3 checkpoints, steps 10, 15, 20" in told
    _, raw = evaluate_cli.evaluate(tmp_path / "straight", weights="raw")
    assert raw["loss"] == pytest.approx(last["loss"], rel=1e-5)
    for got, want in zip(jax.tree.leaves(load_run(tmp_path / "straight").params),
                         jax.tree.leaves(mean)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    up_to_15 = load_weights(tmp_path / "straight", 15, "average")  # the last 3 up to step 15
    earlier = [load_params(tmp_path / "straight", step) for step in checkpoint_steps(
        tmp_path / "straight") if step <= 15][-3:]
    assert len(earlier) >= 2
    for got, *want in zip(jax.tree.leaves(up_to_15), *map(jax.tree.leaves, earlier)):
        np.testing.assert_allclose(got, np.mean(want, axis=0), rtol=1e-6, atol=1e-7)
    plain = tmp_path / "plain"  # a run that averages nothing has no average to read
    plain.mkdir()
    config = json.loads((tmp_path / "straight" / "config.json").read_text())
    config["train"]["average_checkpoints"] = 0
    (plain / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"averages no checkpoints \(train.average_che"):
        load_weights(plain, weights="average")

    Trainer(_config(), tmp_path / "resumed").run(until_step=12)
    assert _evals(tmp_path / "resumed") == []  # stopped before the end: nothing averaged
    config = json.loads((tmp_path / "resumed" / "config.json").read_text())
    assert final_eval_weights(tmp_path / "resumed", config) == "raw"  # what its evals were of
    resumed = Trainer(_config(), tmp_path / "resumed").run()
    assert resumed["averaged_checkpoints"] == 3
    assert resumed["loss"] == pytest.approx(final["loss"], rel=1e-6)

    again = Trainer(_config(), tmp_path / "resumed").run()  # nothing left to train
    assert again["loss"] == pytest.approx(final["loss"], rel=1e-6)


def test_more_averaged_than_kept_is_refused(fashion_mnist_env, tmp_path):
    with pytest.raises(ConfigError, match=r"average_checkpoints=4 averages more checkpoints "
                                          r"than config.train.keep_checkpoints=3 keeps: set "
                                          r"keep_checkpoints to 4 or more"):
        Trainer(_config(**{"train.average_checkpoints": 4}), tmp_path)
    with pytest.raises(ConfigError, match=r"average_checkpoints=-1 must be >= 0 \(0: the final "
                                          r"parameters"):
        Trainer(_config(**{"train.average_checkpoints": -1}), tmp_path)
