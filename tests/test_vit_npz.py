"""The original ViT .npz checkpoints (models/vit_npz.py): a fixture written here with the
published parameter names (google-research/vision_transformer's AugReg checkpoints, and
big_vision's own layout) at small shapes, read into our ViT, which must compute what a NumPy
ViT written from those names and the published modules computes (float64, within 1e-5); the
model read off the shapes; the strict name check; writing back."""

from __future__ import annotations

import dataclasses

import math
import os
import stat

import numpy as np
import pytest
from test_vit_transfer import random_params

from models.safetensors_file import CheckpointError
from models.vit import ViT, ViTConfig
from models.vit_npz import load_npz, params_to_npz, read_npz_architecture, save_npz

P, C, D, HEADS, F, LAYERS = 4, 3, 8, 2, 16, 2
# A block's submodules as the files name them: vision_transformer's checkpoints were written
# by the pre-Linen flax.nn, which numbered a block's submodules all together; big_vision's by
# Linen, which numbers them per class.
BLOCK_MODULES = {
    "vit": ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"),
    "big_vision": ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0")}


def block_names(i: int, layout: str) -> dict[str, tuple[int, ...]]:
    """One encoder block's names and shapes."""
    ln0, mha, ln1, mlp = BLOCK_MODULES[layout]
    b = f"Transformer/encoderblock_{i}"
    d = D // HEADS
    names = {f"{b}/{ln}/{w}": (D,) for ln in (ln0, ln1) for w in ("scale", "bias")}
    for proj in ("query", "key", "value"):
        names[f"{b}/{mha}/{proj}/kernel"] = (D, HEADS, d)
        names[f"{b}/{mha}/{proj}/bias"] = (HEADS, d)
    names.update({f"{b}/{mha}/out/kernel": (HEADS, d, D), f"{b}/{mha}/out/bias": (D,),
                  f"{b}/{mlp}/Dense_0/kernel": (D, F), f"{b}/{mlp}/Dense_0/bias": (F,),
                  f"{b}/{mlp}/Dense_1/kernel": (F, D), f"{b}/{mlp}/Dense_1/bias": (D,)})
    return names


def published_names(layout: str = "vit", *, grid=(3, 3), cls=True, pre_logits=0,
                    classes=5) -> dict[str, tuple[int, ...]]:
    """The tensors of a published checkpoint of this small size (module docstring)."""
    patches = grid[0] * grid[1]
    names = {"embedding/kernel": (P, P, C, D), "embedding/bias": (D,),
             "Transformer/encoder_norm/scale": (D,), "Transformer/encoder_norm/bias": (D,)}
    if layout == "vit":
        names["Transformer/posembed_input/pos_embedding"] = (1, patches + cls, D)
    else:
        names["pos_embedding"] = (1, patches, D)
    if cls:
        names["cls"] = (1, 1, D)
    for i in range(LAYERS):
        names.update(block_names(i, layout))
    width = D
    if pre_logits:
        names.update({"pre_logits/kernel": (D, pre_logits), "pre_logits/bias": (pre_logits,)})
        width = pre_logits
    if classes:
        names.update({"head/kernel": (width, classes), "head/bias": (classes,)})
    return names


def write_fixture(path, names, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {name: (rng.normal(scale=0.3, size=shape) + (name.endswith("/scale"))).astype(
        np.float32) for name, shape in names.items()}
    np.savez(path, **tensors)
    return tensors


def numpy_vit(t: dict, images: np.ndarray, layout: str) -> np.ndarray:
    """Logits in float64 from the published tensors `t`, written from the published modules:
    a stride-P convolution `embedding`, positions added (vision_transformer: after the class
    token is prepended; big_vision: before), pre-LN blocks (LayerNorm eps 1e-6, softmax(q k^T /
    sqrt(d)) v, tanh-GELU MLP), encoder_norm, the class token or the mean of all tokens,
    tanh pre-logits, head."""
    w = {k: np.asarray(v, np.float64) for k, v in t.items()}
    x = np.asarray(images, np.float64)
    b, height, width, _ = x.shape
    kernel = w["embedding/kernel"]
    p = kernel.shape[0]
    emb = w["embedding/bias"] + sum(  # the convolution, one kernel tap (i, j) at a time
        np.einsum("brsc,cd->brsd", x[:, i::p, j::p], kernel[i, j])
        for i in range(p) for j in range(p))
    x = emb.reshape(b, (height // p) * (width // p), -1)
    cls = [np.broadcast_to(w["cls"], (b, 1, x.shape[-1]))] if "cls" in w else []
    if layout == "vit":
        x = np.concatenate([*cls, x], 1) + w["Transformer/posembed_input/pos_embedding"]
    else:
        x = np.concatenate([*cls, x + w["pos_embedding"]], 1)

    def norm(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-6) * w[f"{name}/scale"] + w[f"{name}/bias"]

    def gelu_tanh(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    ln0, mha, ln1, mlp = BLOCK_MODULES[layout]
    i = 0
    while f"Transformer/encoderblock_{i}/{ln0}/scale" in w:
        blk = f"Transformer/encoderblock_{i}"
        h = norm(x, f"{blk}/{ln0}")
        q, k, v = (np.einsum("bld,dnh->blnh", h, w[f"{blk}/{mha}/{n}/kernel"])
                   + w[f"{blk}/{mha}/{n}/bias"] for n in ("query", "key", "value"))
        logits = np.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(q.shape[-1])
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        att = np.einsum("bnqk,bknh->bqnh", probs, v)
        x = x + np.einsum("bqnh,nhd->bqd", att, w[f"{blk}/{mha}/out/kernel"]) \
            + w[f"{blk}/{mha}/out/bias"]
        h = norm(x, f"{blk}/{ln1}")
        h = gelu_tanh(h @ w[f"{blk}/{mlp}/Dense_0/kernel"] + w[f"{blk}/{mlp}/Dense_0/bias"])
        x = x + h @ w[f"{blk}/{mlp}/Dense_1/kernel"] + w[f"{blk}/{mlp}/Dense_1/bias"]
        i += 1
    x = norm(x, "Transformer/encoder_norm")
    pooled = x[:, 0] if "cls" in w else x.mean(1)
    if "pre_logits/kernel" in w:
        pooled = np.tanh(pooled @ w["pre_logits/kernel"] + w["pre_logits/bias"])
    return pooled @ w["head/kernel"] + w["head/bias"]


IMAGES = np.random.default_rng(5).normal(size=(2, 12, 12, C)).astype(np.float32)


@pytest.mark.parametrize("layout", ["vit", "big_vision"])
@pytest.mark.parametrize("cls, pre_logits", [(True, 0), (True, 6), (False, 0)])
def test_published_checkpoint_computes_what_the_published_model_does(tmp_path, layout, cls,
                                                                    pre_logits):
    tensors = write_fixture(tmp_path / "ckpt.npz",
                            published_names(layout, cls=cls, pre_logits=pre_logits))
    cfg, params = load_npz(tmp_path / "ckpt.npz")
    assert (cfg.image_size, cfg.patch_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
            cfg.mlp_dim, cfg.num_classes) == ((12, 12), P, D, LAYERS, HEADS, F, 5)
    assert (cfg.pool, cfg.head_hidden_size) == ("cls" if cls else "mean", pre_logits)
    assert (cfg.activation, cfg.layer_norm_eps) == ("gelu_tanh", 1e-6)
    logits = ViT(cfg).apply({"params": params}, IMAGES)
    np.testing.assert_allclose(logits, numpy_vit(tensors, IMAGES, layout), atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["vit", "big_vision"])
def test_written_checkpoints_have_the_published_names_and_read_back_the_same(tmp_path, layout):
    names = published_names(layout, pre_logits=6)
    tensors = write_fixture(tmp_path / "ckpt.npz", names)
    cfg, params = load_npz(tmp_path / "ckpt.npz", layout=layout)
    written = params_to_npz(params, cfg, layout=layout)
    assert {k: v.shape for k, v in written.items()} == names
    for name, value in tensors.items():
        if layout == "big_vision" and name == "cls":  # read as (cls, position 0) = (cls, 0)
            np.testing.assert_allclose(written[name], value)
        else:
            np.testing.assert_array_equal(written[name], value, err_msg=name)
    save_npz(tmp_path / "out.npz", cfg, params, layout=layout)
    again_cfg, again = load_npz(tmp_path / "out.npz")
    assert again_cfg == cfg
    np.testing.assert_array_equal(ViT(cfg).apply({"params": again}, IMAGES),
                                  ViT(cfg).apply({"params": params}, IMAGES))


def test_our_class_position_is_folded_into_big_visions_class_token(tmp_path):
    cfg = ViTConfig(num_classes=5, image_size=(8, 8), patch_size=4, hidden_size=D, num_layers=1,
                    num_heads=HEADS, mlp_dim=F, activation="gelu_tanh")
    params = random_params(cfg)  # its class row of the position table is not zero
    save_npz(tmp_path / "bv.npz", cfg, params, layout="big_vision")
    loaded_cfg, loaded = load_npz(tmp_path / "bv.npz")
    assert loaded_cfg == cfg
    np.testing.assert_allclose(ViT(cfg).apply({"params": loaded}, IMAGES[:, :8, :8]),
                               ViT(cfg).apply({"params": params}, IMAGES[:, :8, :8]),
                               atol=1e-6, rtol=0)


def test_a_non_square_grid_is_refused_on_export_and_read_at_the_grid_asked_for(tmp_path):
    """An .npz keeps the position table's length only: 2 x 8 patches would read back as 4 x 4,
    silently, so we do not write one; one written elsewhere (big_vision) reads at the grid
    given, or, of no square length, at the run's when its length fits that grid; a square
    table stays square whatever the run's grid."""
    cfg = ViTConfig(num_classes=5, image_size=(8, 32), patch_size=4, hidden_size=D, num_layers=1,
                    num_heads=HEADS, mlp_dim=F, activation="gelu_tanh")
    with pytest.raises(CheckpointError, match=r"\(8, 32\) with 4-pixel patches makes a 2x8 "
                                              r"patch grid.*--format hf.*keeps image_size"):
        save_npz(tmp_path / "wide.npz", cfg, random_params(cfg))
    assert not (tmp_path / "wide.npz").exists()
    tensors = write_fixture(tmp_path / "bv.npz", published_names("big_vision", grid=(2, 6)))
    images = np.random.default_rng(6).normal(size=(2, 8, 24, C)).astype(np.float32)
    expected = numpy_vit(tensors, images, "big_vision")
    for kwargs in ({"image_size": (8, 24)}, {"run_image_size": (8, 24)}):
        read, params = load_npz(tmp_path / "bv.npz", **kwargs)
        assert (read.image_size, read.grid) == ((8, 24), (2, 6)), kwargs
        np.testing.assert_allclose(ViT(read).apply({"params": params}, images), expected,
                                   atol=1e-5, rtol=0)
    # A square table (every published one) stays square under a 2 x 8 run of as many patches.
    write_fixture(tmp_path / "square.npz", published_names("big_vision", grid=(4, 4)))
    assert read_npz_architecture(tmp_path / "square.npz",
                                 run_image_size=(8, 32))[0].grid == (4, 4)
    write_fixture(tmp_path / "six.npz", published_names(grid=(2, 3)))
    with pytest.raises(CheckpointError, match=r"6 patch positions, not a square grid: pass "
                                              r"image_size=\(height, width\)"):
        load_npz(tmp_path / "six.npz")
    with pytest.raises(CheckpointError, match=r"6 patch positions, not a square grid nor the "
                                              r"2x8 grid of the run's image size \(8, 32\)"):
        read_npz_architecture(tmp_path / "six.npz", run_image_size=(8, 32))


def test_bfloat16_params_are_written_as_float32_and_raw_bytes_refused(tmp_path):
    cfg = ViTConfig(num_classes=5, image_size=(8, 8), patch_size=4, hidden_size=D, num_layers=1,
                    num_heads=HEADS, mlp_dim=F, activation="gelu_tanh", param_dtype="bfloat16")
    params = random_params(cfg)
    assert params["cls"].dtype.name == "bfloat16"
    save_npz(tmp_path / "bf16.npz", cfg, params)
    with np.load(tmp_path / "bf16.npz") as archive:
        assert {archive[name].dtype for name in archive.files} == {np.dtype(np.float32)}
    loaded_cfg, loaded = load_npz(tmp_path / "bf16.npz", param_dtype="bfloat16")
    assert loaded_cfg == cfg
    np.testing.assert_array_equal(loaded["block_0"]["mlp"]["wi"]["kernel"],
                                  params["block_0"]["mlp"]["wi"]["kernel"])
    # What np.savez makes of bfloat16 (raw '|V2' bytes) is refused by file and name.
    tensors = params_to_npz(params, cfg)
    np.savez(tmp_path / "raw.npz", **{**tensors, "cls": np.asarray(params["cls"])})
    for read in (load_npz, read_npz_architecture):
        with pytest.raises(CheckpointError, match=rf"raw.npz: 'cls' is stored as raw bytes "
                                                  rf"\(dtype '.V2'\).*as float32"):
            read(tmp_path / "raw.npz")


def test_a_written_npz_is_readable_by_others_as_any_file_under_the_umask(tmp_path):
    """Written through a private temporary file (mkstemp's 0600), then made 0644 like a file
    written plainly under the usual umask 022: an export is to be shared."""
    cfg = ViTConfig(num_classes=5, image_size=(8, 8), patch_size=4, hidden_size=D, num_layers=1,
                    num_heads=HEADS, mlp_dim=F, activation="gelu_tanh")
    previous = os.umask(0o022)
    try:
        save_npz(tmp_path / "shared.npz", cfg, random_params(cfg))
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.npz").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.npz"]


def test_a_checkpoint_without_head_reads_as_an_encoder(tmp_path):
    write_fixture(tmp_path / "ckpt.npz", published_names(classes=0))
    cfg, channels, has_head = read_npz_architecture(tmp_path / "ckpt.npz")
    assert (channels, has_head, cfg.num_classes) == (3, False, 1)
    _, params = load_npz(tmp_path / "ckpt.npz", num_classes=10)
    assert "head" not in params


def test_every_difference_is_named_in_one_error(tmp_path):
    names = published_names()
    del names["Transformer/encoderblock_0/MlpBlock_3/Dense_1/bias"]
    names["Transformer/encoderblock_1/LayerNorm_2/scale"] = (D + 1,)
    names["MAPHead_0/probe"] = (1, 1, D)
    write_fixture(tmp_path / "ckpt.npz", names)
    with pytest.raises(CheckpointError) as error:
        load_npz(tmp_path / "ckpt.npz")
    message = str(error.value)
    assert str(tmp_path / "ckpt.npz") in message
    assert "1 missing, 1 unexpected, 1 mis-shaped" in message
    assert "missing: Transformer/encoderblock_0/MlpBlock_3/Dense_1/bias" in message
    assert "unexpected: MAPHead_0/probe" in message
    assert ("wrong shape: Transformer/encoderblock_1/LayerNorm_2/scale: expected [8], found [9]"
            in message)
    gap = published_names()
    del gap["Transformer/encoderblock_1/LayerNorm_0/bias"]  # a block half there: still named
    write_fixture(tmp_path / "gap.npz", {**gap, **block_names(3, "vit")})
    with pytest.raises(CheckpointError, match="missing: Transformer/encoderblock_2/"):
        load_npz(tmp_path / "gap.npz")


def test_what_the_layouts_cannot_hold_is_refused(tmp_path):
    names = {k: v for k, v in published_names().items() if "posembed" not in k}
    write_fixture(tmp_path / "sincos.npz", names)
    with pytest.raises(CheckpointError, match="no position table"):
        load_npz(tmp_path / "sincos.npz")
    cfg = ViTConfig(num_classes=5, image_size=(12, 12), patch_size=4, hidden_size=D,
                    num_layers=1, num_heads=HEADS, mlp_dim=F, activation="relu")
    with pytest.raises(CheckpointError, match="activation='relu' .*'gelu_tanh'.*the HF format"):
        save_npz(tmp_path / "relu.npz", cfg, random_params(cfg))
    assert not (tmp_path / "relu.npz").exists()
    layered = dataclasses.replace(cfg, activation="gelu_tanh", posemb_mode="every_layer")
    with pytest.raises(CheckpointError, match="posemb_mode='every_layer' .*'stem'"):
        save_npz(tmp_path / "layered.npz", layered, random_params(layered))
    # What the names cannot tell may be overridden on reading.
    write_fixture(tmp_path / "ckpt.npz", published_names())
    cfg, _ = load_npz(tmp_path / "ckpt.npz", activation="gelu", layer_norm_eps=1e-5)
    assert (cfg.activation, cfg.layer_norm_eps) == ("gelu", 1e-5)
