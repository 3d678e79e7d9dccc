"""Reader for IDX files, the format of (Fashion-)MNIST, plain or gzip-compressed.

Layout (all integers big-endian):
  bytes 0-1   zero
  byte  2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
              0x0E float64
  byte  3     number of dimensions n
  then        n uint32 sizes, then prod(sizes) elements in C order.
Gzip is recognised by its magic bytes, not by the file name.
"""

from __future__ import annotations

import gzip
import math
import pathlib
import zlib

import numpy as np

from data.errors import DataError

_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: pathlib.Path, limit: int | None = None) -> bytes:
    """The (decompressed) content of `path`, or its first `limit` bytes."""
    if not path.is_file():
        raise DataError(f"{path}: IDX file not found")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: IDX file is empty")
    with open(path, "rb") as f:
        compressed = f.read(2) == _GZIP_MAGIC
    try:
        opener = gzip.open if compressed else open
        with opener(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except (EOFError, OSError, zlib.error) as e:
        raise DataError(f"{path}: corrupt gzip stream ({e})") from e


def _parse_header(path: pathlib.Path, raw: bytes) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, dims, header length) from the first bytes of an IDX file."""
    if len(raw) < 4:
        raise DataError(f"{path}: not an IDX file (only {len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _DTYPES:
        raise DataError(f"{path}: not an IDX file (bad magic {raw[:4].hex()}; expected 0000 "
                        f"followed by a type code in {sorted(hex(c) for c in _DTYPES)})")
    ndim = raw[3]
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataError(f"{path}: truncated header: {ndim} dimensions need {header_len} bytes, "
                        f"found {len(raw)}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    return _DTYPES[raw[2]], dims, header_len


def read_idx_shape(path: str | pathlib.Path) -> tuple[int, ...]:
    """The dimensions in the header of an IDX file, reading only the header (cheap)."""
    path = pathlib.Path(path)
    head = _read_bytes(path, limit=4 + 4 * 255)
    return _parse_header(path, head)[1]


def read_idx(path: str | pathlib.Path) -> np.ndarray:
    """The array stored in an IDX file; DataError naming the file when it is missing or corrupt."""
    path = pathlib.Path(path)
    raw = _read_bytes(path)
    dtype, dims, header_len = _parse_header(path, raw)
    expected = math.prod(dims) * dtype.itemsize  # Python ints: a corrupt header can't wrap
    found = len(raw) - header_len
    if found < expected:
        raise DataError(f"{path}: truncated: expected {expected} bytes of data for shape {dims}, "
                        f"found {found}")
    if found > expected:
        raise DataError(f"{path}: {found - expected} unexpected bytes after the {expected} bytes "
                        f"of data for shape {dims}")
    data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)
    return data.astype(dtype.newbyteorder("="), copy=False)


def write_idx(path: str | pathlib.Path, array: np.ndarray, *,
              compress: bool | None = None) -> None:
    """Writes `array` as an IDX file, gzip'd when `compress` (default: path ends in .gz).

    The gzip header carries no time stamp, so the same array always gives the same bytes.
    """
    path = pathlib.Path(path)
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in _DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise DataError(f"{path}: IDX cannot store dtype {array.dtype}")
    code = codes[native]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    content = header + np.ascontiguousarray(array, dtype=_DTYPES[code]).tobytes()
    if path.suffix == ".gz" if compress is None else compress:
        content = gzip.compress(content, compresslevel=9, mtime=0)
    path.write_bytes(content)
