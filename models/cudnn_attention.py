"""cuDNN's fused attention behind ``models.attention.dot_product_attention``: when it can compute
a call (``cudnn_attention_blocker``), the call itself (padding odd lengths to even ones for the
backward kernel), and the once-per-reason note that ``implementation='auto'`` fell back to the
'xla' einsums."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp

_log = logging.getLogger(__name__)


def _expand_to_4d(x, q_len, kv_len):
    """Bias/mask to 4-D with full ``q`` and ``k`` axes (cuDNN broadcasts only batch and heads)."""
    x = jnp.asarray(x)
    x = x.reshape((1,) * (4 - x.ndim) + x.shape)
    return jnp.broadcast_to(x, x.shape[:2] + (q_len, kv_len))


def cudnn_attention_blocker(dtype, head_dim: int, value_head_dim: int, *,
                            dropout_rate: float = 0.0,
                            training: bool = True, lengths: tuple[int, int] = (2, 2),
                            device=None) -> str | None:
    """Why cuDNN's fused attention (``jax.nn.dot_product_attention(implementation='cudnn')``)
    cannot compute a call, or None when it can.

    Its flash-attention kernel needs an NVIDIA GPU of compute capability 8.0 or later (Ampere),
    bfloat16 or float16 inputs, a head dimension that is a multiple of 8 and at most 128 (256
    from Hopper, 9.0, on), equal query/key and value head dimensions, even query and key lengths
    in training (its backward pass: jax 0.10 asks this only of calls with a bias or mask, jax
    0.11 of every call; on an H100 it refused ViT-B/16's 197 tokens with no bias or mask), and
    has no attention-probability dropout. ``training`` is the caller's ``not deterministic``.
    ``device`` (default: the first of ``jax.devices()``, where a jitted step runs) is read for
    its platform, CUDA runtime and compute capability. A rule of a later jax that this does not
    know still reaches ``dot_product_attention`` as jax's NotImplementedError at trace time:
    'auto' then falls back to 'xla' with jax's reason, 'cudnn' raises it as a ValueError.
    """
    if dropout_rate > 0.0:
        return (f"attention-probability dropout is active (rate {dropout_rate}) and cuDNN's kernel "
                "has none")
    device = jax.devices()[0] if device is None else device
    platform_version = str(getattr(getattr(device, 'client', None), 'platform_version', ''))
    if device.platform != 'gpu' or 'cuda' not in platform_version.lower():
        return f"the device is {device.device_kind!r} ({device.platform}), not an NVIDIA GPU"
    capability = str(getattr(device, 'compute_capability', ''))
    try:
        major, minor = (int(x) for x in capability.split('.')[:2])
    except ValueError:
        return f"the GPU reports no compute capability ({capability!r})"
    if (major, minor) < (8, 0):
        return f"compute capability {capability} is below 8.0 (flash attention needs Ampere+)"
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return f"the compute dtype is {jnp.dtype(dtype).name}; the kernel takes bfloat16 or float16"
    largest = 256 if (major, minor) >= (9, 0) else 128
    if head_dim % 8 or head_dim > largest:
        return (f"head dimension {head_dim} is not a multiple of 8 of at most {largest} "
                f"(compute capability {capability})")
    if value_head_dim != head_dim:
        return f"value head dimension {value_head_dim} differs from the query/key's {head_dim}"
    if training and any(n % 2 for n in lengths):
        return (f"an odd query or key length in training (query, key lengths {lengths}): the "
                "backward kernel needs even lengths")
    return None


_reported_fallbacks: set[str] = set()


def log_fallback(reason: str):
    """Says once per reason (at trace time) that 'auto' attention runs the 'xla' einsums."""
    if reason not in _reported_fallbacks:
        _reported_fallbacks.add(reason)
        level = logging.WARNING if jax.default_backend() == 'gpu' else logging.INFO
        _log.log(level, "attention implementation 'auto' uses 'xla': %s", reason)


def even_lengths(lengths: tuple[int, int], training: bool) -> tuple[int, int]:
    """The query and key lengths ``cudnn_attention(..., pad_to_even=training)`` hands the
    kernel: in training each odd one is padded by one (the backward kernel needs even lengths)."""
    return tuple(n + n % 2 for n in lengths) if training else tuple(lengths)


def cudnn_attention(query, key, value, bias, mask, dtype, *, pad_to_even: bool = False):
    """``jax.nn.dot_product_attention`` with cuDNN; fully masked queries output zeros.

    ``pad_to_even``: an odd query or key length gets one more position (zeros) so that the
    training kernel can run it (ViT's 197 tokens become 198): the extra key is masked out of
    every query's softmax and the extra query's output is dropped, so the result and the
    gradients are those of the unpadded call."""
    q_len, kv_len = query.shape[1], key.shape[1]
    pad_q, pad_k = (q_len % 2, kv_len % 2) if pad_to_even else (0, 0)
    if pad_q or pad_k:
        query = jnp.pad(query, ((0, 0), (0, pad_q), (0, 0), (0, 0)))
        key, value = (jnp.pad(t, ((0, 0), (0, pad_k), (0, 0), (0, 0))) for t in (key, value))
        widths = ((0, 0), (0, 0), (0, pad_q), (0, pad_k))       # the [b, h, q, k] axes
        if pad_k and mask is None:
            mask = jnp.ones((1, 1, q_len, kv_len), bool)
        if mask is not None:  # the extra query sees the real keys, the extra key nobody
            mask = _expand_to_4d(mask, q_len, kv_len).astype(bool)
            mask = jnp.pad(mask, ((0, 0), (0, 0), (0, pad_q), (0, 0)), constant_values=True)
            mask = jnp.pad(mask, ((0, 0), (0, 0), (0, 0), (0, pad_k)), constant_values=False)
        if bias is not None:
            bias = jnp.pad(_expand_to_4d(bias, q_len, kv_len), widths)
    lengths = query.shape[1], key.shape[1]
    if mask is not None:
        mask = _expand_to_4d(mask, *lengths).astype(bool)
    out = jax.nn.dot_product_attention(
        query, key, value,
        bias=None if bias is None else _expand_to_4d(bias, *lengths).astype(dtype),
        mask=mask, implementation='cudnn')
    if mask is not None:
        # Match the 'xla' path: queries with no visible key output zeros.
        any_key = jnp.any(mask, axis=-1)                                          # [b|1, h|1, q]
        out = out * jnp.transpose(any_key, (0, 2, 1))[..., None].astype(out.dtype)
    return out[:, :q_len]
