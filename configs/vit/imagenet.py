"""python -m train --config configs/vit/imagenet.py --workdir workdirs/vit_b16_imagenet

ViT trained from scratch on ImageNet (ILSVRC-2012, TFDS `imagenet2012`: 1,281,167 training and
50,000 validation images, 1,000 classes), then fine-tuned at a higher resolution: the recipe of
Dosovitskiy et al. 2021 (its Table 3 and appendix B.1; its Table 5 gives ViT-B/16 77.91% top-1
after fine-tuning at 384 px). GPU-node / pod scale: docs/launch.md has the commands and costs.

The data. ImageNet cannot be downloaded by a script: register at https://image-net.org, put
ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar in a folder and prepare the TFDS dataset
once, as TFDS documents for `imagenet2012` (manual download); encoding its images needs
TensorFlow on the machine that prepares it (`pip install tensorflow-cpu`), reading it does not:
    tfds build imagenet2012 --manual_dir=DIR --file_format=array_record --data_dir=TFDS_DIR
then point every host at TFDS_DIR (TFDS_DATA_DIR or the default ~/tensorflow_datasets).

Variants (`:arg`, comma-separated):
  stage=pretrain|finetune   pretrain (default): Table 3's ImageNet row, from scratch at 224 px:
                            Adam (0.9, 0.999), batch 4096, 300 epochs, lr 3e-3 with 10k warmup
                            steps and cosine decay, weight decay 0.3, dropout 0.1, gradient
                            clipping at norm 1, Inception crop and flip, the MLP pre-logits
                            head. finetune: App. B.1.1 and Table 4: SGD with momentum 0.9,
                            batch 512, 20,000 steps, cosine decay (500 warmup steps, the
                            authors' code), no weight decay, clipping at norm 1, a new zero-
                            initialised linear head, from the pretraining run in `init`
  init=DIR                  finetune: the workdir of the pretraining run (required; a local
                            folder or gs:// URL)
  size=Ti/16|S/16|B/16|B/32|L/16|L/32|H/14   Table 1's models B, L, H and DeiT's Ti, S
                            (default B/16); finetune takes the pretraining run's
                            architecture, whatever size says
  resolution=N              images of N x N pixels (default 224 pretrain, 384 finetune)
  lr=X                      peak learning rate; finetune default 0.03 (Table 4's ImageNet grid:
                            0.003, 0.01, 0.03, 0.06)
  minival                   train on 99% of the training images and evaluate on the other 1%,
                            the paper's held-out split for choosing the learning rate (App.
                            B.1.1); the final run trains on all and evaluates on validation
  smoke                     a seconds-long run for tests: a tiny model on 32 px images (48 px
                            when fine-tuning: the position embeddings resampled) with the
                            recipe's optimizer, schedule shape, crops and heads
e.g. `...imagenet.py:stage=finetune,init=workdirs/vit_b16_imagenet` (at 384 px).

Fine-tuning (train/vit_init.py, models/vit_transfer.py). The pretraining run's config.json gives
the architecture (width, depth, heads, patch size, position embedding), its latest checkpoint
the weights; config.init_head='new' replaces the whole head (the tanh pre-logits layer and the
classifier) by "a single, zero-initialized linear layer" even though both stages have 1,000
classes (App. B.1.1). The paper fine-tunes at 384 px: the pretrained 1-D position embeddings
are resampled bilinearly to the larger patch grid (16-pixel patches: 14 x 14 at 224 px, 24 x 24
at 384), the class token's row kept (Sec. 3.2, "2D interpolation of the pre-trained position
embeddings"); the run prints what was carried over, resampled and replaced.
"""

from __future__ import annotations

import math

import ml_collections

from configs import common
from models.sizes import vit_size

TRAIN_IMAGES = 1_281_167          # ILSVRC-2012 training images (TFDS imagenet2012 'train')
PRETRAIN_EPOCHS = 300             # Table 3, ImageNet row
PRETRAIN_BATCH = 4096             # Table 3 caption
FINETUNE_STEPS = 20_000           # Table 4, ImageNet
FINETUNE_BATCH = 512              # Table 4 caption
MINIVAL_PERCENT = 1               # App. B.1.1: the share of train held out to choose the lr
STAGES = ("pretrain", "finetune")


def pretrain_steps(epochs: int = PRETRAIN_EPOCHS, batch: int = PRETRAIN_BATCH) -> int:
    """Optimizer updates of `epochs` passes over ImageNet's training images in batches of
    `batch` (300 epochs of 4096: 93,836 updates)."""
    return math.ceil(epochs * TRAIN_IMAGES / batch)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, stage="pretrain", init="", size="B/16", resolution=0, lr=0.0,
                            minival=False, smoke=False)
    if args.stage not in STAGES:
        raise ValueError(f"stage={args.stage!r} is not one of {list(STAGES)}")
    finetune = args.stage == "finetune"
    if finetune and not args.init:
        raise ValueError("stage=finetune needs init=DIR, the workdir of the stage=pretrain run "
                         "to fine-tune (e.g. init=workdirs/vit_b16_imagenet)")
    if not finetune and args.init:
        raise ValueError(f"init={args.init!r} is for stage=finetune; stage=pretrain trains "
                         "from scratch")
    resolution = args.resolution or (384 if finetune else 224)

    config = ml_collections.ConfigDict()
    config.seed = 0                          # parameter init, dropout, data order, crops
    config.init = args.init or "scratch"     # scratch | the pretraining run's workdir
                                             # (or an .npz / HF ViT folder, train/vit_init.py)
    config.init_head = "new"                 # new: always a new zero-initialised head (App.
                                             # B.1.1) | auto: keep the checkpoint's when it fits
    # finetune: the 224 px table to 384 px as the released code zooms it (corner patches
    # aligned); pretrain starts from scratch, where nothing is resampled (centres, the default)
    config.init_posemb_resample = "corners" if finetune else "centres"

    config.task = ml_collections.ConfigDict()
    config.task.name = "classify"            # train/tasks/classify.py
    config.task.label_smoothing = 0.0
    config.task.probe = False                # True: a linear probe (only the head trains)
    config.task.probe_norm_examples = 0      # images of model.probe_norm's statistics
    config.task.update(common.mixing_keys())  # Mixup and CutMix, off (train/mixing.py)

    config.model = ml_collections.ConfigDict()
    config.model.name = "vit"                # models/vit.py
    config.model.num_classes = 1000
    config.model.image_size = (resolution, resolution)
    config.model.update(vit_size(args.size))  # patch_size, hidden_size, num_layers, ... (Table 1)
    config.model.posemb = "learned_1d"       # the paper's default
    config.model.posemb_mode = "stem"        # the table added once, to the patch embeddings
    config.model.pool = "cls"                # the class token (eq. 4)
    # App. D.3 / Sec. 3.1: an MLP head with one tanh hidden layer when pretraining, a single
    # linear layer when fine-tuning.
    config.model.head_hidden_size = 0 if finetune else config.model.hidden_size
    config.model.probe_norm = False          # a linear probe's fixed feature standardisation
    config.model.stem_channels = 0           # the plain ViT (no hybrid stem)
    config.model.dropout_rate = 0.0 if finetune else 0.1  # Table 3 (ImageNet): 0.1
    config.model.attention_dropout_rate = 0.0
    config.model.activation = "gelu"
    config.model.norm = "layernorm"
    config.model.norm_position = "pre"
    config.model.layer_norm_eps = 1e-6       # the paper's code
    config.model.attention_implementation = "xla"  # xla | cudnn (GPU) | auto
    config.model.dtype = "float32"           # compute dtype (bfloat16 on GPUs and TPUs)
    config.model.param_dtype = "float32"
    config.model.remat = "none"              # none | minimal | full
    config.model.scan_layers = False
    config.model.distill_token = False       # DeiT's distillation token (configs/vit/deit.py)
    config.model.drop_path_rate = 0.0        # stochastic depth: the last block's rate (DeiT: 0.1)

    config.data = ml_collections.ConfigDict()
    config.data.name = "imagenet2012"        # TFDS, prepared once from the manual download
    config.data.source = "tfds"
    config.data.image_shape = (resolution, resolution, 3)  # the crops' and resizes' output
    config.data.resize = False               # the pipeline's crops are at the model's size
    config.data.train_split = "train"
    config.data.eval_split = "validation"    # the 50,000 validation images (Table 5's ImageNet)
    if args.minival:  # App. B.1.1: the learning rate is chosen on 1% of train, trained on 99%
        config.data.update(train_split=f"train[:{100 - MINIVAL_PERCENT}%]",
                           eval_split=f"train[{100 - MINIVAL_PERCENT}%:]")
    config.data.train_fraction = 1.0         # the share of the training split used
    config.data.train_subset = "random"      # how a fraction is drawn: random | balanced
    config.data.augment = "inception_crop"   # Inception crop of 8-100% of the area, then flip
    # Evaluation: the standard 87.5% centre crop at 224; the authors' fine-tuning code resizes
    # the whole image to the resolution.
    config.data.eval_resize = "resize" if finetune else "center_crop"
    config.data.normalize = "minus_one_to_one"  # x / 127.5 - 1, the paper's input range
    config.data.repeated_augment = 1         # r > 1: each image r times per batch, each copy
                                             # augmented anew (Hoffer et al. 2020; DeiT: 3)
    config.data.worker_count = 0             # processes making the training batches (0: this
                                             # one; data/pipelines/workers.py)
    config.data.batch_size = FINETUNE_BATCH if finetune else PRETRAIN_BATCH
    config.data.eval_batch_size = 1024       # the last batch padded and masked

    if finetune:  # App. B.1.1, Table 4
        config.optimizer = common.optimizer_config(
            name="sgd", momentum=0.9, schedule="cosine", learning_rate=args.lr or 0.03,
            warmup_steps=500, weight_decay=0.0, clip_norm=1.0)
        config.train = common.train_config(num_steps=FINETUNE_STEPS, log_every=100,
                                           eval_every=2000, checkpoint_every=2000)
    else:  # Table 3 (ImageNet row) and its caption; Adam's betas from Sec. 4.1
        config.optimizer = common.optimizer_config(
            name="adamw", schedule="cosine", learning_rate=args.lr or 3e-3, warmup_steps=10_000,
            b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.3, clip_norm=1.0)
        config.train = common.train_config(num_steps=pretrain_steps(), log_every=100,
                                           eval_every=5000, checkpoint_every=5000)
    config.mesh = common.mesh_config()

    if args.smoke:  # seconds on a CPU: a tiny ViT on 32 px (fine-tuning: 48 px) images, the
        size = args.resolution or (48 if finetune else 32)  # recipe's other settings
        config.model.update(image_size=(size, size), patch_size=8, hidden_size=32,
                            num_layers=2, num_heads=2, mlp_dim=64,
                            head_hidden_size=0 if finetune else 32)
        config.data.update(image_shape=(size, size, 3), batch_size=16, eval_batch_size=16)
        config.optimizer.warmup_steps = 2
        config.train.update(num_steps=6, log_every=2, eval_every=3, checkpoint_every=3,
                            keep_checkpoints=2, progress_bar=False)
    return config
