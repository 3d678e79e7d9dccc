"""DistilBERT's two distillation tasks end to end on the Brown fixture, from tiny teachers trained
here (a pretraining run and a Brown POS fine-tuning run, 4 layers each): the student starts from
the teacher's layers, the losses are the paper's terms on the right positions (against NumPy),
the teacher gets no gradient and stays out of the optimizer state, a run resumes bit for bit and
refuses a teacher that changed, config.json names the teacher and the layers, and bad settings
fail with the key and the fix. Losses alone: test_distill_losses.py; the student's arrays:
test_bert_student.py."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn, traverse_util

from distill_teachers import config as _config, pretrain_config, teachers  # noqa: F401 (fixture)
from test_distill_losses import numpy_kl
from train.config import ConfigError
from train.tasks.base import batch_objective

DISTILL = "configs/bert/distill.py"


def general_config(teachers, arg: str = "", **overrides):
    return _config(f"{DISTILL}:smoke,teacher={teachers['pretrain']}" + (f",{arg}" if arg else ""),
                   **overrides)


def task_config(teachers, arg: str = "", **overrides):
    return _config(f"{DISTILL}:mode=task,task=brown_pos,smoke,teacher={teachers['finetune']}"
                   + (f",{arg}" if arg else ""), **{"data.eval_split": "test", **overrides})


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _flat(tree):
    return traverse_util.flatten_dict(jax.tree.map(np.asarray, nn.meta.unbox(tree)), sep="/")


def _general(config):
    from train.tasks.distill_pretrain import GeneralDistillationTask
    return GeneralDistillationTask(config)


def _task(config):
    from train.tasks.distill_finetune import TaskDistillationTask
    return TaskDistillationTask(config)


def _init(task, seed=0):
    return jax.tree.map(jnp.asarray, nn.meta.unbox(
        task.init_variables(jax.random.PRNGKey(seed), task.dummy_inputs(1))["params"]))


# ------------------------------------------------------------------ the student and its start
def test_the_general_student_starts_from_every_other_teacher_layer(teachers, brown_env):
    from train.checkpointing import load_params
    from train.teacher import fingerprint

    task = _general(general_config(teachers))
    teacher = load_params(teachers["pretrain"])
    student = _flat(_init(task))
    assert task.layers == (1, 3)
    assert (task.model_config.num_layers, task.model_config.type_vocab_size,
            task.model_config.pooler, task.model_config.nsp) == (2, 0, False, False)
    flat_teacher = _flat(teacher)
    for key, value in student.items():  # every student array is a teacher array
        source = key.replace("layer_0", "layer_1", 1) if "layer_0" in key else \
            key.replace("layer_1", "layer_3", 1)
        np.testing.assert_array_equal(value, flat_teacher[source], err_msg=key)
    assert not any("token_type" in k or "pooler" in k or "seq_relationship" in k
                   for k in student)
    random = _flat(_init(_general(general_config(teachers, "init=random"))))
    assert not np.array_equal(random["bert/encoder/layer_0/mlp/wi/kernel"],
                              flat_teacher["bert/encoder/layer_1/mlp/wi/kernel"])

    resolution = task.resolution()  # what config.json will say
    assert resolution.values == {"distill.layers": "1,3", "distill.teacher_step": 4,
                                 "distill.teacher_fingerprint": fingerprint(teacher)}
    assert resolution.model_config == task.model_config
    from train.tasks import plan_task
    plan = plan_task(general_config(teachers))  # --print_config: no weights read
    assert plan.values["distill.layers"] == "1,3" and "distill.teacher_fingerprint" in plan.pending


def test_general_distillation_has_bert_pretrainings_phase_2(teachers, brown_env):
    """The masked-LM inputs BERT pretraining has (train/tasks/pretraining_inputs.py): phase 2's
    longer sequences with their own batch size, which the trainer splits over the devices
    (train_batch_keys) and counts per step (global_batch_at), and the FLOPs of a phase-2 step:
    the student's training and the teacher's forward pass at 64 tokens, the [V]-wide heads on
    every token (ce_positions=real)."""
    from models.bert import BertConfig
    from train import flops

    config = general_config(teachers, **{"train.num_steps": 10, "data.phase2_fraction": 0.2,
                                         "data.phase2_batch_size": 2})
    task = _general(config)
    iterator = task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1)
    assert [next(iterator)["input_ids"].shape for _ in range(10)] == [(4, 32)] * 8 + [(2, 64)] * 2
    assert [task.global_batch_at(step) for step in range(10)] == [8] * 8 + [2] * 2
    assert task.train_batch_keys(config) == ("batch_size", "phase2_batch_size")
    student = BertConfig(**{**task.model_config.__dict__, "nsp": False})
    teacher = BertConfig(**{**task.teacher.model_config.__dict__, "nsp": False})
    cost = {length: flops.bert_train_flops_per_example(student, length, length)
            + flops.bert_train_flops_per_example(teacher, length, length) / 3
            for length in (32, 64)}
    assert [task.flops_per_example_at(step) for step in range(10)] == pytest.approx(
        [cost[32]] * 8 + [cost[64]] * 2)
    # Without the soft targets (alpha_ce = 0) only the student's head runs, at the masked ones.
    no_ce = _general(general_config(teachers, **{"distill.alpha_ce": 0.0}))
    length, predictions = no_ce.config.data.max_seq_length, no_ce.config.data.max_predictions
    assert no_ce.flops_per_example() == pytest.approx(
        flops.bert_train_flops_per_example(student, length, predictions)
        + flops.bert_train_flops_per_example(teacher, length, 0) / 3)


# ------------------------------------------------------------------------ the triple loss
def _padded_batch(task):
    """A training batch whose first row ends in 6 padding tokens (the pipeline packs rows
    full), so that the right positions matter."""
    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    batch = {k: np.array(v) for k, v in batch.items()}
    batch["input_mask"][0, -6:] = 0
    keep = batch["masked_positions"][0] < batch["input_mask"].shape[1] - 6
    batch["masked_weights"][0] *= keep
    return batch


# The paper's code's weights 5 / 2 / 1 and T = 2 (the config's defaults), and others.
DEFAULTS = {"alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0, "temperature": 2.0}
OTHERS = {"alpha_ce": 0.7, "alpha_mlm": 1.3, "alpha_cos": 0.4, "temperature": 3.0}


def _spread(frozen, seed=0):
    """The teacher with a random MLM output bias (std 4): a 4-step teacher's logits are nearly
    uniform and its student's close to them, where T^2 KL hardly depends on T (0.1% from T = 2
    to 3) nor on its direction (0.2%); spread logits tell the temperatures and directions apart."""
    bias = frozen["predictions"]["bias"]
    noise = np.random.default_rng(seed).normal(scale=4.0, size=bias.shape)
    return {**frozen, "predictions": {**frozen["predictions"],
                                      "bias": jnp.asarray(bias + noise, bias.dtype)}}


@pytest.mark.parametrize("ce_positions, chosen", [("real", {}), ("masked", {}),
                                                  ("real", OTHERS)],
                         ids=["real", "masked", "other_weights"])
def test_the_triple_loss_is_the_papers_terms_on_the_right_positions(teachers, brown_env,
                                                                    ce_positions, chosen):
    """Soft targets (T^2 KL) over the real tokens (or the masked ones), MLM over the masked
    positions, cosine of the last states over the real tokens, each a mean, weighted by
    distill.alpha_ce / alpha_mlm / alpha_cos (5 / 2 / 1 by default) at distill.temperature."""
    from models.bert_pretraining import BertForPreTraining

    task = _general(general_config(teachers, f"ce_positions={ce_positions}",
                                   **{f"distill.{k}": v for k, v in chosen.items()}))
    w = {**DEFAULTS, **chosen}
    params, frozen, batch = _init(task), _spread(task.teacher.params), _padded_batch(task)
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    normalizers = task.loss_normalizers(batch)

    inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    method = BertForPreTraining.hidden_and_mlm_logits
    hidden, logits = map(np.asarray, task.model.apply({"params": params}, *inputs, method=method))
    t_hidden, t_logits = map(np.asarray, task.teacher_model.apply({"params": frozen}, *inputs,
                                                                  method=method))
    real = batch["input_mask"].astype(bool)
    masked = np.zeros_like(real)
    rows, cols = np.nonzero(batch["masked_weights"])
    masked[rows, batch["masked_positions"][rows, cols]] = True
    where = real if ce_positions == "real" else masked
    kl = numpy_kl(logits[where], t_logits[where], w["temperature"]).mean()
    reverse = numpy_kl(t_logits[where], logits[where], w["temperature"]).mean()
    assert abs(reverse - kl) > 10 * 2e-4 * kl  # ten times the tolerance below
    s, t = hidden[real].astype(np.float64), t_hidden[real].astype(np.float64)
    cosine = (1 - (s * t).sum(-1) / np.linalg.norm(s, axis=-1) / np.linalg.norm(t, axis=-1)).mean()
    log_p = _log_softmax(logits[rows, batch["masked_positions"][rows, cols]])
    mlm = -log_p[np.arange(len(rows)), batch["masked_ids"][rows, cols]].mean()

    means = {k: float(terms[k] / normalizers[k]) for k in terms}
    # The KL of two close distributions is a small difference of float32 sums (about 0.002
    # here): its rounding is a few 1e-6, which is over 2e-4 of it on some CPUs.
    assert means == pytest.approx({"distill_ce": w["alpha_ce"] * kl,
                                   "mlm": w["alpha_mlm"] * mlm,
                                   "cosine": w["alpha_cos"] * cosine}, rel=2e-4, abs=1e-5)
    assert float(batch_objective(terms, normalizers)) == pytest.approx(
        w["alpha_ce"] * kl + w["alpha_mlm"] * mlm + w["alpha_cos"] * cosine, rel=2e-4)
    assert float(metrics["cosine_loss"][1]) == real.sum()
    assert float(metrics["distill_kl"][1]) == where.sum()


@pytest.mark.parametrize("drop, kept", [("ce", {"mlm", "cosine"}),
                                        ("cos", {"distill_ce", "mlm"}),
                                        ("mlm", {"distill_ce", "cosine"})])
def test_a_dropped_loss_is_neither_computed_nor_counted(teachers, brown_env, drop, kept):
    task = _general(general_config(teachers, f"drop={drop}"))
    batch = _padded_batch(task)
    terms, _ = task.loss_fn(_init(task), batch, jax.random.PRNGKey(0), task.teacher.params)
    assert set(terms) == set(task.loss_normalizers(batch)) == kept


# --------------------------------------------------- the teacher: frozen, sharded, not trained
def test_the_teacher_gets_no_gradient_and_no_optimizer_state(teachers, brown_env, tmp_path):
    from train.trainer import Trainer

    trainer = Trainer(general_config(teachers), tmp_path / "student")
    task, state = trainer.task, trainer.init_state()
    # The optimizer holds the student only: the same state as for the student's parameters.
    assert (jax.tree.structure(state.opt_state)
            == jax.tree.structure(trainer.optimizer.init(state.params)))
    student_size = sum(x.size for x in jax.tree.leaves(state.params))
    assert sum(x.size for x in jax.tree.leaves(state.opt_state)) <= 2 * student_size + 8
    # Placed once, sharded by the same logical axes as the student's parameters.
    frozen = trainer.frozen
    assert (frozen["bert"]["embeddings"]["word_embeddings"]["embedding"].sharding
            == trainer.state_shardings.params["bert"]["embeddings"]["word_embeddings"][
                "embedding"])
    # Even differentiated on purpose, the teacher's outputs carry no gradient back.
    batch = _padded_batch(task)

    def objective(frozen_params):
        terms, _ = task.loss_fn(state.params, batch, jax.random.PRNGKey(0), frozen_params)
        return batch_objective(terms, task.loss_normalizers(batch))
    grads = jax.grad(objective)(task.teacher.params)
    assert all(not np.asarray(g).any() for g in jax.tree.leaves(grads))
    # Training steps leave it as it was read.
    before = _flat(frozen)
    for _ in range(2):
        state, _ = trainer.train_step(state, _padded_batch(task))
    for key, value in _flat(trainer.frozen).items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


# ------------------------------------------------------------------- runs, resume, records
def test_a_distillation_run_resumes_bit_for_bit_and_records_its_teacher(teachers, brown_env,
                                                                        tmp_path):
    from train.checkpointing import load_params
    from train.teacher import fingerprint
    from train.trainer import Trainer

    config = general_config(teachers)
    whole = Trainer(config, tmp_path / "whole")
    final = whole.run()
    assert {"mlm_accuracy", "distill_kl", "cosine_loss", "teacher_mlm_accuracy"} <= set(final)
    first = Trainer(config, tmp_path / "halves")
    first.run(until_step=4)
    second = Trainer(config, tmp_path / "halves")
    second.run()
    assert second.start_step == 4
    for key, value in _flat(whole.final_state.params).items():
        np.testing.assert_array_equal(_flat(second.final_state.params)[key], value, err_msg=key)

    saved = json.loads((tmp_path / "halves" / "config.json").read_text())
    assert saved["distill"]["teacher"] == str(teachers["pretrain"])
    assert saved["distill"]["layers"] == "1,3" and saved["distill"]["teacher_step"] == 4
    assert saved["distill"]["teacher_fingerprint"] == fingerprint(load_params(teachers["pretrain"]))
    assert saved["model"]["num_layers"] == 2 and saved["model"]["type_vocab_size"] == 0
    assert json.loads((tmp_path / "halves" / "requested_config.json").read_text())[
        "distill"]["layers"] == "every_other"


def test_a_resume_refuses_a_teacher_that_changed(teachers, brown_env, tmp_path):
    from train.trainer import Trainer

    teacher = tmp_path / "teacher"
    shutil.copytree(teachers["pretrain"], teacher)
    config = _config(f"{DISTILL}:smoke,teacher={teacher}")
    Trainer(config, tmp_path / "student").run(until_step=4)
    # The teacher trains on: its latest checkpoint is another model now.
    more = pretrain_config(**{"train.num_steps": 8})
    Trainer(more, teacher).run()
    with pytest.raises(ConfigError, match=r"(?s)fingerprint.*config.json.*teacher_step=4 --allow"):
        Trainer(config, tmp_path / "student").run()
    from train.workdir import keeps_train_state  # the pin resumes the workdir (python -m train)
    assert keeps_train_state("distill.teacher_step", -1, 4)
    pinned = _config(f"{DISTILL}:smoke,teacher={teacher}", **{"distill.teacher_step": 4})
    assert Trainer(pinned, tmp_path / "student").run()["mlm_loss"] > 0  # the step it began with


def test_task_distillation_learns_from_soft_and_gold_labels(teachers, brown_env, tmp_path):
    """The student of a fine-tuned teacher starts with its classifier; the loss is
    0.5 x T^2 KL over the tagged words + 0.5 x their gold cross-entropy; evals score both models."""
    from train.checkpointing import load_params
    from train.trainer import Trainer

    task = _task(task_config(teachers))
    params = _init(task)
    teacher = _flat(load_params(teachers["finetune"]))
    for key, value in _flat(params).items():
        source = key.replace("layer_0", "layer_1", 1) if "layer_0" in key else \
            key.replace("layer_1", "layer_3", 1)
        np.testing.assert_array_equal(value, teacher[source], err_msg=key)
    assert "classifier/kernel" in _flat(params) and "bert/pooler/dense/kernel" in _flat(params)

    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    frozen = task.teacher.params
    params = _init(_task(task_config(teachers, "init=random")))  # far from the teacher
    terms, metrics = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    normalizers = task.loss_normalizers(batch)
    inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    logits = np.asarray(task.model.apply({"params": params}, *inputs))
    t_logits = np.asarray(task.teacher_model.apply({"params": frozen}, *inputs))
    words = (batch["label_weights"] * batch["mask"][:, None]).astype(bool)
    kl = numpy_kl(logits[words], t_logits[words], 2.0).mean()
    log_p = _log_softmax(logits[words])
    gold = -log_p[np.arange(words.sum()), batch["labels"][words]].mean()
    # Dropout is on (0.1), so the numbers compare in eval mode: the eval's KL is the same term.
    eval_metrics = task.eval_fn(params, batch, frozen)
    assert float(eval_metrics["distill_kl"][0] / eval_metrics["distill_kl"][1]) == \
        pytest.approx(kl, rel=2e-4)
    assert float(eval_metrics["loss"][0] / eval_metrics["loss"][1]) == pytest.approx(gold,
                                                                                     rel=2e-4)
    assert set(terms) == set(normalizers) == {"cross_entropy", "distill_ce"}
    assert float(normalizers["distill_ce"]) == float(normalizers["cross_entropy"]) == words.sum()
    assert float(terms["distill_ce"]) == pytest.approx(0.5 * float(metrics["distill_kl"][0]))

    final = Trainer(task_config(teachers), tmp_path / "student").run()
    assert final["score"] == final["token_accuracy"]
    assert final["teacher_score"] == final["teacher_token_accuracy"] > 0
    assert final["score_of_teacher"] == pytest.approx(final["score"] / final["teacher_score"])


def test_task_distillation_weighs_soft_and_gold_labels_as_configured(teachers, brown_env):
    """Away from the defaults (alpha_ce 0.7, alpha_gold 0.3, T 3; dropout 0; a padded row),
    against NumPy on both models' logits, summed over the tagged words of the real rows:
    distill_ce = alpha_ce T^2 KL(p_T || p_S) at T, cross_entropy = alpha_gold x the gold
    labels' negative log-likelihood; both normalised by the count of those words."""
    task = _task(task_config(teachers, "init=random", **{
        "distill.alpha_ce": 0.7, "distill.alpha_gold": 0.3, "distill.temperature": 3.0,
        "model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}))
    params, frozen = _init(task), task.teacher.params
    # a 4-step teacher's tags are nearly uniform, where T^2 KL hardly depends on T: spread them
    bias = frozen["classifier"]["bias"]
    frozen = {**frozen, "classifier": {**frozen["classifier"], "bias": jnp.asarray(
        bias + np.random.default_rng(0).normal(scale=4.0, size=bias.shape), bias.dtype)}}
    batch = next(task.train_iterator(batch_size=4, seed=0, process_index=0, process_count=1))
    batch = {k: np.array(v) for k, v in batch.items()}
    batch["mask"][1] = 0.0
    assert batch["label_weights"][1].any()  # the padded row has tagged words to leave out
    terms, _ = task.loss_fn(params, batch, jax.random.PRNGKey(0), frozen)
    normalizers = task.loss_normalizers(batch)
    inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    logits = np.asarray(task.model.apply({"params": params}, *inputs))
    t_logits = np.asarray(task.teacher_model.apply({"params": frozen}, *inputs))
    words = (batch["label_weights"] > 0) & (batch["mask"][:, None] > 0)
    kl = numpy_kl(logits[words], t_logits[words], 3.0).sum()
    nll = -_log_softmax(logits[words])[np.arange(words.sum()), batch["labels"][words]].sum()
    assert {k: float(v) for k, v in terms.items()} == pytest.approx(
        {"distill_ce": 0.7 * kl, "cross_entropy": 0.3 * nll}, rel=2e-4)
    assert float(normalizers["distill_ce"]) == float(normalizers["cross_entropy"]) == words.sum()


# ------------------------------------------------------------------------------- bad input
def test_bad_teachers_and_settings_name_the_key_and_the_fix(teachers, brown_env, tmp_path):
    from train.distill_init import student_model_config
    from train.teacher import load_teacher

    with pytest.raises(ConfigError, match="fine-tuning run; general distillation"):
        _general(_config(f"{DISTILL}:smoke,teacher={teachers['finetune']}"))
    with pytest.raises(ConfigError, match="not a fine-tuning run"):
        _task(_config(f"{DISTILL}:mode=task,task=brown_pos,smoke,teacher={teachers['pretrain']}"))
    with pytest.raises(ConfigError, match="fine-tuned on 'brown_pos', not config.data.name="):
        _task(_config(f"{DISTILL}:mode=task,task=brown_genre,smoke,"
                      f"teacher={teachers['finetune']}", **{"data.eval_split": "test"}))
    with pytest.raises(ConfigError, match="config.json does not exist"):
        _general(_config(f"{DISTILL}:smoke,teacher={tmp_path / 'nowhere'}"))
    with pytest.raises(ConfigError, match=r"no the checkpoint of step 99 \(saved steps: \[4\]\)"):
        _general(general_config(teachers, **{"distill.teacher_step": 99}))
    with pytest.raises(ConfigError, match="alpha_ce and alpha_cos are both 0"):
        _general(general_config(teachers, "drop=ce", **{"distill.alpha_cos": 0.0}))
    with pytest.raises(ConfigError, match="config.distill.alpha_mlm=-1.0 must be >= 0"):
        _general(general_config(teachers, **{"distill.alpha_mlm": -1.0}))
    with pytest.raises(ConfigError, match=r"config.distill: layers=\[1, 4\]"):
        _general(general_config(teachers, **{"distill.layers": "1,4"}))
    with pytest.raises(ConfigError, match="teacher_fingerprint='abc'"):
        _general(general_config(teachers, **{"distill.teacher_fingerprint": "abc"}))
    config = general_config(teachers)
    with config.model.unlocked():
        config.model.hidden_size = 64
    with pytest.raises(ConfigError, match="config.model.hidden_size: a student's dimensions"):
        student_model_config(config, load_teacher(str(teachers["pretrain"]), build=False))


def test_minilm_teaches_only_its_hidden_states(teachers, brown_env, tmp_path, monkeypatch):
    """MiniLM has no MLM head: no soft targets (alpha_ce must be 0), and the student's MLM head
    starts at random while the rest is MiniLM's."""
    from minilm_standin import install_minilm_standin

    root = tmp_path / "root"
    shutil.copytree(brown_env, root)
    install_minilm_standin(root)
    monkeypatch.setenv("PAPERS_JAX_DATA", str(root))
    with pytest.raises(ConfigError, match="has no MLM head, so no soft targets; set alpha_ce=0"):
        _general(_config(f"{DISTILL}:smoke,teacher=minilm"))
    task = _general(_config(f"{DISTILL}:smoke,teacher=minilm,drop=ce"))
    assert task.layers == (0, 2) and task.model_config.hidden_size == 24
    params = _flat(_init(task))
    teacher = _flat(task.teacher.params)
    np.testing.assert_array_equal(params["bert/encoder/layer_1/mlp/wi/kernel"],
                                  teacher["encoder/layer_2/mlp/wi/kernel"])
    assert "predictions/bias" in params
    batch = next(task.train_iterator(batch_size=2, seed=0, process_index=0, process_count=1))
    terms, metrics = task.loss_fn(_init(task), batch, jax.random.PRNGKey(0), task.teacher.params)
    assert set(terms) == {"mlm", "cosine"} and "distill_kl" not in metrics


def test_the_teacher_is_sharded_like_the_student_on_a_mesh(teachers, brown_data_root, tmp_path):
    """On 4 devices (fsdp 2 x tensor 2) every teacher array has the partition spec of the
    student's array of the same name, spread over the devices, with the values read."""
    from conftest import json_report, run_python

    report = json_report(run_python(
        ["tests/scripts/distill_sharding.py", str(teachers["pretrain"]), str(tmp_path / "s")],
        env={"PAPERS_JAX_DATA": str(brown_data_root)}, devices=4).stdout)
    specs = report["specs"]
    assert report["exact"] and all(np.isfinite(report["losses"]))
    shared = {name: spec for name, spec in specs.items() if spec[1] is not None}
    assert len(shared) > 10 and all(mine == theirs for mine, theirs, _ in shared.values()), shared
    word = specs["bert/embeddings/word_embeddings/embedding"]
    assert word[0] == "P('tensor', 'fsdp')" and word[2] == 4
    assert specs["bert/encoder/layer_2/mlp/wi/kernel"][0] == "P('fsdp', 'tensor')"


def test_a_teacher_trained_with_cudnn_attention_runs_where_there_is_none(teachers, tmp_path):
    """A GPU run's teacher (attention 'cudnn', refused on a CPU) runs 'auto' (XLA's attention
    here: the XLA teacher's logits), remat off; an XLA teacher stays XLA."""
    from models.bert_pretraining import BertForPreTraining
    from train.teacher import load_teacher

    gpu = tmp_path / "gpu_teacher"
    shutil.copytree(teachers["pretrain"], gpu)
    saved = json.loads((gpu / "config.json").read_text())
    saved["model"].update(attention_implementation="cudnn", remat="full")
    (gpu / "config.json").write_text(json.dumps(saved))
    here, there = load_teacher(str(teachers["pretrain"])), load_teacher(str(gpu))
    assert (here.model_config.attention_implementation, there.model_config.remat,
            there.model_config.attention_implementation) == ("xla", "none", "auto")
    ids = jnp.asarray(np.random.default_rng(0).integers(5, 50, (2, 9)), jnp.int32)
    inputs = (ids, jnp.zeros_like(ids), jnp.ones_like(ids))
    logits = [BertForPreTraining(t.model_config).apply(
        {"params": t.params}, *inputs, method=BertForPreTraining.hidden_and_mlm_logits)[1]
        for t in (here, there)]
    np.testing.assert_array_equal(*logits)
