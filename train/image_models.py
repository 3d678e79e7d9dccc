"""The image classifiers a run names by config.model.name: a classification run builds one
(train/tasks/classify.py), a DeiT run reads one as its teacher (train/teacher.py).

  'vit'      models/vit.py, the Vision Transformer (with DeiT's distillation token as an option)
  'convnet'  models/convnet.py, a small ResNet: the convnet teacher of DeiT's Table 2 and 3
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from models.convnet import ConvNet, ConvNetConfig
from models.vit import ViT, ViTConfig
from train import flops


@dataclasses.dataclass(frozen=True)
class ImageModel:
    module: type                    # the Linen module: images [b, H, W, C] -> logits
    config: type                    # its frozen config dataclass, built from config.model
    train_flops: Callable[[Any, int], float]   # (config, image channels) -> FLOPs per example


MODELS = {
    "vit": ImageModel(ViT, ViTConfig, flops.vit_train_flops_per_example),
    "convnet": ImageModel(ConvNet, ConvNetConfig, flops.convnet_train_flops_per_example),
}


def model_config(name: str, fields: dict) -> Any:
    """The config dataclass of model `name` from a saved config's model section (a workdir's
    config.json): the fields it has, any others (e.g. `name`) left out. ValueError or TypeError
    from the dataclass's own checks."""
    cls = MODELS[name].config
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in known})
