"""Learning-rate schedules and the optax optimizer chain built from a config.

Every schedule is an optax schedule: a function `step -> learning rate`, where `step` counts the
updates already applied (0 for the very first update). This is the `count` optax hands to a
schedule, and the `step` of a train state *before* its update, so the learning rate used to go
from step k to step k + 1 is `schedule(k)`.

The linear warmups ('linear', 'cosine', 'constant') start at 0: `schedule(0) == 0`, so the
first update does not move the parameters (as in the original BERT code), and reach `peak` at
step `warmup_steps`. 'inverse_sqrt' is eq. 3 of Vaswani et al. with steps counted from 1: it
starts at d^-0.5 w^-1.5 and peaks at step `warmup_steps - 1` (inverse_sqrt_schedule).

`make_optimizer(cfg)` reads exactly the keys of `configs/common.py:optimizer_config`:

    clip_by_global_norm(clip_norm)      (only when clip_norm > 0)
    -> adam(b1, b2, eps) | adamw(b1, b2, eps, weight_decay, mask=weight_decay_mask)
       | sgd(momentum)                  (heavy-ball momentum: the ViT paper's fine-tuning)
    -> scaled by the schedule chosen by `schedule`

`freeze(tx, trained)` leaves every top-level parameter subtree not in `trained` as it is (a
linear probe's frozen encoder): their updates are set to zero (optax.set_to_zero).

Gradient accumulation is the trainer's job (a microbatch scan inside the step), not an optax
wrapper here.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.core import meta

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("inverse_sqrt", "linear", "cosine", "constant")
CONFIG_KEYS = ("name", "schedule", "learning_rate", "warmup_steps", "total_steps",
               "end_learning_rate", "b1", "b2", "eps", "momentum", "weight_decay", "clip_norm")


# --------------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------------

def _as_float(step) -> jax.Array:
    return jnp.asarray(step, dtype=jnp.float32)


def _check_steps(warmup_steps: int, total_steps: int | None = None) -> None:
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps={warmup_steps} must be >= 0.")
    if total_steps is not None and total_steps <= warmup_steps:
        raise ValueError(f"total_steps={total_steps} must be larger than "
                         f"warmup_steps={warmup_steps}.")


def inverse_sqrt_schedule(d_model: int, warmup_steps: int, scale: float = 1.0) -> optax.Schedule:
    """Linear warmup, then decay with the inverse square root of the step number.

    The paper's step_num counts from 1, so the first update (optax count 0) uses n = 1 and the
    peak, d_model^-0.5 * warmup_steps^-0.5 (times `scale`), is reached at count warmup_steps - 1.
    """
    if warmup_steps < 1:
        raise ValueError(f"warmup_steps={warmup_steps} must be >= 1 for the inverse-sqrt schedule.")
    if d_model < 1:
        raise ValueError(f"d_model={d_model} must be >= 1.")

    def schedule(step):
        n = _as_float(step) + 1.0
        # Vaswani et al. 2017, "Attention Is All You Need", eq. (3).
        return scale * d_model ** -0.5 * jnp.minimum(n ** -0.5, n * warmup_steps ** -1.5)

    return schedule


def _warmup(peak: float, warmup_steps: int, step: jax.Array) -> jax.Array:
    """peak * step / warmup_steps, the linear ramp from 0 (used below warmup_steps only)."""
    return peak * step / max(warmup_steps, 1)


def _decay_fraction(step: jax.Array, warmup_steps: int, total_steps: int) -> jax.Array:
    """0 at warmup_steps, rising linearly to 1 at total_steps, 1 after."""
    return jnp.clip((step - warmup_steps) / (total_steps - warmup_steps), 0.0, 1.0)


def linear_warmup_linear_decay(peak: float, warmup_steps: int, total_steps: int,
                               end_value: float = 0.0) -> optax.Schedule:
    """Linear warmup 0 -> peak over warmup_steps, linear decay from peak at warmup_steps to
    end_value at total_steps, constant end_value after: Hugging Face's
    get_linear_schedule_with_warmup. BERT's released code decays from step 0 instead, warmup
    overriding the start, so its rate after warmup is peak x (1 - step / total_steps): the same
    for pretraining's 10k of 1M steps to within 1% of the peak, up to 10% lower for a
    fine-tuning run that warms up for a tenth of its steps."""
    _check_steps(warmup_steps, total_steps)

    def schedule(step):
        step = _as_float(step)
        decay = peak + (end_value - peak) * _decay_fraction(step, warmup_steps, total_steps)
        return jnp.where(step < warmup_steps, _warmup(peak, warmup_steps, step), decay)

    return schedule


def warmup_cosine(peak: float, warmup_steps: int, total_steps: int,
                  end_value: float = 0.0) -> optax.Schedule:
    """Linear warmup 0 -> peak over warmup_steps, half a cosine down to end_value at total_steps,
    constant end_value after."""
    _check_steps(warmup_steps, total_steps)

    def schedule(step):
        step = _as_float(step)
        cosine = 0.5 * (1.0 + jnp.cos(math.pi * _decay_fraction(step, warmup_steps, total_steps)))
        decay = end_value + (peak - end_value) * cosine
        return jnp.where(step < warmup_steps, _warmup(peak, warmup_steps, step), decay)

    return schedule


def constant_with_warmup(peak: float, warmup_steps: int) -> optax.Schedule:
    """Linear warmup 0 -> peak over warmup_steps, then constant peak (warmup_steps=0: constant)."""
    _check_steps(warmup_steps)

    def schedule(step):
        step = _as_float(step)
        return jnp.where(step < warmup_steps, _warmup(peak, warmup_steps, step),
                         jnp.asarray(peak, jnp.float32))

    return schedule


# --------------------------------------------------------------------------------------------
# SGD with momentum
# --------------------------------------------------------------------------------------------

def sgd_momentum(schedule: optax.Schedule, momentum: float) -> optax.GradientTransformation:
    """SGD with heavy-ball momentum (Polyak 1964), as the ViT paper fine-tunes (Dosovitskiy et al.
    2021, App. B.1.1: "SGD with a momentum of 0.9"):

        v <- momentum * v + g            (v starts at 0)
        p <- p - lr(step) * v

    the convention of optax.sgd and PyTorch's SGD (the learning rate scales the velocity, not
    each gradient as it enters it). The velocity is kept even at momentum 0 (then v = g: plain
    SGD), so the optimizer state has one structure whatever the momentum, and a run resumes
    with another momentum (train/workdir.py)."""
    return optax.chain(optax.trace(decay=momentum, nesterov=False),
                       optax.scale_by_learning_rate(schedule))


# --------------------------------------------------------------------------------------------
# Weight-decay mask
# --------------------------------------------------------------------------------------------

# Leaf names of normalisation and bias parameters (flax LayerNorm/RMSNorm: 'scale', 'bias').
NO_DECAY_NAMES = ("bias", "scale")


def _key_name(key) -> str:
    for attr in ("key", "name", "idx"):  # DictKey, GetAttrKey, SequenceKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _raw_value(leaf):
    """The array (or ShapeDtypeStruct) inside a flax metadata box, without sharding constraints."""
    if isinstance(leaf, nn.Partitioned):  # includes nn.LogicallyPartitioned
        return leaf.value
    if isinstance(leaf, meta.AxisMetadata):
        return meta.unbox(leaf)
    return leaf


def _decays(path, leaf) -> bool:
    names = [_key_name(k) for k in path]
    ndim = len(getattr(_raw_value(leaf), "shape", ()))
    is_norm = any("norm" in name.lower() for name in names[:-1])
    return ndim >= 2 and names[-1] not in NO_DECAY_NAMES and not is_norm


def weight_decay_mask(params: Any) -> Any:
    """True for the parameters weight decay applies to, False for the others.

    Rule: a parameter is decayed iff it has ndim >= 2 (weight matrices, kernels, embedding
    tables, also learned position tables and the ViT class token), its leaf name is not
    'bias' or 'scale', and no enclosing module name contains 'norm' (LayerNorm_0, RMSNorm, ...).
    So biases (including 2-D DenseGeneral biases), LayerNorm/RMSNorm scale and bias, and every
    1-D or scalar parameter are not decayed.

    `params` may hold plain arrays, jax.ShapeDtypeStructs, or flax metadata boxes
    (nn.LogicallyPartitioned from nn.with_logical_partitioning). A boxed leaf gets a box of the
    same kind holding the bool, so the mask has exactly the structure of `params` and can be
    zipped with it by optax (pass the function itself as optax's `mask`, as make_optimizer does).
    """
    def decide(path, leaf):
        decision = _decays(path, leaf)
        if isinstance(leaf, meta.AxisMetadata):
            return leaf.replace_boxed(decision)
        return decision

    return jax.tree_util.tree_map_with_path(decide, params, is_leaf=meta.is_axis_metadata)


# --------------------------------------------------------------------------------------------
# Frozen parameters
# --------------------------------------------------------------------------------------------

def frozen_mask(params: Any, trained) -> Any:
    """True for the leaves of `params` outside the top-level keys in `trained` (the frozen
    ones), False under them; boxed leaves get boxed decisions, as in weight_decay_mask."""
    trained = frozenset(trained)

    def decide(path, leaf):
        decision = _key_name(path[0]) not in trained
        return leaf.replace_boxed(decision) if isinstance(leaf, meta.AxisMetadata) else decision

    return jax.tree_util.tree_map_with_path(decide, params, is_leaf=meta.is_axis_metadata)


def freeze(tx: optax.GradientTransformation, trained) -> optax.GradientTransformation:
    """`tx`, then its updates of every top-level parameter not named in `trained` set to zero
    (optax.masked(optax.set_to_zero())): weight decay and all, those parameters stay exactly as
    they are. (A masked tail rather than optax.multi_transform: the latter's states hold
    placeholder nodes the trainer's sharding rules do not map; `tx`'s moments of the frozen
    parameters stay zero where the task gives them zero gradients.)"""
    return optax.chain(tx, optax.masked(optax.set_to_zero(),
                                        lambda params: frozen_mask(params, trained)))


# --------------------------------------------------------------------------------------------
# Optimizer from config
# --------------------------------------------------------------------------------------------

def _read_config(cfg) -> dict[str, Any]:
    if hasattr(cfg, "keys"):
        unknown = sorted(set(cfg.keys()) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"optimizer config has unknown keys {unknown}; the keys are "
                             f"{list(CONFIG_KEYS)}.")
    values = {}
    for key in CONFIG_KEYS:
        try:
            values[key] = getattr(cfg, key)
        except (AttributeError, KeyError):
            raise ValueError(f"optimizer config is missing the key optimizer.{key}; the keys are "
                             f"{list(CONFIG_KEYS)}.") from None
    return values


def _at_most(limit: int) -> str:
    return f"{limit} or less" if limit > 0 else "0"


def _check_ranges(c: dict[str, Any]) -> None:
    """Every number of the optimizer config in its range, named with the allowed one."""
    for key in ("learning_rate", "end_learning_rate", "b1", "b2", "eps", "momentum",
                "weight_decay", "clip_norm"):
        if not math.isfinite(float(c[key])):
            raise ValueError(f"config.optimizer.{key}={c[key]} must be a finite number.")
    lr, end = float(c["learning_rate"]), float(c["end_learning_rate"])
    ranges = (
        ("learning_rate", lr >= 0, ">= 0 (the peak learning rate, or the 'inverse_sqrt' scale; "
                                   "0 leaves the parameters as initialised)"),
        ("end_learning_rate", end >= 0, ">= 0"),
        ("b1", 0 <= float(c["b1"]) < 1, "in [0, 1) (Adam's first-moment decay, e.g. 0.9)"),
        ("b2", 0 <= float(c["b2"]) < 1, "in [0, 1) (Adam's second-moment decay, e.g. 0.999)"),
        ("eps", float(c["eps"]) > 0, "> 0 (Adam divides by sqrt(second moment) + eps, which is 0 "
                                     "where a gradient is 0; e.g. 1e-8)"),
        ("momentum", 0 <= float(c["momentum"]) < 1, "in [0, 1) (SGD's velocity decay, e.g. 0.9; "
                                                    "0: plain SGD)"),
        ("weight_decay", float(c["weight_decay"]) >= 0, ">= 0 (0: no decay)"),
        ("clip_norm", float(c["clip_norm"]) >= 0, ">= 0 (0 disables clipping)"),
        ("warmup_steps", int(c["warmup_steps"]) >= 0, ">= 0 (0: no warmup)"),
        ("total_steps", int(c["total_steps"]) == -1 or int(c["total_steps"]) >= 1,
         "-1 (the decay ends with the run, at train.num_steps) or >= 1"),
    )
    for key, ok, allowed in ranges:
        if not ok:
            raise ValueError(f"config.optimizer.{key}={c[key]} must be {allowed}.")
    if c["schedule"] in ("linear", "cosine") and end > lr:
        raise ValueError(f"config.optimizer.end_learning_rate={end} must not exceed "
                         f"config.optimizer.learning_rate={lr}: schedule '{c['schedule']}' decays "
                         "from the peak down to it.")


def _decay_end(c: dict[str, Any], num_steps: int | None) -> int:
    """The step where a 'linear' or 'cosine' decay ends: total_steps, or -1: the run's end."""
    name, warmup, total = c["schedule"], int(c["warmup_steps"]), int(c["total_steps"])
    if total != -1:
        if total <= warmup:
            raise ValueError(
                f"config.optimizer.total_steps={total} must be larger than "
                f"config.optimizer.warmup_steps={warmup} for config.optimizer.schedule='{name}' "
                f"(it decays from the end of the warmup to total_steps): set total_steps to "
                f"{warmup + 1} or more (-1: the run's train.num_steps), or warmup_steps to "
                f"{_at_most(total - 1)}.")
        return total
    if num_steps is None:
        raise ValueError("config.optimizer.total_steps=-1 ends the decay with the run: call "
                         "make_optimizer(cfg, num_steps=config.train.num_steps).")
    if num_steps <= warmup:
        raise ValueError(
            f"config.train.num_steps={num_steps} must be larger than "
            f"config.optimizer.warmup_steps={warmup}: schedule '{name}' warms up for {warmup} "
            "steps, then decays until the run ends (config.optimizer.total_steps=-1). Set "
            f"config.train.num_steps to {warmup + 1} or more, or config.optimizer.warmup_steps to "
            f"{_at_most(num_steps - 1)} (e.g. {num_steps // 10}, a tenth of the run).")
    return num_steps


def _make_schedule(c: dict[str, Any], d_model: int | None,
                   num_steps: int | None) -> optax.Schedule:
    name, warmup = c["schedule"], int(c["warmup_steps"])
    lr, end = float(c["learning_rate"]), float(c["end_learning_rate"])
    if name == "inverse_sqrt":
        if d_model is None:
            raise ValueError("config.optimizer.schedule='inverse_sqrt' needs the model width: call "
                             "make_optimizer(cfg, d_model=...).")
        if warmup < 1:
            raise ValueError(f"config.optimizer.warmup_steps={warmup} must be >= 1 for "
                             "config.optimizer.schedule='inverse_sqrt' (its peak is at the end of "
                             "the warmup).")
        return inverse_sqrt_schedule(d_model, warmup, scale=lr)
    if name == "linear":
        return linear_warmup_linear_decay(lr, warmup, _decay_end(c, num_steps), end_value=end)
    if name == "cosine":
        return warmup_cosine(lr, warmup, _decay_end(c, num_steps), end_value=end)
    return constant_with_warmup(lr, warmup)


def make_optimizer(cfg, *, d_model: int | None = None, num_steps: int | None = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """(optax transformation, learning-rate schedule) from an optimizer config.

    Keys (all required, no others allowed when `cfg` has .keys()), with their ranges:
      name           'adam' | 'adamw' | 'sgd'
      schedule       'inverse_sqrt' | 'linear' | 'cosine' | 'constant'
      learning_rate  >= 0: peak lr; for 'inverse_sqrt' the scale multiplying
                     d_model^-0.5 * min(...)
      warmup_steps   >= 0 (>= 1 for 'inverse_sqrt'): linear warmup length in updates
      total_steps    end of the decay ('linear', 'cosine'), > warmup_steps; -1: `num_steps`
      end_learning_rate  0 <= it <= learning_rate: lr at and after total_steps ('linear', 'cosine')
      b1, b2, eps    Adam moments' decays in [0, 1), epsilon > 0 (added outside the square root);
                     not read by 'sgd'
      momentum       in [0, 1): SGD's velocity decay ('sgd' only; 0 for Adam)
      weight_decay   >= 0: decoupled decay, 'adamw' only (0 for 'adam' and 'sgd'), masked by weight_decay_mask; optax
                     multiplies it by the scheduled lr: p <- p - lr * (adam_update + weight_decay * p)
      clip_norm      >= 0: global-norm gradient clipping before Adam; 0 disables
    `d_model` is required for 'inverse_sqrt'; `num_steps` (the run's train.num_steps) for a
    decay with total_steps=-1. Errors name the config key, its value and the allowed range.
    """
    c = _read_config(cfg)
    if c["name"] not in OPTIMIZERS:
        raise ValueError(f"config.optimizer.name={c['name']!r} is not one of {list(OPTIMIZERS)}.")
    if c["schedule"] not in SCHEDULES:
        raise ValueError(f"config.optimizer.schedule={c['schedule']!r} is not one of "
                         f"{list(SCHEDULES)}.")
    _check_ranges(c)
    weight_decay, clip_norm = float(c["weight_decay"]), float(c["clip_norm"])
    if c["name"] in ("adam", "sgd") and weight_decay != 0.0:
        raise ValueError(f"config.optimizer.weight_decay={weight_decay} is not applied by "
                         f"config.optimizer.name={c['name']!r}; use name='adamw' for decoupled "
                         "weight decay, or set weight_decay=0.")

    momentum = float(c["momentum"])
    if c["name"] != "sgd" and momentum != 0.0:
        raise ValueError(f"config.optimizer.momentum={momentum} is SGD's (name='sgd'); "
                         f"config.optimizer.name={c['name']!r} keeps its first moment with b1: "
                         "set momentum=0.")

    if c["schedule"] in ("inverse_sqrt", "constant"):
        ignored = [f"{key}={c[key]}" for key, unused in (("end_learning_rate", 0.0),
                                                          ("total_steps", -1))
                   if float(c[key]) != unused]
        if ignored:
            raise ValueError(f"config.optimizer.{' and '.join(ignored)}: schedule "
                             f"'{c['schedule']}' has no decay to an end, so it would not be "
                             "used; set end_learning_rate=0 and total_steps=-1, or a decaying "
                             "schedule ('linear', 'cosine').")
    schedule = _make_schedule(c, d_model, num_steps)
    adam_args = dict(b1=float(c["b1"]), b2=float(c["b2"]), eps=float(c["eps"]))
    if c["name"] == "adam":
        tx = optax.adam(schedule, **adam_args)
    elif c["name"] == "adamw":
        tx = optax.adamw(schedule, weight_decay=weight_decay, mask=weight_decay_mask, **adam_args)
    else:
        tx = sgd_momentum(schedule, momentum)
    if clip_norm > 0:
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)
    return tx, schedule
