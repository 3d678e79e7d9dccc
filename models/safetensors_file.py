"""safetensors files, read and written with NumPy alone (no ``safetensors`` package).

The format: 8 bytes little-endian u64 ``N``, then ``N`` bytes of JSON ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}`` (padded with spaces), then the raw
little-endian tensor bytes, offsets relative to the end of the header, covering the data without holes.
``read_safetensors`` returns BF16 tensors as float32 (exact: the bf16 bits are the top half of a
float32); ``write_safetensors`` writes arrays of any dtype named 'bfloat16' (``jnp.bfloat16``,
``ml_dtypes.bfloat16``) as BF16.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import struct
import tempfile
from typing import Any, Mapping

import numpy as np


class CheckpointError(ValueError):
    """A checkpoint file or tree that does not match what is asked for; the message says how."""


# ----------------------------------------------------------------------------- safetensors

# safetensors dtype -> NumPy dtype as stored (little-endian). BF16 is read as its uint16 bits.
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
           "I16": "<i2", "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1",
           "BOOL": "?"}
_NAMES = {np.dtype(v).newbyteorder("<").str: k for k, v in _DTYPES.items() if k != "BF16"}
_MAX_HEADER = 100 << 20  # a header of more than 100 MB is a corrupt length


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _read_header(f, path) -> tuple[int, dict]:
    size = os.fstat(f.fileno()).st_size
    raw = f.read(8)
    if len(raw) < 8:
        raise CheckpointError(f"{path}: not a safetensors file ({size} bytes, less than the "
                              "8-byte header length)")
    (n,) = struct.unpack("<Q", raw)
    if n > min(_MAX_HEADER, size - 8):
        raise CheckpointError(f"{path}: not a safetensors file (header length {n} for a file of "
                              f"{size} bytes)")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    return 8 + n, header


def safetensors_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when it has none); reads the header only."""
    with open(path, "rb") as f:
        _, header = _read_header(f, path)
    return dict(header.get("__metadata__") or {})


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """{name: array} of a safetensors file (native byte order; BF16 as float32).

    The file is read once; the arrays are views of that buffer (writable). CheckpointError when
    the file is not a complete, well-formed safetensors file.
    """
    path = pathlib.Path(path)
    with open(path, "rb") as f:
        start, header = _read_header(f, path)
        data = bytearray(os.fstat(f.fileno()).st_size - start)
        f.readinto(data)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    problems, spans, tensors = [], [], {}
    for name, entry in entries.items():
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
            shape = tuple(int(s) for s in shape)
        except (KeyError, TypeError, ValueError):
            problems.append(f"{name}: malformed entry {entry!r}")
            continue
        if dtype not in _DTYPES:
            problems.append(f"{name}: unsupported dtype {dtype!r} (known: {sorted(_DTYPES)})")
            continue
        stored = np.dtype(_DTYPES[dtype])
        nbytes = math.prod(shape) * stored.itemsize
        if not 0 <= begin <= end <= len(data) or end - begin != nbytes:
            problems.append(f"{name}: bytes [{begin}, {end}) do not hold {dtype} {list(shape)} "
                            f"({nbytes} bytes) within the {len(data)} data bytes")
            continue
        spans.append((begin, end))
        array = np.frombuffer(data, stored, count=math.prod(shape), offset=begin).reshape(shape)
        if dtype == "BF16":
            tensors[name] = _bf16_to_f32(array.astype(np.uint16, copy=False))
        else:
            tensors[name] = array.astype(stored.newbyteorder("="), copy=False)
    covered = 0
    for begin, end in sorted(spans):
        if begin != covered:
            problems.append(f"data bytes [{min(begin, covered)}, {max(begin, covered)}) are "
                            f"{'overlapping' if begin < covered else 'a hole'}")
        covered = max(covered, end)
    if not problems and covered != len(data):
        problems.append(f"{len(data) - covered} data bytes after the last tensor")
    if problems:
        raise CheckpointError(f"{path}: corrupt safetensors file (truncated or not written "
                              "completely?):\n  " + "\n  ".join(problems))
    return tensors


def contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` in C order (a copy only when it is not); unlike ``np.ascontiguousarray``, a 0-d
    array stays 0-d."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _as_stored(array) -> tuple[str, np.ndarray]:
    """(safetensors dtype, little-endian C-contiguous array to write) of an array."""
    array = np.asarray(array)
    if array.dtype.name == "bfloat16":
        return "BF16", contiguous(array).view(np.uint16).astype("<u2", copy=False)
    name = _NAMES.get(array.dtype.newbyteorder("<").str)
    if name is None:
        raise CheckpointError(f"safetensors cannot store dtype {array.dtype}")
    return name, contiguous(array.astype(array.dtype.newbyteorder("<"), copy=False))


def write_safetensors(path: str | os.PathLike, tensors: Mapping[str, Any],
                      metadata: Mapping[str, str] | None = None) -> None:
    """Writes {name: array} (and string ``metadata``) as a safetensors file.

    Tensors are laid out by decreasing item size, then name, so each starts at a multiple of its
    item size (the header is padded to 8 bytes). Written to a temporary file beside ``path``,
    then renamed over it.
    """
    path = pathlib.Path(path)
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in metadata.items()):
        raise CheckpointError(f"safetensors metadata must map str to str, got {dict(metadata)!r}")
    if "__metadata__" in tensors:
        raise CheckpointError("'__metadata__' is reserved in safetensors; not a tensor name")
    stored = {name: _as_stored(array) for name, array in tensors.items()}
    order = sorted(stored, key=lambda n: (-stored[n][1].dtype.itemsize, n))
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        dtype, array = stored[name]
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for name in order:
                f.write(memoryview(stored[name][1].reshape(-1).view(np.uint8)))
        os.chmod(tmp, 0o644)  # mkstemp made it private; an exported checkpoint is to be shared
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def safetensors_shapes(path: str | os.PathLike) -> dict[str, tuple[int, ...]]:
    """{name: shape} of a safetensors file's tensors, from its header alone (no tensor read):
    what a model's architecture needs to be known before its weights are."""
    with open(path, "rb") as f:
        _, header = _read_header(f, path)
    try:
        return {name: tuple(int(s) for s in entry["shape"]) for name, entry in header.items()
                if name != "__metadata__"}
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors header ({e!r})") from e
