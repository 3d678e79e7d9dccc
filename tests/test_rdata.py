"""data.corpora.rdata, the reader of R's XDR serialization and lazy-load databases: a real
R-written index (tests/fixtures/austen/Rdata.rdx), values written here by a tiny R XDR writer,
and clear errors for what it does not read."""

from __future__ import annotations

import pathlib
import re
import struct

import pytest

from data.corpora import austen, rdata
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
