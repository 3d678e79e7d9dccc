"""A Hugging Face model folder: ``config.json`` beside ``model.safetensors``, read with named
errors and written atomically. Shared by the converters of each model family (models/hf_bert.py,
models/hf_vit.py), which decide what the two files hold.

Written into a temporary folder beside the target, then renamed into place: a crash never leaves
a half-written checkpoint under the name. Sharded checkpoints (``model.safetensors.index.json``)
and ``pytorch_model.bin`` (a pickle) are not read.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Iterable, Mapping

import numpy as np

from models.safetensors_file import CheckpointError, write_safetensors

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def require_files(directory: pathlib.Path, names: Iterable[str] = (CONFIG_FILE, WEIGHTS_FILE)
                  ) -> None:
    """CheckpointError naming the first missing file and what the folder holds instead."""
    for path in (directory / name for name in names):
        if not path.is_file():
            others = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else None
            hint = ("" if others is None else
                    f" (the folder holds {others}; sharded checkpoints and pytorch_model.bin "
                    "are not read: save the model with safe_serialization=True, unsharded)")
            raise CheckpointError(f"{path} does not exist{hint}")


def read_config_json(directory: pathlib.Path) -> dict[str, Any]:
    """The folder's config.json as a dict; CheckpointError when unreadable."""
    config_path = directory / CONFIG_FILE
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{config_path}: unreadable config ({e})") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: unreadable config (not a JSON object)")
    return config


def _is_model_folder(directory: pathlib.Path) -> bool:
    """Files only (no subfolder: a workdir's checkpoints/), config.json and weights among
    them."""
    entries = list(directory.iterdir())
    names = {p.name for p in entries}
    return all(p.is_file() for p in entries) and {CONFIG_FILE, WEIGHTS_FILE} <= names


def write_folder(directory: str | os.PathLike, config: Mapping[str, Any],
                 tensors: Mapping[str, np.ndarray], *, overwrite: bool = False,
                 extra_files: Mapping[str, bytes] | None = None) -> pathlib.Path:
    """Writes ``config.json`` and ``model.safetensors`` (PyTorch layout, metadata format 'pt')
    into ``directory``, atomically (module docstring), with ``extra_files`` {name: contents}
    beside them (a tokenizer's files). An existing non-empty ``directory`` is replaced only with
    ``overwrite=True``, and only if it is a model folder (files alone, ``config.json`` and
    ``model.safetensors`` among them): never a training workdir or a folder of folders;
    otherwise CheckpointError."""
    extra_files = dict(extra_files or {})
    clash = sorted({CONFIG_FILE, WEIGHTS_FILE} & set(extra_files))
    if clash or any("/" in name or name.startswith(".") for name in extra_files):
        raise CheckpointError(f"extra files {sorted(extra_files)}: plain names other than "
                              f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    directory = pathlib.Path(directory)

    def occupied() -> bool:
        if directory.is_dir():
            return any(directory.iterdir())
        return directory.exists() or directory.is_symlink()

    if occupied() and not overwrite:
        raise CheckpointError(f"{directory} exists and is not empty; pass overwrite=True "
                              "(--overwrite) to replace it")
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"{directory} is a file, not a model folder, so it is not replaced "
                              "even with overwrite: write to a new folder")
    if occupied() and directory.is_dir() and not _is_model_folder(directory):
        raise CheckpointError(
            f"{directory} is not a model folder (it holds "
            f"{', '.join(sorted(p.name for p in directory.iterdir())[:6])}), so it is not "
            f"replaced even with overwrite: only a folder of files with {CONFIG_FILE} and "
            f"{WEIGHTS_FILE} is. Write to a new folder")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-",
                                            dir=directory.parent))
    try:
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        # 'format': 'pt' tells HF transformers the tensors use PyTorch's layout (Linear [out, in]).
        write_safetensors(staging / WEIGHTS_FILE, tensors, metadata={"format": "pt"})
        for name, contents in extra_files.items():
            (staging / name).write_bytes(contents)
        staging.chmod(0o755)  # mkdtemp made it private
        old = None
        if directory.is_dir() and not directory.is_symlink():
            old = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-",
                                                dir=directory.parent))
            directory.rename(old / "previous")
        elif directory.is_symlink():
            directory.unlink()  # overwrite=True over a dangling link
        staging.rename(directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return directory
