"""BERT under rematerialisation (`BertConfig.remat`): the same parameters, loss and gradients
with dropout off and on, remat visible in the gradient with fewer saved residuals, and bfloat16
with full remat close to float32."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.bert_pretraining import BertForPreTraining

from random_params import perturbed
from remat_checks import (REMATS, assert_same_loss_and_grads, assert_same_variables,
                          grad_has_remat, num_saved_residuals)
from tiny_bert import POSITIONS, inputs as _inputs, tiny


@pytest.fixture(scope="module")
def params():
    """The tiny BertForPreTraining's initial parameters (unboxed)."""
    ids, types, mask = _inputs()
    variables = jax.jit(lambda rng: BertForPreTraining(tiny()).init(
        rng, ids, types, mask, masked_positions=POSITIONS))(jax.random.PRNGKey(0))
    return nn.meta.unbox(variables)["params"]


def _pretraining_loss(cfg):
    """MLM cross-entropy at POSITIONS (labels: the tokens there) plus NSP (label IsNext), as a
    function of (params, train, seed); dropout rng 'dropout' from ``seed``."""
    ids, types, mask = _inputs()
    labels = jnp.take_along_axis(ids, POSITIONS, axis=1)

    def loss(params, train=False, seed=0):
        out = BertForPreTraining(cfg).apply(
            {"params": params}, ids, types, mask, masked_positions=POSITIONS, train=train,
            rngs={"dropout": jax.random.PRNGKey(seed)})
        mlm = -jnp.take_along_axis(jax.nn.log_softmax(out["mlm_logits"]), labels[..., None], -1)
        return mlm.mean() - jax.nn.log_softmax(out["nsp_logits"])[:, 0].mean()

    return loss


def _perturbed(params):
    """BERT's initial parameters plus noise: outputs far from uniform, LayerNorm scales near 1."""
    return perturbed(params, scale=0.2)


def test_remat_keeps_parameters_loss_and_gradients():
    ids, types, mask = _inputs()

    def init(cfg):  # tiny(): dropout 0.1 on embeddings, attention probabilities, sublayers
        return jax.jit(lambda: BertForPreTraining(cfg).init(
            jax.random.PRNGKey(0), ids, types, mask, masked_positions=POSITIONS))()

    boxed = init(tiny())
    params = _perturbed(nn.meta.unbox(boxed)["params"])

    def losses_and_grads(cfg):  # dropout off and on (the same dropout rng for every remat)
        loss = _pretraining_loss(cfg)
        return jax.jit(lambda p: [jax.value_and_grad(loss)(p, train) for train in (False, True)])(
            params)

    expected = losses_and_grads(tiny())
    for remat in REMATS:
        assert_same_variables(init(tiny(remat=remat)), boxed)
        for got, want in zip(losses_and_grads(tiny(remat=remat)), expected):
            assert_same_loss_and_grads(got, want)
    assert not np.allclose(expected[0][0], expected[1][0])  # dropout did act


def test_remat_appears_in_the_gradient_and_keeps_fewer_residuals(params):
    residuals = {}
    for remat in ("none",) + REMATS:
        loss = _pretraining_loss(tiny(remat=remat))
        assert grad_has_remat(loss, params) == (remat != "none")
        residuals[remat] = num_saved_residuals(loss, params)
    # 'full' keeps the layers' inputs only, 'minimal' also the projections' outputs.
    assert residuals["full"] < residuals["minimal"] < residuals["none"], residuals


def test_bfloat16_with_full_remat_stays_close_to_float32(params):
    params = _perturbed(params)
    loss32, grads32 = jax.jit(jax.value_and_grad(_pretraining_loss(tiny())))(params)
    loss16, grads16 = jax.jit(jax.value_and_grad(
        _pretraining_loss(tiny(dtype="bfloat16", remat="full"))))(params)
    assert loss16.dtype == jnp.float32        # float32 logits and loss, float32 parameters
    assert all(g.dtype == jnp.float32 and np.all(np.isfinite(g))
               for g in jax.tree.leaves(grads16))
    # bfloat16 keeps 8 significant bits (relative rounding 2^-9 ~ 0.2% per operation).
    assert abs(float(loss16) - float(loss32)) < 0.02 * abs(float(loss32)), (loss16, loss32)
    flat16, flat32 = (jnp.concatenate([g.ravel() for g in jax.tree.leaves(t)])
                      for t in (grads16, grads32))
    assert float(jnp.linalg.norm(flat16 - flat32) / jnp.linalg.norm(flat32)) < 0.1


def test_unknown_remat_is_rejected():
    with pytest.raises(ValueError, match=r"remat='all' is not one of \['none', 'minimal', 'full'\]"):
        tiny(remat="all")
