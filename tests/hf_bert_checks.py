"""Shared by the Hugging Face BERT tests: flattened parameter trees, Flax's init shapes, and an
independent NumPy BERT in HF's own tensor names and layout (nn.Linear: y = x W^T + b)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import erf

from models.bert import BertConfig, BertModel
from models.bert_pretraining import BertForPreTraining


def flat(tree, prefix=()):
    """{path: leaf} of a nested dict."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def init_shapes(cfg: BertConfig, head: str) -> dict:
    """{path: (shape, dtype)} of the params that Flax's init makes (unboxed)."""
    ids = jnp.zeros((1, 8), jnp.int32)
    if head == "model":
        init = lambda: BertModel(cfg).init(jax.random.PRNGKey(0), ids)  # noqa: E731
    else:
        init = lambda: BertForPreTraining(cfg).init(  # noqa: E731
            jax.random.PRNGKey(0), ids, masked_positions=jnp.zeros((1, 2), jnp.int32))
    params = nn.meta.unbox(jax.eval_shape(init))["params"]
    return {path: (tuple(x.shape), np.dtype(x.dtype))
            for path, x in flat(params).items()}


def assert_trees_equal(a: dict, b: dict):
    fa, fb = flat(a), flat(b)
    assert sorted(fa) == sorted(fb)
    for path in fa:
        assert fa[path].dtype == fb[path].dtype and fa[path].shape == fb[path].shape, path
        np.testing.assert_array_equal(fa[path], fb[path], err_msg="/".join(path))


def hf_numpy_bert(t, ids, types, mask, *, heads, eps, prefix=""):
    """(last hidden state [b, l, H], pooled [b, H]) in float64 from HF tensors ``t``, written
    from Devlin et al. 2019 and Vaswani et al. 2017: embeddings sum + LayerNorm; per layer
    softmax(Q K^T / sqrt(d) + mask) V, output projection, residual + LayerNorm, erf-GELU FFN,
    residual + LayerNorm; pooler tanh(W h_[CLS] + b)."""
    def w(name):
        return np.asarray(t[prefix + name], np.float64)

    def linear(x, name):
        return x @ w(name + ".weight").T + w(name + ".bias")

    def layer_norm(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w(name + ".weight") + w(name + ".bias")

    b, length = ids.shape
    x = (w("embeddings.word_embeddings.weight")[ids]
         + w("embeddings.position_embeddings.weight")[np.arange(length)][None]
         + w("embeddings.token_type_embeddings.weight")[types])
    x = layer_norm(x, "embeddings.LayerNorm")
    hidden = x.shape[-1]
    d = hidden // heads
    key_bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf)    # [b, 1, 1, l]
    i = 0
    while prefix + f"encoder.layer.{i}.output.dense.weight" in t:
        layer = f"encoder.layer.{i}."

        def split(y):                                     # [b, l, H] -> [b, heads, l, d]
            return y.reshape(b, length, heads, d).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, layer + f"attention.self.{p}"))
                   for p in ("query", "key", "value"))
        logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + key_bias
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, length, hidden)
        x = layer_norm(x + linear(context, layer + "attention.output.dense"),
                       layer + "attention.output.LayerNorm")
        inner = linear(x, layer + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / math.sqrt(2.0)))
        x = layer_norm(x + linear(inner, layer + "output.dense"), layer + "output.LayerNorm")
        i += 1
    return x, np.tanh(linear(x[:, 0], "pooler.dense"))
