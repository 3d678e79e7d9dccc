"""Schedules against independent NumPy formulas, the weight-decay mask, and the optax chain."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from train import optimizers


def _cfg(**overrides):
    c = ml_collections.ConfigDict(dict(
        name="adam", schedule="constant", learning_rate=1e-3, warmup_steps=0, total_steps=100,
        end_learning_rate=0.0, b1=0.9, b2=0.98, eps=1e-9, momentum=0.0, weight_decay=0.0,
        clip_norm=0.0))
    c.update(overrides)
    if c.schedule in ("constant", "inverse_sqrt") and "total_steps" not in overrides:
        c.total_steps = -1  # no decay to end: the key must keep its default
    return c


def _values(schedule, steps):
    return np.array([float(schedule(s)) for s in steps])


# ----- schedules ----------------------------------------------------------------------------

def test_inverse_sqrt_matches_paper():
    d_model, warmup = 512, 4000
    schedule = optimizers.inverse_sqrt_schedule(d_model, warmup)
    steps = [0, 1, warmup - 2, warmup - 1, warmup, 2 * warmup, 100_000]
    # Paper: step_num starts at 1, so count s uses step_num = s + 1.
    expected = [d_model ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5) for s in steps]
    np.testing.assert_allclose(_values(schedule, steps), expected, rtol=1e-6)
    peak = float(schedule(warmup - 1))
    assert peak == pytest.approx(6.988e-4, rel=1e-3)
    assert peak == max(_values(schedule, range(warmup - 3, warmup + 3)))
    # `scale` multiplies the whole formula; works under jit with an int32 count.
    scaled = optimizers.inverse_sqrt_schedule(d_model, warmup, scale=2.0)
    assert float(jax.jit(scaled)(jnp.int32(10))) == pytest.approx(2 * expected[0] * 11, rel=1e-6)


def _np_warmup_then(peak, warmup, total, end, decay):
    def f(s):
        if s < warmup:
            return peak * s / warmup
        frac = min(max((s - warmup) / (total - warmup), 0.0), 1.0)
        return decay(frac)
    return f


@pytest.mark.parametrize("warmup", [0, 10])
def test_linear_warmup_linear_decay(warmup):
    peak, total, end = 1e-4, 50, 1e-6
    schedule = optimizers.linear_warmup_linear_decay(peak, warmup, total, end_value=end)
    ref = _np_warmup_then(peak, warmup, total, end, lambda fr: peak + (end - peak) * fr)
    steps = [0, 1, max(warmup - 1, 0), warmup, 2 * warmup, 30, total - 1, total, total + 7, 10 * total]
    np.testing.assert_allclose(_values(schedule, steps), [ref(s) for s in steps], rtol=1e-5)
    assert float(schedule(total)) == pytest.approx(end)
    assert float(schedule(warmup)) == pytest.approx(peak)


@pytest.mark.parametrize("warmup", [0, 10])
def test_warmup_cosine(warmup):
    peak, total, end = 3e-4, 50, 1e-5
    schedule = optimizers.warmup_cosine(peak, warmup, total, end_value=end)
    ref = _np_warmup_then(peak, warmup, total, end,
                          lambda fr: end + (peak - end) * 0.5 * (1 + math.cos(math.pi * fr)))
    steps = [0, 1, max(warmup - 1, 0), warmup, 2 * warmup, 30, total - 1, total, total + 7, 10 * total]
    np.testing.assert_allclose(_values(schedule, steps), [ref(s) for s in steps], rtol=1e-5)
    assert float(schedule(total)) == pytest.approx(end)


def test_constant_with_warmup():
    peak, warmup = 5e-4, 8
    schedule = optimizers.constant_with_warmup(peak, warmup)
    steps = [0, 1, warmup - 1, warmup, 2 * warmup, 10 ** 6]
    expected = [peak * min(s / warmup, 1.0) for s in steps]
    np.testing.assert_allclose(_values(schedule, steps), expected, rtol=1e-6)
    assert float(optimizers.constant_with_warmup(peak, 0)(0)) == pytest.approx(peak)


def _recipe_lr(name, peak, warmup, total, end, d_model, step):
    """The learning rate each `optimizer.schedule` name stands for, from its recipe (plain
    Python): Vaswani et al. eq. (3) with step_num = step + 1 and `peak` as its scale; otherwise
    a linear warmup from 0 to `peak` over `warmup` steps, then BERT's linear decay to `end` at
    `total`, half a cosine down to `end` at `total` (both constant `end` after), or constant
    `peak`."""
    if name == "inverse_sqrt":
        n = step + 1
        return peak * d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)
    if step < warmup:
        return peak * step / warmup
    frac = min((step - warmup) / (total - warmup), 1.0)
    if name == "linear":
        return peak + (end - peak) * frac
    if name == "cosine":
        return end + (peak - end) * 0.5 * (1.0 + math.cos(math.pi * frac))
    assert name == "constant"
    return peak


@pytest.mark.parametrize("name", optimizers.SCHEDULES)
def test_config_schedule_name_selects_its_formula(name):
    """`optimizer.schedule` = NAME makes `make_optimizer` return (and Adam follow) the schedule of
    that name, with the config's learning_rate, warmup_steps, total_steps and end_learning_rate:
    equal to the recipe's formula at steps in the warmup, the decay, its end and beyond. The
    schedules are told apart at these steps (so a name mapped to another one's formula fails),
    and every name in optimizers.SCHEDULES is covered here."""
    assert set(optimizers.SCHEDULES) == {"inverse_sqrt", "linear", "cosine", "constant"}
    peak, warmup, total, end, d_model = 2e-3, 4, 20, 1e-4, 16
    decays = name in ("linear", "cosine")  # the others refuse an end they would not reach
    tx, schedule = optimizers.make_optimizer(
        _cfg(schedule=name, learning_rate=peak, warmup_steps=warmup,
             total_steps=total if decays else -1, end_learning_rate=end if decays else 0.0),
        d_model=d_model)
    steps = [0, 1, warmup - 1, warmup, warmup + 4, 12, total - 1, total, total + 5, 10 * total]
    want = [_recipe_lr(name, peak, warmup, total, end, d_model, s) for s in steps]
    np.testing.assert_allclose(_values(schedule, steps), want, rtol=1e-5, atol=1e-12)
    others = [other for other in optimizers.SCHEDULES if other != name]
    for other in others:  # the steps above separate every pair of schedules
        theirs = [_recipe_lr(other, peak, warmup, total, end, d_model, s) for s in steps]
        assert not np.allclose(want, theirs, rtol=1e-3), (name, other)
    if name in ("linear", "cosine"):
        assert float(schedule(total)) == pytest.approx(end, rel=1e-5)
        assert float(schedule(10 * total)) == pytest.approx(end, rel=1e-5)
    # The optimizer uses the same schedule: for a constant gradient Adam's direction is -1 (its
    # bias-corrected m / sqrt(v) is 1), so each update is -lr(step).
    p = jnp.zeros((2,))
    state = tx.init(p)
    for step in range(total + 2):
        updates, state = tx.update(jnp.ones((2,)), state, p)
        np.testing.assert_allclose(
            updates, -_recipe_lr(name, peak, warmup, total, end, d_model, step),
            rtol=1e-4, atol=1e-9, err_msg=f"step {step}")


# ----- weight-decay mask --------------------------------------------------------------------

class _Block(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        lp = nn.with_logical_partitioning
        x = nn.Embed(32, 8, embedding_init=lp(nn.initializers.normal(), ("vocab", "embed")))(tokens)
        x = nn.LayerNorm(scale_init=lp(nn.initializers.ones, ("embed",)),
                         bias_init=lp(nn.initializers.zeros, ("embed",)))(x)
        x = nn.DenseGeneral((2, 4), kernel_init=lp(nn.initializers.lecun_normal(),
                                                   ("embed", "heads", "kv")),
                            bias_init=lp(nn.initializers.zeros, ("heads", "kv")), name="query")(x)
        x = x.reshape(x.shape[:-2] + (8,))
        x = nn.RMSNorm(name="final_norm")(x)
        return nn.Dense(3, kernel_init=lp(nn.initializers.lecun_normal(), ("embed", "classes")),
                        bias_init=lp(nn.initializers.zeros, ("classes",)))(x)


EXPECTED_MASK = {
    "Embed_0": {"embedding": True},
    "LayerNorm_0": {"scale": False, "bias": False},
    "query": {"kernel": True, "bias": False},  # a 2-D bias is still a bias
    "final_norm": {"scale": False},
    "Dense_0": {"kernel": True, "bias": False},
}


def _boxed_params():
    return _Block().init(jax.random.key(0), jnp.zeros((2, 5), jnp.int32))["params"]


def test_mask_on_boxed_and_plain_params():
    boxed = _boxed_params()
    assert isinstance(boxed["Dense_0"]["kernel"], nn.LogicallyPartitioned)
    mask = optimizers.weight_decay_mask(boxed)
    assert jax.tree.structure(mask) == jax.tree.structure(boxed)  # boxes kept, bools inside
    assert nn.unbox(mask) == EXPECTED_MASK
    plain = nn.unbox(boxed)
    assert optimizers.weight_decay_mask(plain) == EXPECTED_MASK
    abstract = jax.eval_shape(lambda: plain)
    assert optimizers.weight_decay_mask(abstract) == EXPECTED_MASK


@pytest.mark.parametrize("boxed", [False, True])
def test_adamw_decays_only_masked_params(boxed):
    lr, wd = 0.1, 0.01
    params = _boxed_params() if boxed else nn.unbox(_boxed_params())
    params = jax.tree.map(lambda p: p + 1.0, params)  # make biases/scales non-zero
    tx, _ = optimizers.make_optimizer(_cfg(name="adamw", learning_rate=lr, weight_decay=wd))
    state = tx.init(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    updates, _ = jax.jit(tx.update)(zeros, state, params)
    new = nn.unbox(optax.apply_updates(params, updates))
    old = nn.unbox(params)
    flat_new = dict(jax.tree_util.tree_leaves_with_path(new))
    for path, p in jax.tree_util.tree_leaves_with_path(old):
        decayed = EXPECTED_MASK[path[0].key][path[1].key]
        want = p - lr * wd * p if decayed else p
        np.testing.assert_allclose(flat_new[path], want, rtol=1e-6, err_msg=str(path))


# ----- Adam, clipping -----------------------------------------------------------------------

def test_adam_one_step_matches_hand_computation():
    lr, b1, b2, eps = 1e-3, 0.9, 0.98, 1e-9
    tx, _ = optimizers.make_optimizer(_cfg(learning_rate=lr, b1=b1, b2=b2, eps=eps))
    rng = np.random.default_rng(0)
    p = rng.normal(size=(4, 3)).astype(np.float32)
    g = rng.normal(size=(4, 3)).astype(np.float32)
    updates, _ = tx.update(jnp.asarray(g), tx.init(jnp.asarray(p)), jnp.asarray(p))
    g64 = g.astype(np.float64)
    m = (1 - b1) * g64
    v = (1 - b2) * g64 ** 2
    m_hat, v_hat = m / (1 - b1), v / (1 - b2)
    np.testing.assert_allclose(np.asarray(updates), -lr * m_hat / (np.sqrt(v_hat) + eps),
                               rtol=1e-5)


def test_inverse_sqrt_is_the_lr_of_the_first_updates():
    tx, schedule = optimizers.make_optimizer(
        _cfg(schedule="inverse_sqrt", learning_rate=2.0, warmup_steps=10), d_model=64)
    p = jnp.ones((3,))
    state = tx.init(p)
    for step in range(3):  # Adam's first-step direction is sign(g) for a constant gradient.
        updates, state = tx.update(jnp.ones((3,)), state, p)
        want = 2.0 * 64 ** -0.5 * (step + 1) * 10 ** -1.5
        assert float(schedule(step)) == pytest.approx(want, rel=1e-6)
        np.testing.assert_allclose(updates, -want, rtol=1e-4)


def _np_adam(grads, lr, b1, b2, eps):
    """Updates of plain Adam (float64) for a sequence of gradients."""
    m = v = 0.0
    out = []
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        out.append(-lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps))
    return out


@pytest.mark.parametrize("clip", [0.0, 0.5])
def test_clipping_to_clip_norm(clip):
    # Adam is invariant to one global gradient scale, so clipping shows over two steps whose
    # gradients get different factors: the first (norm 10) is clipped, the second is not.
    lr, b1, b2, eps = 1e-2, 0.9, 0.98, 1e-9
    tx, _ = optimizers.make_optimizer(_cfg(learning_rate=lr, clip_norm=clip))
    rng = np.random.default_rng(1)
    g1 = rng.normal(size=(5,)); g1 *= 10.0 / np.linalg.norm(g1)
    g2 = rng.normal(size=(5,)); g2 *= 0.1 / np.linalg.norm(g2)
    clipped = [g * min(1.0, clip / np.linalg.norm(g)) if clip else g for g in (g1, g2)]
    if clip:
        assert np.linalg.norm(clipped[0]) == pytest.approx(clip)
    want = _np_adam(clipped, lr, b1, b2, eps)
    p = jnp.zeros((5,))
    state = tx.init(p)
    for g, w in zip((g1, g2), want):
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state, p)
        np.testing.assert_allclose(updates, w, rtol=1e-4)
    if clip:  # the unclipped run differs, so the test above really saw the clipping
        assert not np.allclose(_np_adam([g1, g2], lr, b1, b2, eps)[1], want[1], rtol=1e-2)


def _np_sgd_momentum(grads, lrs, momentum):
    """Updates of heavy-ball SGD (float64): v = momentum * v + g, update = -lr * v."""
    v, out = 0.0, []
    for g, lr in zip(grads, lrs):
        v = momentum * v + g
        out.append(-lr * v)
    return out


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_momentum_matches_the_heavy_ball_recursion(momentum):
    """name='sgd' (ViT App. B.1.1 fine-tuning) over four steps of a warmup-cosine schedule and
    clipping at norm 1, as the ViT fine-tuning recipe runs it, against the recursion in NumPy."""
    cfg = _cfg(name="sgd", momentum=momentum, schedule="cosine", learning_rate=0.03,
               warmup_steps=2, total_steps=6, clip_norm=1.0)
    tx, schedule = optimizers.make_optimizer(cfg)
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=(4, 2)) * scale for scale in (3.0, 0.1, 2.0, 0.5)]
    clipped = [g * min(1.0, 1.0 / np.linalg.norm(g)) for g in grads]
    lrs = [_recipe_lr("cosine", 0.03, 2, 6, 0.0, None, step) for step in range(4)]
    want = _np_sgd_momentum(clipped, lrs, momentum)
    p = jnp.zeros((4, 2))
    state = tx.init(p)
    for step, (g, w) in enumerate(zip(grads, want)):
        assert float(schedule(step)) == pytest.approx(lrs[step], abs=1e-9)
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state, p)
        np.testing.assert_allclose(updates, w, rtol=1e-5, atol=1e-9)
    if momentum:  # the last update carries the earlier gradients: plain SGD would differ
        assert not np.allclose(want[-1], -lrs[-1] * clipped[-1], rtol=1e-2)


def test_sgd_state_has_one_structure_whatever_the_momentum():
    """A run resumes with another momentum (train/workdir.py RESUMABLE): the state is the same
    tree at momentum 0 and 0.9."""
    p = {"w": jnp.zeros((3,))}
    states = [optimizers.make_optimizer(_cfg(name="sgd", momentum=m))[0].init(p)
              for m in (0.0, 0.9)]
    assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])


# ----- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, d_model, match", [
    (dict(schedule="foo"), None,
     r"optimizer.schedule='foo' is not one of \['inverse_sqrt', 'linear', 'cosine', 'constant'\]"),
    (dict(name="lamb"), None, r"optimizer.name='lamb' is not one of \['adam', 'adamw', 'sgd'\]"),
    (dict(momentum=0.9), None, r"optimizer.momentum=0.9 is SGD's \(name='sgd'\); "
                               r"config.optimizer.name='adam' keeps its first moment with b1"),
    (dict(name="sgd", weight_decay=1e-4), None, r"weight_decay=0.0001 is not applied by "
                                                r"config.optimizer.name='sgd'"),
    (dict(schedule="inverse_sqrt", warmup_steps=4000), None, r"d_model"),
    (dict(weight_decay=0.01), None, r"optimizer.weight_decay=0.01.*'adamw'"),
    (dict(clip_norm=-1.0), None, r"optimizer.clip_norm"),
    (dict(schedule="linear", warmup_steps=100, total_steps=100), None, r"optimizer.total_steps"),
])
def test_config_errors(overrides, d_model, match):
    with pytest.raises(ValueError, match=match):
        optimizers.make_optimizer(_cfg(**overrides), d_model=d_model)


def test_missing_and_unknown_keys():
    cfg = _cfg()
    del cfg["clip_norm"]
    with pytest.raises(ValueError, match=r"optimizer.clip_norm"):
        optimizers.make_optimizer(cfg)
    with pytest.raises(ValueError, match=r"unknown keys \['nesterov'\]"):
        optimizers.make_optimizer(_cfg(nesterov=True))


@pytest.mark.parametrize("overrides, match", [
    (dict(learning_rate=-1e-3), r"config.optimizer.learning_rate=-0.001 must be >= 0"),
    (dict(learning_rate=float("inf")), r"config.optimizer.learning_rate=inf must be a finite"),
    (dict(end_learning_rate=-1e-5), r"config.optimizer.end_learning_rate=-1e-05 must be >= 0"),
    (dict(schedule="cosine", end_learning_rate=1e-2),
     r"config.optimizer.end_learning_rate=0.01 must not exceed config.optimizer.learning_rate="
     r"0.001: schedule 'cosine' decays"),
    (dict(schedule="linear", end_learning_rate=1e-2), r"end_learning_rate=0.01 must not exceed"),
    (dict(b1=1.0), r"config.optimizer.b1=1.0 must be in \[0, 1\)"),
    (dict(b1=-0.1), r"config.optimizer.b1=-0.1 must be in \[0, 1\)"),
    (dict(b2=1.5), r"config.optimizer.b2=1.5 must be in \[0, 1\)"),
    (dict(eps=0.0), r"config.optimizer.eps=0.0 must be > 0"),
    (dict(eps=-1e-8), r"config.optimizer.eps=-1e-08 must be > 0"),
    (dict(name="sgd", momentum=1.0), r"config.optimizer.momentum=1.0 must be in \[0, 1\)"),
    (dict(name="sgd", momentum=-0.5), r"config.optimizer.momentum=-0.5 must be in \[0, 1\)"),
    (dict(name="adamw", weight_decay=-0.1), r"config.optimizer.weight_decay=-0.1 must be >= 0"),
    (dict(clip_norm=-1.0), r"config.optimizer.clip_norm=-1.0 must be >= 0 \(0 disables"),
    (dict(warmup_steps=-1), r"config.optimizer.warmup_steps=-1 must be >= 0"),
    (dict(total_steps=-5), r"config.optimizer.total_steps=-5 must be -1 \(the decay ends with "
                           r"the run, at train.num_steps\) or >= 1"),
    (dict(total_steps=0), r"config.optimizer.total_steps=0 must be -1"),
    (dict(schedule="cosine", warmup_steps=50, total_steps=40),
     r"config.optimizer.total_steps=40 must be larger than config.optimizer.warmup_steps=50 for "
     r"config.optimizer.schedule='cosine' .*set total_steps to 51 or more .* or warmup_steps to "
     r"39 or less"),
])
def test_every_number_out_of_its_range_is_named_with_the_range(overrides, match):
    with pytest.raises(ValueError, match=match):
        optimizers.make_optimizer(_cfg(**overrides), num_steps=100)


@pytest.mark.parametrize("overrides", [
    dict(learning_rate=0.0),                        # a reference run that does not move
    dict(b1=0.0, b2=0.0, eps=1e-12, clip_norm=0.0),
    dict(schedule="cosine", end_learning_rate=1e-3, total_steps=-1),  # end == peak: flat
    dict(schedule="linear", warmup_steps=99, total_steps=-1),
])
def test_the_edges_of_the_ranges_are_allowed(overrides):
    """Each edge builds, its schedule is the recipe's (total_steps=-1: the run's 100 steps;
    warmup 99 of 100: the ramp, the peak at step 99, the end at 100), and Adam's updates are
    plain Adam's (NumPy, float64) with that lr: with b1 = b2 = 0, m_t = g_t and v_t = g_t^2, no
    memory of earlier gradients and no bias correction left, so each update is -lr g / (|g| +
    eps)."""
    tx, lr = optimizers.make_optimizer(_cfg(**overrides), num_steps=100)
    c = _cfg(**overrides)
    peak = c.learning_rate
    total = 100 if c.total_steps == -1 else c.total_steps
    steps = [0, 1, 50, 98, 99, 100, 150]
    if overrides.get("end_learning_rate") == peak:  # end == peak: flat, warmup aside
        assert [float(lr(s)) for s in steps] == pytest.approx([peak] * len(steps))
    elif peak == 0.0:
        assert [float(lr(s)) for s in steps] == [0.0] * len(steps)
    want = [_recipe_lr(c.schedule, peak, c.warmup_steps, total, c.end_learning_rate, None, s)
            for s in steps]
    np.testing.assert_allclose(_values(lr, steps), want, rtol=1e-5, atol=1e-12)
    if c.warmup_steps == 99:  # the edge: a one-step decay after the ramp
        assert float(lr(98)) == pytest.approx(peak * 98 / 99, rel=1e-6)
        assert float(lr(99)) == pytest.approx(peak, rel=1e-6)
        assert float(lr(100)) == 0.0

    grads = np.random.default_rng(0).normal(size=(4, 5))  # a different gradient each step
    lrs = [_recipe_lr(c.schedule, peak, c.warmup_steps, total, c.end_learning_rate, None, s)
           for s in range(len(grads))]
    want = [rate * update for rate, update in zip(lrs, _np_adam(grads, 1.0, c.b1, c.b2, c.eps))]
    p = jnp.zeros((5,))
    state = tx.init(p)
    for step, g in enumerate(grads):
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state, p)
        np.testing.assert_allclose(updates, want[step], rtol=1e-5, atol=1e-12,
                                   err_msg=f"step {step}")


@pytest.mark.parametrize("schedule", ["constant", "inverse_sqrt"])
@pytest.mark.parametrize("key, value", [("end_learning_rate", 1e-4), ("total_steps", 500)])
def test_a_decay_setting_a_schedule_without_decay_would_ignore_is_refused(schedule, key, value):
    cfg = _cfg(schedule=schedule, warmup_steps=10, **{key: value})
    with pytest.raises(ValueError, match=f"config.optimizer.{key}={value}: schedule "
                                         f"'{schedule}' has no decay"):
        optimizers.make_optimizer(cfg, d_model=64, num_steps=100)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_a_run_shorter_than_its_warmup_names_the_keys_to_change(schedule):
    """total_steps=-1 stands for train.num_steps: the message names that key (the one the user
    set), not total_steps, with values that work."""
    cfg = _cfg(schedule=schedule, warmup_steps=300, total_steps=-1)
    with pytest.raises(ValueError) as error:
        optimizers.make_optimizer(cfg, num_steps=40)
    message = str(error.value)
    assert message.startswith("config.train.num_steps=40 must be larger than "
                              "config.optimizer.warmup_steps=300")
    assert "total_steps=40" not in message
    assert "config.train.num_steps to 301 or more" in message
    assert "config.optimizer.warmup_steps to 39 or less (e.g. 4, a tenth of the run)" in message
    for fixed in (dict(num_steps=301), dict(num_steps=40, warmup_steps=39)):  # both fixes work
        cfg.warmup_steps = fixed.get("warmup_steps", 300)
        _, lr = optimizers.make_optimizer(cfg, num_steps=fixed["num_steps"])
        assert float(lr(fixed["num_steps"])) == pytest.approx(0.0)  # decayed at the run's end


def test_total_steps_minus_one_is_the_runs_length():
    cfg = _cfg(schedule="linear", warmup_steps=0, total_steps=-1, learning_rate=1.0)
    _, lr = optimizers.make_optimizer(cfg, num_steps=10)
    np.testing.assert_allclose(_values(lr, [0, 5, 10, 20]), [1.0, 0.5, 0.0, 0.0], atol=1e-6)
    with pytest.raises(ValueError, match=r"total_steps=-1 ends the decay with the run.*num_steps="):
        optimizers.make_optimizer(cfg)
