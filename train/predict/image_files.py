"""Image files as an image run's pipeline stores its images: uint8 [height, width, channels].

    image = read_image("shoe.png", channels=1, size=(28, 28), resize="resize", note=print)

Files: anything PIL opens (PNG, JPEG, ...), or a NumPy .npy array of uint8 pixels [h, w] or
[h, w, c] (c 1, 3 or 4), the form the datasets' images take. The channels are converted to the
run's by PIL's own conversions (grey to RGB repeats the grey value; RGB to grey is ITU-R
601-2 luma, L = 0.299 R + 0.587 G + 0.114 B; an alpha channel is dropped), the size brought
to the run's by data/pipelines/image_crops.py `eval_resize` ('resize': the whole image,
bilinear and antialiased; 'center_crop'), as the eval pipeline of a run of any-size images
does. Each change is told to `note`; `resize='refuse'` makes a wrong size an error instead.

Wider pixels: a 16-bit grey image (PIL mode I;16, I;16B, ...: a 16-bit PNG or TIFF) is scaled
to 8 bits by its type's fixed range, value / 257 rounded (0..65535 onto 0..255), before any
channel conversion; PIL's own conversion would clip it at 255, a nearly white image. Modes I
(32-bit integers) and F (floats) have no fixed range to scale by, so they are refused rather
than guessed at (min-max would make a faint image as contrasty as a bright one).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from PIL import Image, UnidentifiedImageError

from data.pipelines import image_crops
from train.config import ConfigError

RESIZES = ("resize", "center_crop", "refuse")
PIL_MODES = {1: "L", 3: "RGB"}  # the channels a run's images have -> PIL's mode of them
UNSCALED = {"I": "32-bit integer", "F": "floating-point"}  # PIL modes with no fixed range


def _open(path: str) -> Image.Image:
    """The file as a PIL image (a .npy array through Image.fromarray)."""
    if path.endswith(".npy"):
        try:
            array = np.load(path, allow_pickle=False)  # local path: the user's image file
        except (OSError, ValueError) as error:
            raise ConfigError(f"{path} is not a readable .npy array ({error})") from error
        if array.dtype != np.uint8:
            raise ConfigError(f"{path} holds {array.dtype} values; an image array holds uint8 "
                              "pixels 0..255 (convert it with .astype(np.uint8) if it does)")
        if array.ndim == 3 and array.shape[-1] == 1:
            array = array[..., 0]
        if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
            raise ConfigError(f"{path} is an array of shape {array.shape}; an image is [height, "
                              "width] or [height, width, channels] with 1, 3 or 4 channels")
        return Image.fromarray(array)
    try:
        with open(path, "rb") as f:  # local path: the user's image file
            image = Image.open(f)
            image.load()
    except FileNotFoundError as error:
        raise ConfigError(f"{path} does not exist") from error
    except (UnidentifiedImageError, OSError) as error:
        raise ConfigError(f"{path} is not an image (PIL reads PNG, JPEG, ...; or give a .npy "
                          f"array of uint8 pixels): {error}") from error
    return image


def _to_8_bits(image: Image.Image, path: str, note: Callable[[str], None]) -> Image.Image:
    """A 16-bit grey image as 8-bit grey (mode L), scaled by its range; ConfigError for modes
    I and F (module docstring)."""
    pixels = np.asarray(image)
    if image.mode.startswith("I;16") and pixels.dtype.kind == "u":
        note(f"{path}: 16-bit grey (PIL mode {image.mode}) scaled to 8 bits, value / 257 "
             "(0..65535 onto 0..255)")
        return Image.fromarray(((pixels.astype(np.uint32) + 128) // 257).astype(np.uint8))
    kind = UNSCALED.get(image.mode, f"{pixels.dtype}")
    raise ConfigError(f"{path} has PIL mode {image.mode} ({kind} pixels), which has no fixed "
                      "range to scale to the run's 8-bit pixels: export it as an 8-bit image "
                      "(grey or RGB PNG), or as a .npy array of uint8 pixels")


def read_image(path: str, *, channels: int, size: tuple[int, int], resize: str,
               note: Callable[[str], None]) -> np.ndarray:
    """uint8 [size[0], size[1], channels] of the file (module docstring)."""
    if channels not in PIL_MODES:
        raise ConfigError(f"the run's images have {channels} channels; image files give 1 "
                          "(grey) or 3 (RGB)")
    image = _open(path)
    if image.mode in UNSCALED or image.mode.startswith("I;16"):
        image = _to_8_bits(image, path, note)
    mode = PIL_MODES[channels]
    if image.mode != mode:
        note(f"{path}: converted from PIL mode {image.mode} to {mode} ({channels} channel"
             f"{'s' if channels > 1 else ''}, as the run's images)")
        if image.mode in ("RGBA", "LA", "P") and mode == "L":
            image = image.convert("RGB")  # the alpha channel dropped before the luma
        image = image.convert(mode)
    pixels = np.asarray(image, np.uint8).reshape(image.height, image.width, channels)
    if pixels.shape[:2] == tuple(size):
        return pixels
    if resize == "refuse":
        raise ConfigError(f"{path} is {pixels.shape[0]}x{pixels.shape[1]} pixels; the run's "
                          f"images are {size[0]}x{size[1]}: resize it, or leave out --resize "
                          "refuse to have it resized here")
    note(f"{path}: {resize} from {pixels.shape[0]}x{pixels.shape[1]} to {size[0]}x{size[1]} "
         "pixels, the run's image size (config.data.image_shape)")
    return image_crops.eval_resize(pixels, tuple(size), resize)
