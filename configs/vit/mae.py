"""python -m train --config configs/vit/mae.py --workdir workdirs/mae_fmnist

Masked-autoencoder pretraining (He et al. 2022, models/mae.py) of a small ViT on the Fashion-MNIST
training images, without their labels, sized for a 2-core CPU: 49 patches of 4 x 4 pixels, 75%
of them masked, a 6-block encoder 128 wide and a 2-block decoder 64 wide (about 8% of the
encoder's compute per token, the paper's 8 x 512 decoder is 9% of ViT-L's), trained to
reconstruct the masked patches' normalised pixels. Then fine-tune all its weights, or train a
linear probe on the frozen encoder, with the classification config, which reads the encoder
out of this run's workdir (train/vit_init.py):

    python -m train --config configs/vit/fashion_mnist.py:init=workdirs/mae_fmnist \\
        --workdir workdirs/mae_fmnist_finetune
    python -m train --config configs/vit/fashion_mnist.py:init=workdirs/mae_fmnist,probe \\
        --workdir workdirs/mae_fmnist_probe

The paper's recipe where it fits (App. A.1): AdamW with betas (0.9, 0.95) and weight decay
0.05, a linear warmup then a cosine decay, masking ratio 0.75, per-patch normalised pixels as
targets, a class token in the encoder, fixed 2-D sine-cosine position embeddings in the encoder
and the decoder, random horizontal flips (MAE's released code; App. A.1's table names random
resized crops alone). Not: its batch of 4096 and 800 epochs (here 256
images, about 8.5 epochs), its random resized crops, its base learning rate 1.5e-4 x batch /
256 (a model this small, trained this briefly, takes 1.5e-3), and GELU (ReLU here, as in
configs/vit/fashion_mnist.py: exact GELU's erf costs a 2-core CPU 14% of the step).

Variants (`:arg`, comma-separated):
  mask_ratio=0.75           the share of patches masked (Fig. 5: 0.1 .. 0.9)
  norm_pix=true             per-patch normalised targets (false: the pixels; Table 1d)
  mask_token_in_encoder     the encoder runs on every patch, mask tokens in the masked places
                            (Table 1c's other row; about N / K times its compute)
  decoder_layers=2          the decoder's depth (Table 1a)
  steps=2000                pretraining steps (warmup min(200, steps / 10), cosine to steps)
  smoke                     a seconds-long run for tests (12 steps unless steps= is given)
"""

from __future__ import annotations

import ml_collections

from configs import common


STEPS = 2000


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = common.parse_arg(arg, mask_ratio=0.75, norm_pix=True, mask_token_in_encoder=False,
                            decoder_layers=2, steps=STEPS, smoke=False)
    if args.steps < 2:
        raise ValueError(f"steps={args.steps} must be >= 2 (a warmup and a decay)")
    config = ml_collections.ConfigDict()
    config.seed = 0                          # parameter init, data order, augmentation, masks

    config.task = ml_collections.ConfigDict()
    config.task.name = "mae_pretrain"        # train/tasks/mae_pretrain.py

    config.model = ml_collections.ConfigDict()
    config.model.name = "mae"                # models/mae.py
    config.model.mask_ratio = args.mask_ratio        # r: K = int(N (1 - r)) patches visible
    config.model.norm_pix_loss = args.norm_pix       # targets: each patch normalised by its own
                                                     # mean and variance (False: the pixels)
    config.model.mask_token_in_encoder = args.mask_token_in_encoder  # Table 1c's other row

    # The encoder: a ViT (models/vit.py) without its classifier; a classification run started
    # from this workdir takes these values (its architecture) from the checkpoint.
    encoder = config.model.encoder = ml_collections.ConfigDict()
    encoder.image_size = (28, 28)            # (height, width): the data's
    encoder.patch_size = 4                   # 7 x 7 = 49 patches of 4 x 4 pixels
    encoder.hidden_size = 128
    encoder.num_layers = 6
    encoder.num_heads = 4
    encoder.mlp_dim = 256
    encoder.posemb = "sincos_2d"             # fixed 2-D sine-cosine, as MAE's code (none |
                                             # learned_1d | learned_2d | sincos_2d | rope_2d)
    encoder.posemb_mode = "stem"             # the table added once (the only mode masking takes)
    encoder.pool = "cls"                     # a class token (the paper's), read by the probe and
                                             # fine-tuning | mean: no class token
    encoder.stem_channels = 0                # no conv stem: it would leak masked pixels
    encoder.dropout_rate = 0.0
    encoder.attention_dropout_rate = 0.0
    encoder.drop_path_rate = 0.0             # stochastic depth (MAE pretrains without it)
    encoder.distill_token = False            # DeiT's token: a classifier's, not an encoder's
    encoder.activation = "relu"              # relu | gelu (the paper's) | gelu_tanh
    encoder.norm = "layernorm"               # layernorm | rmsnorm (the decoder's too)
    encoder.norm_position = "pre"            # pre | post (the decoder is pre-LN)
    encoder.layer_norm_eps = 1e-6
    encoder.attention_implementation = "xla"  # xla | cudnn (GPU) | auto
    encoder.dtype = "float32"                # compute dtype (the decoder's too)
    encoder.param_dtype = "float32"          # parameter and optimizer-state dtype
    encoder.remat = "none"                   # none | minimal | full (the decoder's too)
    encoder.scan_layers = False              # nn.scan over the blocks (the decoder's too)

    decoder = config.model.decoder = ml_collections.ConfigDict()
    decoder.hidden_size = 64                 # its own width (divisible by 4: sin-cos table)
    decoder.num_layers = args.decoder_layers
    decoder.num_heads = 4
    decoder.mlp_dim = 128

    config.data = ml_collections.ConfigDict()
    config.data.name = "fashion_mnist"       # python -m data.fetch fashion_mnist
    config.data.source = "local"             # local (data/ builders) | tfds (standard catalog)
    config.data.image_shape = (28, 28, 1)    # every stored image must have this shape
    config.data.train_split = "train"        # its images; the labels are not read
    config.data.train_fraction = 1.0         # the share of the training images used
    config.data.train_subset = "random"      # how a fraction is drawn: random | balanced
    config.data.eval_split = "test"          # reconstruction error on the test images
    config.data.augment = "flip"             # none | flip | crop_flip
    config.data.eval_resize = "none"         # every image is image_shape
    config.data.normalize = "dataset"        # dataset: its per-channel mean/std |
                                             # minus_one_to_one: x / 127.5 - 1
    config.data.worker_count = 0             # processes making the training batches (0: this
                                             # one; data/pipelines/workers.py)
    config.data.batch_size = 256             # global batch, split over processes and devices
    config.data.eval_batch_size = 500        # global eval batch (last one padded and masked)

    config.optimizer = common.optimizer_config(
        name="adamw", schedule="cosine", learning_rate=1.5e-3,
        warmup_steps=min(200, args.steps // 10), b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.05,
        clip_norm=0.0)
    config.train = common.train_config(
        num_steps=args.steps, log_every=100, eval_every=0, checkpoint_every=500)
    config.mesh = common.mesh_config()

    if args.smoke:  # a few seconds on a CPU: tiny model, few steps, every code path once
        encoder.update(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64)
        decoder.update(hidden_size=16, num_heads=2, mlp_dim=32)
        config.data.batch_size = 32
        config.data.eval_batch_size = 200
        config.train.update(num_steps=12 if args.steps == STEPS else args.steps, log_every=4,
                            eval_every=6, checkpoint_every=6,
                            keep_checkpoints=2, progress_bar=False)
        config.optimizer.warmup_steps = 2
    return config
