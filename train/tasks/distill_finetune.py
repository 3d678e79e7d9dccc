"""Task-specific distillation (Sanh et al. 2019, Sec. 4.1: the second step of "DistilBERT (D)",
here without the general-purpose first; Jiao et al. 2020, TinyBERT's prediction-layer
distillation): a student with half the layers of a teacher fine-tuned on a task learns that
task from the teacher's soft labels and the gold labels together.

    objective = alpha_ce x T^2 KL(p_T || p_S) at temperature T     (train/losses.py soft_target_kl)
              + alpha_gold x the task's own cross-entropy           (train/tasks/finetune.py)

each a mean: the soft term over every unit the head predicts for (each example; each tagged
word; a span example's start and end, averaged; each multiple-choice example), the gold term
over what fine-tuning averages its loss over. The teacher is a configs/bert/finetune.py workdir
of the same dataset (e.g. MiniLM fine-tuned on spam); the student takes its vocabulary, its
dimensions and, with distill.init='teacher', its embeddings, its layers one out of two, its
pooler and its classifier (models/bert_student.py). It runs in the same jitted step in inference
mode, on parameters the trainer places sharded like the student's and never differentiates
(train/tasks/base.py frozen_params).

Everything else is fine-tuning's (FinetuneTask): the data, the head of the dataset's kind, the
gold loss and the metrics. Evals also score the teacher on the same batches (`teacher_loss`,
`teacher_accuracy`, ...), and report `score` (the task's main metric: accuracy, token_accuracy
for tagging, f1 for spans), `teacher_score` and `score_of_teacher` = score / teacher_score, the
share of the teacher's score the student keeps (the paper's "97%").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from train import flops, teacher as teachers, vocabulary
from train.config import ConfigError
from train.distill_init import (check_fingerprint, distill_resolution, frozen_teacher,
                                init_from_teacher, student_model_config)
from train.losses import soft_target_kl
from train.run_config import Resolution
from train.tasks.base import Task
from train.tasks.finetune import FinetuneTask, _dataset, head_model

# The metric each kind of task is scored by (its `score`).
SCORES = {"classify": "accuracy", "pair_classify": "accuracy", "tag": "token_accuracy",
          "span": "f1", "multiple_choice": "accuracy"}


def _load_teacher(config: ml_collections.ConfigDict, *, build: bool):
    """The fine-tuned teacher of config.distill.teacher, checked against config.data.name."""
    teacher = teachers.load_teacher(config.distill.teacher, config.distill.teacher_step,
                                    build=build)
    if teacher.kind != "finetune":
        raise ConfigError(
            f"config.distill.teacher={teacher.source!r} is not a fine-tuning run ({teacher.kind}"
            "): task-specific distillation learns from a teacher fine-tuned on the task, e.g. "
            "`python -m train --config configs/bert/finetune.py:task=spam,init=minilm "
            "--workdir workdirs/finetune_spam`")
    taught = teacher.saved["data"]["name"]
    if taught != config.data.name:
        raise ConfigError(f"config.distill.teacher={teacher.source!r} was fine-tuned on "
                          f"{taught!r}, not config.data.name={config.data.name!r}")
    return teacher


class TaskDistillationTask(FinetuneTask):
    """A fine-tuning head on a smaller encoder, learning from a fine-tuned teacher."""

    # The teacher's head, features and vocabulary are read from it, not from the config.
    TASK_KEYS = Task.TASK_KEYS + ("max_answer_length",)
    DATA_KEYS = Task.DATA_KEYS + ("name", "max_seq_length", "max_query_length")
    has_frozen_params = True

    def _check_options(self) -> None:
        distill = self.config.distill
        for key in ("alpha_ce", "alpha_gold"):
            if distill[key] < 0:
                raise ConfigError(f"config.distill.{key}={distill[key]} must be >= 0")
        if not distill.alpha_ce:
            raise ConfigError("config.distill.alpha_ce=0: nothing is learned from the teacher "
                              "(the gold labels alone are configs/bert/finetune.py)")
        if distill.temperature <= 0:
            raise ConfigError(f"config.distill.temperature={distill.temperature} must be > 0")

    def _resolve_model(self, saved_vocabulary):
        config = self.config
        self.teacher = _load_teacher(config, build=True)
        tokenizer = vocabulary.choose(
            saved_vocabulary, lambda: self.teacher.tokenizer, kind="wordpiece",
            requested=self.teacher.tokenizer,
            where=f"the vocabulary of config.distill.teacher={config.distill.teacher!r}")
        self.layers, model_config = student_model_config(config, self.teacher)
        check_fingerprint(config, self.teacher)
        self.teacher_model = head_model(self.kind, self.teacher.model_config,
                                        self.dataset.num_labels)
        return model_config, tokenizer

    def _head(self):
        return head_model(self.kind, self.model_config, self.dataset.num_labels)

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return _dataset(config).fetched if config.data.source == "local" else ()

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        teacher = _load_teacher(config, build=False)
        layers, model_config = student_model_config(config, teacher)
        return distill_resolution(config, teacher, layers, model_config, pending=True)

    def resolution(self) -> Resolution:
        return distill_resolution(self.config, self.teacher, self.layers, self.model_config)

    # ---- model -----------------------------------------------------------------------------
    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, inputs["input_ids"], train=False)
        if self.config.distill.init == "random":
            return variables
        distill = self.config.distill
        return init_from_teacher(variables, self.teacher, self.layers,
                                 segments=distill.segments, pooler=distill.pooler)

    def frozen_params(self):
        ids = jnp.ones(self._shape(1), jnp.int32)
        return frozen_teacher(lambda rng: self.teacher_model.init({"params": rng}, ids),
                              self.teacher)

    def flops_per_example(self) -> float:
        """The student's training step plus the teacher's forward pass (heads left out)."""
        length = self.config.data.max_seq_length
        choices = self.dataset.num_choices if self.kind == "multiple_choice" else 1

        def forward(cfg):
            return choices * flops.encoder_forward_flops(length, cfg.hidden_size, cfg.mlp_dim,
                                                         cfg.num_layers)
        return (flops.TRAIN_FLOPS_FACTOR * forward(self.model_config)
                + forward(self.teacher.model_config))

    # ---- losses ----------------------------------------------------------------------------
    def _soft(self, outputs, teacher_outputs, batch):
        """(the soft-target loss summed over its units, their count)."""
        temperature = self.config.distill.temperature
        rows = batch["mask"]
        if self.kind == "span":
            losses = 0.5 * sum(soft_target_kl(s, t, temperature)
                               for s, t in zip(outputs, teacher_outputs))
            return (losses * rows).sum(), rows.sum()
        weights = self._soft_weights(batch)
        return (soft_target_kl(outputs, teacher_outputs, temperature) * weights).sum(), \
            weights.sum()

    def _soft_weights(self, batch):
        """1 for each unit with soft targets: every real example, or each tagged word."""
        rows = batch["mask"]
        return batch["label_weights"] * rows[:, None] if self.kind == "tag" else rows

    def _both(self, params, frozen, batch, *, train: bool, rng=None):
        outputs = self._apply(params, batch, train=train, rng=rng)
        teacher_outputs = self._real_positions(self.teacher_model.apply(
            {"params": frozen}, batch["input_ids"], batch["segment_ids"], batch["input_mask"]),
            batch)
        return outputs, jax.lax.stop_gradient(teacher_outputs)

    def loss_normalizers(self, batch):
        weights = (batch["mask"] if self.kind == "span" else self._soft_weights(batch))
        return {"cross_entropy": self._loss_weights(batch).sum(), "distill_ce": weights.sum()}

    def loss_fn(self, params, batch, rng, frozen):
        outputs, teacher_outputs = self._both(params, frozen, batch, train=True, rng=rng)
        gold, _, metrics = self._scores(outputs, batch, train=True)
        soft, count = self._soft(outputs, teacher_outputs, batch)
        distill = self.config.distill
        metrics = {k: v for k, v in metrics.items() if k != "loss"}
        metrics.update(gold_loss=(gold, self._loss_weights(batch).sum()),
                       distill_kl=(soft, count))
        return {"cross_entropy": distill.alpha_gold * gold,
                "distill_ce": distill.alpha_ce * soft}, metrics

    def eval_fn(self, params, batch, frozen):
        outputs, teacher_outputs = self._both(params, frozen, batch, train=False)
        metrics = self._scores(outputs, batch, train=False)[2]
        teacher = self._scores(teacher_outputs, batch, train=False)[2]
        soft, count = self._soft(outputs, teacher_outputs, batch)
        return {**metrics, **{f"teacher_{k}": v for k, v in teacher.items()},
                "distill_kl": (soft, count)}

    def derived_metrics(self, values: dict[str, float]) -> dict[str, float]:
        """score, teacher_score and the share of it the student keeps (evals only)."""
        name = SCORES[self.kind]
        if name not in values or f"teacher_{name}" not in values:
            return values
        score, teacher_score = values[name], values[f"teacher_{name}"]
        share = score / teacher_score if teacher_score else float("nan")
        return {**values, "score": score, "teacher_score": teacher_score,
                "score_of_teacher": share}

