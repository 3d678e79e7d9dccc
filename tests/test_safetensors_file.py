"""safetensors files (models/safetensors_file.py): every dtype round trip, the bytes parsed by
hand, and corrupt files."""

from __future__ import annotations

import json
import math
import struct

import jax.numpy as jnp
import numpy as np
import pytest

from models.safetensors_file import (CheckpointError, read_safetensors, safetensors_metadata,
                                     write_safetensors)


def test_safetensors_round_trip_with_bf16_and_metadata(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.normal(size=(3, 5)).astype(np.float32),
        "f16": rng.normal(size=(7,)).astype(np.float16),          # odd byte count: 14
        "bf16": np.asarray(jnp.asarray(rng.normal(size=(2, 3)), jnp.bfloat16)),
        "i64": np.array([[-(2 ** 40), 0, 7]], np.int64),
        "i32": np.arange(5, dtype=np.int32),
        "u8": np.array([0, 255], np.uint8),
        "bool": np.array([True, False, True]),
        "f64_scalar": np.float64(math.pi) * np.ones(()),
        "empty": np.zeros((0, 4), np.float32),
        "transposed": np.arange(12, dtype=np.float32).reshape(3, 4).T,  # not C-contiguous
        "big_endian": np.arange(3, dtype=">f4"),
    }
    path = tmp_path / "x.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt", "note": "héllo"})
    back = read_safetensors(path)
    assert sorted(back) == sorted(tensors)
    for name, x in tensors.items():
        want = np.asarray(x)
        if name == "bf16":                       # read back as float32, exactly
            assert back[name].dtype == np.float32
            want = want.astype(np.float32)
        elif name == "big_endian":
            assert back[name].dtype == np.dtype("=f4")
        else:
            assert back[name].dtype == want.dtype, name
        assert back[name].shape == want.shape, name
        np.testing.assert_array_equal(back[name], want, err_msg=name)
    assert safetensors_metadata(path) == {"format": "pt", "note": "héllo"}

    # The bytes, parsed here by hand: u64 LE header length, JSON header (8-byte padded), data.
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    assert header["__metadata__"] == {"format": "pt", "note": "héllo"}
    assert header["bf16"]["dtype"] == "BF16" and header["i64"]["dtype"] == "I64"
    assert header["f64_scalar"]["shape"] == [] and header["empty"]["shape"] == [0, 4]
    begin, end = header["f16"]["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(data[begin:end], "<f2"), tensors["f16"])
    begin, end = header["bf16"]["data_offsets"]           # bf16 = the top 16 bits of float32
    np.testing.assert_array_equal(np.frombuffer(data[begin:end], "<u2"),
                                  (tensors["bf16"].astype(np.float32).view(np.uint32) >> 16)
                                  .reshape(-1))
    spans = sorted(e["data_offsets"] for k, e in header.items() if k != "__metadata__")
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))   # no holes, no overlaps
    for k, e in header.items():                                 # each aligned to its item size
        if k != "__metadata__":
            assert e["data_offsets"][0] % np.asarray(tensors[k]).dtype.itemsize == 0, k
    assert not list(tmp_path.glob(".*partial"))


def test_corrupt_safetensors_files_raise(tmp_path):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {"a": np.ones((4, 4), np.float32), "b": np.ones(3, np.int64)})
    raw = path.read_bytes()
    (tmp_path / "truncated.safetensors").write_bytes(raw[:-5])
    with pytest.raises(CheckpointError, match=r"truncated\.safetensors: corrupt.*\n.*a: bytes"):
        read_safetensors(tmp_path / "truncated.safetensors")
    (tmp_path / "length.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + raw[8:])
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        read_safetensors(tmp_path / "length.safetensors")
    (tmp_path / "tiny.safetensors").write_bytes(b"\x01")
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        read_safetensors(tmp_path / "tiny.safetensors")
    with pytest.raises(CheckpointError, match="cannot store dtype complex64"):
        write_safetensors(tmp_path / "c.safetensors", {"c": np.ones(2, np.complex64)})


def _hand_made(path, entries: dict, data: bytes):
    """A safetensors file written here byte by byte: u64 LE header length, JSON, data."""
    text = json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


@pytest.mark.parametrize("entries, n_data, message", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, 12,
     r"data bytes \[4, 8\) are overlapping"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}}, 20,
     r"data bytes \[8, 12\) are a hole"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 12,
     "4 data bytes after the last tensor"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}, 8,
     r"a: bytes \[0, 8\) do not hold F32 \[1\] \(4 bytes\)"),
    ({"a": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}}, 1,
     "a: unsupported dtype 'F8'"),
    ({"a": {"dtype": "F32", "data_offsets": [0, 4]}}, 4, "a: malformed entry"),
], ids=["overlap", "hole", "trailing", "size", "dtype", "malformed"])
def test_inconsistent_safetensors_headers_raise(tmp_path, entries, n_data, message):
    """Headers that parse but do not describe the data (two tensors sharing bytes, bytes no
    tensor owns, a span of the wrong size for its dtype and shape, an unknown dtype, a missing
    field) are refused with the problem named, not read as garbage or a bare KeyError."""
    path = _hand_made(tmp_path / "x.safetensors", entries, bytes(n_data))
    with pytest.raises(CheckpointError, match=message):
        read_safetensors(path)


def test_header_length_past_the_end_and_bad_writes_raise(tmp_path):
    """A header length longer than the file (though under the 100 MB cap) is not a safetensors
    file; writing a tensor named '__metadata__' or metadata that is not str -> str is refused
    (the file would not read back)."""
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 100) + b"{}" + bytes(40))
    with pytest.raises(CheckpointError, match="header length 100 for a file of 50 bytes"):
        read_safetensors(path)
    with pytest.raises(CheckpointError, match="'__metadata__' is reserved"):
        write_safetensors(tmp_path / "m.safetensors", {"__metadata__": np.ones(1)})
    with pytest.raises(CheckpointError, match="metadata must map str to str"):
        write_safetensors(tmp_path / "m.safetensors", {"a": np.ones(1)}, metadata={"n": 1})
    assert not list(tmp_path.glob("m.safetensors*")) and not list(tmp_path.glob(".m.*"))
