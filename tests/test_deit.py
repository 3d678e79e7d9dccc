"""DeiT's task (train/tasks/deit.py) on the Fashion-MNIST fixture: a tiny convnet teacher trained
by the trainer, then a ViT student learning from it in the jitted step; its losses are those of
train/losses.py on the model's heads, the teacher gets no gradient, and the evaluation's
prediction is the two heads' softmaxes averaged."""

from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from distill_teachers import config
from train.config import ConfigError
from train.losses import deit_hard_distillation, deit_soft_distillation, one_hot_targets

QUICK = {"train.num_steps": 4, "optimizer.warmup_steps": 1, "train.eval_every": 0,
         "train.checkpoint_every": 4, "train.progress_bar": False}


@pytest.fixture(scope="module")
def teacher(fixture_data_root, tmp_path_factory):
    """The workdir of a 4-step convnet teacher (trained on the fixture)."""
    import os

    from train.trainer import Trainer

    workdir = tmp_path_factory.mktemp("deit") / "teacher"
    previous = os.environ.get("PAPERS_JAX_DATA")
    os.environ["PAPERS_JAX_DATA"] = str(fixture_data_root)
    try:
        Trainer(config("configs/vit/convnet_teacher.py:smoke", **QUICK), workdir).run()
    finally:
        if previous is None:
            del os.environ["PAPERS_JAX_DATA"]
        else:
            os.environ["PAPERS_JAX_DATA"] = previous
    return workdir


def _student(teacher, arg="", **overrides):
    return config(f"configs/vit/deit.py:smoke,teacher={teacher}{',' + arg if arg else ''}",
                  **{**QUICK, **overrides})


def test_the_recipe_trains_the_student_and_evaluates_its_average(teacher, fashion_mnist_env,
                                                                 tmp_path):
    from train.trainer import Trainer

    trainer = Trainer(_student(teacher, "recipe"), tmp_path / "student")
    final = trainer.run()
    for name in ("accuracy", "class_accuracy", "distill_accuracy", "teacher_accuracy",
                 "teacher_agreement", "distill_kl"):
        assert np.isfinite(final[name]) and np.isfinite(final[f"ema.{name}"])
    saved = json.loads((tmp_path / "student" / "config.json").read_text())
    assert saved["distill"]["teacher_step"] == 4 and saved["distill"]["teacher_fingerprint"]
    assert saved["model"]["drop_path_rate"] == 0.1 and saved["data"]["repeated_augment"] == 3
    # the teacher is an input, not part of the state the checkpoints hold
    state = trainer.abstract_state
    assert "head_dist" in state.params and "stage_0_block_0" not in state.params
    assert jax.tree.structure(state.ema_params) == jax.tree.structure(state.params)
    resolved = tmp_path / "student" / "config.json"  # cut short: named at the resume's check
    resolved.write_text(resolved.read_text()[:50])
    with pytest.raises(ConfigError, match="config.json does not read as JSON"):
        Trainer(_student(teacher, "recipe"), tmp_path / "student").run()


def _task(teacher, arg="", **overrides):
    from train.tasks.deit import DeiTTask

    return DeiTTask(_student(teacher, arg, **overrides))


def _params_and_batch(task, seed=0):
    variables = task.init_variables(jax.random.PRNGKey(seed), task.dummy_inputs(1))
    params = nn.meta.unbox(variables["params"])
    rng = np.random.default_rng(seed)
    for head in [h for h in ("head", "head_dist") if h in params]:  # zero-initialised heads
        params[head]["kernel"] = jnp.asarray(rng.normal(size=params[head]["kernel"].shape),
                                             jnp.float32)
    frozen = jax.tree.map(jnp.asarray, task.teacher.params)
    frozen["head"]["kernel"] = jnp.asarray(rng.normal(size=frozen["head"]["kernel"].shape),
                                           jnp.float32)
    batch = {"image": jnp.asarray(rng.normal(size=(6, *task.image_shape)), jnp.float32),
             "label": jnp.asarray(rng.integers(0, 10, 6)), "mask": jnp.ones(6)}
    return params, frozen, batch


def _logits(task, params, frozen, images):
    student = task.model.apply({"params": params}, task._model_input(images))
    return student, task.teacher_model.apply({"params": frozen}, images)


@pytest.mark.parametrize("arg", ["distill=hard", "distill=soft", "distill=soft,token=false",
                                 "distill=hard,token=false", "distill=none,token=false"])
def test_the_loss_is_the_kinds_formula_on_the_heads(teacher, fashion_mnist_env, arg):
    task = _task(teacher, arg)
    params, frozen, batch = _params_and_batch(task)
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    student, teacher_logits = _logits(task, params, frozen, batch["image"])
    cls, dist = student if task.token else (student, student)
    # The training accuracy decides as evaluation does (both heads' softmaxes averaged).
    probs = (np.asarray(jax.nn.softmax(cls)) + np.asarray(jax.nn.softmax(dist))) / 2
    labels, mask = np.asarray(batch["label"]), np.asarray(batch["mask"])
    assert float(metrics["accuracy"][0]) == np.sum((probs.argmax(-1) == labels) * mask)
    assert float(metrics["class_accuracy"][0]) == np.sum((np.argmax(cls, -1) == labels) * mask)
    targets = one_hot_targets(batch["label"], 10)
    if task.kind == "soft":
        want = deit_soft_distillation(cls, dist, teacher_logits, targets, 0.1, 3.0)
    elif task.kind == "hard":
        want = deit_hard_distillation(cls, dist, teacher_logits, targets, 0.5)
    else:
        want = -jnp.sum(targets * jax.nn.log_softmax(cls), -1)
    np.testing.assert_allclose(terms["distillation"], np.sum(want), rtol=1e-5)


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("arg", ["distill=soft", "distill=hard", "distill=soft,token=false",
                                 "distill=hard,token=false"])
def test_the_loss_takes_alpha_tau_and_smoothing_from_the_config_and_skips_padding(
        teacher, fashion_mnist_env, arg):
    """Away from the defaults (alpha 0.3, tau 2, label smoothing 0.1, two padded rows), against
    NumPy: soft (eq. 2) (1 - a) CE(class, y_smoothed) + a tau^2 KL(p_T || p_S) at tau on the
    distillation head; hard (eq. 3) (1 - a) CE(class, y_smoothed) + a CE(dist, argmax teacher),
    the teacher's label unsmoothed; summed over the rows whose mask is 1."""
    task = _task(teacher, arg, **{"distill.alpha": 0.3, "distill.temperature": 2.0,
                                  "task.label_smoothing": 0.1})
    params, frozen, batch = _params_and_batch(task)
    mask = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    batch["mask"] = jnp.asarray(mask)
    terms, _ = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    student, teacher_logits = _logits(task, params, frozen, batch["image"])
    cls, dist = student if task.token else (student, student)
    labels = np.asarray(batch["label"])
    targets = np.full((6, 10), 0.1 / 10) + 0.9 * np.eye(10)[labels]
    gold = -(targets * _log_softmax(cls)).sum(-1)
    if "soft" in arg:
        log_t, log_s = _log_softmax(np.asarray(teacher_logits) / 2.0), _log_softmax(
            np.asarray(dist) / 2.0)
        taught = 2.0 ** 2 * (np.exp(log_t) * (log_t - log_s)).sum(-1)
    else:
        taught = -_log_softmax(dist)[np.arange(6), np.argmax(teacher_logits, -1)]
    want = ((0.7 * gold + 0.3 * taught) * mask).sum()
    np.testing.assert_allclose(float(terms["distillation"]), want, rtol=1e-5)
    assert task.loss_normalizers(batch)["distillation"] == 4


def test_the_teacher_gets_no_gradient(teacher, fashion_mnist_env):
    task = _task(teacher, "distill=soft")
    params, frozen, batch = _params_and_batch(task)
    grads = jax.grad(lambda f: task.loss_fn(params, batch, jax.random.PRNGKey(0), f)[0][
        "distillation"])(frozen)
    assert all(np.all(g == 0) for g in jax.tree.leaves(grads))


def test_evaluation_averages_the_two_heads_softmaxes(teacher, fashion_mnist_env):
    task = _task(teacher)
    params, frozen, batch = _params_and_batch(task)
    metrics = task.eval_fn(params, batch, frozen)
    (cls, dist), teacher_logits = _logits(task, params, frozen, batch["image"])
    probs = np.asarray(jax.nn.softmax(cls) + jax.nn.softmax(dist)) / 2
    labels = np.asarray(batch["label"])
    assert not np.array_equal(np.argmax(cls, -1), np.argmax(dist, -1))  # the heads disagree
    right = lambda decided: float(np.sum(decided == labels))  # noqa: E731
    assert float(metrics["accuracy"][0]) == right(probs.argmax(-1))
    assert float(metrics["class_accuracy"][0]) == right(np.argmax(cls, -1))
    assert float(metrics["distill_accuracy"][0]) == right(np.argmax(dist, -1))
    np.testing.assert_allclose(metrics["loss"][0], -np.log(probs[np.arange(6), labels]).sum(),
                               rtol=1e-5)
    assert float(metrics["teacher_agreement"][0]) == float(
        np.sum(probs.argmax(-1) == np.argmax(teacher_logits, -1)))


def test_bad_settings_are_refused(teacher, fashion_mnist_env):
    from train.tasks.deit import DeiTTask

    with pytest.raises(ValueError, match="token=false"):
        _student(teacher, "distill=none")
    with pytest.raises(ConfigError, match="learn nothing"):
        _task(teacher, **{"distill.kind": "none"})
    with pytest.raises(ConfigError, match="would be ignored"):
        _task(teacher, **{"distill.kind": "none", "model.distill_token": False})
    with pytest.raises(ConfigError, match="the distillation head would learn nothing"):
        _task(teacher, **{"distill.alpha": 0.0})
    with pytest.raises(ConfigError, match="the teacher would teach nothing"):
        _task(teacher, **{"distill.alpha": 0.0, "model.distill_token": False})
    with pytest.raises(ConfigError, match="the class head would learn nothing"):
        _task(teacher, **{"distill.alpha": 1.0})
    _task(teacher, **{"distill.alpha": 1.0, "model.distill_token": False})  # teacher alone
    misspelt = _student(teacher)
    misspelt.distill.temprature = 1.0  # a config file's typo (an override's is refused earlier)
    with pytest.raises(ConfigError, match='distill.temprature.*Did you mean "temperature"'):
        DeiTTask(misspelt)
    with pytest.raises(ConfigError, match="not a run's workdir"):
        _task(teacher.parent / "missing")
    with pytest.raises(ConfigError, match="other images"):
        _task(teacher, **{"data.normalize": "minus_one_to_one"})
    with pytest.raises(ConfigError, match="would leave the distillation head untrained"):
        _task(teacher, **{"task.probe": True})
    smoothing = _student(teacher, **{"task.label_smoothing": 2.0})  # --print_config as a start
    with pytest.raises(ConfigError, match=r"label_smoothing=2.0 must be in \[0, 1\)"):
        DeiTTask.plan(smoothing)
