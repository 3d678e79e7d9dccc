"""Image classification: softmax cross-entropy (optionally label-smoothed), accuracy.

A task is what the trainer is generic over (train/tasks/base.py): it builds the model and the
data from the config, and gives the pure loss and eval functions that the trainer jits. Losses
and metrics are returned as sums with their counts; the trainer normalises (and the host
divides when it logs), so padded examples and gradient accumulation never bias an average.

Initialisation (`config.init`, train/vit_init.py): 'scratch', an .npz or Hugging Face ViT
checkpoint, or an earlier classification workdir, whose weights replace the random ones in
`init_variables` (the head kept or new, `config.init_head`). With `config.data.resize` the
stored images are resized bilinearly to config.model.image_size on the device, before the model
(the ViT paper fine-tunes at a higher resolution than it pre-trains at, Sec. 3.2).

Linear probing (`config.task.probe`; MAE, He et al. 2022, Sec. 4 and App. A.3): the encoder is
frozen and only the classifier trains. Frozen twice over: the loss sees the other parameters
through stop_gradient (no backward pass through the encoder), and the optimizer gives them
optax.set_to_zero updates (train/optimizers.py `freeze`: weight decay included), so they stay
bit for bit what config.init loaded; the model runs as at test time (no dropout), and
the head is linear (head_hidden_size=0). config.json records it (`task.trained_parameters`).
With config.model.probe_norm the pooled features are standardised before the head by their
mean and variance over the first config.task.probe_norm_examples training images, computed
here through the frozen encoder when the task is built (models.vit.ProbeNorm: the paper's
BatchNorm without affine transformation, in its inference form).

The training images may be a fraction of the split (config.data.train_fraction,
train/tasks/image_data.py): fine-tuning with few labels.

`config.model.name` picks the model (train/image_models.py): 'vit', or 'convnet' (a small ResNet,
trained from scratch only: DeiT's convnet teacher). DeiT's training recipe (Touvron et al. 2021,
Table 9) is options here: Mixup and CutMix (`config.task.mixup_alpha`, `cutmix_alpha`,
`mixup_prob`, `mixup_switch_prob`; train/mixing.py), drawn on the device from the step's key and
learned with the soft-label cross-entropy; repeated augmentation (`config.data.repeated_augment`,
data/pipelines/images.py); stochastic depth (config.model.drop_path_rate, models/vit.py); the
weights' moving average is the trainer's (config.train.ema_decay). A ViT with DeiT's distillation
token trains with its teacher (train/tasks/deit.py), not here.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from data.pipelines import images as image_data
from models.vit import ViT, ViTConfig, pool_tokens
from models.vit_transfer import HEAD, PROBE_NORM
from train import flops
from train.config import ConfigError, check_choice, to_dataclass
from train.image_models import MODELS
from train.losses import cross_entropy, one_hot_targets, soft_cross_entropy
from train.mixing import MIX_STREAM, MixConfig, mix_batch
from train.pretrained_params import put_pretrained
from train.run_config import Resolution
from train.tasks.base import Task
from train.tasks.image_data import ImageData, check_data, check_dataset
from train.vit_init import ViTInit, resolve_init

PROBE_TRAINED = (HEAD,)  # what a linear probe trains; every other parameter is frozen


def image_init(config: ml_collections.ConfigDict, *, build: bool) -> ViTInit:
    check_choice(config, "model.name", MODELS)
    if config.model.name == "vit":
        return resolve_init(config, build=build)
    if config.init != "scratch":
        raise ConfigError(f"config.init={config.init!r}: a model.name={config.model.name!r} "
                          "run trains from scratch (only ViT weights are read); set "
                          "init='scratch'")
    section = config.model.copy_and_resolve_references()
    with section.unlocked():
        del section["name"]
    return ViTInit(to_dataclass(MODELS[config.model.name].config, section, "model"), None, (), ())


def mix_config(config: ml_collections.ConfigDict) -> MixConfig:
    """config.task's Mixup / CutMix settings (train/mixing.py)."""
    task = config.task
    try:
        return MixConfig(task.mixup_alpha, task.cutmix_alpha, task.mixup_prob,
                         task.mixup_switch_prob)
    except ValueError as error:
        raise ConfigError(f"config.task: {error} (mixup_prob and mixup_switch_prob are prob and "
                          "switch_prob there)") from error


def _check_probe(config: ml_collections.ConfigDict, model_config: ViTConfig) -> None:
    """ConfigError for a probe that is not linear, or probe statistics without a frozen
    pretrained encoder."""
    task = config.task
    if not isinstance(model_config, ViTConfig):
        if task.probe:
            raise ConfigError(f"config.task.probe freezes a pretrained ViT encoder; a "
                              f"model.name={config.model.name!r} run trains from scratch: set "
                              "probe=False")
        return
    if model_config.probe_norm and not task.probe:
        raise ConfigError("config.model.probe_norm standardises the features of a frozen "
                          "encoder; it needs config.task.probe=True")
    if not task.probe:
        return
    if model_config.head_hidden_size:
        raise ConfigError(f"config.task.probe trains a linear classifier, but the model has a "
                          f"pre-logits layer (head_hidden_size={model_config.head_hidden_size}); "
                          "set config.model.head_hidden_size=0")
    if model_config.probe_norm and config.init == "scratch":
        raise ConfigError("config.model.probe_norm computes the features' statistics through a "
                          "pretrained encoder, but config.init='scratch'; give config.init a "
                          "checkpoint or set probe_norm=False")
    if model_config.probe_norm and task.probe_norm_examples < 1:
        raise ConfigError(f"config.task.probe_norm_examples={task.probe_norm_examples} must be "
                          ">= 1 (the training images the feature statistics are computed on)")


def model_input(images, image_size: tuple[int, int]):
    """A batch of normalised images [b, h, w, c] at the model's `image_size`: as stored, or
    resized bilinearly (config.data.resize; antialiased when shrinking). The task's steps and
    `python -m train.predict` both feed the model through it."""
    height, width = image_size
    if images.shape[1:3] == (height, width):
        return images
    return jax.image.resize(images, (images.shape[0], height, width, images.shape[3]),
                            method="bilinear")


def check_values(config) -> None:
    """ConfigError for a config.data / config.task value out of range (a start and
    --print_config alike)."""
    check_data(config)
    repeats = config.data.repeated_augment
    if repeats < 1 or config.data.batch_size % repeats:
        raise ConfigError(f"config.data.repeated_augment={repeats} must be >= 1 and divide "
                          f"config.data.batch_size={config.data.batch_size}")
    smoothing = float(config.task.label_smoothing)
    if not 0.0 <= smoothing < 1.0:
        raise ConfigError(f"config.task.label_smoothing={smoothing} must be in [0, 1)")


class ClassificationTask(ImageData, Task):
    """ViT (or any `images -> logits` model) on a labelled image dataset."""

    TASK_KEYS = Task.TASK_KEYS + ("label_smoothing", "mixup_alpha", "cutmix_alpha", "mixup_prob",
                                  "mixup_switch_prob", "probe", "probe_norm_examples")
    DATA_KEYS = Task.DATA_KEYS + ImageData.IMAGE_KEYS + ("resize", "repeated_augment")

    def __init__(self, config: ml_collections.ConfigDict, saved_vocabulary=None):
        if saved_vocabulary is not None:
            raise ConfigError(f"this workdir holds a vocabulary ({saved_vocabulary.path}): it was "
                              "used by a text task, not image classification; use a new --workdir")
        check_values(config)
        check_dataset(config)
        self.init = image_init(config, build=True)
        self.model_config = self.init.model_config
        self.model = MODELS[config.model.name].module(self.model_config)
        self.config = config
        self._check_heads()
        self.num_classes = self.model_config.num_classes  # checked when the data is opened
        self.mixing = mix_config(config)
        repeats = config.data.repeated_augment
        self.label_smoothing = float(config.task.label_smoothing)
        shape = tuple(config.data.image_shape)
        if shape[:2] != self.model_config.image_size and not config.data.resize:
            raise ConfigError(f"config.model.image_size={self.model_config.image_size} does not "
                              f"match config.data.image_shape={shape}; set config.data.resize="
                              "True to resize the images to the model's size")
        self.image_shape = shape
        self.repeated_augment = repeats
        self.d_model = self.model_config.hidden_size
        _check_probe(config, self.model_config)
        self.probe = bool(config.task.probe)
        self.trained_parameters = PROBE_TRAINED if self.probe else None
        self.probe_statistics = (self._feature_statistics() if self.probe
                                 and self.model_config.probe_norm else None)

    def _check_heads(self) -> None:
        """A ViT with a distillation token has a head that learns from a teacher: not here."""
        if isinstance(self.model_config, ViTConfig) and self.model_config.distill_token:
            raise ConfigError("config.model.distill_token=True: the distillation head learns from "
                              "a teacher, which task.name='deit' reads (configs/vit/deit.py); "
                              "here set distill_token=False")

    @staticmethod
    def _values(config) -> dict:
        """What config.json records beyond the config: the parameters the optimizer updates."""
        return {"task.trained_parameters": list(PROBE_TRAINED) if config.task.probe else "all"}

    @classmethod
    def plan(cls, config, saved_vocabulary=None) -> Resolution:
        """The model of config.model, or of config.init's checkpoint (its config and tensor
        shapes read, not its weights), and the notes on what is carried over."""
        check_values(config)
        init = image_init(config, build=False)
        _check_probe(config, init.model_config)
        return Resolution(init.model_config, values=cls._values(config), notes=init.notes)

    def resolution(self) -> Resolution:
        notes = self.init.notes
        if self.probe:
            notes += ("linear probe: only the classifier trains; the encoder is frozen "
                      "(stop_gradient, optax.set_to_zero)",)
        return Resolution(self.model_config, values=self._values(self.config), notes=notes)

    def _feature_statistics(self) -> dict:
        """{'mean', 'var'} (float32 [D]) of the frozen encoder's pooled features over the first
        config.task.probe_norm_examples training images, in order, without augmentation: the
        statistics of models.vit.ProbeNorm."""
        cfg = dataclasses.replace(self.model_config, num_classes=0, probe_norm=False)
        encoder = ViT(cfg)
        params = {k: v for k, v in self.init.params.items() if k not in (HEAD, PROBE_NORM)}
        features = jax.jit(lambda p, x: pool_tokens(encoder.apply(
            {"params": p}, self._model_input(x)), cfg.pool).astype(jnp.float32))
        wanted = self.config.task.probe_norm_examples
        source = self.train_source()
        batch_size = min(wanted, len(source), self.config.data.eval_batch_size)
        batches = image_data.image_batches(
            source, batch_size=batch_size, train=False, seed=0, augment="none",
            **{**self._pixels(), "patch_order": 0})
        total = total_sq = 0.0
        count = 0
        for batch in batches:  # one pass in order; only the last batch has padding rows
            take = min(wanted - count, len(batch["mask"]))
            real = batch["mask"][:take] > 0
            f = np.asarray(features(params, batch["image"]), np.float64)[:take][real]
            total, total_sq, count = total + f.sum(0), total_sq + (f * f).sum(0), count + len(f)
            if count >= wanted or not real.all():
                break
        mean = total / count
        var = np.maximum(total_sq / count - mean * mean, 0.0)
        return {"mean": mean.astype(np.float32), "var": var.astype(np.float32)}

    # ---- model -----------------------------------------------------------------------------
    def dummy_inputs(self, batch_size: int) -> dict[str, np.ndarray]:
        return {"image": np.zeros((batch_size, *self.image_shape), np.float32)}

    def _model_input(self, images):
        return model_input(images, self.model_config.image_size)

    def init_variables(self, rng, inputs):
        variables = self.model.init({"params": rng}, self._model_input(inputs["image"]),
                                    train=False)
        if self.init.params is None:
            return variables
        loaded, fresh = self.init.params, self.init.fresh
        if self.probe_statistics is not None:  # the frozen encoder's, not ProbeNorm's 0 and 1
            loaded = {**loaded, PROBE_NORM: self.probe_statistics}
            fresh = tuple(name for name in fresh if name != PROBE_NORM)
        return {**variables, "params": put_pretrained(
            variables["params"], loaded, fresh=fresh,
            what=f"the weights of config.init={self.config.init!r}")}

    def flops_per_example(self) -> float:
        train = MODELS[self.config.model.name].train_flops(self.model_config, self.image_shape[-1])
        # A frozen encoder runs forward only; the linear head's backward is left out.
        return train / flops.TRAIN_FLOPS_FACTOR if self.probe else train

    # ---- pure functions the trainer jits ---------------------------------------------------
    def loss_normalizers(self, batch):
        """The cross-entropy is a mean over the real (mask = 1) examples."""
        return {"cross_entropy": batch["mask"].sum()}

    def mixed(self, batch, rng):
        """(images, target distributions [b, K] or None, the labels accuracy counts against) of
        a training batch: with Mixup / CutMix (train/mixing.py) the mixed images and targets
        and each row's larger share's label, drawn from a key folded from the step's `rng`
        (the dropout key stays as it is); else the batch as it is, None and its labels."""
        if not self.mixing.enabled:
            return batch["image"], None, batch["label"]
        targets = one_hot_targets(batch["label"], self.model_config.num_classes,
                                  self.label_smoothing)
        mixed = mix_batch(jax.random.fold_in(rng, MIX_STREAM), batch["image"], targets,
                          self.mixing)
        return mixed.images, mixed.targets, jnp.argmax(mixed.targets, axis=-1)

    def loss_fn(self, params, batch, rng):
        """({'cross_entropy': sum over real examples}, {'accuracy': (sum, count)})."""
        images, targets, labels = self.mixed(batch, rng)
        if self.probe:  # no gradient into (and no backward pass through) the frozen encoder
            params = {k: v if k in PROBE_TRAINED else jax.lax.stop_gradient(v)
                      for k, v in params.items()}
        logits = self.model.apply({"params": params}, self._model_input(images),
                                  train=not self.probe, rngs={"dropout": rng})
        weights = batch["mask"]
        losses = (cross_entropy(logits, labels, self.label_smoothing) if targets is None
                  else soft_cross_entropy(logits, targets)) * weights
        correct = (jnp.argmax(logits, -1) == labels) * weights
        return {"cross_entropy": losses.sum()}, {"accuracy": (correct.sum(), weights.sum())}

    def eval_fn(self, params, batch):
        """Metric sums over the real (mask = 1) examples of one eval batch."""
        logits = self.model.apply({"params": params}, self._model_input(batch["image"]),
                                  train=False)
        weights = batch["mask"]
        losses = cross_entropy(logits, batch["label"]) * weights
        correct = (jnp.argmax(logits, -1) == batch["label"]) * weights
        count = weights.sum()
        return {"loss": (losses.sum(), count), "accuracy": (correct.sum(), count)}
