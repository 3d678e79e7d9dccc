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
