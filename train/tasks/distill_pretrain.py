"""General-purpose distillation (Sanh et al. 2019, "DistilBERT", Sec. 2-3): a student BERT with
half its teacher's layers learns masked-LM on the pretraining corpora from the teacher.

The objective is the paper's triple loss, each term a mean over its positions and weighted from
the config (`distill.alpha_ce`, `alpha_mlm`, `alpha_cos`; 5, 2, 1 as in the training command
of its code's README):

  distill_ce  T^2 KL(softmax(z_T / T) || softmax(z_S / T)) of the MLM logits (train/losses.py
              soft_target_kl), over `distill.ce_positions`: 'real' every real token (the
              paper's code), or 'masked' the predicted positions only (its restrict_ce_to_mask;
              the [V]-wide head then runs on the P masked positions instead of all L)
  mlm         the student's MLM cross-entropy at the masked positions (train/losses.py)
  cosine      1 - cos(h_S, h_T) of the last hidden states, over the real tokens (padding out)

with dynamic masking (`data.dupe_factor = 0`) and no next-sentence prediction, as the paper
trains (RoBERTa's practice). A term whose weight is 0 is not computed (Table 4's ablations).

The teacher is a BERT pretrained by this project (a configs/bert/pretrain.py workdir, or a
distilled student of one), with its MLM head and its vocabulary, which the student shares; MiniLM
has no MLM head, so it can teach only with alpha_ce = 0 (its hidden states, cosine). It runs in
the same jitted step, in inference mode, on parameters the trainer places sharded like the
student's and never differentiates (train/tasks/base.py frozen_params); its outputs are cut from
the gradient besides. The student starts from the teacher's layers (train/distill_init.py).

Metrics: the student's `mlm_loss` / `mlm_accuracy`, the unweighted `distill_kl` and
`cosine_loss`, and in evals the teacher's `teacher_mlm_loss` / `teacher_mlm_accuracy` on the same
masked positions.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections

from models.bert import BertModel
from models.bert_pretraining import BertForPreTraining, gather_positions
from train import flops, teacher as teachers, vocabulary
from train.config import ConfigError, check_choice
from train.distill_init import (check_fingerprint, distill_resolution, frozen_teacher,
                                init_from_teacher, student_model_config)
from train.losses import cosine_embedding_loss, cross_entropy, soft_target_kl
from train.run_config import Resolution
from train.tasks.base import Task
from train.tasks.pretraining_inputs import MaskedLMData, PretrainingInputs, real_rows

CE_POSITIONS = ("real", "masked")
TERMS = ("distill_ce", "mlm", "cosine")  # and their weights alpha_ce, alpha_mlm, alpha_cos


def check_weights(config: ml_collections.ConfigDict, teacher) -> dict[str, float]:
    """{term: weight} of the terms with a weight > 0; ConfigError for a negative weight, no
    term at all, or soft targets from a teacher without an MLM head."""
    distill = config.distill
    weights = dict(zip(TERMS, (distill.alpha_ce, distill.alpha_mlm, distill.alpha_cos)))
    for term, key in zip(TERMS, ("alpha_ce", "alpha_mlm", "alpha_cos")):
        if weights[term] < 0:
            raise ConfigError(f"config.distill.{key}={weights[term]} must be >= 0")
    if not weights["distill_ce"] and not weights["cosine"]:
        raise ConfigError("config.distill.alpha_ce and alpha_cos are both 0: nothing is learned "
                          "from the teacher (MLM alone is configs/bert/pretrain.py)")
    if weights["distill_ce"] and not teacher.has_mlm_head:
        raise ConfigError(f"config.distill.alpha_ce={distill.alpha_ce}: the teacher "
                          f"{teacher.source!r} has no MLM head, so no soft targets; set "
                          "alpha_ce=0 (cosine and MLM only) or teach with a pretraining workdir")
    if distill.temperature <= 0:
        raise ConfigError(f"config.distill.temperature={distill.temperature} must be > 0")
    return {term: float(w) for term, w in weights.items() if w > 0}


class GeneralDistillationTask(MaskedLMData, Task):
    """A smaller `BertForPreTraining` (no NSP) learning masked LM from a pretrained teacher."""

    DATA_KEYS = Task.DATA_KEYS + MaskedLMData.INPUT_KEYS  # the teacher's vocabulary

    has_frozen_params = True

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        check_choice(config, "model.name", ("bert",))
        check_choice(config, "distill.ce_positions", CE_POSITIONS)
        self.config = config
        self.inputs = PretrainingInputs(config)
        self.teacher = teachers.load_teacher(config.distill.teacher, config.distill.teacher_step)
        _check_teacher_kind(self.teacher)
        self.weights = check_weights(config, self.teacher)
        self.tokenizer = vocabulary.choose(
            saved_vocabulary, lambda: self.teacher.tokenizer, kind="wordpiece",
            requested=self.teacher.tokenizer,
            where=f"the vocabulary of config.distill.teacher={config.distill.teacher!r}")
        self.inputs.use_tokenizer(self.tokenizer)
        self.layers, self.model_config = student_model_config(config, self.teacher)
        self.inputs.check_lengths(self.model_config)
        check_fingerprint(config, self.teacher)
        self.model = BertForPreTraining(self.model_config)
        teacher_class = BertForPreTraining if self.teacher.has_mlm_head else BertModel
        self.teacher_model = teacher_class(self.teacher.model_config)
        self.d_model = self.model_config.hidden_size

    @staticmethod
    def datasets(config) -> tuple[str, ...]:
        return (*PretrainingInputs.datasets(config),
                *((teachers.MINILM,) if config.distill.teacher == teachers.MINILM else ()))

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        teacher = teachers.load_teacher(config.distill.teacher, config.distill.teacher_step,
                                        build=False)
        layers, model_config = student_model_config(config, teacher)
        return distill_resolution(config, teacher, layers, model_config, pending=True)

    def resolution(self) -> Resolution:
        return distill_resolution(self.config, self.teacher, self.layers, self.model_config)

    # ---- model -----------------------------------------------------------------------------
    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, inputs["input_ids"],
                                    masked_positions=inputs["masked_positions"], train=False)
        if self.config.distill.init == "random":  # DistilBERT Table 4's last row
            return variables
        distill = self.config.distill
        return init_from_teacher(variables, self.teacher, self.layers,
                                 segments=distill.segments, pooler=distill.pooler,
                                 keep_random=() if self.teacher.has_mlm_head else ("predictions",))

    def frozen_params(self):
        ids = jnp.ones((1, self.config.data.max_seq_length), jnp.int32)
        if self.teacher.has_mlm_head:
            init = lambda rng: self.teacher_model.init(  # noqa: E731
                {"params": rng}, ids, masked_positions=jnp.zeros((1, 1), jnp.int32))
        else:
            init = lambda rng: self.teacher_model.init({"params": rng}, ids)  # noqa: E731
        return frozen_teacher(init, self.teacher)

    def flops_per_example(self) -> float:
        """Phase 1's FLOPs (a longer phase 2, when configured, costs more: flops_per_example_at)."""
        data = self.config.data
        return self._flops(data.max_seq_length, data.max_predictions)

    def flops_per_example_at(self, step: int) -> float:
        """FLOPs of an example of the phase that train step `step` (0-based) belongs to."""
        data = self.config.data
        if not self.inputs.in_phase2(step):
            return self.flops_per_example()
        return self._flops(data.phase2_max_seq_length, data.phase2_max_predictions)

    def _flops(self, length: int, predictions: int) -> float:
        """The student's training step plus the teacher's forward pass on sequences of `length`,
        the MLM heads over the positions they run on in training (`_outputs`): with the soft
        targets on, both heads at all L with ce_positions='real', else at the `predictions`
        masked ones; without them (alpha_ce = 0) the student's at the masked ones and the
        teacher's not at all."""
        soft = self.teacher.has_mlm_head and "distill_ce" in self.weights
        heads = length if soft and self.config.distill.ce_positions == "real" else predictions
        student = flops.bert_train_flops_per_example(self.model_config, length, heads)
        teacher_heads = heads if soft else 0
        teacher = flops.bert_train_flops_per_example(
            dataclasses.replace(self.teacher.model_config, nsp=False), length,
            teacher_heads) / flops.TRAIN_FLOPS_FACTOR
        return student + teacher

    # ---- losses ----------------------------------------------------------------------------
    def _outputs(self, params, frozen, batch, *, train: bool, rng=None):
        """(student hidden [b, l, H], student MLM logits, teacher hidden, teacher logits or
        None, whether the logits are at every position). The teacher's logits are computed when
        the soft targets are trained on, or for an eval's metrics; with ce_positions='real' both
        models' logits are then at every position, else at the masked ones."""
        soft = self.teacher.has_mlm_head and ("distill_ce" in self.weights or not train)
        every = soft and self.config.distill.ce_positions == "real"
        positions = None if every else batch["masked_positions"]
        inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
        hidden, logits = self.model.apply(
            {"params": params}, *inputs, masked_positions=positions, train=train,
            rngs=None if rng is None else {"dropout": rng},
            method=BertForPreTraining.hidden_and_mlm_logits)
        t_logits = None
        if soft:
            t_hidden, t_logits = self.teacher_model.apply(
                {"params": frozen}, *inputs, masked_positions=positions,
                method=BertForPreTraining.hidden_and_mlm_logits)
        elif self.teacher.has_mlm_head:
            t_hidden, _ = self.teacher_model.apply({"params": frozen}, *inputs,
                                                   method=lambda model, *a: model.bert(*a))
        else:
            t_hidden, _ = self.teacher_model.apply({"params": frozen}, *inputs)
        # The teacher is not differentiated (not an argument of the objective's gradient); this
        # cut keeps it so even if its outputs reach the loss some other way.
        return (hidden, logits, jax.lax.stop_gradient(t_hidden), jax.lax.stop_gradient(t_logits),
                every)

    def _weights(self, batch):
        """(masked-position weights [b, P], real-token weights [b, l]), padding rows out."""
        rows = real_rows(batch)
        masked = batch["masked_weights"] * rows[:, None]
        real = batch["input_mask"].astype(jnp.float32) * rows[:, None]
        return masked, real

    def _sums(self, params, frozen, batch, *, train: bool, rng=None):
        """({term: weight x its sum over its positions}, metrics)."""
        hidden, logits, t_hidden, t_logits, every = self._outputs(params, frozen, batch,
                                                                  train=train, rng=rng)
        masked, real = self._weights(batch)
        ce_weights = real if every else masked

        def at_masked_positions(x):  # the logits at the masked positions, wherever computed
            return gather_positions(x, batch["masked_positions"]) if every else x

        at_masked = at_masked_positions(logits)
        mlm = cross_entropy(at_masked, batch["masked_ids"]) * masked
        correct = (jnp.argmax(at_masked, -1) == batch["masked_ids"]) * masked
        cosine = cosine_embedding_loss(hidden, t_hidden) * real
        metrics = {"mlm_loss": (mlm.sum(), masked.sum()),
                   "mlm_accuracy": (correct.sum(), masked.sum()),
                   "cosine_loss": (cosine.sum(), real.sum())}
        sums = {"mlm": mlm.sum(), "cosine": cosine.sum()}
        if t_logits is not None:
            kl = soft_target_kl(logits, t_logits, self.config.distill.temperature) * ce_weights
            metrics["distill_kl"] = (kl.sum(), ce_weights.sum())
            sums["distill_ce"] = kl.sum()
            if not train:
                t_at_masked = at_masked_positions(t_logits)
                t_mlm = cross_entropy(t_at_masked, batch["masked_ids"]) * masked
                t_correct = (jnp.argmax(t_at_masked, -1) == batch["masked_ids"]) * masked
                metrics.update(teacher_mlm_loss=(t_mlm.sum(), masked.sum()),
                               teacher_mlm_accuracy=(t_correct.sum(), masked.sum()))
        terms = {term: weight * sums[term] for term, weight in self.weights.items()}
        return terms, metrics

    def loss_normalizers(self, batch):
        """Each term is a mean: distill_ce over its positions, mlm over the masked ones, cosine
        over the real tokens, each counted over the whole batch."""
        masked, real = self._weights(batch)
        counts = {"distill_ce": (real if self.config.distill.ce_positions == "real"
                                 else masked).sum(),
                  "mlm": masked.sum(), "cosine": real.sum()}
        return {term: counts[term] for term in self.weights}

    def loss_fn(self, params, batch, rng, frozen):
        return self._sums(params, frozen, batch, train=True, rng=rng)

    def eval_fn(self, params, batch, frozen):
        return self._sums(params, frozen, batch, train=False)[1]


def _check_teacher_kind(teacher) -> None:
    if teacher.kind == "finetune":
        raise ConfigError(f"config.distill.teacher={teacher.source!r} is a fine-tuning run; "
                          "general distillation learns masked LM from a pretrained teacher (a "
                          "configs/bert/pretrain.py workdir); a fine-tuned teacher teaches with "
                          "configs/bert/distill.py:mode=task")
