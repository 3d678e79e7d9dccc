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
    assert blocker(lengths=(128, 128)) is None
    assert blocker(training=False, lengths=(197, 197)) is None  # ViT's 197 tokens, inference
    assert blocker(training=False, lengths=(1, 197)) is None    # decoding a step
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
    # ViT-B/16's 197 tokens in training, no bias or mask: jax 0.11.2 refused it on an H100.
    (dict(lengths=(197, 197)), r"an odd query or key length in training \(query, key lengths "
                               r"\(197, 197\)\): the backward kernel needs even lengths"),
    (dict(lengths=(128, 197)), r"odd query or key length in training \(query, key lengths"),
    (dict(lengths=(197, 128)), r"odd query or key length in training \(query, key lengths"),
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


def test_auto_passes_the_call_as_it_is_to_the_blocker(monkeypatch):
    """dot_product_attention must describe the call to the blocker faithfully, here on a
    described H100 (the blocker is the real one): dropout counts only when active (an eval
    call with dropout_rate > 0 may use cuDNN), training is `not deterministic`, and in training
    an odd length (the key's 5) is handed over padded to even, as cudnn_attention pads it. Where
    the blocker says None, cuDNN's function is called (a stand-in here) with the bias and mask
    as they came."""
    real = A.cudnn_attention_blocker
    monkeypatch.setattr(A, "cudnn_attention_blocker",
                        lambda *a, **k: real(*a, **{**k, "device": gpu()}))
    used = []
    monkeypatch.setattr(A, "cudnn_attention",
                        lambda *args, **kwargs: used.append((args, kwargs)) or "cudnn")
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, 6, 2, 64)), jnp.bfloat16)
    k, v = (jnp.asarray(rng.normal(size=(1, 5, 2, 64)), jnp.bfloat16) for _ in range(2))
    bias = jnp.zeros((6, 5), jnp.float32)
    # Eval with dropout configured, a bias and an odd key length: cuDNN can compute it.
    assert A.dot_product_attention(q, k, v, bias=bias, dropout_rate=0.1, deterministic=True,
                                   implementation="auto") == "cudnn"
    assert len(used) == 1 and used[0][0][3] is bias and used[0][0][4] is None
    assert used[0][1] == {"pad_to_even": False}
    # Training, no dropout, key length 5, with a bias or without: cuDNN, padded to even.
    for kwargs in (dict(bias=bias), dict()):
        assert A.dot_product_attention(q, k, v, deterministic=False, implementation="cudnn",
                                       **kwargs) == "cudnn"
        assert used[-1][1] == {"pad_to_even": True}
    # Training with attention dropout: not cuDNN.
    with pytest.raises(ValueError, match=r"dropout is active \(rate 0.1\)"):
        A.dot_product_attention(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0),
                                deterministic=False, implementation="cudnn")
    assert len(used) == 3
    seen = []
    monkeypatch.setattr(A, "cudnn_attention_blocker",
                        lambda *a, **k: seen.append(k["lengths"]) or real(*a, **{**k,
                                                                                "device": gpu()}))
    A.dot_product_attention(q, k, v, deterministic=False, implementation="auto")
    A.dot_product_attention(q, k, v, deterministic=True, implementation="auto")
    assert seen == [(6, 6), (6, 5)]


def test_a_refusal_from_jax_itself_falls_back_or_names_jax_reason(monkeypatch, caplog):
    """A rule of a jax version that the blocker does not know reaches us as jax's
    NotImplementedError while tracing: 'auto' computes the 'xla' result and logs jax's reason,
    'cudnn' raises it as a ValueError with the fix."""
    monkeypatch.setattr(A, "cudnn_attention_blocker", lambda *a, **k: None)
    monkeypatch.setattr(C, "_reported_fallbacks", set())

    def refuse(*args, **kwargs):
        raise NotImplementedError("Unsupported sequence length Q 7, KV 7.")

    monkeypatch.setattr(A, "cudnn_attention", refuse)
    q, k, v = _qkv(length=7)
    with caplog.at_level(logging.INFO, logger=C.__name__):
        out = jax.jit(lambda q: A.dot_product_attention(q, k, v, implementation="auto"))(q)
    np.testing.assert_array_equal(out, A.dot_product_attention(q, k, v, implementation="xla"))
    assert [r.getMessage() for r in caplog.records if r.name == C.__name__] == [
        "attention implementation 'auto' uses 'xla': jax refused it (Unsupported sequence "
        "length Q 7, KV 7.)"]
    with pytest.raises(ValueError, match=r"implementation='cudnn' cannot compute this "
                                         r"attention: jax refused it \(Unsupported sequence "
                                         r"length Q 7, KV 7\.\)\. Change that"):
        A.dot_product_attention(q, k, v, implementation="cudnn")


def test_cudnn_path_expands_bias_and_mask_and_zeroes_fully_masked_queries(monkeypatch):
    """cudnn_attention's own work around the kernel, run on the CPU by letting the kernel be
    jax's 'xla' one: a 2-D bias and a [b, 1, 1, k] mask are expanded to full q and k axes
    (leading axes added, not trailing), and a query that may see no key outputs zeros (the
    kernel would average the values), so the result equals the reference 'xla' path exactly
    up to float rounding, fully masked rows included."""
    kernel = jax.nn.dot_product_attention
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        lambda *a, implementation=None, **k: kernel(*a, implementation="xla", **k))
    q, k, v = _qkv(length=6)
    bias = np.linspace(-1, 1, 36, dtype=np.float32).reshape(6, 6)
    mask = np.ones((2, 1, 1, 6), bool)
    mask[1, ..., :] = False                    # batch 1: no key visible for any query
    mask[0, ..., 4:] = False
    got = C.cudnn_attention(*(jnp.asarray(t) for t in (q, k, v)), bias, mask, jnp.float32)
    want = A.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation="xla")
    assert np.all(np.asarray(got)[1] == 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The expansion itself: trailing (q, k) axes kept, batch/head axes broadcast.
    assert C._expand_to_4d(bias, 6, 6).shape == (1, 1, 6, 6)
    np.testing.assert_array_equal(C._expand_to_4d(bias, 6, 6)[0, 0], bias)
    np.testing.assert_array_equal(C._expand_to_4d(mask, 6, 6)[:, 0],
                                  np.broadcast_to(mask[:, 0], (2, 6, 6)))


@pytest.mark.parametrize("lengths", [(7, 7), (6, 5), (5, 6)])
def test_padding_odd_lengths_for_cudnn_changes_neither_result_nor_gradients(monkeypatch, lengths):
    """cudnn_attention(pad_to_even=True), the kernel played by jax's 'xla' one: the kernel gets
    even lengths, and the output and the gradients with respect to query, key, value and bias
    equal the unpadded reference, with no mask, a causal-style mask, or a bias with a padding
    mask in which a query sees no key."""
    kernel = jax.nn.dot_product_attention
    shapes = []

    def stand_in(q, k, v, *args, implementation=None, **kwargs):
        shapes.append((q.shape[1], k.shape[1]))
        return kernel(q, k, v, *args, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", stand_in)
    q_len, kv_len = lengths
    rng = np.random.default_rng(4)
    q = jnp.asarray(rng.normal(size=(2, q_len, 2, 8)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(2, kv_len, 2, 8)), jnp.float32) for _ in range(2))
    bias = jnp.asarray(rng.normal(size=(q_len, kv_len)), jnp.float32)
    lower = np.tril(np.ones((q_len, kv_len), bool), kv_len - q_len)[None, None]
    padding = np.ones((2, 1, 1, kv_len), bool)
    padding[1, ..., 2:] = False
    padding[0, ...] = True
    some_unseen = np.broadcast_to(padding, (2, 1, q_len, kv_len)).copy()
    some_unseen[0, 0, 0] = False                          # query 0 of example 0 sees no key
    for bias_, mask in ((None, None), (None, lower), (bias, some_unseen)):
        def loss(fn, q, k, v, b):
            return jnp.sum(jnp.sin(fn(q, k, v, b)))

        def padded(q, k, v, b):
            return C.cudnn_attention(q, k, v, b, mask, jnp.float32, pad_to_even=True)

        def reference(q, k, v, b):
            return A.dot_product_attention(q, k, v, bias=b, mask=mask, implementation="xla")

        shapes.clear()
        np.testing.assert_allclose(padded(q, k, v, bias_), reference(q, k, v, bias_),
                                   rtol=1e-5, atol=1e-6)
        assert shapes == [(q_len + q_len % 2, kv_len + kv_len % 2)]
        argnums = (0, 1, 2, 3) if bias_ is not None else (0, 1, 2)
        got = jax.grad(lambda *a: loss(padded, *a), argnums=argnums)(q, k, v, bias_)
        want = jax.grad(lambda *a: loss(reference, *a), argnums=argnums)(q, k, v, bias_)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
