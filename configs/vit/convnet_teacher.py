"""python -m train --config configs/vit/convnet_teacher.py --workdir workdirs/convnet_teacher

DeiT's teacher (Touvron et al. 2021, Sec. 5.2): a small residual convnet (models/convnet.py)
trained on Fashion-MNIST from scratch, with the data and optimizer of
configs/vit/fashion_mnist.py and random 2-pixel crops added to its flips (the student's
augmentation under deit.py's `recipe`; Table 3's rows flip only). configs/vit/deit.py reads its workdir as the teacher of a ViT
(`teacher=workdirs/convnet_teacher`, the default). The paper's teachers are RegNetYs, convnets
whose accuracy is at least the student's; this one reaches the ViT's within the ViT's own
budget (recorded as `convnet_teacher`, docs/results.md: 90.79% test accuracy against the demo
ViT's 90.58%; the run's final eval in its metrics.jsonl is Table 3's teacher row).

Sizes: widths 16, 32, 64 over three stages of two basic blocks each (the second and third
halving the resolution to 14 and 7 pixels), about 40 MFLOPs forward per image, 1.6 times the
Fashion-MNIST ViT's; but XLA's CPU convolutions run at a lower share of the machine's peak than
its matmuls, and on the shared 2-core machine a training step measured about 3 times the ViT's
(so its forward pass inside every DeiT step costs about one ViT step). `blocks=1` halves it.
The convnet also starts slower than the ViT: a 300-step run ended at 58% training accuracy
where the ViT's ended at 80%, so give it the full budget before it teaches.

Variants (`:arg`, comma-separated):
  widths=16-32-64     the stages' channels, '-'-separated
  blocks=2            basic blocks per stage
  steps=0             train steps (0: configs/vit/fashion_mnist.py's, 5900)
  smoke               a seconds-long run for tests (widths 8-16, one block a stage, unless
                      given)
e.g. `--config configs/vit/convnet_teacher.py:widths=32-64-128,smoke`.
"""

from __future__ import annotations

import ml_collections

from configs import common
from configs.vit import fashion_mnist


WIDTHS, BLOCKS = "16-32-64", 2


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, widths=WIDTHS, blocks=BLOCKS, steps=0, smoke=False)
    if args.steps < 0:
        raise ValueError(f"steps={args.steps} must be >= 0 (0: the ViT config's)")
    try:
        widths = tuple(int(w) for w in str(args.widths).split("-"))
    except ValueError:
        raise ValueError(f"widths={args.widths!r} must be channel counts joined by '-', "
                         "e.g. widths=16-32-64") from None
    if args.blocks < 1 or min(widths) < 1:
        raise ValueError(f"widths={args.widths}, blocks={args.blocks}: each must be >= 1")
    config = fashion_mnist.get_config("smoke" if args.smoke else None)

    config.model = ml_collections.ConfigDict()
    config.model.name = "convnet"            # models/convnet.py (train/image_models.py)
    config.model.num_classes = 10
    config.model.image_size = (28, 28)       # (height, width): the data's
    config.model.widths = widths             # channels of each stage; stages 2.. halve the size
    config.model.blocks_per_stage = args.blocks  # basic blocks (two 3x3 convolutions) per stage
    config.model.norm_groups = 8             # GroupNorm's groups: no batch statistics
    config.model.dropout_rate = 0.0          # on the pooled features
    config.model.dtype = "float32"           # compute dtype
    config.model.param_dtype = "float32"     # parameter and optimizer-state dtype
    config.data.augment = "crop_flip"        # 2-pixel-padded random crop and flip (deit.py's
                                             # recipe augments so; its Table 3 rows flip only)
    if args.steps:
        config.train.num_steps = args.steps
    if args.smoke:  # a smaller convnet, where widths= and blocks= are not given
        config.model.norm_groups = 4
        if args.widths == WIDTHS:
            config.model.widths = (8, 16)
        if args.blocks == BLOCKS:
            config.model.blocks_per_stage = 1
    return config
