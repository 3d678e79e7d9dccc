"""Gradient accumulation is exact for every task: k microbatches give the gradient of the one
big batch, even when the microbatches hold different numbers of real examples, target tokens or
masked positions. (The ViT case against plain autodiff is in test_trainer.py; the compiled step
on 8 devices, where microbatches must keep the batch's data sharding, in
test_accumulation_sharding.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from train.config import apply_override, load_config_file
from train.train_step import split_microbatches

NO_DROPOUT = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
CASES = {  # task: (config, fixture holding its data, overrides)
    "bert_pretrain": ("configs/bert/pretrain.py:smoke", "brown_env",
                      {"data.names": "('brown',)", **NO_DROPOUT}),
    "translate": ("configs/transformer/translate.py:smoke", "bible_env", NO_DROPOUT),
    "finetune_tag": ("configs/bert/finetune.py:smoke,init=scratch", "tag_env", NO_DROPOUT),
    # The masks travel in the batch (data/pipelines/patch_masking.py): each microbatch keeps
    # its images' own, and the loss counts the masked patches of the whole batch.
    "mae_pretrain": ("configs/vit/mae.py:smoke", "fashion_mnist_env", {}),
    "causal_lm": ("configs/lm/english.py:smoke", "english_lm_env", NO_DROPOUT),
}
ACCUM = 4


@pytest.fixture
def tag_env(tmp_path, monkeypatch):
    """Generated tagging data (finetune_examples.py) and an empty data root for its vocabulary."""
    from finetune_examples import register

    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path / "data_root"))
    return register("tag")


def _config(spec, overrides, accum, data_name=None):
    config = load_config_file(spec)
    settings = {**overrides, "train.grad_accum_steps": accum, "optimizer.clip_norm": 0.0}
    if data_name:
        settings["data.name"] = data_name
    for key, value in settings.items():
        apply_override(config, key, str(value))
    return config


def _gradient(trainer, batch):
    """The gradient the optimizer received in one step from the initial state, read back from
    Adam's first moment (mu = (1 - b1) g after the first update)."""
    state, metrics = trainer.train_step(trainer.init_state(), batch)
    (adam,) = [node for node in jax.tree.leaves(
        state.opt_state, is_leaf=lambda n: isinstance(n, optax.ScaleByAdamState))
        if isinstance(node, optax.ScaleByAdamState)]
    b1 = trainer.config.optimizer.b1
    return jax.tree.map(lambda m: np.asarray(m) / (1.0 - b1), jax.device_get(adam.mu)), metrics


def _assert_close(a, b, rtol):
    biggest = max(float(np.max(np.abs(x))) for x in jax.tree.leaves(b))
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * biggest),
                 a, b)


def _distance(a, b) -> float:
    """max |a - b| relative to the largest entry of b."""
    biggest = max(float(np.max(np.abs(x))) for x in jax.tree.leaves(b))
    return max(float(np.max(np.abs(x - y))) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b))) / biggest


@pytest.mark.parametrize("case", sorted(CASES))
def test_accumulated_gradient_equals_the_big_batch(case, request, tmp_path):
    from train.trainer import Trainer

    spec, fixture, overrides = CASES[case]
    data_name = request.getfixturevalue(fixture) if fixture == "tag_env" else None
    if fixture != "tag_env":
        request.getfixturevalue(fixture)
    big = Trainer(_config(spec, overrides, 1, data_name), tmp_path / "big")
    accumulated = Trainer(_config(spec, overrides, ACCUM, data_name), tmp_path / "accumulated")
    batch = next(big.task.train_iterator(batch_size=big.config.data.batch_size, seed=0,
                                         process_index=0, process_count=1))
    batch = {k: v for k, v in batch.items() if np.asarray(v).dtype.kind in "biuf"}
    if "mask" in batch:  # some padding rows, unevenly spread over the microbatches
        batch["mask"] = np.asarray(batch["mask"]).copy()
        batch["mask"][[0, 4]] = 0.0
    if "weights" in batch:  # causal LM: unscored targets (document boundaries), unevenly
        batch["weights"] = np.asarray(batch["weights"]).copy()
        batch["weights"][0, :5] = 0.0

    want, big_metrics = _gradient(big, batch)
    got, metrics = _gradient(accumulated, batch)
    _assert_close(got, want, rtol=1e-4)
    np.testing.assert_allclose(metrics["loss"][0], big_metrics["loss"][0], rtol=1e-5)

    # The test has teeth: the microbatches' loss counts differ, so averaging the microbatch
    # means (what BERT's accumulation did before) gives another gradient.
    task, params = big.task, jax.device_get(big.init_state().params)
    micro = split_microbatches(jax.tree.map(jnp.asarray, batch), ACCUM)
    counts = [task.loss_normalizers(jax.tree.map(lambda x: x[i], micro)) for i in range(ACCUM)]
    assert any(len({float(c[term]) for c in counts}) > 1 for term in counts[0]), counts

    def mean_of_means(p):
        total = 0.0
        for i in range(ACCUM):
            part = jax.tree.map(lambda x: x[i], micro)
            terms, _ = task.loss_fn(p, part, jax.random.PRNGKey(0))
            norms = task.loss_normalizers(part)
            total += sum(terms[t] / jnp.maximum(norms[t], 1.0) for t in terms) / ACCUM
        return total

    old = jax.grad(mean_of_means)(params)
    assert _distance(old, want) > 100 * _distance(got, want)
