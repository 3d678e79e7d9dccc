"""What every Hugging Face checkpoint converter shares (``models.hf_bert``, ``models.hf_gpt2``):
the folder layout (``config.json`` + ``model.safetensors``), reading it with errors that say
what is there, writing it atomically, parameter trees as flat paths, and the one error that lists
every missing, unexpected and mis-shaped tensor.

The safetensors files themselves are read and written by ``models.safetensors_file``. Pure NumPy:
no model code, no train or data imports.
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


def mismatch_error(what: str, missing: Iterable[str], unexpected: Iterable[str],
                   misshaped: Iterable[tuple[str, tuple, tuple]]) -> CheckpointError | None:
    """One CheckpointError listing every missing, unexpected and mis-shaped (name, expected
    shape, found shape) tensor under the heading ``what``; None when all lists are empty."""
    missing, unexpected, misshaped = sorted(missing), sorted(unexpected), sorted(misshaped)
    if not (missing or unexpected or misshaped):
        return None
    lines = [f"missing: {name}" for name in missing]
    lines += [f"unexpected: {name}" for name in unexpected]
    lines += [f"wrong shape: {name}: expected {list(want)}, found {list(got)}"
              for name, want, got in misshaped]
    return CheckpointError(f"{what}: {len(missing)} missing, {len(unexpected)} unexpected, "
                           f"{len(misshaped)} mis-shaped:\n  " + "\n  ".join(lines))


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a config's ``param_dtype`` name (bfloat16 from ml_dtypes)."""
    if name == "bfloat16":
        import ml_dtypes  # a dependency of jax; NumPy has no bfloat16 of its own
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def unboxed(tree: Mapping) -> dict:
    """Nested plain dicts of the values of flax's nn.Partitioned / LogicallyPartitioned boxes."""
    out = {}
    for key, value in tree.items():
        if hasattr(value, "unbox"):
            value = value.unbox()
        out[str(key)] = unboxed(value) if isinstance(value, Mapping) else value
    return out


def flatten(tree: Mapping, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """{path tuple: leaf} of nested dicts."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, (*path, str(key))))
        else:
            flat[(*path, str(key))] = value
    return flat


def nest(flat: Mapping[tuple[str, ...], Any]) -> dict:
    """The nested dicts of ``{path tuple: leaf}`` (``flatten``'s inverse)."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return tree


def require_files(directory: pathlib.Path, names: Iterable[str]) -> None:
    """CheckpointError naming the first missing file and what the folder holds instead."""
    for path in (directory / name for name in names):
        if not path.is_file():
            others = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else None
            hint = ("" if others is None else
                    f" (the folder holds {others}; sharded checkpoints and pytorch_model.bin "
                    "are not read: save the model with safe_serialization=True, unsharded)")
            raise CheckpointError(f"{path} does not exist{hint}")


def read_config_json(directory: pathlib.Path) -> dict[str, Any]:
    """The folder's ``config.json`` as a dict; CheckpointError when it cannot be read."""
    config_path = directory / CONFIG_FILE
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{config_path}: unreadable config ({e})") from e


def write_checkpoint(directory: str | os.PathLike, config: Mapping[str, Any],
                     tensors: Mapping[str, Any], *, overwrite: bool = False) -> pathlib.Path:
    """Writes ``config.json`` + ``model.safetensors`` (PyTorch layout, metadata format 'pt')
    into ``directory``.

    Written into a temporary folder beside it, then renamed into place: a crash never leaves a
    half-written checkpoint under the name. An existing non-empty ``directory`` is replaced only
    with ``overwrite=True``; otherwise CheckpointError.
    """
    directory = pathlib.Path(directory)

    def occupied() -> bool:
        if directory.is_dir():
            return any(directory.iterdir())
        return directory.exists() or directory.is_symlink()

    if occupied() and not overwrite:
        raise CheckpointError(f"{directory} exists and is not empty; pass overwrite=True to "
                              "replace it")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-",
                                            dir=directory.parent))
    try:
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        # 'format': 'pt' tells HF transformers the tensors use PyTorch's layout (Linear [out, in]).
        write_safetensors(staging / WEIGHTS_FILE, tensors, metadata={"format": "pt"})
        staging.chmod(0o755)  # mkdtemp made it private
        old = None
        if directory.is_dir() and not directory.is_symlink():
            old = pathlib.Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-",
                                                dir=directory.parent))
            directory.rename(old / "previous")
        elif directory.exists() or directory.is_symlink():
            directory.unlink()  # overwrite=True over a file or link
        staging.rename(directory)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return directory
