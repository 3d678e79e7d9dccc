"""python -m train --config configs/vit/deit.py --workdir workdirs/deit

DeiT (Touvron et al. 2021, "Training data-efficient image transformers & distillation through
attention"): a ViT learning Fashion-MNIST from the labels and from a convnet teacher trained in
this project first (`python -m train --config configs/vit/convnet_teacher.py --workdir
workdirs/convnet_teacher`), whose workdir `teacher=` names (train/tasks/deit.py reads its
latest checkpoint and records that step and a fingerprint, which a resume must find again).

The student is configs/vit/fashion_mnist.py's ViT as DeiT builds it: patches embedded by a
linear map (no convolutional stem: the teacher's convolutions are what distillation is to pass
on, Sec. 5.2), the class token (pool='cls'), and with `token` the distillation token and its
head beside it (Sec. 4); at test time the two heads' softmaxes are averaged.

Variants (`:arg`, comma-separated):
  distill=hard|soft|none  what the teacher teaches (Sec. 4, eq. 2 and 3; default hard, the
                          paper's best): its argmax as a label, its softened softmax (tau 3,
                          alpha 0.1, Sec. 6), or nothing (the labels alone, Table 3's first row)
  token=true|false        the distillation token and head (default true: DeiT-alembic); false
                          distils into the class head (Table 3's "usual distillation" rows);
                          distill=none needs token=false
  teacher=DIR             the teacher's workdir (default workdirs/convnet_teacher): any
                          'classify' run on Fashion-MNIST, a ViT's too (Table 2's comparison)
  recipe=false|true       the part of DeiT's regularisation (Table 9) this project has, each
                          piece a config key of its own: stochastic depth 0.1, Mixup 0.8 and
                          CutMix 1.0, repeated augmentation 3 (the batch 126: 42 images, 3
                          draws of each), label smoothing 0.1, no gradient clipping; not
                          RandAugment 9/0.5 nor random erasing 0.25 (crop_flip instead), nor
                          Table 9's learning rate 5e-4 x batch / 512 (the ViT config's 1.5e-3
                          stays). Added, not DeiT's (its Table 8 trains without one): an EMA
                          of the weights, evaluated beside them. Off by default: DeiT runs it
                          for 300 ImageNet epochs, this config for 13 Fashion-MNIST epochs (of
                          image draws: with the recipe's repetition, about 4.1 passes over
                          distinct images), and Table 3's comparison is of the distillation
  steps=0                 train steps (0: the ViT config's, 5900)
  smoke                   a seconds-long run for tests (the teacher must exist)
e.g. `--config configs/vit/deit.py:distill=soft,token=false,teacher=workdirs/convnet_teacher`.

Weight decay (train/optimizers.py `weight_decay_mask`) applies to every parameter of two or
more dimensions that is not a norm's, so also to the class and distillation tokens and a
learned position table, which DeiT's code (timm's `no_weight_decay`) exempts: every row here
decays its class token and position table alike, and the rows with the distillation token
decay that token too.
"""

from __future__ import annotations

import ml_collections

from configs import common
from configs.vit import fashion_mnist

DEFAULT_TEACHER = "workdirs/convnet_teacher"
# Sec. 6 (after Cho & Hariharan 2019): soft distillation at tau = 3 with lambda = 0.1; eq. 3's
# hard distillation weighs both labels 1/2.
ALPHA = {"none": 0.0, "soft": 0.1, "hard": 0.5}
TEMPERATURE = 3.0
# The recipe's moving average: DeiT's code keeps 0.99996 over 375k steps; here a time constant
# of 1 / (1 - d) = 1000 steps, a sixth of the run, so the average forgets the first epochs.
EMA_DECAY = 0.999


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, distill="hard", token=True, teacher=DEFAULT_TEACHER,
                            recipe=False, steps=0, smoke=False)
    if args.distill not in ALPHA:
        raise ValueError(f"distill={args.distill!r} is not one of {sorted(ALPHA)}")
    if args.distill == "none" and args.token:
        raise ValueError("distill=none trains on the labels alone, where a distillation token "
                         "would learn nothing: add token=false")
    if args.steps < 0:
        raise ValueError(f"steps={args.steps} must be >= 0 (0: the ViT config's)")
    config = fashion_mnist.get_config("smoke" if args.smoke else None)
    config.task.name = "deit"                # train/tasks/deit.py
    config.model.update(pool="cls", stem_channels=0, distill_token=args.token)

    config.distill = ml_collections.ConfigDict()
    config.distill.teacher = args.teacher    # a classification run's workdir (train/teacher.py)
    config.distill.teacher_step = -1         # its checkpoint step; -1: the latest
    config.distill.teacher_fingerprint = ""  # sha256 of its parameters; "": recorded at start
    config.distill.kind = args.distill       # none | soft | hard (train/tasks/deit.py)
    config.distill.alpha = ALPHA[args.distill]  # the teacher's share of the loss
    config.distill.temperature = TEMPERATURE  # tau of soft distillation (and of distill_kl)

    if args.recipe:  # DeiT Table 9's pieces that this project has (the docstring)
        config.model.drop_path_rate = 0.1
        config.optimizer.clip_norm = 0.0     # Table 9: no gradient clipping
        config.task.update(label_smoothing=0.1, mixup_alpha=0.8, cutmix_alpha=1.0)
        config.data.update(augment="crop_flip", repeated_augment=3)
        config.data.batch_size -= config.data.batch_size % 3  # whole groups of 3 copies: 126
        config.train.ema_decay = EMA_DECAY
    if args.steps:
        config.train.num_steps = args.steps
    return config
