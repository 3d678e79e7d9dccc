"""DeiT's model pieces: the ViT's distillation token and head (models/vit.py), stochastic depth
in its blocks, and the convnet teacher (models/convnet.py) with its FLOP count."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.convnet import ConvNet, ConvNetConfig
from models.dropout import DropPath
from models.layers import EncoderBlock
from models.vit import ViT, ViTConfig
from train.flops import TRAIN_FLOPS_FACTOR, convnet_train_flops_per_example

TINY = dict(num_classes=5, image_size=(8, 8), patch_size=4, hidden_size=16, num_layers=2,
            num_heads=2, mlp_dim=32, stem_channels=0, pool="cls")


def _images(batch=3, size=8, channels=1, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=(batch, size, size, channels)),
                       jnp.float32)


def _init(model, images):
    return nn.meta.unbox(model.init(jax.random.PRNGKey(0), images)["params"])


def test_distillation_token_is_a_second_prefix_token_with_its_own_head():
    cfg = ViTConfig(**TINY, distill_token=True)
    assert cfg.num_prefix_tokens == 2
    model, images = ViT(cfg), _images()
    params = _init(model, images)
    assert params["dist"].shape == (1, 1, 16) and "head_dist" in params
    assert np.any(params["dist"] != 0)  # drawn, unlike the zero class token
    # the heads are zero-initialised: give them weights to see which token each one reads
    rng = np.random.default_rng(1)
    for head in ("head", "head_dist"):
        params[head]["kernel"] = jnp.asarray(rng.normal(size=(16, 5)), jnp.float32)
    cls_logits, dist_logits = model.apply({"params": params}, images)
    assert cls_logits.shape == dist_logits.shape == (3, 5)
    assert not np.allclose(cls_logits, dist_logits)
    # with the distillation head set to the class head's weights, the two differ only by the
    # token each reads (the same head on the same token: the next test)
    same = {**params, "head_dist": params["head"]}
    a, b = model.apply({"params": same}, images)
    assert not np.allclose(a, b)


def test_two_identical_prefix_tokens_give_identical_heads_without_positions():
    """The heads read tokens 0 and 1: equal tokens (no position table to tell them apart)
    through equal heads give equal logits."""
    cfg = ViTConfig(**{**TINY, "posemb": "none"}, distill_token=True)
    model, images = ViT(cfg), _images()
    params = _init(model, images)
    params["head"]["kernel"] = jnp.asarray(np.random.default_rng(1).normal(size=(16, 5)),
                                           jnp.float32)
    same = {**params, "head_dist": params["head"], "dist": jnp.zeros_like(params["dist"])}
    a, b = model.apply({"params": same}, images)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad,message", [
    (dict(pool="mean"), "pool='cls'"),
    (dict(head_hidden_size=8), "head_hidden_size"),
])
def test_distillation_token_refuses_what_it_cannot_be(bad, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**{**TINY, **bad}, distill_token=True)


def test_stochastic_depth_changes_training_only():
    base = ViTConfig(**TINY)
    dropped = ViTConfig(**TINY, drop_path_rate=0.5)
    images = _images(batch=16)
    params = _init(ViT(base), images)
    params["head"]["kernel"] = jnp.ones((16, 5))
    np.testing.assert_allclose(ViT(dropped).apply({"params": params}, images),
                               ViT(base).apply({"params": params}, images), rtol=1e-6)
    trained = ViT(dropped).apply({"params": params}, images, train=True,
                                 rngs={"dropout": jax.random.PRNGKey(3)})
    plain = ViT(base).apply({"params": params}, images, train=True,
                            rngs={"dropout": jax.random.PRNGKey(3)})
    assert not np.allclose(trained, plain)
    with pytest.raises(ValueError, match="scan_layers"):
        ViTConfig(**TINY, drop_path_rate=0.1, scan_layers=True)


@pytest.mark.parametrize("rate,depth", [(0.3, 4), (0.1, 12), (0.0, 3)])
def test_each_block_drops_its_paths_at_the_linear_rule_rate(rate, depth):
    """Huang et al.'s linear decay rule (models/dropout.py): block l of L (1-based) drops at
    r l / L, the last at r. Read where it acts, in training: the rate each block is built with
    and the rate of every DropPath module it calls (one per residual branch, two per block)."""
    cfg = ViTConfig(**{**TINY, "num_layers": depth}, drop_path_rate=rate)
    model, images = ViT(cfg), _images(batch=4)
    params = _init(model, images)
    blocks, paths = {}, {}

    def record(next_fun, args, kwargs, context):
        module = context.module
        if isinstance(module, EncoderBlock) and context.method_name == "__call__":
            blocks[module.name] = module.drop_path_rate
        if isinstance(module, DropPath) and context.method_name == "__call__":
            paths.setdefault(module.path[0], []).append(module.rate)
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        model.apply({"params": params}, images, train=True,
                    rngs={"dropout": jax.random.PRNGKey(0)})
    want = {f"block_{i}": rate * (i + 1) / depth for i in range(depth)}  # l = i + 1
    assert blocks == pytest.approx(want, rel=1e-12, abs=0)
    if rate == 0:  # no stochastic depth: no DropPath at all
        assert paths == {}
    else:
        assert set(paths) == set(want)
        for name, rates in paths.items():
            assert rates == pytest.approx([want[name]] * 2, rel=1e-12, abs=0), name


# ---- the convnet teacher -------------------------------------------------------------------
def test_convnet_classifies_and_starts_as_identity_blocks():
    cfg = ConvNetConfig(num_classes=4, image_size=(12, 12), widths=(8, 16), blocks_per_stage=2,
                        norm_groups=4)
    model, images = ConvNet(cfg), _images(size=12, channels=2)
    params = _init(model, images)
    assert model.apply({"params": params}, images).shape == (3, 4)
    # zero-initialised last norm scale: a block without projection starts as relu(x) = x
    assert np.all(params["stage_0_block_1"]["norm_2"]["scale"] == 0)
    with pytest.raises(ValueError, match="norm_groups=3"):
        ConvNetConfig(num_classes=4, widths=(8, 16), norm_groups=3)


def test_convnet_flops_match_the_kernels_it_applies():
    """2 x each convolution's kernel size x its output pixels (read from the model's own
    intermediates), plus the classifier, times the training factor."""
    cfg = ConvNetConfig(num_classes=10, image_size=(13, 11), widths=(8, 16, 24),
                        blocks_per_stage=2, norm_groups=4)
    model, images = ConvNet(cfg), jnp.zeros((1, 13, 11, 3))
    params = _init(model, images)
    _, state = model.apply({"params": params}, images,
                           capture_intermediates=lambda mdl, _: isinstance(mdl, nn.Conv),
                           mutable=["intermediates"])
    kernels = {"/".join(getattr(p, "key", "") for p in path[:-1]): leaf.shape for path, leaf in
               jax.tree_util.tree_leaves_with_path(params) if path[-1].key == "kernel"}
    forward = 0
    for path, out in jax.tree_util.tree_leaves_with_path(state["intermediates"]):
        name = "/".join(getattr(p, "key", "") for p in path[:-1])
        if name == "__call__" or not name.endswith("__call__"):
            continue
        pixels = out.shape[1] * out.shape[2]
        forward += 2 * pixels * int(np.prod(kernels[name.rsplit("/", 1)[0]]))
    assert forward > 0
    forward += 2 * 24 * 10
    assert convnet_train_flops_per_example(cfg, channels=3) == TRAIN_FLOPS_FACTOR * forward
