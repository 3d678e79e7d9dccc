"""python -m train.export WORKDIR OUT [--format auto|hf|npz] [--head ...] [--layout ...]

Writes the latest checkpoint of an image-classification run (a ViT, configs/vit/...) in a
format other code reads:
  hf    a Hugging Face ViT folder (config.json + model.safetensors, models/hf_vit.py): HF's
        ViTForImageClassification (--head classifier, the default), or ViTModel (--head model:
        the encoder, its pre-logits layer as ViTModel's pooler, no classifier);
  npz   the .npz of google-research/vision_transformer (--layout vit, the AugReg checkpoints'
        names, the default) or big_vision (--layout big_vision) (models/vit_npz.py).
--format auto picks npz for an OUT ending in .npz, else hf. The run's config.json (the model
that ran, train/run_config.py) gives the architecture. A model the format cannot describe
(a hybrid stem, mean pooling for HF, a ReLU model as .npz, ...) is refused with what differs.
Either file starts another run: `--config configs/vit/fashion_mnist.py:init=OUT`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

from models.safetensors_file import CheckpointError
from models.vit import ViTConfig
from train import storage
from train.config import ConfigError

FORMATS = ("auto", "hf", "npz")
TASK = "classify"


def _model_config(workdir) -> ViTConfig:
    path = workdir / "config.json"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {workdir} is not the workdir of a run")
    saved = json.loads(path.read_text())
    task = saved.get("task", {}).get("name")
    if task != TASK:
        raise ConfigError(f"{workdir} holds a {task!r} run; python -m train.export writes the "
                          f"ViT of a {TASK!r} run")
    fields = {f.name for f in dataclasses.fields(ViTConfig)}
    try:
        cfg = ViTConfig(**{k: v for k, v in saved["model"].items() if k in fields})
    except (TypeError, ValueError) as error:
        raise ConfigError(f"the model of {path} gives no valid ViTConfig: {error}") from error
    if cfg.probe_norm:
        raise ConfigError(f"{workdir} is a linear probe with probe_norm=True: neither format has "
                          "its feature standardisation before the head; export the encoder's "
                          "run (its config.init) instead")
    return cfg


def export(workdir: str, out: str, *, format: str = "auto", head: str = "auto",
           layout: str = "vit", overwrite: bool = False) -> str:
    """Writes the run's latest checkpoint to `out` (module docstring); returns what was written,
    as a line to print."""
    from models.hf_vit import save_hf_checkpoint
    from models.vit_npz import save_npz
    from train.checkpointing import load_params

    if format not in FORMATS:
        raise ConfigError(f"--format {format!r} is not one of {list(FORMATS)}")
    directory = storage.run_path(workdir)
    cfg = _model_config(directory)
    out_path = pathlib.Path(out)  # local path: models/ writes the .npz or HF folder locally
    if format == "auto":
        format = "npz" if out_path.suffix == ".npz" else "hf"
    if format == "npz" and out_path.exists() and not overwrite:
        raise CheckpointError(f"{out_path} exists; pass --overwrite to replace it")
    params = load_params(directory)
    if format == "hf":
        save_hf_checkpoint(out_path, cfg, params, head=head, overwrite=overwrite)
        kind = json.loads((out_path / "config.json").read_text())["architectures"][0]
        what = f"a Hugging Face {kind} folder"
    else:
        save_npz(out_path, cfg, params, layout=layout)
        what = f"an .npz in the {layout} layout"
    return (f"{out_path}: {what} of the latest checkpoint in {directory} ({cfg.num_layers} "
            f"layers, hidden {cfg.hidden_size}, {cfg.image_size[0]}x{cfg.image_size[1]} images, "
            f"{cfg.num_classes} classes)")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", help="the workdir of an image-classification run")
    parser.add_argument("out", help="the folder (hf) or .npz file (npz) to write")
    parser.add_argument("--format", choices=FORMATS, default="auto")
    parser.add_argument("--head", choices=("auto", "classifier", "model"), default="auto",
                        help="hf: ViTForImageClassification (auto, classifier) or ViTModel")
    parser.add_argument("--layout", choices=("vit", "big_vision"), default="vit",
                        help="npz: vision_transformer's (AugReg) or big_vision's names")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from train.checkpointing import CheckpointError as UnreadableCheckpoint

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(export(args.workdir, args.out, format=args.format, head=args.head,
                     layout=args.layout, overwrite=args.overwrite))
    except (ConfigError, CheckpointError, UnreadableCheckpoint) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
