"""Where an image classifier's starting weights come from (`config.init`): the ViT fine-tuning
stage of configs/vit/imagenet.py.

  'scratch'   random weights (models/vit.py's initialisers);
  <path>      the workdir of an earlier image-classification run (a local folder or gs:// URL,
              e.g. the `stage=pretrain` run of configs/vit/imagenet.py): its latest checkpoint's
              parameters, except the head. The ViT paper (Dosovitskiy et al. 2021, App. B.1.1)
              removes "the whole head (two linear layers)" and puts in "a single,
              zero-initialized linear layer": here the pretraining run's `pre_logits` and `head`
              are left out and the fine-tuning model's own zero-initialised `head` stays.

Every other parameter must be there with the fine-tuning model's shape: `load_backbone` names
each difference. A different image grid (a new resolution, e.g. the paper's 224 px pretraining
and 384 px fine-tuning, or a new patch size) changes the shape of the learned position
embeddings (`posemb`, `relative_bias`): the paper resamples them by 2-D interpolation (Sec. 3.2).
That resampling comes with models/ (the ViT position-embedding resampling and published-weights
work, not in this code yet); until it lands a resolution change is refused here, naming the
pretraining run's resolution to fine-tune at instead.
"""

from __future__ import annotations

import json
from typing import Any

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from train import storage
from train.config import ConfigError

SCRATCH = "scratch"
HEAD = ("pre_logits", "head")               # the pretraining head the paper replaces
POSITION_PARAMS = ("posemb", "relative_bias")  # shaped by the grid of patches


def _saved_config(init: str) -> tuple[Any, dict]:
    workdir = storage.run_path(init)
    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(f"config.init={init!r} is neither {SCRATCH!r} nor the workdir of an "
                          f"image-classification run: {saved_path} does not exist (python -m "
                          "train writes it)")
    saved = json.loads(saved_path.read_text())
    task = saved.get("task", {}).get("name")
    if task != "classify" or saved.get("model", {}).get("name") != "vit":
        raise ConfigError(f"config.init={init!r}: that run trained task {task!r} with model "
                          f"{saved.get('model', {}).get('name')!r}, not a ViT classifier")
    return workdir, saved


def check_resolution(init: str, model_config) -> None:
    """ConfigError when the run in `init` saw another grid of patches than `model_config` will
    (a resolution or patch-size change): its position embeddings do not fit without the
    resampling still to come (module docstring). Reads only the run's config.json."""
    if init == SCRATCH:
        return
    _, saved = _saved_config(init)
    model = saved["model"]
    size, patch = tuple(model["image_size"]), int(model["patch_size"])
    grid = (size[0] // patch, size[1] // patch)
    if grid != tuple(model_config.grid) and model["posemb"] in ("learned_1d", "learned_2d",
                                                                "relative"):
        raise ConfigError(
            f"config.init={init!r} was trained on {size[0]}x{size[1]} images in {patch}-pixel "
            f"patches (a {grid[0]}x{grid[1]} grid), this run takes "
            f"{model_config.image_size[0]}x{model_config.image_size[1]} in "
            f"{model_config.patch_size}-pixel patches (a {model_config.grid[0]}x"
            f"{model_config.grid[1]} grid): its {model['posemb']} position embeddings would have "
            "to be resampled to the new grid (ViT paper Sec. 3.2), which comes with the ViT "
            "position-embedding resampling in models/ and is not available yet. Fine-tune at "
            f"the pretraining resolution: --config.model.image_size={size[0]},{size[1]} "
            f"--config.data.image_shape={size[0]},{size[1]},{saved['data']['image_shape'][2]}")


def load_backbone(init: str) -> dict | None:
    """The parameters (NumPy) of the latest checkpoint of the run in `init` without its head
    (HEAD); None for 'scratch'."""
    if init == SCRATCH:
        return None
    from train.checkpointing import load_params

    workdir, _ = _saved_config(init)
    params = load_params(workdir)
    return {name: value for name, value in params.items() if name not in HEAD}


def replace_backbone(variables: dict, backbone: dict | None) -> dict:
    """`variables` with every parameter of `backbone` put in place (keeping the random ones'
    logical-partitioning boxes and dtypes); the head stays as initialised. ConfigError naming
    every missing, unexpected or mis-shaped parameter."""
    if backbone is None:
        return variables
    current = traverse_util.flatten_dict(variables["params"])
    loaded = traverse_util.flatten_dict(backbone)
    kept = {k: v for k, v in current.items() if k[0] not in HEAD}
    problems = [f"missing {'/'.join(k)} {tuple(nn.meta.unbox(v).shape)}"
                for k, v in kept.items() if k not in loaded]
    problems += [f"unexpected {'/'.join(k)} {np.shape(v)}" for k, v in loaded.items()
                 if k not in kept]
    problems += [f"{'/'.join(k)}: pretrained {np.shape(loaded[k])}, model "
                 f"{tuple(nn.meta.unbox(v).shape)}" for k, v in kept.items()
                 if k in loaded and np.shape(loaded[k]) != tuple(nn.meta.unbox(v).shape)]
    if problems:
        raise ConfigError(f"the pretrained ViT does not fit this run's model ({len(problems)} "
                          "differences; the model section must match the pretraining run's "
                          "but for the head):\n  " + "\n  ".join(problems[:40]))

    def put(old, new):
        value = jnp.asarray(new, dtype=nn.meta.unbox(old).dtype)
        return old.replace_boxed(value) if isinstance(old, nn.meta.AxisMetadata) else value

    replaced = {k: put(v, loaded[k]) if k in kept else v for k, v in current.items()}
    return {**variables, "params": traverse_util.unflatten_dict(replaced)}
