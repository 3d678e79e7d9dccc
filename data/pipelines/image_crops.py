"""Crops and resizes of decoded images of any size, to the fixed size a ViT takes.

ImageNet's images come in every size, so a batch needs each image brought to `size` (height,
width) first:

  training     `inception_crop`: a random crop (`inception_crop_box`) resized to `size`, then
               flipped left-right with probability 1/2 (the caller's rng). The ViT paper trains
               and fine-tunes with it (Dosovitskiy et al. 2021, App. B: "Inception crop" and
               flip at 224 px, the augmentation of Kolesnikov et al. 2020, BiT).
  evaluation   `resize` (the whole image to `size`, its aspect ratio changed: how the ViT authors'
               code evaluates a fine-tuned model at 384 px) or `center_crop` (the shorter side
               resized to size / CENTER_CROP_FRACTION, then the centre `size` cut out: the
               standard ImageNet evaluation at 224 px, 87.5% of the side).

The crop box (Szegedy et al. 2015, "Going deeper with convolutions", Sec. 6: "patches of the
image whose size is distributed evenly between 8% and 100% of the image area with aspect ratio
constrained to the interval [3/4, 4/3]"): the area fraction is uniform in `area`, the aspect
ratio w / h log-uniform in `aspect` (so w/h and h/w are equally likely), the box's sides the
rounded sqrt(area * ratio) and sqrt(area / ratio), its corner uniform where it fits. A draw
that does not fit the image is drawn again, `attempts` times; then the whole image is the box
(TensorFlow's `sample_distorted_bounding_box` falls back the same way).

Resizing is PIL's bilinear filter (`Image.resize(..., BILINEAR, box=...)`), which widens its
triangle to the scale when shrinking, so a downscaled image is averaged (antialiased), not
sampled: tests/test_image_crops.py checks it against that formula in NumPy. It runs in C and
releases the GIL, so grain's reader threads resize in parallel.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from data.errors import DataError

INCEPTION_AREA = (0.08, 1.0)        # Szegedy et al. 2015, Sec. 6
INCEPTION_ASPECT = (3 / 4, 4 / 3)   # w / h
INCEPTION_ATTEMPTS = 10             # TensorFlow's and torchvision's default
CENTER_CROP_FRACTION = 0.875        # 224 of 256 px
EVAL_RESIZES = ("resize", "center_crop")


def inception_crop_box(height: int, width: int, rng: np.random.Generator, *,
                       area: tuple[float, float] = INCEPTION_AREA,
                       aspect: tuple[float, float] = INCEPTION_ASPECT,
                       attempts: int = INCEPTION_ATTEMPTS) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width) of a random Inception crop of a height x width
    image (module docstring)."""
    if height < 1 or width < 1:
        raise DataError(f"an image of {height} x {width} pixels has nothing to crop")
    log_low, log_high = math.log(aspect[0]), math.log(aspect[1])
    for _ in range(attempts):
        target = height * width * rng.uniform(*area)
        ratio = math.exp(rng.uniform(log_low, log_high))
        w = int(round(math.sqrt(target * ratio)))
        h = int(round(math.sqrt(target / ratio)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    return 0, 0, height, width


def resize(image: np.ndarray, size: tuple[int, int],
           box: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """uint8 [h, w, c] (c 1 or 3) -> uint8 [size[0], size[1], c]: the region `box` = (top, left,
    height, width) of `image` (default: all of it) resized with PIL's bilinear filter."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise DataError(f"a uint8 image [height, width, 1 or 3] expected, got {image.dtype} "
                        f"{image.shape}")
    top, left, h, w = box if box is not None else (0, 0, *image.shape[:2])
    pil = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
    out = pil.resize((size[1], size[0]), Image.Resampling.BILINEAR,
                     box=(left, top, left + w, top + h))
    return np.asarray(out, np.uint8).reshape(size[0], size[1], image.shape[-1])


def inception_crop(image: np.ndarray, size: tuple[int, int],
                   rng: np.random.Generator) -> np.ndarray:
    """A random Inception crop of `image` resized to `size`, flipped left-right with probability
    1/2 (the crop is drawn first, then the flip)."""
    box = inception_crop_box(image.shape[0], image.shape[1], rng)
    out = resize(image, size, box)
    return out[:, ::-1] if rng.random() < 0.5 else out


def center_crop_box(height: int, width: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width): the centre region of a height x width image that,
    scaled so that its shorter side is min(size) / CENTER_CROP_FRACTION, is `size`."""
    scale = min(size) / CENTER_CROP_FRACTION / min(height, width)  # output px per input px
    h = min(height, max(1, int(round(size[0] / scale))))
    w = min(width, max(1, int(round(size[1] / scale))))
    return (height - h) // 2, (width - w) // 2, h, w


def eval_resize(image: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """`image` brought to `size` for evaluation: 'resize' or 'center_crop' (module docstring)."""
    if mode == "resize":
        return resize(image, size)
    if mode == "center_crop":
        return resize(image, size, center_crop_box(image.shape[0], image.shape[1], size))
    raise DataError(f"eval resize {mode!r} is not one of {list(EVAL_RESIZES)}")
