"""Model FLOPs per example and the peak they are compared against (MFU).

MFU (model FLOPs utilisation) = model FLOPs per step / step time / peak FLOP/s. Model FLOPs count
only the matrix multiplications the model needs (2 FLOPs per multiply-add), not what an
implementation spends on recomputation, so MFU is comparable across codebases.

A training step costs 3x the forward pass: the backward pass multiplies by each weight twice
(gradient with respect to the input and to the weight).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

TRAIN_FLOPS_FACTOR = 3  # forward + backward (2x forward)


def encoder_forward_flops(tokens: int, hidden: int, mlp_dim: int, layers: int) -> float:
    """Forward FLOPs of a stack of Transformer encoder blocks over one sequence.

    Per layer: Q, K, V and output projections (4 d^2 weights per token), the two MLP matrices
    (2 d f), and the attention itself: Q K^T and (weights) V, each t^2 d multiply-adds.
    """
    weights_per_token = 4 * hidden * hidden + 2 * hidden * mlp_dim
    linear = 2 * tokens * weights_per_token
    attention = 2 * 2 * tokens * tokens * hidden
    return float(layers * (linear + attention))


def vit_train_flops_per_example(cfg, channels: int) -> float:
    """Training FLOPs of one image through `models.vit.ViT` with config `cfg`."""
    grid_h, grid_w = cfg.grid
    patches = grid_h * grid_w
    tokens = patches + cfg.num_prefix_tokens
    d = cfg.hidden_size
    forward = 0.0
    if cfg.stem_channels:  # 3x3 convolution at every pixel
        height, width = cfg.image_size
        forward += 2 * height * width * 9 * channels * cfg.stem_channels
        channels = cfg.stem_channels
    forward += 2 * patches * (cfg.patch_size ** 2 * channels) * d         # patch embedding
    forward += encoder_forward_flops(tokens, d, cfg.mlp_dim, cfg.num_layers)
    head_in = cfg.head_hidden_size or d
    if cfg.head_hidden_size:
        forward += 2 * d * cfg.head_hidden_size
    forward += (1 + cfg.distill_token) * 2 * head_in * cfg.num_classes  # DeiT: two heads
    return TRAIN_FLOPS_FACTOR * float(forward)


def mae_train_flops_per_example(cfg, channels: int) -> float:
    """Training FLOPs of one image through `models.mae.MAE` with config `cfg` (an MAEConfig).

    The patch embedding of all N patches (the encoder embeds every patch, then keeps the
    visible ones); the encoder's blocks over the class token and the K visible patches, or all
    N with `mask_token_in_encoder` (Table 1c); the decoder's input projection of those tokens,
    its blocks over the class token and all N patches, and the pixel prediction of the N
    patches (computed for all, the loss reads the masked ones).
    """
    enc, dec = cfg.encoder, cfg.decoder
    n, prefix = cfg.num_patches, enc.num_prefix_tokens
    encoded = prefix + (n if cfg.mask_token_in_encoder else cfg.num_visible)
    pixels = enc.patch_size ** 2 * channels
    forward = 2.0 * n * pixels * enc.hidden_size
    forward += encoder_forward_flops(encoded, enc.hidden_size, enc.mlp_dim, enc.num_layers)
    forward += 2.0 * encoded * enc.hidden_size * dec.hidden_size
    forward += encoder_forward_flops(prefix + n, dec.hidden_size, dec.mlp_dim, dec.num_layers)
    forward += 2.0 * n * dec.hidden_size * pixels
    return TRAIN_FLOPS_FACTOR * forward


def convnet_train_flops_per_example(cfg, channels: int) -> float:
    """Training FLOPs of one image through `models.convnet.ConvNet` with config `cfg`: 2 per
    multiply-add of every convolution and of the classifier (norms, activations and pooling
    left out, as for the Transformers)."""
    height, width = cfg.image_size

    def conv(k, c_in, c_out, h, w):
        return 2.0 * h * w * k * k * c_in * c_out

    forward = conv(3, channels, cfg.widths[0], height, width)   # the stem
    inputs = cfg.widths[0]
    for stage, features in enumerate(cfg.widths):
        for index in range(cfg.blocks_per_stage):
            stride = 2 if stage > 0 and index == 0 else 1
            height, width = -(-height // stride), -(-width // stride)  # SAME padding: ceil
            forward += conv(3, inputs, features, height, width) + conv(3, features, features,
                                                                        height, width)
            if stride != 1 or inputs != features:  # the projection shortcut
                forward += conv(1, inputs, features, height, width)
            inputs = features
    forward += 2.0 * inputs * cfg.num_classes
    return TRAIN_FLOPS_FACTOR * forward


def chained_matmuls(chain: int):
    """A jitted f(x, y) = x @ y @ ... @ y, `chain` dependent matmuls in one compiled loop."""
    return jax.jit(lambda x, y: jax.lax.fori_loop(0, chain, lambda _, z: z @ y, x))


def measure_matmul_peak(size: int = 2048, repeats: int = 5, dtype=jnp.float32,
                        chain: int | None = None) -> float:
    """Best observed FLOP/s of square matmuls on the default device (a practical peak).

    On a shared CPU the spec sheet is meaningless; the best of a few timed matmuls is what the
    machine can actually do, measured in the same process as the training it is compared with.
    Each timed call runs `chain` dependent matmuls in one compiled loop (default: 1 on a CPU,
    where one takes a good fraction of a second; 32 elsewhere, where one takes well under a
    millisecond and a single call's launch and wait would count against the device).
    """
    if chain is None:
        chain = 1 if jax.default_backend() == "cpu" else 32
    a = jnp.ones((size, size), dtype)
    b = jnp.full((size, size), 1.0 / size, dtype)  # ones @ b = ones: the values stay finite
    matmuls = chained_matmuls(chain)
    matmuls(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmuls(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 * chain / best


@functools.cache
def measured_peak_flops(dtype: str = "float32") -> float:
    """`measure_matmul_peak` of `dtype` matmuls (a model's compute dtype: a bfloat16 model's
    MFU is against bfloat16 matmuls, several times float32's on a GPU's tensor cores) once per
    process and dtype: the peak a run's MFU is computed against when neither the config nor a
    data sheet gives one. Runs in one process (tests, notebooks) share the measurement; a
    benchmark that tracks the machine's load calls measure_matmul_peak itself."""
    return measure_matmul_peak(dtype=jnp.dtype(dtype))


# Dense (no sparsity) bf16 tensor-core peaks from NVIDIA's data sheets, matched in order against
# a device's `device_kind` (e.g. 'NVIDIA H100 80GB HBM3'): H100 SXM 989.4 TFLOP/s, H100 PCIe 756,
# H100 NVL 835, H200 and GH200 (the H100's compute) 989.4, H200 NVL 835, A100 (SXM and PCIe) 312.
# The variants come before the plain 'H100' / 'H200' they contain.
GPU_BF16_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200 NVL", 835e12),
    ("H200", 989e12),
    ("A100", 312e12),
)


# Peak bf16 compute per chip from Google Cloud's TPU pages ("Peak compute per chip (bf16)"):
# v4 275 TFLOP/s, v5e 197, v5p 459. JAX shows one device per chip on these (v4 and v5p join
# their two TensorCores into one device), so these are per-device peaks too. Matched in order
# against a device's `device_kind` (e.g. 'TPU v4', 'TPU v5 lite', 'TPU v5').
TPU_BF16_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("TPU v5 lite", 197e12),
    ("TPU v5e", 197e12),
    ("TPU v5p", 459e12),
    ("TPU v5", 459e12),
    ("TPU v4", 275e12),
)


def spec_peak_flops(device_kind: str) -> float | None:
    """The data-sheet dense bf16 peak FLOP/s of a GPU or TPU by its `device_kind`; None if
    unknown."""
    for name, peak in GPU_BF16_PEAK_FLOPS + TPU_BF16_PEAK_FLOPS:
        if name in device_kind:
            return peak
    return None


def compute_dtype(model_config) -> str:
    """The dtype a model config computes in (an MAE's: its encoder's)."""
    encoder = getattr(model_config, "encoder", None)
    return getattr(model_config, "dtype", None) or getattr(encoder, "dtype", "float32")


def data_sheet_peak(device, dtype) -> float | None:
    """The peak an accelerator's MFU is quoted against: the data sheet's dense bf16 peak of
    `device` (a GPU or TPU of a known kind) for a model computing in bfloat16. None elsewhere (a
    CPU, float32, an unknown chip), where the peak is measured: a matmul timed in one short
    call underestimates a GPU's or TPU's by its launch overhead, and a float32 one is not the
    peak a bfloat16 model runs against."""
    if device.platform not in ("gpu", "tpu") or jnp.dtype(dtype) != jnp.bfloat16:
        return None
    return spec_peak_flops(device.device_kind)


def attention_forward_flops(q_tokens: int, kv_tokens: int, d_model: int, num_heads: int,
                            kv_heads: int, qk_dim: int, v_dim: int) -> float:
    """Forward FLOPs of one multi-head attention of `q_tokens` queries over `kv_tokens` keys.

    Projections: queries h d_k and output h d_v per query token, keys and values
    kv_heads (d_k + d_v) per key token, each times d_model; then Q K^T (d_k) and weights x V (d_v)
    for every query-key pair in every head.
    """
    projections = (q_tokens * d_model * num_heads * (qk_dim + v_dim)
                   + kv_tokens * d_model * kv_heads * (qk_dim + v_dim))
    scores = q_tokens * kv_tokens * num_heads * (qk_dim + v_dim)
    return 2.0 * (projections + scores)


def transformer_train_flops_per_example(cfg, source_tokens: int, target_tokens: int) -> float:
    """Training FLOPs of one (source, target) row through `models.transformer.Transformer`.

    Encoder layers: self-attention and the feed-forward (2 d_model d_ff per token). Decoder
    layers: causal self-attention (counted in full: the masked half is still computed), cross-
    attention over the source, the feed-forward; then the output projection onto the vocabulary.
    Packed rows count their full length: padding and masked pairs cost the same as real ones.
    """
    d, f = cfg.d_model, cfg.d_ff
    heads = dict(num_heads=cfg.num_heads, kv_heads=cfg.kv_heads, qk_dim=cfg.qk_dim,
                 v_dim=cfg.v_dim)
    encoder = cfg.encoder_layers * (
        attention_forward_flops(source_tokens, source_tokens, d, **heads)
        + 2.0 * 2 * source_tokens * d * f)
    decoder = cfg.decoder_layers * (
        attention_forward_flops(target_tokens, target_tokens, d, **heads)
        + attention_forward_flops(target_tokens, source_tokens, d, **heads)
        + 2.0 * 2 * target_tokens * d * f)
    logits = 2.0 * target_tokens * d * cfg.vocab_size
    return TRAIN_FLOPS_FACTOR * (encoder + decoder + logits)


def bert_train_flops_per_example(cfg, seq_length: int, num_predictions: int) -> float:
    """Training FLOPs of one sequence through `models.bert_pretraining.BertForPreTraining`.

    The encoder over every token; the MLM head (dense H x H, then scores against the V word
    embeddings) only at the `num_predictions` gathered positions, as it is computed; the pooler
    and the NSP layer on [CLS] when the model has NSP. Embedding lookups are not matmuls.
    """
    h = cfg.hidden_size
    forward = encoder_forward_flops(seq_length, h, cfg.mlp_dim, cfg.num_layers)
    forward += 2.0 * num_predictions * (h * h + h * cfg.vocab_size)
    if cfg.nsp:
        forward += 2.0 * (h * h + h * 2)
    return TRAIN_FLOPS_FACTOR * forward


def decoder_lm_train_flops_per_example(cfg, tokens: int) -> float:
    """Training FLOPs of one row of `tokens` through `models.decoder_lm.DecoderLM`.

    Every layer: causal self-attention (counted in full: the masked half is still computed) and
    the feed-forward (2 d_model d_ff per token); then the output projection onto the vocabulary.
    A packed row costs the same whatever documents it holds.
    """
    heads = dict(num_heads=cfg.num_heads, kv_heads=cfg.kv_heads, qk_dim=cfg.qk_dim,
                 v_dim=cfg.qk_dim)
    layer = (attention_forward_flops(tokens, tokens, cfg.d_model, **heads)
             + 2.0 * 2 * tokens * cfg.d_model * cfg.d_ff)
    logits = 2.0 * tokens * cfg.d_model * cfg.vocab_size
    return TRAIN_FLOPS_FACTOR * (cfg.num_layers * layer + logits)
