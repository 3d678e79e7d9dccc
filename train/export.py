"""python -m train.export WORKDIR OUT [--format auto|hf|npz] [--head ...] [--layout ...]
    [--weights raw|ema|average] [--overwrite]

Writes a run's weights in a format other code reads: by default those its final eval scored,
as python -m train.predict and train.evaluate read them (train/run_weights.py): the average of
its last checkpoints for a finished run with train.average_checkpoints > 0 (the Transformer's
base and big recipes), else the latest checkpoint's; --weights raw (the latest checkpoint's),
ema (their moving average, a run with train.ema_decay > 0) or average chooses, and the line
printed names them.

A translation run (configs/transformer/translate.py) becomes a Hugging Face Marian folder
(models/hf_marian.py: MarianMTModel's config.json + model.safetensors, and the run's vocabulary
as MarianTokenizer's source.spm, target.spm and vocab.json, train/marian_tokenizer.py); its model
must have Marian's architecture (`arch=marian` trains one), and --head / --layout do not apply.
An image-classification run (a ViT, configs/vit/...) becomes:
  hf    a Hugging Face ViT folder (config.json + model.safetensors, models/hf_vit.py): HF's
        ViTForImageClassification (--head classifier, the default), or ViTModel (--head model:
        the encoder, its pre-logits layer as ViTModel's pooler, no classifier);
  npz   the .npz of google-research/vision_transformer (--layout vit, the AugReg checkpoints'
        names, the default) or big_vision (--layout big_vision) (models/vit_npz.py).
--format auto picks npz for an OUT ending in .npz, else hf; --head is for hf and --layout for
npz only, and given for the other format is refused. The run's config.json (the model that ran,
train/run_config.py) gives the architecture. A model the format cannot describe (a hybrid
stem, mean pooling for HF, a ReLU model or a non-square patch grid as .npz, ...) is refused
with what differs, and so is a classification run of another model than a ViT (the convnet of
configs/vit/convnet_teacher.py), which has neither layout.
Either file starts another run: `--config configs/vit/fashion_mnist.py:init=OUT` (a Marian
folder: `--config configs/transformer/translate.py:init=OUT`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import zipfile
from typing import Any, Callable

from models.safetensors_file import CheckpointError
from models.vit import ViTConfig
from train import storage
from train.config import ConfigError
from train.run_config import read_resolved, saved_model
from train.run_weights import WEIGHTS

FORMATS = ("auto", "hf", "npz")
TASKS = ("classify", "translate")


def _saved_config(workdir) -> dict:
    path = workdir / "config.json"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {workdir} is not the workdir of a run")
    saved = read_resolved(path)
    task = saved.get("task", {}).get("name")
    if task not in TASKS:
        raise ConfigError(f"{workdir} holds a {task!r} run; python -m train.export writes the "
                          f"model of a run of {list(TASKS)}")
    return saved


def weights_loader(directory, saved: dict, weights: str | None) -> Callable[[], tuple[Any, str]]:
    """What reads the run's `weights` (None: those its final eval scored, train/run_weights.py
    `final_eval_weights`; `saved`: its config.json) when called: (the parameters, words that
    name them for the line printed). Nothing is read before the call."""
    from train.checkpointing import checkpoint_steps
    from train.run_weights import averaged_steps, final_eval_weights, load_weights

    def load() -> tuple[Any, str]:
        chosen = weights or final_eval_weights(directory, saved)
        params = load_weights(directory, weights=chosen)
        if chosen == "average":
            steps = averaged_steps(directory)
            return params, (f"its average weights (the last {len(steps)} checkpoints "
                            f"averaged, steps {', '.join(map(str, steps))})")
        latest = checkpoint_steps(directory)[-1]
        return params, (f"its raw weights (the latest checkpoint, step {latest})"
                        if chosen == "raw" else
                        f"its ema weights (the moving average in the latest checkpoint, step "
                        f"{latest})")
    return load


def export(workdir: str, out: str, *, format: str = "auto", head: str | None = None,
           layout: str | None = None, overwrite: bool = False, weights: str | None = None) -> str:
    """Writes the run's `weights` (module docstring; None: those its final eval scored) to
    `out`; returns what was written, as a line to print. `head` (ViT, hf only) defaults to
    'auto', `layout` (ViT, npz only) to 'vit'."""
    from models.hf_vit import save_hf_checkpoint
    from models.vit_npz import save_npz

    if format not in FORMATS:
        raise ConfigError(f"--format {format!r} is not one of {list(FORMATS)}")
    if weights is not None and weights not in WEIGHTS:
        raise ConfigError(f"--weights {weights!r} is not one of {list(WEIGHTS)}")
    if not str(out).strip():
        raise ConfigError(f"OUT {out!r} is blank: give the folder or .npz file to write")
    directory = storage.run_path(workdir)
    saved = _saved_config(directory)
    if saved["task"]["name"] == "translate":
        from train.export_translation import export_translation

        given = [f"--{name} {value}" for name, value in (("head", head), ("layout", layout))
                 if value is not None]
        if given:
            raise ConfigError(f"{' and '.join(given)}: for a ViT; {directory} holds a "
                              "translation run (a Hugging Face Marian folder has no head or "
                              "layout to choose)")
        return export_translation(directory, saved, pathlib.Path(out),  # local path: as below
                                  format=format, overwrite=overwrite,
                                  load=weights_loader(directory, saved, weights))
    model = saved.get("model", {}).get("name")
    if model != "vit":
        raise ConfigError(
            f"{directory} holds a classification run of config.model.name={model!r}, not a "
            f"ViT: a {model} has no Hugging Face ViT or .npz layout, so python -m train.export "
            "cannot write it; other runs read its workdir as it is (configs/vit/deit.py's "
            "teacher= takes the convnet's)")
    out_path = pathlib.Path(out)  # local path: models/ writes the .npz or HF folder locally
    if format == "auto":
        format = "npz" if out_path.suffix == ".npz" else "hf"
    if format == "npz" and head is not None:
        raise ConfigError(f"--head {head}: for a Hugging Face folder; {out_path} is written as an "
                          ".npz, which holds the run's classifier as it is: drop --head, or "
                          "write a folder (--format hf)")
    if format == "hf" and layout is not None:
        raise ConfigError(f"--layout {layout}: for an .npz; {out_path} is written as a Hugging "
                          "Face folder, whose names are HF's: drop --layout, or write an .npz "
                          "(--format npz, or an OUT ending in .npz)")
    head, layout = head or "auto", layout or "vit"
    cfg = saved_model(ViTConfig, saved, directory)
    if cfg.probe_norm:
        raise ConfigError(f"{directory} is a linear probe with probe_norm=True: neither format "
                          "has its feature standardisation before the head; export the "
                          "encoder's run (its config.init) instead")
    if format == "npz" and out_path.exists() and not overwrite:
        raise CheckpointError(f"{out_path} exists; pass --overwrite to replace it")
    if format == "npz" and out_path.exists() and not zipfile.is_zipfile(out_path):
        raise CheckpointError(f"{out_path} is not an .npz (a zip of arrays), so it is not "
                              "replaced even with --overwrite: write to a new path")
    params, which = weights_loader(directory, saved, weights)()
    if format == "hf":
        save_hf_checkpoint(out_path, cfg, params, head=head, overwrite=overwrite)
        kind = json.loads((out_path / "config.json").read_text())["architectures"][0]
        what = f"a Hugging Face {kind} folder"
    else:
        save_npz(out_path, cfg, params, layout=layout)
        what = f"an .npz in the {layout} layout"
    return (f"{out_path}: {what} of {which} in {directory} ({cfg.num_layers} "
            f"layers, hidden {cfg.hidden_size}, {cfg.image_size[0]}x{cfg.image_size[1]} images, "
            f"{cfg.num_classes} classes)")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m train.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", help="the workdir of an image-classification or translation "
                                            "run")
    parser.add_argument("out", help="the folder (hf) or .npz file (npz) to write")
    parser.add_argument("--format", choices=FORMATS, default="auto")
    parser.add_argument("--head", choices=("auto", "classifier", "model"), default=None,
                        help="ViT, hf: ViTForImageClassification (auto, the default; "
                             "classifier) or ViTModel")
    parser.add_argument("--layout", choices=("vit", "big_vision"), default=None,
                        help="ViT, npz: vision_transformer's (AugReg; the default) or "
                             "big_vision's names")
    parser.add_argument("--weights", choices=WEIGHTS, default=None,
                        help="raw: the latest checkpoint's; ema: their moving average (a run "
                             "with train.ema_decay > 0); average: the last "
                             "train.average_checkpoints checkpoints averaged (default: those "
                             "the run's final eval scored, as python -m train.predict: average "
                             "for a finished run that averages)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from train.checkpointing import CheckpointError as UnreadableCheckpoint

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(export(args.workdir, args.out, format=args.format, head=args.head,
                     layout=args.layout, overwrite=args.overwrite, weights=args.weights))
    except (ConfigError, CheckpointError, UnreadableCheckpoint) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
