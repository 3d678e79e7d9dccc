"""Choosing the attention kernel: when cuDNN's fused attention can run (`cudnn_attention_blocker`,
tried against described devices, since the test machine has no GPU), 'auto' computing exactly
what 'xla' computes where it cannot and saying so once, and 'cudnn' refusing with the reason."""

import logging
import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import attention as A
from models import cudnn_attention as C


def gpu(capability="9.0", runtime="cuda 12080", kind="NVIDIA H100 80GB HBM3"):
    """What the blocker reads from a jax GPU device."""
    return SimpleNamespace(platform="gpu", device_kind=kind, compute_capability=capability,
                           client=SimpleNamespace(platform_version=runtime))


def blocker(dtype=jnp.bfloat16, head_dim=64, value_head_dim=64, device=None, **kwargs):
    return A.cudnn_attention_blocker(dtype, head_dim, value_head_dim,
                                     device=gpu() if device is None else device, **kwargs)


def test_cudnn_runs_bfloat16_and_float16_heads_on_ampere_and_later():
    for capability in ("8.0", "8.6", "9.0", "10.0"):
        for dtype in (jnp.bfloat16, jnp.float16):
            assert blocker(dtype, device=gpu(capability)) is None
    assert blocker(head_dim=128, value_head_dim=128, device=gpu("8.0")) is None
    assert blocker(head_dim=256, value_head_dim=256, device=gpu("9.0")) is None
    assert blocker(masked=True, lengths=(128, 128)) is None
    assert blocker(lengths=(197, 197)) is None           # ViT's 197 tokens, no bias or mask
    assert blocker(masked=True, training=False, lengths=(1, 197)) is None  # decoding a step
    assert blocker(dropout_rate=0.0) is None


@pytest.mark.parametrize("kwargs, reason", [
    (dict(dropout_rate=0.1), r"dropout is active \(rate 0.1\) and cuDNN's kernel has none"),
    (dict(device=jax.devices("cpu")[0]), r"\(cpu\), not an NVIDIA GPU"),
    (dict(device=gpu(runtime="rocm 6.2", kind="AMD Instinct MI300X")), r"not an NVIDIA GPU"),
    (dict(device=gpu("7.5", kind="Tesla T4")), r"compute capability 7.5 is below 8.0"),
    (dict(device=gpu(capability="")), r"reports no compute capability"),
    (dict(dtype=jnp.float32), r"compute dtype is float32; the kernel takes bfloat16 or float16"),
    (dict(head_dim=60, value_head_dim=60), r"head dimension 60 is not a multiple of 8"),
    (dict(head_dim=256, value_head_dim=256, device=gpu("8.0")), r"of at most 128"),
    (dict(head_dim=264, value_head_dim=264), r"of at most 256"),
    (dict(value_head_dim=32), r"value head dimension 32 differs from the query/key's 64"),
    (dict(masked=True, lengths=(197, 197)), r"a bias or mask with an odd length in training"),
])
def test_cudnn_blocker_names_each_unsupported_case(kwargs, reason):
    found = blocker(**kwargs)
    assert found is not None
    assert re.search(reason, found), found


def test_dropout_is_reported_before_the_device():
    cpu = jax.devices("cpu")[0]
    assert "dropout" in blocker(dropout_rate=0.1, device=cpu)


def _qkv(kv_heads=4, length=6):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, length, 4, 8)).astype(np.float32)
    k, v = (rng.normal(size=(2, length, kv_heads, 8)).astype(np.float32) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_auto_computes_what_xla_computes_where_cudnn_cannot(kv_heads):
    q, k, v = _qkv(kv_heads)
    mask = np.tril(np.ones((6, 6), bool))[None, None]
    bias = np.linspace(-1, 1, 36, dtype=np.float32).reshape(1, 1, 6, 6)
    rng = jax.random.PRNGKey(3)
    for kwargs in (dict(), dict(mask=mask, bias=bias),
                   dict(dropout_rate=0.2, dropout_rng=rng, deterministic=False)):
        np.testing.assert_array_equal(
            A.dot_product_attention(q, k, v, implementation="auto", **kwargs),
            A.dot_product_attention(q, k, v, implementation="xla", **kwargs))


def test_auto_reports_each_fallback_reason_once(caplog, monkeypatch):
    monkeypatch.setattr(C, "_reported_fallbacks", set())
    q, k, v = _qkv()
    with caplog.at_level(logging.INFO, logger=C.__name__):
        for _ in range(3):
            A.dot_product_attention(q, k, v, implementation="auto")
        A.dot_product_attention(q, k, v, implementation="auto", dropout_rate=0.5,
                                dropout_rng=jax.random.PRNGKey(0), deterministic=False)
    messages = [r.getMessage() for r in caplog.records if r.name == C.__name__]
    assert len(messages) == 2, messages                    # the device, then the dropout
    assert all(m.startswith("attention implementation 'auto' uses 'xla': ") for m in messages)
    assert "not an NVIDIA GPU" in messages[0] and "dropout is active" in messages[1]
    assert all(r.levelno == logging.INFO for r in caplog.records)   # a CPU: expected, no warning


def test_cudnn_refuses_with_the_reason_and_the_fix():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"implementation='cudnn' cannot compute this attention: "
                                         r"the device is .* not an NVIDIA GPU\. Change that, or "
                                         r"use implementation='xla' \(or 'auto'"):
        A.dot_product_attention(q, k, v, implementation="cudnn")


def test_auto_in_the_attention_module_matches_xla():
    x = np.random.default_rng(1).normal(size=(2, 5, 16)).astype(np.float32)
    xla = A.MultiHeadAttention(num_heads=2, head_dim=8, dropout_rate=0.1)
    auto = A.MultiHeadAttention(num_heads=2, head_dim=8, dropout_rate=0.1, implementation="auto")
    variables = xla.init(jax.random.PRNGKey(0), x)
    rngs = {"dropout": jax.random.PRNGKey(2)}
    for deterministic in (True, False):
        np.testing.assert_array_equal(
            auto.apply(variables, x, deterministic=deterministic, rngs=rngs),
            xla.apply(variables, x, deterministic=deterministic, rngs=rngs))
