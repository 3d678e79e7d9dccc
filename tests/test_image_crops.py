"""data/pipelines/image_crops.py and the image pipeline on images of any size (ImageNet): the
Inception crop's box statistics, PIL's bilinear resize against its formula in NumPy, the crop,
flip and resize of a batch against a NumPy computation of the same draws, and the eval
resizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from data.errors import DataError
from data.pipelines import image_crops
from data.pipelines.images import image_batches


def _pil_bilinear_weights(in_size: int, out_size: int, start: float, length: float
                          ) -> np.ndarray:
    """[out_size, in_size] weights of PIL's bilinear resample of the span [start, start +
    length) of an axis onto out_size pixels: pixel i reads the triangle of half-width
    max(1, scale) input pixels around its centre start + (i + 0.5) * scale, scale = length /
    out_size, over the input pixels whose window PIL takes, normalised to sum 1."""
    scale = length / out_size
    widen = max(scale, 1.0)
    weights = np.zeros((out_size, in_size))
    for i in range(out_size):
        centre = start + (i + 0.5) * scale
        lo = max(int(centre - widen + 0.5), 0)
        hi = min(int(centre + widen + 0.5), in_size)
        for x in range(lo, hi):
            weights[i, x] = max(0.0, 1.0 - abs((x - centre + 0.5) / widen))
        weights[i] /= weights[i].sum()
    return weights


def _round(x: np.ndarray) -> np.ndarray:
    """To uint8 levels, halves up (PIL adds half a level before its fixed-point shift)."""
    return np.clip(np.floor(x + 0.5), 0, 255)


def _numpy_resize(image: np.ndarray, size, box) -> np.ndarray:
    """PIL's two-pass bilinear resize in float64: along the width first, rounded to uint8, then
    along the height (PIL computes in fixed point, so results may differ by one level)."""
    top, left, h, w = box
    wx = _pil_bilinear_weights(image.shape[1], size[1], left, w)
    wy = _pil_bilinear_weights(image.shape[0], size[0], top, h)
    rows = _round(np.einsum("ox,hxc->hoc", wx, image.astype(np.float64)))
    return _round(np.einsum("oy,yxc->oxc", wy, rows))


@pytest.mark.parametrize("shape, size, box", [
    ((37, 53, 3), (16, 16), (5, 7, 30, 41)),    # shrink a region
    ((20, 12, 3), (32, 24), (0, 0, 20, 12)),    # enlarge the whole image
    ((64, 48, 1), (10, 10), (3, 2, 50, 40)),    # one channel
])
def test_resize_is_pils_bilinear_filter(shape, size, box):
    image = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    got = image_crops.resize(image, size, box)
    want = _numpy_resize(image, size, box)
    assert got.shape == (*size, shape[-1]) and got.dtype == np.uint8
    assert np.abs(got.astype(int) - want).max() <= 1
    assert np.mean(got != want) < 0.02


def test_inception_crop_boxes_lie_inside_and_spread_over_the_image():
    rng = np.random.default_rng(1)
    height, width = 300, 400
    boxes = [image_crops.inception_crop_box(height, width, rng) for _ in range(2000)]
    tops, lefts, hs, ws = (np.array(v) for v in zip(*boxes))
    assert (tops >= 0).all() and (lefts >= 0).all()
    assert (tops + hs <= height).all() and (lefts + ws <= width).all()
    fractions, ratios = hs * ws / (height * width), ws / hs
    assert fractions.min() > 0.07 and ratios.min() > 0.74 and ratios.max() < 1.35
    centres = (tops + hs / 2) / height  # the corner is uniform where the box fits
    assert 0.45 < centres.mean() < 0.55 and centres.std() > 0.07


def test_inception_crop_boxes_have_the_papers_distribution():
    """Szegedy et al.'s rule: area fraction f uniform in [0.08, 1], u = log(w / h) uniform in
    [log 3/4, log 4/3], a draw kept when the box fits. On a square image a box fits iff
    f * exp(|u|) <= 1, so the kept draws follow the uniform density restricted to that region:
    their mean f and mean |u|, integrated numerically on a grid here, are what the sampler's
    boxes show (3,000 boxes of a 1000 x 1000 image)."""
    f = np.linspace(0.08, 1.0, 2001)[:, None]
    u = np.linspace(-math.log(4 / 3), math.log(4 / 3), 2001)[None, :]
    kept = (f * np.exp(np.abs(u)) <= 1.0).astype(float)
    mean_f = (f * kept).sum() / kept.sum()
    mean_abs_u = (np.abs(u) * kept).sum() / kept.sum()
    rng = np.random.default_rng(5)
    boxes = np.array([image_crops.inception_crop_box(1000, 1000, rng) for _ in range(3000)])
    hs, ws = boxes[:, 2], boxes[:, 3]
    assert abs(np.mean(hs * ws / 1e6) - mean_f) < 0.015
    assert abs(np.mean(np.abs(np.log(ws / hs))) - mean_abs_u) < 0.006
    assert abs(np.mean(np.log(ws / hs))) < 0.01  # w / h and h / w equally likely


def test_inception_crop_falls_back_to_the_whole_image():
    """A 1 x 100 strip fits no box of aspect ratio 3/4..4/3 and 8% of the area or more: after
    the attempts the box is the whole image."""
    assert image_crops.inception_crop_box(1, 100, np.random.default_rng(0)) == (0, 0, 1, 100)


def test_center_crop_is_the_centre_of_the_shorter_side_resized():
    """The standard evaluation: the shorter side scaled to 224 / 0.875 = 256 px, the centre
    224 x 224 cut out; in input pixels a centred square of 375 * 224 / 256 = 328 px."""
    assert image_crops.center_crop_box(375, 500, (224, 224)) == (23, 86, 328, 328)
    image = np.random.default_rng(2).integers(0, 256, size=(375, 500, 3), dtype=np.uint8)
    got = image_crops.eval_resize(image, (224, 224), "center_crop")
    want = _numpy_resize(image, (224, 224), (23, 86, 328, 328))
    assert np.abs(got.astype(int) - want).max() <= 1
    with pytest.raises(DataError, match=r"eval resize 'crop' is not one of"):
        image_crops.eval_resize(image, (224, 224), "crop")


class AnySizeSource:
    """Images of different sizes (as TFDS imagenet2012 decodes them), label = index."""

    def __init__(self, n, channels=3):
        rng = np.random.default_rng(4)
        self.images = [rng.integers(0, 256, size=(int(rng.integers(20, 60)),
                                                   int(rng.integers(20, 60)), channels),
                                    dtype=np.uint8) for _ in range(n)]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return {"image": self.images[i], "label": i}


def test_a_training_batch_is_cropped_resized_and_flipped_as_numpy_computes_it():
    """The pipeline's augmentation of a batch equals, image by image, the Inception crop drawn
    from the same generator, resized by the NumPy formula and flipped where the next draw says:
    16 x 16 images from sources of 20-60 px."""
    from data.pipelines.images import _Augment

    source = AnySizeSource(8)
    batch = {"image": list(source.images), "label": np.arange(8), "mask": np.ones(8)}
    out = _Augment("inception_crop", (16, 16, 3))(batch, np.random.default_rng(7))
    assert out["image"].shape == (8, 16, 16, 3) and out["image"].dtype == np.uint8
    rng, flips = np.random.default_rng(7), 0
    for j, image in enumerate(source.images):
        box = image_crops.inception_crop_box(image.shape[0], image.shape[1], rng)
        want = _numpy_resize(image, (16, 16), box)
        if rng.random() < 0.5:
            want, flips = want[:, ::-1], flips + 1
        assert np.abs(out["image"][j].astype(int) - want).max() <= 1, j
    assert 0 < flips < 8


def test_training_batches_of_any_size_are_reproducible_and_resume():
    """The augmented stream is the same when rebuilt, and a pipeline restored from a state
    continues it exactly (the crops are drawn from the batch's seeded generator)."""
    def build():
        return image_batches(AnySizeSource(24), batch_size=4, train=True, seed=3,
                             image_shape=(16, 16, 3), augment="inception_crop",
                             eval_resize="center_crop", mean=(0.0,) * 3, std=(1.0,) * 3)
    first = [next(it) for it in [build()] for _ in range(5)]
    again = build()
    for _ in range(2):
        next(again)
    resumed = build()
    resumed.set_state(again.get_state())
    for want in first[2:]:
        got = next(resumed)
        np.testing.assert_array_equal(got["image"], want["image"])
        np.testing.assert_array_equal(got["label"], want["label"])
    assert not np.array_equal(first[0]["image"], first[1]["image"])


@pytest.mark.parametrize("mode", ["resize", "center_crop"])
def test_eval_batches_of_any_size_are_resized(mode):
    source = AnySizeSource(10)
    batches = list(image_batches(source, batch_size=4, train=False, seed=0,
                                 image_shape=(12, 12, 3), eval_resize=mode, mean=(0.0,) * 3,
                                 std=(1 / 255,) * 3))
    images = np.concatenate([b["image"] for b in batches])
    masks = np.concatenate([b["mask"] for b in batches])
    assert images.shape == (12, 12, 12, 3) and masks.tolist() == [1.0] * 10 + [0.0] * 2
    for i in range(10):
        np.testing.assert_array_equal(images[i], image_crops.eval_resize(source.images[i],
                                                                         (12, 12), mode))
    assert not images[10:].any()


def test_sizes_and_augmentations_that_do_not_fit_are_refused():
    source = AnySizeSource(8)
    common = dict(batch_size=4, seed=0, image_shape=(12, 12, 3), mean=(0.0,) * 3,
                  std=(1.0,) * 3)
    with pytest.raises(DataError, match=r"images of any size .* train with "
                                        r"augment='inception_crop'"):
        image_batches(source, train=True, augment="flip", eval_resize="resize", **common)
    with pytest.raises(DataError, match=r"augment='inception_crop' with eval_resize='none'"):
        image_batches(AnySizeSource(8), train=True, augment="inception_crop", **common)
    with pytest.raises(DataError, match=r"eval_resize='fit' is not one of"):
        image_batches(source, train=False, eval_resize="fit", **common)
    grey = AnySizeSource(8, channels=1)
    with pytest.raises(DataError, match=r"images of shape \(12, 12, 3\) expected, found "):
        image_batches(grey, train=False, eval_resize="resize", **common)
