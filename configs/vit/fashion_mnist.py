"""python -m train --config configs/vit/fashion_mnist.py --workdir workdirs/vit_fmnist

A small ViT trained from scratch on Fashion-MNIST (28x28 grey images, 10 classes) on a CPU.

Variants (`:arg`, comma-separated):
  posemb=none|learned_1d|learned_2d|relative   ViT paper Table 8 rows (default learned_1d;
                                               relative: the paper's 1-D relative attention)
         |sincos_2d|relative_bias_2d           fixed 2-D sin-cos, learned scalar bias per 2-D
         |rope_2d|alibi_2d                     offset, 2-D RoPE, 2-D ALiBi (not in the paper)
  posemb_mode=stem|every_layer|every_layer_shared   Table 8's columns: the table added once
                                               (default), learned and added at every layer, or
                                               one table added at every layer (learned_1d,
                                               learned_2d; sincos_2d: stem|every_layer_shared)
  size=custom|Ti|S|B|L|H                       ViT Table 1 widths/depths (default custom)
  init=scratch|<file.npz>|<folder>             start from these weights (default scratch)
         (train/vit_init.py): an .npz of google-research/vision_transformer (AugReg) or
         big_vision, a Hugging Face ViT folder (python -m train.export writes one), or a
         classification workdir; its architecture replaces config.model's, the head is kept
         when it fits (config.init_head)
  image_size=0                                 N > 0: train at N x N, the images resized to it
                                               (the data's 28 x 28 by default)
  plain                                        the published ViT's architecture: no stem, the
         class token, Flax's tanh GELU (both `python -m train.export` formats describe it)
  probe                                        a linear probe of config.init's encoder (e.g. the
         workdir of configs/vit/mae.py): the encoder frozen, its pooled features standardised
         (model.probe_norm, MAE's BatchNorm without affine), only the zero-initialised
         classifier trains, without weight decay
  labels=1.0                                   the fraction of the training images (and labels)
         used, drawn per class (data.train_subset='balanced') with config.seed
  val                                          a validation split for choosing settings: train
         on the first 54,000 training images, evaluate on the last 6,000 (the test split then
         scores the chosen settings once)
  smoke                                        a seconds-long run for tests
Fine-tuning or a linear probe from a masked autoencoder: `...:init=workdirs/mae_fmnist` and
`...:init=workdirs/mae_fmnist,probe` (configs/vit/mae.py; the encoder's architecture replaces the
config's, a new head).
e.g. `--config configs/vit/fashion_mnist.py:posemb=sincos_2d` or `...:smoke`, or fine-tuning
at twice the resolution of an exported run, its position embeddings resampled (ViT Sec. 3.2):
`--config configs/vit/fashion_mnist.py:init=exports/vit_fmnist,image_size=56`.
"""

from __future__ import annotations

import ml_collections

from configs import common
from models.sizes import vit_size


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, posemb="learned_1d", posemb_mode="stem", size="custom",
                            init="scratch", image_size=0, plain=False, probe=False, labels=1.0,
                            val=False, smoke=False)
    if args.image_size < 0:
        raise ValueError(f"image_size={args.image_size} must be > 0 (or 0: the data's 28)")
    config = ml_collections.ConfigDict()
    config.seed = 0                          # parameter init, dropout and data order
    config.init = args.init                  # scratch | an .npz | an HF ViT folder | a workdir
    config.init_head = "auto"                # auto: keep the checkpoint's head when it fits the
                                             # run | new: always a new zero-initialised one
    config.init_posemb_resample = "centres"  # a position table resampled to a new patch grid:
                                             # each patch at its centre | corners (the ViT code's)

    config.task = ml_collections.ConfigDict()
    config.task.name = "classify"            # train/tasks/classify.py
    config.task.label_smoothing = 0.0        # epsilon of label-smoothed cross-entropy
    config.task.probe = args.probe           # True: a linear probe, only the head trains
    config.task.probe_norm_examples = 10_000  # training images of model.probe_norm's statistics
    config.task.update(common.mixing_keys())  # Mixup and CutMix, off (train/mixing.py)

    config.model = ml_collections.ConfigDict()
    config.model.name = "vit"                # models/vit.py
    config.model.num_classes = 10
    config.model.image_size = (28, 28)       # (height, width): the data's, or with data.resize
                                             # the size the images are resized to
    config.model.patch_size = 7              # 4 x 4 = 16 patches of 7 x 7 pixels
    config.model.hidden_size = 128           # D
    config.model.num_layers = 5
    config.model.num_heads = 4
    config.model.mlp_dim = 256
    config.model.posemb = args.posemb        # none|learned_1d|learned_2d|sincos_2d|relative|
                                             # relative_bias_2d|rope_2d|alibi_2d (models/vit.py)
    config.model.posemb_mode = args.posemb_mode  # stem|every_layer|every_layer_shared: where a
                                             # position table is added (Table 8's columns)
    config.model.pool = "mean"               # mean of patch tokens (converges faster here) | cls (paper)
    config.model.head_hidden_size = 0        # >0: tanh pre-logits layer
    config.model.probe_norm = args.probe     # standardise the pooled features by their fixed
                                             # statistics (a linear probe's BatchNorm)
    config.model.stem_channels = 16          # hybrid input: patches of a 3x3-conv feature map; 0 = pure ViT
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    config.model.activation = "relu"         # relu|gelu|gelu_tanh (the ViT paper: gelu; exact
                                             # GELU's erf costs a 2-core CPU 14% of the step)
    config.model.norm = "layernorm"          # layernorm|rmsnorm
    config.model.norm_position = "pre"       # pre (ViT) | post (original Transformer)
    config.model.layer_norm_eps = 1e-6       # every norm's epsilon (HF's ViT checkpoints: 1e-12)
    config.model.attention_implementation = "xla"  # xla | cudnn (GPU) | auto
    config.model.dtype = "float32"           # compute dtype: float32|bfloat16|float16
    config.model.param_dtype = "float32"     # parameter and optimizer-state dtype
    config.model.remat = "none"              # none | minimal | full: recompute block activations
                                             # in the backward pass, less memory for more compute
    config.model.scan_layers = False         # nn.scan over the blocks (models/stack.py):
                                             # one compiled block, a leading layer axis
    config.model.distill_token = False       # DeiT's distillation token (configs/vit/deit.py)
    config.model.drop_path_rate = 0.0        # stochastic depth: the last block's rate (DeiT: 0.1)
    if args.size != "custom":  # the paper's sizes (Table 1) with the paper's GELU
        config.model.update(vit_size(args.size))
        config.model.activation = "gelu"
    if args.plain:  # as the paper's code (google-research/vision_transformer) builds it
        config.model.update(stem_channels=0, pool="cls", activation="gelu_tanh")

    config.data = ml_collections.ConfigDict()
    config.data.name = "fashion_mnist"       # python -m data.fetch fashion_mnist
    config.data.source = "local"             # local (data/ builders) | tfds (standard catalog)
    config.data.image_shape = (28, 28, 1)    # every stored image must have this shape
    config.data.resize = False               # True: resize the images (bilinear, on the device)
                                             # to model.image_size
    # val: choose settings on the last 6,000 training images, trained on the other 54,000, and
    # keep the test split for the chosen ones (the demo's settings were chosen on test)
    config.data.train_split = "train[:90%]" if args.val else "train"
    config.data.train_fraction = args.labels  # the share of the training split used (1.0: all)
    config.data.train_subset = "balanced"    # how a fraction is drawn: balanced (as many of
                                             # every class) | random
    config.data.eval_split = "train[90%:]" if args.val else "test"
    config.data.augment = "flip"             # none | flip | crop_flip (2px-padded random crop)
                                             # | inception_crop (images of any size)
    config.data.eval_resize = "none"         # none: every image is image_shape | resize |
                                             # center_crop (images of any size)
    config.data.normalize = "dataset"        # dataset: its per-channel mean/std |
                                             # minus_one_to_one: x / 127.5 - 1 (ViT's)
    config.data.repeated_augment = 1         # r > 1: each image r times per batch, each copy
                                             # augmented anew (Hoffer et al. 2020; DeiT: 3)
    config.data.worker_count = 0             # processes making the training batches (0: this
                                             # one; data/pipelines/workers.py)
    config.data.batch_size = 128             # global batch, split over processes and devices
    config.data.eval_batch_size = 500        # global eval batch (last one padded and masked)

    config.optimizer = common.optimizer_config(
        name="adamw", schedule="cosine", learning_rate=1.5e-3, warmup_steps=300,
        b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.05, clip_norm=1.0)
    config.train = common.train_config(
        num_steps=5900, log_every=100, eval_every=2000, checkpoint_every=2000)
    config.mesh = common.mesh_config()
    if args.probe:  # the paper's probe has no weight decay (MAE App. A.3)
        config.optimizer.weight_decay = 0.0
    if args.image_size:
        config.model.image_size = (args.image_size, args.image_size)
        config.data.resize = (args.image_size, args.image_size) != config.data.image_shape[:2]

    if args.smoke:  # a few seconds on a CPU: tiny model, few steps, every code path once
        config.model.update(patch_size=7, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64)
        config.data.batch_size = 32
        config.data.eval_batch_size = 200
        config.train.update(num_steps=20, log_every=5, eval_every=10, checkpoint_every=10,
                            keep_checkpoints=2, progress_bar=False)
        config.optimizer.warmup_steps = 5
        config.task.probe_norm_examples = 500
    return config
