"""Task-specific distillation (train/tasks/distill_finetune.py) of a span head, away from the
config's defaults, against NumPy: the soft term is alpha_ce x T^2 x the mean of the start's and
the end's KL, each a softmax over the real tokens only, per real example; the gold term
alpha_gold x the mean of the start's and the end's cross-entropy. The tagging kind:
test_distill.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from distill_teachers import config as _config
from finetune_examples import register

SPAN_TEACHER = {"model.num_layers": 4, "train.num_steps": 2, "optimizer.warmup_steps": 1,
                "train.eval_every": 0, "train.checkpoint_every": 2, "train.progress_bar": False}


@pytest.fixture(scope="module")
def span_teacher(tmp_path_factory):
    """(the workdir of a 2-step, 4-layer span fine-tuning run from scratch on the generated span
    data (tests/finetune_examples.py), the data's name)."""
    from train.trainer import Trainer

    name = register("span")
    root = tmp_path_factory.mktemp("span_teacher")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAPERS_JAX_DATA", str(root / "data"))
        Trainer(_config("configs/bert/finetune.py:smoke,init=scratch",
                        **{"data.name": name, **SPAN_TEACHER}), root / "teacher").run()
    return root / "teacher", name


def _log_softmax_over(logits, real):
    """log softmax over the positions where `real` (float64), -inf elsewhere."""
    x = np.where(real, np.asarray(logits, np.float64), -np.inf)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _kl(student, teacher, real, t):
    """T^2 sum over the real positions of p_T (log p_T - log p_S), p = softmax(logits / T)."""
    log_s, log_t = (_log_softmax_over(np.asarray(x) / t, real) for x in (student, teacher))
    with np.errstate(invalid="ignore"):  # -inf - -inf at the padding, left out
        terms = np.where(real, np.exp(log_t) * (log_t - log_s), 0.0)
    return t * t * terms.sum(-1)


def test_span_distillation_averages_start_and_end_over_real_tokens_and_rows(span_teacher,
                                                                          tmp_path,
                                                                          monkeypatch):
    from train.tasks.distill_finetune import TaskDistillationTask

    workdir, name = span_teacher
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path))
    task = TaskDistillationTask(_config(
        f"configs/bert/distill.py:mode=task,task=brown_pos,smoke,teacher={workdir},init=random",
        **{"data.name": name, "distill.alpha_ce": 0.7, "distill.alpha_gold": 0.3,
           "distill.temperature": 3.0, "model.dropout_rate": 0.0,
           "model.attention_dropout_rate": 0.0}))
    assert task.kind == "span"
    params = jax.tree.map(jnp.asarray, nn.meta.unbox(task.init_variables(
        jax.random.PRNGKey(0), task.dummy_inputs(1))["params"]))
    frozen = task.teacher.params
    # a 2-step teacher is nearly uniform over the positions, where T^2 KL hardly depends on T:
    # a random classifier kernel spreads its start and end logits
    kernel = frozen["qa_outputs"]["kernel"]
    frozen = {**frozen, "qa_outputs": {**frozen["qa_outputs"], "kernel": jnp.asarray(
        np.random.default_rng(0).normal(scale=2.0, size=kernel.shape), kernel.dtype)}}
    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    batch = {k: np.array(v) for k, v in batch.items()}
    batch["mask"][2] = 0.0
    real = batch["input_mask"] > 0
    assert not real.all()  # padding positions the softmaxes must leave out
    assert np.all(batch["answer_weight"] == 1)

    terms, _ = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    normalizers = task.loss_normalizers(batch)
    inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    start, end = (np.asarray(x) for x in task.model.apply({"params": params}, *inputs))
    t_start, t_end = (np.asarray(x) for x in task.teacher_model.apply({"params": frozen}, *inputs))
    rows = batch["mask"] > 0
    soft = 0.5 * (_kl(start, t_start, real, 3.0) + _kl(end, t_end, real, 3.0))
    picked = np.arange(4)
    gold = -0.5 * (_log_softmax_over(start, real)[picked, batch["start_positions"]]
                   + _log_softmax_over(end, real)[picked, batch["end_positions"]])
    assert {k: float(v) for k, v in terms.items()} == pytest.approx(
        {"distill_ce": 0.7 * soft[rows].sum(), "cross_entropy": 0.3 * gold[rows].sum()},
        rel=2e-4)
    assert float(normalizers["distill_ce"]) == float(normalizers["cross_entropy"]) == 3
