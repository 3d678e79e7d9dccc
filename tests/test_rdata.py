"""data.formats.rdata, the reader of R's XDR serialization and lazy-load databases: a real
R-written index (tests/fixtures/austen/Rdata.rdx), values written here by a tiny R XDR writer,
and clear errors for what it does not read."""

from __future__ import annotations

import bz2
import gzip
import lzma
import pathlib
import re
import struct

import pytest

from data.corpora import austen
from data.formats import rdata
from data.errors import DataError
from r_xdr_writer import RWriter, flags, write_lazyload_db

RDX_FIXTURE = pathlib.Path(__file__).resolve().parent / "fixtures" / "austen" / "Rdata.rdx"


def test_rdata_reads_the_index_r_wrote():
    index = rdata.read_rds(RDX_FIXTURE)
    assert index.kind == "list" and index.names == ["variables", "references", "compressed"]
    fields = index.as_dict()
    variables = fields["variables"].as_dict()
    assert list(variables) == list(sorted(austen.BOOKS))
    assert variables["emma"].kind == "integer" and variables["emma"].values == [0, 352043]
    assert variables["sensesensibility"].values == [1334779, 266556]
    assert fields["compressed"].kind == "logical" and fields["compressed"].values == [True]
    assert fields["references"].values == []


def test_rdata_values_attributes_and_references():
    w = RWriter()
    value = w.named_list({
        "s": w.character(["x", None, "é"]),
        "i": w.integer([1, None, -3], {"names": w.character(["a", "b", "c"])}),
        "l": w.integer([1, None, 0], sexptype=10),
        "d": w.double([1.5, -2.0]),
        "n": struct.pack(">i", 254),  # NULL
    })
    obj = rdata.unserialize(RWriter.serialize(value))
    assert obj.names == ["s", "i", "l", "d", "n"]
    v = obj.as_dict()
    assert v["s"].kind == "character" and v["s"].values == ["x", None, "é"]
    # The second `names` tag is a reference to the first symbol in R's reference table.
    assert v["i"].values == [1, None, -3] and v["i"].names == ["a", "b", "c"]
    assert v["l"].values == [True, None, False] and v["d"].values == [1.5, -2.0]
    assert v["n"] is None


@pytest.mark.parametrize("data, message", [
    (b"A\n" + bytes(20), "ASCII R serialization is not supported"),
    (b"RDX3\n", "not R XDR serialization"),
    (b"X\n" + struct.pack(">iii", 4, 0, 0), "format version 4"),
    (RWriter.serialize(flags(3)), "closure (CLOSXP) is not supported"),
    (RWriter.serialize(flags(238)), "ALTREP"),
    (RWriter.serialize(flags(16) + struct.pack(">i", 3)), "truncated"),
    (RWriter.serialize(struct.pack(">i", 255 | 7 << 8)), "reference 7 to an unknown object"),
    (RWriter.serialize(struct.pack(">i", 254)) + b"xx", "2 unexpected bytes"),
], ids=["ascii", "magic", "version", "closure", "altrep", "truncated", "reference", "trailing"])
def test_rdata_errors_are_clear(data, message):
    with pytest.raises(DataError, match=re.escape(message)) as err:
        rdata.unserialize(data, "some.rds")
    assert "some.rds" in str(err.value)


@pytest.mark.parametrize("method", ["Z", "2", "1", "0"])
def test_lazyload_db_records_of_every_compression_method(tmp_path, method):
    """compress = 2/3 records carry a method byte: 'Z' is xz (a raw LZMA2 stream; it was read
    as zlib), '2' bzip2, '1' zlib (it was refused), '0' stored."""
    write_lazyload_db(tmp_path / "Rdata", {"one": ["a", "Ünïcode"]}, method=method)
    assert rdata.LazyLoadDB(tmp_path / "Rdata")["one"].values == ["a", "Ünïcode"]


def test_unflagged_strings_are_in_the_writers_native_encoding():
    """A format-3 stream names the writer's encoding; a string without an encoding flag is in
    it (a latin-1 session's 'café' was decoded as UTF-8 and crashed)."""
    def stream(encoding: bytes, raw: bytes) -> bytes:
        head = b"X\n" + struct.pack(">iii", 3, 0x40300, 0x30500)
        return (head + struct.pack(">i", len(encoding)) + encoding + flags(16) +
                struct.pack(">i", 1) + flags(9) + struct.pack(">i", len(raw)) + raw)

    assert rdata.unserialize(stream(b"ISO-8859-1", b"caf\xe9")).values == ["café"]
    assert rdata.unserialize(stream(b"UTF-8", "café".encode())).values == ["café"]
    with pytest.raises(DataError, match="not valid utf-8"):
        rdata.unserialize(stream(b"UTF-8", b"caf\xe9"), "x.rds")
    with pytest.raises(DataError, match="unknown native encoding 'KLINGON'"):
        rdata.unserialize(stream(b"KLINGON", b"a"), "x.rds")


def test_a_truncated_rds_is_a_data_error_whatever_its_compression(tmp_path):
    data = RWriter.serialize(RWriter().character(["a"] * 200))
    for name, compress in (("gz", gzip.compress), ("bz2", bz2.compress), ("xz", lzma.compress)):
        path = tmp_path / f"x.{name}.rds"
        path.write_bytes(compress(data)[:-8])
        with pytest.raises(DataError, match="corrupt compressed R data") as err:
            rdata.read_rds(path)
        assert str(path) in str(err.value)


def test_lazyload_db_round_trip_and_errors(tmp_path):
    write_lazyload_db(tmp_path / "Rdata", {"one": ["a", "b"], "two": ["Ünïcode", ""]})
    db = rdata.LazyLoadDB(tmp_path / "Rdata")
    assert db.names == ["one", "two"] and "two" in db
    assert db["two"].values == ["Ünïcode", ""] and db["one"].kind == "character"
    with pytest.raises(DataError, match="no variable 'three'"):
        db["three"]
    rdb = tmp_path / "Rdata.rdb"
    rdb.write_bytes(rdb.read_bytes()[:-3])
    with pytest.raises(DataError, match="truncated"):
        db["two"]
    with pytest.raises(DataError, match="not found"):
        rdata.LazyLoadDB(tmp_path / "Nothing")


def test_rdata_long_lengths_far_references_string_flags_and_pairlist_attributes():
    """The less common corners of the format, each built by hand: a long-vector length (-1, then
    the upper and the lower 32-bit half), a reference whose index is in the next word (flags
    >> 8 == 0), strings flagged latin-1 in a UTF-8 stream (decoded as latin-1) or as raw bytes
    (refused), and a pairlist cell's own attributes (read before its tag)."""
    def ints(*values):
        return struct.pack(f">{len(values)}i", *values)

    # Long-vector length (upper, lower) = (0, 2): two integers follow.
    assert rdata.unserialize(RWriter.serialize(flags(13) + ints(-1, 0, 2, 5, 6))).values == [5, 6]
    # (1, 0) means 2**32 integers: 4 * 2**32 bytes wanted, not 4 (upper and lower swapped).
    with pytest.raises(DataError, match=f"truncated: {4 * 2 ** 32} more bytes expected"):
        rdata.unserialize(RWriter.serialize(flags(13) + ints(-1, 1, 0)), "long.rds")
    # A symbol "a", then a reference to it whose index 1 is in the word after the flags.
    w = RWriter()
    value = w.integer([7])
    cells = (flags(2, tag=True) + w.symbol("a") + value +
             flags(2, tag=True) + ints(255, 1) + value + flags(254))
    pairlist = rdata.unserialize(RWriter.serialize(cells))
    assert pairlist.kind == "pairlist" and pairlist.tags == ["a", "a"]
    assert [v.values for v in pairlist.values] == [[7], [7]]
    # Latin-1 flag (levels bit 2): b"caf\xe9" is "café" although the writer's encoding is UTF-8.
    latin1 = flags(9, levels=4) + ints(4) + b"caf\xe9"
    assert rdata.unserialize(RWriter.serialize(flags(16) + ints(1) + latin1)).values == ["café"]
    raw = flags(9, levels=2) + ints(3) + b"abc"
    with pytest.raises(DataError, match="marked as raw bytes"):
        rdata.unserialize(RWriter.serialize(flags(16) + ints(1) + raw), "raw.rds")
    # A pairlist cell with attributes: attributes, tag, value, then the next cell.
    w = RWriter()
    attrs = w.attributes({"class": w.character(["x"])})
    cell = flags(2, attr=True, tag=True) + attrs + w.symbol("b") + w.integer([3]) + flags(254)
    obj = rdata.unserialize(RWriter.serialize(cell))
    assert obj.tags == ["b"] and obj.values[0].values == [3]
    assert list(obj.attributes) == ["class"] and obj.attributes["class"].values == ["x"]


def test_lazyload_record_whose_length_header_disagrees_is_refused(tmp_path):
    """A record's 4-byte header gives its uncompressed length; a record that decompresses to
    another length is corrupt and must be named, not returned."""
    write_lazyload_db(tmp_path / "Rdata", {"one": ["a", "b"]})
    rdb = tmp_path / "Rdata.rdb"
    record = rdb.read_bytes()
    length = struct.unpack(">I", record[:4])[0]
    rdb.write_bytes(struct.pack(">I", length + 1) + record[4:])
    with pytest.raises(DataError, match=f"decompressed to {length} bytes, its header says "
                                        f"{length + 1}"):
        rdata.LazyLoadDB(tmp_path / "Rdata")["one"]
