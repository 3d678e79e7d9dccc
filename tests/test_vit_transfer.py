"""Carrying a trained ViT to another run (models/vit_transfer.py): the bilinear resampling of the
position table against scipy, the class token's row kept apart, the head kept or replaced, the
pre-logits layer dropped, RGB weights made exact for grey images, and what cannot be carried."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage
from random_params import perturbed

from models.vit import ViT, ViTConfig
from models.vit_transfer import (bilinear_matrix, plan_transfer, resample_posemb, transfer,
                                 with_layer_layout)


def tiny(**overrides) -> ViTConfig:
    fields = dict(num_classes=5, image_size=(8, 8), patch_size=4, hidden_size=8, num_layers=2,
                  num_heads=2, mlp_dim=16)
    return ViTConfig(**{**fields, **overrides})


def random_params(cfg: ViTConfig, channels: int = 3, seed: int = 0):
    images = jnp.zeros((1, *cfg.image_size, channels))
    shapes = jax.eval_shape(lambda: ViT(cfg).init(jax.random.PRNGKey(0), images))
    zeros = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), nn.meta.unbox(shapes)["params"])
    return perturbed(zeros, scale=0.3, seed=seed)


# ----------------------------------------------------------------------------- resampling


@pytest.mark.parametrize("old, new", [((4, 4), (8, 8)), ((4, 3), (7, 5)), ((8, 8), (3, 5)),
                                      ((2, 2), (2, 2)), ((1, 3), (2, 4))])
@pytest.mark.parametrize("prefix", [0, 1])
def test_resampling_is_scipys_bilinear_zoom_with_the_class_row_kept(old, new, prefix):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(prefix + old[0] * old[1], 6)).astype(np.float32)
    out = resample_posemb(table, old, new, prefix)
    assert out.shape == (prefix + new[0] * new[1], 6) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:prefix], table[:prefix])
    # scipy's order-1 spline on pixel-area grids (grid_mode): each cell at its centre, edges
    # repeated: the same definition of bilinear resizing, written independently.
    grid = table[prefix:].reshape(*old, 6).astype(np.float64)
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1,
                                  grid_mode=True, mode="nearest")
    np.testing.assert_allclose(out[prefix:].reshape(*new, 6), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("old, new", [((14, 14), (24, 24)), ((4, 3), (7, 5)), ((8, 8), (3, 5)),
                                      ((1, 3), (2, 4))])
def test_corner_aligned_resampling_is_the_released_codes_zoom(old, new):
    """align='corners': what vision_transformer's and big_vision's resample_posemb compute,
    scipy.ndimage.zoom(grid, zoom, order=1) at its defaults (the first and last patches of the
    old and new grids on each other)."""
    table = np.random.default_rng(1).normal(size=(1 + old[0] * old[1], 6)).astype(np.float32)
    out = resample_posemb(table, old, new, 1, align="corners")
    np.testing.assert_array_equal(out[:1], table[:1])
    grid = table[1:].reshape(*old, 6).astype(np.float64)
    expected = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    np.testing.assert_allclose(out[1:].reshape(*new, 6), expected, atol=1e-6, rtol=0)
    if old[0] > 1 and new[0] > 1:  # the two alignments differ
        assert not np.allclose(out, resample_posemb(table, old, new, 1), atol=1e-3)
    with pytest.raises(ValueError, match=r"align='edges' is not one of \['centres', 'corners'\]"):
        resample_posemb(table, old, new, 1, align="edges")


def test_interpolation_weights_are_convex_and_keep_the_grid_centred():
    weights = bilinear_matrix(4, 8)
    np.testing.assert_allclose(weights.sum(1), 1.0)
    assert (weights >= 0).all()
    # A linear ramp over the cells' centres stays the same ramp at the new centres (inside).
    centres_old = (np.arange(4) + 0.5) / 4
    centres_new = (np.arange(8) + 0.5) / 8
    inside = (centres_new >= centres_old[0]) & (centres_new <= centres_old[-1])
    np.testing.assert_allclose((weights @ centres_old)[inside], centres_new[inside])


def test_a_table_of_the_wrong_size_is_named():
    with pytest.raises(ValueError, match=r"1 \+ 4 x 4 rows"):
        resample_posemb(np.zeros((16, 3)), (4, 4), (8, 8), 1)


# ----------------------------------------------------------------------------- plan and transfer


def test_a_larger_image_runs_with_the_resampled_table_and_keeps_everything_else():
    source, target = tiny(), tiny(image_size=(12, 16), dropout_rate=0.1, scan_layers=True)
    params = random_params(source)
    plan = plan_transfer(source, target, source_channels=3, target_channels=3)
    assert plan.fresh == ()
    assert plan.notes == ("position embeddings resampled bilinearly, each patch at its centre "
                          "(image 8x8 -> 12x16, patch grid 2x2 -> 3x4; ViT Sec. 3.2), class "
                          "token's kept",
                          "classifier kept (5 classes)")
    out = transfer(params, plan)
    assert "blocks" in out and "block_0" not in out  # the run's layer layout
    table = out["posemb"]["embedding"]
    np.testing.assert_array_equal(table, resample_posemb(params["posemb"]["embedding"], (2, 2),
                                                         (3, 4), 1))
    loop = with_layer_layout(out, scan=False)
    np.testing.assert_array_equal(loop["block_1"]["mlp"]["wi"]["kernel"],
                                  params["block_1"]["mlp"]["wi"]["kernel"])
    np.testing.assert_array_equal(out["head"]["kernel"], params["head"]["kernel"])
    logits = ViT(target).apply({"params": out}, jnp.ones((2, 12, 16, 3)))
    assert logits.shape == (2, 5) and np.isfinite(logits).all()


def test_another_class_count_gets_a_new_head_and_head_hidden_size_zero_drops_pre_logits():
    source = tiny(head_hidden_size=6)
    params = random_params(source)
    plan = plan_transfer(source, tiny(num_classes=3), source_channels=3, target_channels=3)
    assert plan.fresh == ("head",)
    assert plan.notes == ("pre-logits layer dropped (head_hidden_size=0; ViT App. B.1.1)",
                          "new zero-initialised classifier for 3 classes (the checkpoint's has 5)")
    out = transfer(params, plan)
    assert "head" not in out and "pre_logits" not in out
    # Kept whole: the same class count with the pre-logits layer kept keeps the classifier ...
    same = plan_transfer(source, source, source_channels=3, target_channels=3)
    assert same.fresh == () and "pre_logits" in transfer(params, same)
    # ... but a classifier that read tanh(pre-logits) is not reused on the encoder's output.
    dropped = plan_transfer(source, tiny(), source_channels=3, target_channels=3)
    assert dropped.fresh == ("head",) and "the pre-logits layer changed" in dropped.notes[-1]
    new = plan_transfer(source, source, source_channels=3, target_channels=3, new_head=True)
    assert new.fresh == ("pre_logits", "head")
    headless = plan_transfer(tiny(), tiny(), source_channels=3, target_channels=3,
                             has_head=False)
    assert headless.notes[-1].endswith("(the checkpoint has none)")


@pytest.mark.parametrize("stem", [0, 4])
def test_rgb_weights_read_a_grey_image_exactly_as_its_three_equal_channels(stem):
    source = tiny(stem_channels=stem)
    params = random_params(source)
    plan = plan_transfer(source, source, source_channels=3, target_channels=1)
    assert plan.sum_channels and "summed over its colour axis" in plan.notes[0]
    grey = np.random.default_rng(1).normal(size=(2, 8, 8, 1)).astype(np.float32)
    rgb = np.repeat(grey, 3, axis=-1)
    expected = ViT(source).apply({"params": params}, rgb)
    got = ViT(source).apply({"params": transfer(params, plan)}, grey)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="only RGB weights for grey images"):
        plan_transfer(source, source, source_channels=1, target_channels=3)


def test_what_cannot_be_carried_is_named():
    with pytest.raises(ValueError, match=r"hidden_size: checkpoint 8, run 16\); only \["):
        plan_transfer(tiny(), tiny(hidden_size=16), source_channels=3, target_channels=3)
    for posemb, table in (("learned_2d", "'posemb'"), ("relative_bias_2d", "'relative_bias'"),
                          ("relative", "'rel_embedding'")):
        with pytest.raises(ValueError, match=f"{table} table is sized by the patch grid"):
            plan_transfer(tiny(posemb=posemb), tiny(posemb=posemb, image_size=(12, 12)),
                          source_channels=3, target_channels=3)
    for mode in ("every_layer", "every_layer_shared"):  # tables inside the blocks
        with pytest.raises(ValueError, match=f"posemb_mode='{mode}': the learned position "
                                             "tables added at every layer are not resampled"):
            plan_transfer(tiny(posemb_mode=mode), tiny(posemb_mode=mode, image_size=(12, 12)),
                          source_channels=3, target_channels=3)
    for mode in ("stem", "every_layer_shared"):  # sines: computed for any grid
        source = tiny(posemb="sincos_2d", posemb_mode=mode)
        target = tiny(posemb="sincos_2d", posemb_mode=mode, image_size=(12, 12))
        plan = plan_transfer(source, target, source_channels=3, target_channels=3)
        assert not plan.resample and "nothing to resample" in plan.notes[0]
        params = transfer(random_params(source), plan)
        assert ViT(target).apply({"params": params}, jnp.zeros((1, 12, 12, 3))).shape == (1, 5)
    with pytest.raises(ValueError, match=r"image_size=8 must be \(height, width\), e.g. \(8, 8\)"):
        tiny(image_size=8)

