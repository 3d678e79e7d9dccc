"""Where an image-classification run's ViT weights come from (`config.init`), and what of them
fits the run (`config.init_head`).

    init = resolve_init(config)              # ViTInit(model_config, params, fresh, notes)
    params = put_pretrained(variables["params"], init.params, fresh=init.fresh, ...)
    plan = resolve_init(config, build=False)  # --print_config: the model, no weights read

  'scratch'      a random ViT of config.model.
  <file>.npz     a ViT checkpoint of google-research/vision_transformer (the paper's and the
                 AugReg ones) or big_vision (models/vit_npz.py).
  <folder>       a Hugging Face ViT folder (config.json + model.safetensors: ViTModel or
                 ViTForImageClassification, models/hf_vit.py), or the workdir of an earlier
                 classification run (its config.json and its latest checkpoint; a local folder
                 or gs:// URL), e.g. the stage=pretrain run of configs/vit/imagenet.py, which
                 its stage=finetune starts from at 384 px with init_head='new', or of a
                 masked-autoencoder pretraining run (configs/vit/mae.py, models/mae.py): its
                 encoder, `params['encoder']`, is a ViT without a classifier (the decoder and,
                 for Table 1c's variant, the encoder's mask token are left out), as BERT
                 fine-tuning starts from a pretraining workdir.

The checkpoint decides the architecture (width, depth, heads, patch size, position embedding,
pooling, stem, activation, norms): config.model's values of those are replaced, as BERT's
`init=minilm` replaces its sizes (train/finetune_init.py). The run decides what
`models.vit_transfer.RUN_FIELDS` names, from config.model: the image size (position embeddings
resampled to its patch grid, ViT Sec. 3.2), the number of classes and the pre-logits width (the
head kept when it fits and config.init_head is 'auto', otherwise a new zero-initialised one),
dropout, dtypes, remat and layer layout. The data's channels (config.data.image_shape) decide
whether RGB weights are summed for grey images. `notes` say which weights came from where and
what was resampled or replaced; the trainer prints them and the workdir's config.json records
the model that runs (train/run_config.py).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import ml_collections

from models.safetensors_file import CheckpointError
from models.vit import ViTConfig
from models.vit_transfer import ALIGNS, RUN_FIELDS, plan_transfer, transfer
from train import run_config, storage
from train.config import ConfigError, to_dataclass

INIT_HEADS = ("auto", "new")
TASK = "classify"
MAE_TASK = "mae_pretrain"   # train/tasks/mae_pretrain.py: its model's 'encoder' is a ViT


@dataclasses.dataclass(frozen=True)
class ViTInit:
    """What `config.init` resolves to."""

    model_config: ViTConfig       # the model that runs
    params: Any                   # the carried-over parameters (NumPy); None: scratch, or a plan
    fresh: tuple[str, ...]        # top-level parameters the run's model initialises itself
    notes: tuple[str, ...]        # the console lines: which weights, from where, what changed


@dataclasses.dataclass(frozen=True)
class _Checkpoint:
    kind: str                     # 'npz' | 'hf' | 'workdir' | 'mae'
    where: str
    model_config: ViTConfig
    channels: int
    has_head: bool


def _model_section(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    section = config.model.copy_and_resolve_references()
    with section.unlocked():
        del section["name"]
    return section


def _architecture(cfg: ViTConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if f.name not in RUN_FIELDS}


def _find(config: ml_collections.ConfigDict) -> _Checkpoint:
    """The checkpoint config.init names and its model, from what is cheap to read."""
    from models.hf_folder import WEIGHTS_FILE
    from models.hf_vit import read_hf_architecture
    from models.vit_npz import read_npz_architecture

    init = config.init
    local = pathlib.Path(init).expanduser()  # local path: an .npz or HF folder (models/ reads)
    try:
        if local.suffix == ".npz":
            if not local.is_file():
                raise ConfigError(f"config.init={init!r}: no such .npz file")
            # An .npz keeps no grid, only the position table's length: one as long as the
            # run's patch grid is read at that grid, else as square (models/vit_npz.py).
            return _Checkpoint("npz", f"the .npz checkpoint {local}", *read_npz_architecture(
                local, run_image_size=_run_image_size(config)))
        if (local / WEIGHTS_FILE).is_file():
            return _Checkpoint("hf", f"the Hugging Face checkpoint {local}",
                               *read_hf_architecture(local))
    except CheckpointError as error:
        raise ConfigError(f"config.init={init!r}: {error}") from error
    workdir = storage.run_path(init)  # a local folder or gs:// URL
    saved_path = workdir / "config.json"
    if not saved_path.is_file():
        raise ConfigError(
            f"config.init={init!r} is neither 'scratch', an .npz checkpoint, a Hugging Face "
            f"folder (config.json + {WEIGHTS_FILE}) nor a classification or MAE workdir: "
            f"{saved_path} does not exist")
    saved = run_config.read_resolved(saved_path)
    task = saved.get("task", {}).get("name")
    if task not in (TASK, MAE_TASK):
        raise ConfigError(f"config.init={init!r}: that run's task is {task!r}, not {TASK!r} or "
                          f"{MAE_TASK!r}")
    mae = task == MAE_TASK
    model = saved["model"]["encoder"] if mae else saved["model"]
    if not mae and model.get("name", "vit") != "vit":
        raise ConfigError(f"config.init={init!r}: that run trained a {model['name']!r}, not a "
                          "ViT, so no ViT can start from its weights (a convnet teaches DeiT: "
                          "configs/vit/deit.py's teacher=)")
    fields = {f.name for f in dataclasses.fields(ViTConfig)}
    try:
        cfg = ViTConfig(**{k: v for k, v in model.items() if k in fields})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {saved_path} gives no valid ViTConfig: {error}") from error
    if mae:
        return _Checkpoint("mae", f"the encoder of the masked autoencoder in {workdir}, its "
                           "latest checkpoint (its decoder left out)", cfg,
                           int(saved["data"]["image_shape"][-1]), False)
    return _Checkpoint("workdir", f"the run in {workdir}, its latest checkpoint", cfg,
                       int(saved["data"]["image_shape"][-1]), True)


def _run_image_size(config: ml_collections.ConfigDict) -> tuple[int, int] | None:
    """The image size the run's model will have; None unless a (height, width) pair (the
    run's ViTConfig then names the key)."""
    section = _model_section(config)
    size = section.image_size if "image_size" in section else ViTConfig.image_size
    return tuple(size) if isinstance(size, (tuple, list)) and len(size) == 2 else None


def _describe(cfg: ViTConfig) -> str:
    layers = f"{cfg.num_layers} layer{'s' * (cfg.num_layers != 1)}"
    return (f"{layers}, hidden {cfg.hidden_size}, patch {cfg.patch_size}, "
            f"{cfg.image_size[0]}x{cfg.image_size[1]} images")


def resolve_init(config: ml_collections.ConfigDict, *, build: bool = True) -> ViTInit:
    """The ViTInit of `config.init` (module docstring). build=False plans: the same model and
    notes from the checkpoint's config and tensor shapes, no weights read (params None)."""
    if config.init_head not in INIT_HEADS:
        raise ConfigError(f"config.init_head={config.init_head!r} is not one of "
                          f"{list(INIT_HEADS)}")
    if config.init_posemb_resample not in ALIGNS:
        raise ConfigError(f"config.init_posemb_resample={config.init_posemb_resample!r} is not "
                          f"one of {list(ALIGNS)}")
    if not config.init:
        raise ConfigError("config.init is empty; use 'scratch', an .npz file, a Hugging Face "
                          "folder, or a classification or MAE pretraining workdir")
    if config.init == "scratch":
        return ViTInit(to_dataclass(ViTConfig, _model_section(config), "model"), None, (), ())
    found = _find(config)
    target = to_dataclass(ViTConfig, _model_section(config), "model",
                          **_architecture(found.model_config))
    requested = bool(_model_section(config).get("distill_token", False))
    if requested != target.distill_token:  # the checkpoint's architecture would win silently
        raise ConfigError(
            f"config.model.distill_token={requested} but config.init={config.init!r} is a ViT "
            f"{'with' if target.distill_token else 'without'} DeiT's distillation token, whose "
            "architecture replaces config.model's: start from scratch, from a checkpoint with "
            f"the same token, or set distill_token={target.distill_token}")
    try:
        plan = plan_transfer(found.model_config, target, source_channels=found.channels,
                             target_channels=int(config.data.image_shape[-1]),
                             has_head=found.has_head, new_head=config.init_head == "new",
                             posemb_align=config.init_posemb_resample)
    except ValueError as error:
        raise ConfigError(f"config.init={config.init!r}: {error}") from error
    notes = (f"weights: {found.where} ({_describe(found.model_config)}); its architecture "
             "replaces config.model's", *plan.notes)
    params = transfer(_read(found, config.init), plan) if build else None
    return ViTInit(target, params, plan.fresh, notes)


def _read(found: _Checkpoint, init: str) -> Any:
    """The checkpoint's parameters (NumPy, loop layout; without 'head' when it has none)."""
    from models.hf_vit import load_hf_checkpoint
    from models.vit_npz import load_npz
    from train.checkpointing import load_params

    local = pathlib.Path(init).expanduser()  # local path: as _find
    try:
        if found.kind == "npz":
            return load_npz(local, image_size=found.model_config.image_size)[1]  # as _find
        if found.kind == "hf":
            return load_hf_checkpoint(local)[1]
    except CheckpointError as error:
        raise ConfigError(f"config.init={init!r}: {error}") from error
    params = load_params(storage.run_path(init))
    if found.kind == "mae":  # the ViT inside the autoencoder; its Table 1c mask token is MAE's
        return {k: v for k, v in params["encoder"].items() if k != "mask_token"}
    return params

