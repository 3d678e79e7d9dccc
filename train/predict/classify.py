"""Classify image files with an image-classification run: `python -m train.predict WORKDIR
--image FILE`.

    python -m train.predict workdirs/vit_fashion_mnist --image shoe.png --image bag.jpg --top_k 3
    python -m train.predict workdirs/vit_fashion_mnist --image digits.npy --resize refuse

Each image (train/predict/image_files.py: PNG, JPEG, ... or a .npy array) is brought to the
run's input, saying what it changed: its channels converted to config.data.image_shape's, its
size to the run's (config.data.eval_resize's way for a run of any-size images, else the whole
image resized; --resize refuse: an error instead), normalised by the eval pipeline's own
function with the run's constants (data/pipelines/images.py `normalization`, `normalize`), and
fed to the model as the task feeds it (train/tasks/classify.py `model_input`: resized on the
device for a run with config.data.resize). Printed: the top --top_k classes with their softmax
probabilities, named by the dataset's label names where its info can be read. A DeiT run with a
distillation token (train/tasks/deit.py) has two heads: their softmaxes are averaged, the
prediction its evaluation scores (train/losses.py `averaged_heads`).
Images go --batch_size at a time over all local devices (train/predict/batching.py).
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from data.builders import sources
from data.errors import DataError
from data.pipelines import images as image_pipeline
from train import run_config
from train.config import ConfigError
from train.image_models import MODELS
from train.losses import averaged_heads
from train.predict.batching import DeviceBatches
from train.predict.image_files import RESIZES, read_image
from train.tasks.classify import model_input
from train.tasks.image_data import pixel_scale


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("image classification")
    group.add_argument("--image", action="append", default=[],
                       help="an image file: PNG, JPEG, ... or a .npy uint8 array (repeat for "
                            "several)")
    group.add_argument("--top_k", type=int, default=5, help="classes printed per image")
    group.add_argument("--resize", choices=RESIZES, default=None,
                       help="how an image of another size than the run's is brought to it "
                            "(default: the run's config.data.eval_resize, 'resize' for a run "
                            "of one-size images); refuse: an error")
    group.add_argument("--batch_size", type=int, default=32, help="images per model call")


class Preprocess:
    """An image file -> the float32 [h, w, c] the run's eval pipeline makes of an image."""

    def __init__(self, run, resize: str | None, note):
        data = ml_collections.ConfigDict(run.config["data"])
        self.shape = tuple(int(d) for d in data.image_shape)
        self.resize = resize or (data.eval_resize if data.eval_resize != "none" else "resize")
        self.note = note
        self.info = dataset_info(data, note)
        name = self.info.tfds_name if self.info is not None else data.name
        try:
            self.mean, self.std = image_pipeline.normalization(
                name, *pixel_scale(data, self.shape[-1]), self.shape[-1])
        except DataError as error:
            raise ConfigError(f"the run's normalisation (config.data.normalize="
                              f"{data.normalize!r}): {error}") from error

    def __call__(self, path: str) -> np.ndarray:
        pixels = read_image(path, channels=self.shape[-1], size=self.shape[:2],
                            resize=self.resize, note=self.note)
        return image_pipeline.normalize(pixels, self.mean, self.std)


def dataset_info(data, note):
    """The run's dataset's info (its label names and TFDS name), or None with a note when it
    cannot be read here (not fetched): the classes are then printed by number."""
    try:
        return sources.dataset_info(data.name, data.source)
    except DataError as error:
        note(f"the classes are numbered: the dataset {data.name!r} ({data.source}) that names "
             f"them cannot be read here ({str(error).splitlines()[0][:200]})")
        return None


def predict(run, args, *, out=print, note=None) -> list[list[tuple[str, float]]]:
    """The top-k (class, probability) of every image, in order; each image's line printed to
    `out`, what was changed about an input to `note` (default: standard error)."""
    note = note or (lambda message: print(message, file=sys.stderr))
    if not args.image:
        raise ConfigError("no image: give --image FILE (repeat for several)")
    # config.model.name picks the model (train/image_models.py); runs from before DeiT's
    # convnet teacher saved no name, and were ViTs.
    entry = MODELS[run.config["model"].get("name", "vit")]
    cfg = run_config.saved_model(entry.config, run.config, run.workdir)
    if args.top_k < 1:
        raise ConfigError(f"--top_k={args.top_k} must be >= 1")
    preprocess = Preprocess(run, args.resize, note)
    rows = [{"image": preprocess(path)} for path in args.image]
    model = entry.module(cfg)

    def step(params, batch):
        logits = model.apply({"params": params}, model_input(batch["image"], cfg.image_size),
                             train=False)
        if isinstance(logits, tuple):  # DeiT: (class head, distillation head)
            return {"probabilities": jnp.exp(averaged_heads(*logits))}
        return {"probabilities": jax.nn.softmax(logits, -1)}

    names = (preprocess.info.class_names if preprocess.info is not None
             and len(preprocess.info.class_names) == cfg.num_classes
             else tuple(f"class {i}" for i in range(cfg.num_classes)))
    results = []
    for path, row in zip(args.image, DeviceBatches(run.params, batch_size=args.batch_size)
                         .run(jax.jit(step), rows)):
        p = row["probabilities"]
        top = np.argsort(-p, kind="stable")[:args.top_k]
        ranked = [(names[i], float(p[i])) for i in top]
        results.append(ranked)
        out(f"{path}: " + ", ".join(f"{name} {prob:.4f}" for name, prob in ranked))
    return results
