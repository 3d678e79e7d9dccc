"""The train step: a pure (state, batch) -> (state, metric sums) function the trainer jits.

    rng         = fold_in(state.rng, state.step)             one dropout key per step
    normalizers = task.loss_normalizers(batch)               counts over the WHOLE batch
    objective   = sum over terms of term_sum / normalizer    (train/tasks/base.py)
    grads       = d objective / d params                     at once, or summed over k
                                                             microbatches (rows i::k)
    params, opt_state <- optimizer update (or kept, for a non-finite step in 'skip' mode)

Gradient accumulation is exact: each microbatch's objective divides its term sums by the
counts of the whole batch, so the k microbatch gradients add up to the gradient of the one big
batch, whatever share of the masked tokens or real examples each microbatch holds. (Averaging
k microbatch means instead would weigh a microbatch with few masked tokens as much as one with
many.) Microbatch i takes rows i, i + k, i + 2k, ...: the batch arrives split over the
data-parallel devices in contiguous blocks, so every microbatch keeps rows on every device and
no device idles or gathers rows from another.

A task with frozen parameters (a distillation teacher, train/tasks/base.py) gets them as the
step's third argument, `frozen`, passed through to its loss: they are not an argument of the
differentiated objective, so no gradient is formed for them and the optimizer never sees them.

With train.ema_decay = d > 0 the state also holds an exponential moving average of the
parameters, updated after every step from the new parameters (`ema_update`), which the trainer
evaluates beside them; it is part of the checkpointed state, sharded like the parameters, so a
resumed run continues it exactly.
"""

from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from train.tasks.base import batch_objective, call_loss


@flax.struct.dataclass
class TrainState:
    step: jax.Array       # optimizer updates applied so far
    params: Any
    opt_state: Any
    rng: jax.Array        # base dropout key (raw uint32); step keys are fold_in(rng, step)
    ema_params: Any = None  # the parameters' moving average (train.ema_decay > 0), else None


# Polyak averaging in its exponential form, the weights' EMA DeiT evaluates (Touvron et al. 2021,
# Sec. 6, "Exponential Moving Average"; timm's ModelEma): ema_0 = theta_0 and after each update
#   ema_{t+1} = d ema_t + (1 - d) theta_{t+1},  so ema_t = (1 - d) sum_s d^(t-s) theta_s + d^t theta_0.
def ema_init(params: Any) -> Any:
    """ema_0 = theta_0, kept in float32 at least: in bfloat16 (model.param_dtype) an update of
    (1 - d)(theta - ema) is below the format's resolution for any d near 1, and the average
    would never leave theta_0. Boxed parameters stay boxed (the same logical axes)."""
    return jax.tree.map(lambda p: p.astype(jnp.promote_types(p.dtype, jnp.float32)), params)


def ema_update(ema: Any, params: Any, decay: float) -> Any:
    """The moving average `ema` moved towards the new `params` with `decay` d (in float32 at
    least, stored in the average's own dtype, float32 from ema_init)."""
    def update(average, value):
        wide = jnp.promote_types(average.dtype, jnp.float32)
        new = decay * average.astype(wide) + (1.0 - decay) * value.astype(wide)
        return new.astype(average.dtype)
    return jax.tree.map(update, ema, params)


def split_microbatches(batch: dict, k: int) -> dict:
    """{name: [b, ...]} -> {name: [k, b / k, ...]} with microbatch i = rows i, i + k, ...

    The constraint keeps each microbatch's rows split over the data-parallel mesh axes as the
    batch is (a no-op outside a mesh)."""
    def split(x):
        rows = jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1)
        return nn.with_logical_constraint(rows, (None, "batch") + (None,) * (x.ndim - 1))
    return jax.tree.map(split, batch)


def _is_schedule_state(node) -> bool:
    return isinstance(node, optax.ScaleByScheduleState)


def _keep_if(keep: jax.Array, new: Any, old: Any) -> Any:
    """`new` where `keep`, else `old`: how a skipped (non-finite) step leaves params and optimizer
    state as they were. Except the learning-rate schedule's step counter, which advances anyway:
    the step number (`state.step`) advances too, and the lr used from step k to k + 1 stays
    `schedule(k)`, the one logged, with warmup and decay ending where the config says. Adam's
    moments and its bias-correction count are kept, as if the step had not happened."""
    def choose(new_node, old_node):
        if _is_schedule_state(new_node):
            return new_node
        return jnp.where(keep, new_node, old_node)
    return jax.tree.map(choose, new, old, is_leaf=_is_schedule_state)


def make_train_step(task, optimizer, schedule, train_cfg):
    """The step of `task` (train/tasks/base.py) with `optimizer` and its lr `schedule`, reading
    train_cfg.grad_accum_steps, train_cfg.nonfinite and train_cfg.ema_decay.

    Metrics are (sum, count) pairs: the task's, plus `loss` (the objective), `grad_norm`,
    `param_norm`, `learning_rate`, and the `finite_loss` / `finite_grads` / `nonfinite_steps`
    flags of the host's NaN check. With nonfinite='skip', a step whose objective or gradients
    are not finite leaves parameters and optimizer state unchanged (see `_keep_if`), and its
    task metrics, `loss` and `grad_norm` count zero times (sum and count 0): a log window's
    means are its kept steps', and `nonfinite_steps` is what tells of the skipped one.
    """
    accum = train_cfg.grad_accum_steps
    skip_nonfinite = train_cfg.nonfinite == "skip"
    ema_decay = float(train_cfg.ema_decay)

    def objective(params, batch, rng, normalizers, frozen):
        terms, metrics = call_loss(task, params, batch, rng, frozen)
        if "loss" in metrics:
            raise ValueError(f"{type(task).__name__}.loss_fn returned a metric named 'loss'; the "
                             "train step logs the objective under that name")
        return batch_objective(terms, normalizers), metrics

    grad_fn = jax.value_and_grad(objective, has_aux=True)

    def train_step(state: TrainState, batch, frozen=None):
        rng = jax.random.fold_in(state.rng, state.step)
        normalizers = task.loss_normalizers(batch)
        if accum == 1:
            (loss, metrics), grads = grad_fn(state.params, batch, rng, normalizers, frozen)
        else:
            micro = split_microbatches(batch, accum)

            def body(total, inputs):
                index, microbatch = inputs
                out = grad_fn(state.params, microbatch, jax.random.fold_in(rng, index),
                              normalizers, frozen)
                return jax.tree.map(jnp.add, total, out), None

            zeros = jax.eval_shape(grad_fn, state.params, jax.tree.map(lambda x: x[0], micro),
                                   rng, normalizers, frozen)
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros)
            ((loss, metrics), grads), _ = jax.lax.scan(body, zeros, (jnp.arange(accum), micro))
        grad_norm = optax.tree.norm(grads)
        finite_loss, finite_grads = jnp.isfinite(loss), jnp.isfinite(grad_norm)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = ema_update(state.ema_params, params, ema_decay) if ema_decay else None
        one = jnp.ones(())
        metrics = dict(metrics)
        metrics["loss"] = (loss, one)
        metrics["grad_norm"] = (grad_norm, one)
        if skip_nonfinite:  # a skipped step moves neither the parameters nor their average,
            keep = finite_loss & finite_grads  # and its (NaN) sums and counts are left out of
            params, opt_state, ema = _keep_if(keep, (params, opt_state, ema),  # the log's means
                                              (state.params, state.opt_state, state.ema_params))
            metrics = jax.tree.map(lambda x: jnp.where(keep, x, jnp.zeros_like(x)), metrics)
        metrics["param_norm"] = (optax.tree.norm(params), one)
        metrics["learning_rate"] = (schedule(state.step), one)
        metrics["finite_loss"] = (finite_loss.astype(jnp.float32), one)
        metrics["finite_grads"] = (finite_grads.astype(jnp.float32), one)
        metrics["nonfinite_steps"] = ((~(finite_loss & finite_grads)).astype(jnp.float32), one)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state,
                                  ema_params=ema)
        return new_state, metrics

    return train_step
