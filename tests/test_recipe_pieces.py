"""DeiT's recipe pieces that are not losses: stochastic depth (models/dropout.py drop_path and
its linear rates), the weights' exponential moving average (train/train_step.py ema_update and
the train step that keeps it) and repeated augmentation (data/pipelines/images.py)."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from data.errors import DataError
from models.dropout import DropPath, drop_path, quantized_rate, stochastic_depth_rates
from test_data import IdSource, batches_of
from train.train_step import TrainState, ema_init, ema_update, make_train_step


# ---- stochastic depth ----------------------------------------------------------------------
def test_drop_path_zeroes_whole_examples_and_scales_the_rest():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4000, 3, 5)), jnp.float32)
    rate = 0.3
    y = np.asarray(drop_path(x, rate, jax.random.PRNGKey(0)))
    dropped = np.all(y == 0, axis=(1, 2))
    kept = ~dropped
    # kept examples: every element x / (1 - p), p the rate the 16-bit decisions apply
    np.testing.assert_allclose(y[kept], np.asarray(x)[kept] / (1 - quantized_rate(rate)),
                               rtol=1e-6)
    assert not np.any(y[kept] == 0)  # no element dropped alone
    assert abs(dropped.mean() - rate) < 0.03
    # the expectation over examples is kept: E[y] = x
    ones = np.asarray(drop_path(jnp.ones((20000, 1)), rate, jax.random.PRNGKey(1)))
    assert abs(ones.mean() - 1.0) < 0.02


def test_drop_path_module_is_the_identity_in_evaluation():
    x = jnp.ones((8, 2, 3))
    module = DropPath(0.5)
    out = module.apply({}, x, deterministic=True)
    np.testing.assert_array_equal(out, x)
    trained = module.apply({}, x, deterministic=False, rngs={"dropout": jax.random.PRNGKey(0)})
    assert set(np.unique(np.asarray(trained))) <= {0.0, 2.0}


def test_stochastic_depth_rates_rise_linearly_to_the_last_block():
    """Huang et al. 2016, eq. 4: block l of L drops at l / L x the last block's rate."""
    np.testing.assert_allclose(stochastic_depth_rates(0.1, 4), np.arange(1, 5) / 4 * 0.1)
    assert stochastic_depth_rates(0.0, 3) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="drop_path_rate=1.0"):
        stochastic_depth_rates(1.0, 3)


# ---- the weights' moving average -----------------------------------------------------------
def test_ema_update_is_the_exponential_average():
    rng = np.random.default_rng(0)
    d = 0.9
    thetas = [rng.normal(size=(3, 2)).astype(np.float32) for _ in range(5)]
    ema = {"w": jnp.asarray(thetas[0])}
    for theta in thetas[1:]:
        ema = ema_update(ema, {"w": jnp.asarray(theta)}, d)
    # closed form: ema_t = (1 - d) sum_{s=1..t} d^(t-s) theta_s + d^t theta_0
    t = len(thetas) - 1
    want = d ** t * thetas[0] + sum((1 - d) * d ** (t - s) * thetas[s] for s in range(1, t + 1))
    np.testing.assert_allclose(ema["w"], want, rtol=1e-5)


def test_the_average_of_bfloat16_parameters_moves():
    """In bfloat16 an update of (1 - d)(theta - ema) rounds away for d near 1; the average is
    kept in float32 (ema_init), so it follows the closed form ema_t = theta + d^t (ema_0 - theta)
    for a constant theta."""
    start = {"w": jnp.ones((4,), jnp.bfloat16)}
    ema = ema_init(start)
    assert ema["w"].dtype == jnp.float32
    theta = {"w": jnp.full((4,), 2.0, jnp.bfloat16)}
    update = jax.jit(ema_update, static_argnums=2)
    for _ in range(2000):
        ema = update(ema, theta, 0.999)
    np.testing.assert_allclose(ema["w"], 2.0 - 0.999 ** 2000, rtol=1e-4)


class _Quadratic:
    """A task whose loss is sum (w - batch.x)^2: the train step's plain SGD moves w to x."""

    has_frozen_params = False

    def loss_fn(self, params, batch, rng):
        return {"sq": jnp.sum((params["w"] - batch["x"]) ** 2)}, {}

    def loss_normalizers(self, batch):
        return {"sq": jnp.ones(())}


def _train_cfg(decay):
    return ml_collections.ConfigDict(dict(grad_accum_steps=1, nonfinite="stop",
                                          ema_decay=decay))


def test_the_train_step_keeps_the_average_of_the_new_parameters():
    decay, lr = 0.8, 0.1
    optimizer = optax.sgd(lr)
    step = jax.jit(make_train_step(_Quadratic(), optimizer, lambda s: lr, _train_cfg(decay)))
    w = jnp.array([1.0, -2.0])
    state = TrainState(step=jnp.zeros((), jnp.int32), params={"w": w},
                       opt_state=optimizer.init({"w": w}), rng=jax.random.PRNGKey(0),
                       ema_params={"w": w})
    x = np.array([3.0, 0.5], np.float32)
    theta, ema = np.asarray(w), np.asarray(w)
    for _ in range(4):
        state, _ = step(state, {"x": jnp.asarray(x)})
        theta = theta - lr * 2 * (theta - x)         # SGD on (w - x)^2
        ema = decay * ema + (1 - decay) * theta      # the average of the new parameters
        np.testing.assert_allclose(state.params["w"], theta, rtol=1e-6)
        np.testing.assert_allclose(state.ema_params["w"], ema, rtol=1e-6)
    off = jax.jit(make_train_step(_Quadratic(), optimizer, lambda s: lr, _train_cfg(0.0)))
    plain, _ = off(state.replace(ema_params=None), {"x": jnp.asarray(x)})
    assert plain.ema_params is None


# ---- repeated augmentation -----------------------------------------------------------------
def test_repeated_augmentation_repeats_each_example_in_its_batch():
    source = IdSource(24)
    it = batches_of(source, batch_size=6, train=True, augment="flip", repeated_augment=3,
                    num_epochs=1)
    seen = []
    for batch in it:
        labels = np.asarray(batch["label"])
        groups = labels.reshape(-1, 3)
        assert (groups == groups[:, :1]).all()  # i, i, i, j, j, j
        seen.extend(groups[:, 0])
    # one epoch: every example r times, each in exactly one batch
    assert sorted(seen) == list(range(24))


def test_repeated_augmentation_draws_each_copy_anew():
    source = IdSource(64, shape=(6, 6, 1))
    batch = next(iter(batches_of(source, batch_size=64, train=True, augment="flip",
                                 repeated_augment=2)))
    images = np.asarray(batch["image"]).reshape(32, 2, 6, 6, 1)
    assert np.any(images[:, 0] != images[:, 1])  # some pair flipped differently


@pytest.mark.parametrize("kw,message", [
    (dict(batch_size=8, repeated_augment=3, augment="flip"), "divide"),
    (dict(batch_size=6, repeated_augment=3, augment="none"), "identical copies"),
])
def test_repeated_augmentation_refuses_what_it_cannot_do(kw, message):
    with pytest.raises(DataError, match=message):
        batches_of(IdSource(24), train=True, **kw)


# ---- all of them in the trainer ------------------------------------------------------------
RECIPE = {"train.ema_decay": 0.9, "model.drop_path_rate": 0.2, "task.mixup_alpha": 0.8,
          "task.cutmix_alpha": 1.0, "data.repeated_augment": 2, "data.augment": "crop_flip",
          "train.eval_every": 0}


def test_a_resumed_recipe_run_ends_bit_identical_with_its_average(fashion_mnist_env, tmp_path):
    """The average is checkpointed with the state, the mixing drawn from the step's key: a run
    stopped at step 10 and resumed ends where the uninterrupted one does, average included."""
    from train.config import apply_override, load_config_file
    from train.trainer import Trainer

    def config():
        loaded = load_config_file("configs/vit/fashion_mnist.py:smoke")
        for key, value in RECIPE.items():
            apply_override(loaded, key, str(value))
        return loaded

    straight = Trainer(config(), tmp_path / "straight")
    final = straight.run()
    assert np.isfinite(final["ema.accuracy"]) and np.isfinite(final["accuracy"])
    Trainer(config(), tmp_path / "resumed").run(until_step=10)
    resumed = Trainer(config(), tmp_path / "resumed")
    resumed.run()
    for part in ("params", "ema_params"):
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
                     jax.device_get(getattr(resumed.final_state, part)),
                     jax.device_get(getattr(straight.final_state, part)))
    assert not np.allclose(jax.tree.leaves(straight.final_state.params)[0],
                           jax.tree.leaves(straight.final_state.ema_params)[0])
