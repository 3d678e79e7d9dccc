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
    train_cfg.grad_accum_steps and train_cfg.nonfinite.

    Metrics are (sum, count) pairs: the task's, plus `loss` (the objective), `grad_norm`,
    `param_norm`, `learning_rate`, and the `finite_loss` / `finite_grads` / `nonfinite_steps`
    flags of the host's NaN check. With nonfinite='skip', a step whose objective or gradients
    are not finite leaves parameters and optimizer state unchanged (see `_keep_if`).
    """
    accum = train_cfg.grad_accum_steps
    skip_nonfinite = train_cfg.nonfinite == "skip"

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
        if skip_nonfinite:
            params, opt_state = _keep_if(finite_loss & finite_grads, (params, opt_state),
                                         (state.params, state.opt_state))
        one = jnp.ones(())
        metrics = dict(metrics)
        metrics["loss"] = (loss, one)
        metrics["grad_norm"] = (grad_norm, one)
        metrics["param_norm"] = (optax.tree.norm(params), one)
        metrics["learning_rate"] = (schedule(state.step), one)
        metrics["finite_loss"] = (finite_loss.astype(jnp.float32), one)
        metrics["finite_grads"] = (finite_grads.astype(jnp.float32), one)
        metrics["nonfinite_steps"] = ((~(finite_loss & finite_grads)).astype(jnp.float32), one)
        new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
        return new_state, metrics

    return train_step
