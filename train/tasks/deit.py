"""DeiT's distillation (Touvron et al. 2021, "Training data-efficient image transformers &
distillation through attention", Sec. 4): a ViT student learns image classification from the
labels and from a frozen teacher, a classifier trained on the same data in this project
(configs/vit/convnet_teacher.py's convnet, or a ViT: `config.distill.teacher`, a workdir).

`config.distill.kind` says what the teacher teaches, and `config.model.distill_token` where:

  kind   without a distillation token               with one (DeiT's token, models/vit.py)
  none   the labels alone (Table 3, "no             refused: the distillation head would
         distillation"); the teacher only scored    learn nothing
  soft   eq. 2 on the one head: (1 - alpha) CE(y)   the class head CE(y) x (1 - alpha), the
         + alpha tau^2 KL(teacher)                  distillation head tau^2 KL x alpha
         (Table 3, "usual distillation")
  hard   eq. 3 on the one head: (1 - alpha) CE(y)   the class head CE(y) x (1 - alpha), the
         + alpha CE(argmax teacher), alpha = 1/2    distillation head CE(y_t) x alpha (the
         (Table 3, "hard distillation")             paper's DeiT-alembic rows)

(train/losses.py deit_soft_distillation, deit_hard_distillation). The paper's values: soft
alpha = 0.1, tau = 3.0 (Sec. 6, after Cho & Hariharan 2019); hard alpha = 1/2. The labels y are
the run's target distributions (label-smoothed, Mixup / CutMix-mixed: train/tasks/classify.py),
and the teacher sees the very images the student sees, mixed included ("the teacher's
supervision takes into account the effects of the data augmentation", Sec. 4), so its hard
label follows the crop. It runs forward only, in the same jitted step, on parameters the
trainer places sharded by their logical axes and never differentiates (train/tasks/base.py
frozen_params); the run's config.json records its checkpoint step and fingerprint, which a
resume must find again (train/teacher.py).

Evaluation (Table 3's columns): `class_accuracy` of the class head, `distill_accuracy` of the
distillation head, and `accuracy` / `loss` of the model's prediction: with the token the two
heads' softmaxes averaged (train/losses.py averaged_heads, "late fusion"), without it the one
head, which is then the class and the distillation head at once (the three accuracies are
equal). Beside them the teacher on the same images, `teacher_accuracy` and `teacher_loss` (the
teacher's own accuracy, Table 2's "acc."), `teacher_agreement` (the share of images where the
model decides as the teacher does: one minus Table 4's disagreement rate) and `distill_kl`
(tau^2 KL of the teacher's softened softmax and the distillation head's, the soft loss's term).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from models.vit import ViTConfig
from train import flops
from train import teacher as teachers
from train.config import ConfigError, check_choice, check_keys
from train.distill_init import check_fingerprint, frozen_teacher
from train.image_models import MODELS
from train.losses import (averaged_heads, cross_entropy, deit_hard_distillation,
                          deit_soft_distillation, one_hot_targets, soft_cross_entropy,
                          soft_target_kl)
from train.run_config import Resolution
from train.tasks.classify import ClassificationTask, check_values, image_init

KINDS = ("none", "soft", "hard")


def _load_teacher(config: ml_collections.ConfigDict, *, build: bool):
    """The teacher of config.distill.teacher, checked against the run's data."""
    teacher = teachers.load_image_teacher(config.distill.teacher, config.distill.teacher_step,
                                          build=build)
    data, taught = config.data, teacher.saved["data"]
    differ = [f"data.{key}: teacher {taught[key]!r}, run {data[key]!r}"
              for key in ("name", "normalize") if taught[key] != data[key]]
    if tuple(taught["image_shape"])[-1] != tuple(data.image_shape)[-1]:
        differ.append(f"image channels: teacher {taught['image_shape'][-1]}, run "
                      f"{data.image_shape[-1]}")
    if differ:
        raise ConfigError(f"config.distill.teacher={teacher.source!r} was trained on other "
                          f"images than this run's ({'; '.join(differ)}); a DeiT teacher is "
                          "trained on the same data")
    return teacher


def _resolution(config, teacher, model_config, notes, pending: bool = False) -> Resolution:
    """The student's model, and in config.distill the teacher's checkpoint step and fingerprint
    (which a resume must find again)."""
    values = {"distill.teacher_step": teacher.step}
    waiting = {}
    if pending:
        waiting["distill.teacher_fingerprint"] = ("sha256 of the teacher's parameters, read when "
                                                  "the run starts")
    else:
        values["distill.teacher_fingerprint"] = teacher.fingerprint
    return Resolution(model_config, values=values, pending=waiting,
                      notes=(teacher.description, *notes),
                      resume_checks=("distill.teacher_fingerprint",))


DISTILL_KEYS = ("teacher", "teacher_step", "teacher_fingerprint", "kind", "alpha",
                "temperature")

class DeiTTask(ClassificationTask):
    """A ViT (with or without DeiT's distillation token) learning from labels and a teacher."""

    has_frozen_params = True

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        if config.task.probe:  # before classify's own probe checks, which know no DeiT
            raise ConfigError("config.task.probe=True with task 'deit': a linear probe trains the "
                              "class head on a frozen encoder and would leave the distillation "
                              "head untrained: DeiT trains every weight; set probe=False")
        super().__init__(config, saved_vocabulary)
        distill = config.distill
        check_keys(distill, "distill", DISTILL_KEYS, "DeiT's task")
        check_choice(config, "distill.kind", KINDS)
        if not 0.0 <= distill.alpha <= 1.0:
            raise ConfigError(f"config.distill.alpha={distill.alpha} must be in [0, 1] (the "
                              "teacher's share of the loss; DeiT: 0.1 soft, 0.5 hard)")
        if distill.temperature <= 0:
            raise ConfigError(f"config.distill.temperature={distill.temperature} must be > 0")
        if self.token and distill.kind == "none":
            raise ConfigError("config.distill.kind='none' with config.model.distill_token=True: "
                              "the distillation head would learn nothing; use kind 'soft' or "
                              "'hard', or distill_token=False")
        if distill.kind == "none" and distill.alpha != 0.0:
            raise ConfigError(f"config.distill.alpha={distill.alpha} with config.distill.kind="
                              "'none': the labels alone train the model, so the teacher's share "
                              "would be ignored; set alpha=0 or kind 'soft' or 'hard'")
        if distill.kind != "none" and distill.alpha == 0.0:
            raise ConfigError(f"config.distill.alpha=0 with config.distill.kind={distill.kind!r}"
                              ": the teacher's share of the loss is nothing, so "
                              + ("the distillation head would learn nothing" if self.token else
                                 "the teacher would teach nothing")
                              + "; set alpha > 0 (DeiT: 0.1 soft, 0.5 hard) or kind 'none'")
        if self.token and distill.alpha == 1.0:
            raise ConfigError("config.distill.alpha=1 with config.model.distill_token=True: the "
                              "labels' share of the loss is nothing, so the class head would "
                              "learn nothing; set alpha < 1 (DeiT: 0.1 soft, 0.5 hard)")
        self.kind, self.alpha, self.temperature = distill.kind, distill.alpha, distill.temperature
        self.teacher = _load_teacher(config, build=True)
        check_fingerprint(config, self.teacher)
        self.teacher_name = self.teacher.saved["model"]["name"]
        self.teacher_model = MODELS[self.teacher_name].module(self.teacher.model_config)

    def _check_heads(self) -> None:
        if self.config.model.name != "vit":
            raise ConfigError(f"config.model.name={self.config.model.name!r}: DeiT's student is "
                              "a ViT ('vit')")

    @property
    def token(self) -> bool:
        return isinstance(self.model_config, ViTConfig) and self.model_config.distill_token

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        check_values(config)  # what a start refuses of the classification settings
        teacher = _load_teacher(config, build=False)
        init = image_init(config, build=False)
        return _resolution(config, teacher, init.model_config, init.notes, pending=True)

    def resolution(self) -> Resolution:
        return _resolution(self.config, self.teacher, self.model_config, self.init.notes)

    # ---- the teacher -----------------------------------------------------------------------
    def _teacher_input(self, images):
        """The batch's images at the teacher's size (resized bilinearly if it trained at
        another, as `_model_input` does for the student)."""
        height, width = self.teacher.model_config.image_size
        if images.shape[1:3] == (height, width):
            return images
        return jax.image.resize(images, (images.shape[0], height, width, images.shape[3]),
                                method="bilinear")

    def frozen_params(self):
        dummy = jnp.zeros((1, *self.image_shape), jnp.float32)
        return frozen_teacher(
            lambda rng: self.teacher_model.init({"params": rng}, self._teacher_input(dummy)),
            self.teacher)

    def _teacher_logits(self, frozen, images):
        logits = self.teacher_model.apply({"params": frozen}, self._teacher_input(images),
                                          train=False)
        return jax.lax.stop_gradient(logits)

    def flops_per_example(self) -> float:
        """The student's training step plus the teacher's forward pass."""
        teacher = MODELS[self.teacher_name].train_flops(self.teacher.model_config,
                                                        self.image_shape[-1])
        return super().flops_per_example() + teacher / flops.TRAIN_FLOPS_FACTOR

    # ---- losses and metrics ----------------------------------------------------------------
    def _heads(self, outputs):
        """(class logits, distillation logits): the model's two heads, or its one head twice."""
        return outputs if self.token else (outputs, outputs)

    def loss_normalizers(self, batch):
        return {"distillation": batch["mask"].sum()}

    def loss_fn(self, params, batch, rng, frozen):
        """({'distillation': the loss of config.distill.kind summed over real examples},
        metrics on the (mixed) training images: `accuracy` of the prediction evaluation makes
        (the averaged heads with the token), `class_accuracy` of the class head, and the
        teacher's)."""
        images, targets, labels = self.mixed(batch, rng)
        if targets is None:
            targets = one_hot_targets(labels, self.model_config.num_classes, self.label_smoothing)
        class_logits, distill_logits = self._heads(self.model.apply(
            {"params": params}, self._model_input(images), train=True, rngs={"dropout": rng}))
        teacher_logits = self._teacher_logits(frozen, images)
        if self.kind == "soft":
            losses = deit_soft_distillation(class_logits, distill_logits, teacher_logits,
                                            targets, self.alpha, self.temperature)
        elif self.kind == "hard":
            losses = deit_hard_distillation(class_logits, distill_logits, teacher_logits,
                                            targets, self.alpha)
        else:  # the labels alone; the teacher is only scored
            losses = soft_cross_entropy(class_logits, targets)
        weights = batch["mask"]
        count = weights.sum()
        teacher_says = jnp.argmax(teacher_logits, -1)
        predicted = jnp.argmax(averaged_heads(class_logits, distill_logits), -1)

        def right(decided, against):
            return ((decided == against) * weights).sum(), count

        metrics = {"accuracy": right(predicted, labels),  # as evaluation decides
                   "class_accuracy": right(jnp.argmax(class_logits, -1), labels),
                   "teacher_accuracy": right(teacher_says, labels),
                   "teacher_agreement": right(predicted, teacher_says)}
        return {"distillation": (losses * weights).sum()}, metrics

    def eval_fn(self, params, batch, frozen):
        """Metric sums over the real examples (module docstring)."""
        images, labels, weights = batch["image"], batch["label"], batch["mask"]
        class_logits, distill_logits = self._heads(self.model.apply(
            {"params": params}, self._model_input(images), train=False))
        teacher_logits = self._teacher_logits(frozen, images)
        predicted = averaged_heads(class_logits, distill_logits) if self.token else class_logits
        count = weights.sum()

        def right(logits, against=labels):
            return ((jnp.argmax(logits, -1) == against) * weights).sum(), count

        def loss(logits):
            return (cross_entropy(logits, labels) * weights).sum(), count

        kl = soft_target_kl(distill_logits, teacher_logits, self.temperature)
        return {"loss": loss(predicted), "accuracy": right(predicted),
                "class_accuracy": right(class_logits), "distill_accuracy": right(distill_logits),
                "teacher_loss": loss(teacher_logits), "teacher_accuracy": right(teacher_logits),
                "teacher_agreement": right(predicted, jnp.argmax(teacher_logits, -1)),
                "distill_kl": ((kl * weights).sum(), count)}
