"""A minimal reader of R's serialized data: XDR serialization and lazy-load databases.

R packages keep their data sets in a lazy-load database, two files beside each other:

  Rdata.rdx  an RDS file (gzip'd, as `saveRDS` writes it) holding the index: a named list
             `variables` (name -> integer vector (offset, length) into the .rdb), `references`
             (environments; none in plain data) and `compressed` (how each record is compressed)
  Rdata.rdb  the records, one per variable: a 4-byte big-endian *uncompressed* length, then
             (compressed = TRUE) a zlib stream, or (compressed = 2 or 3) a one-byte method and
             the data: 'Z' a raw LZMA2 stream (xz's preset 6, no container), '2' bzip2, '1'
             zlib, '0' stored (R's R_decompress2/3). Each record is one serialized value.

A serialized value is "X\\n" (XDR: big-endian), the format version (2 or 3), the writer's and the
oldest reader's R version, for version 3 the writer's native encoding (the encoding of strings
not flagged UTF-8, latin-1 or ASCII), then the object tree. Each item
starts with a 32-bit flags word: bits 0-7 the type (SEXPTYPE), bit 8 "is an object", bit 9 "has
attributes", bit 10 "has a tag", bits 12-27 the "levels" (for strings: their encoding). See R's
`src/main/serialize.c` and the "R Internals" manual, section 1.8 "Serialization Formats".

Only what plain data uses is read: character, logical, integer and double vectors, lists,
pairlists (attributes), symbols, the reference table and NULL. Anything else (functions,
environments, ALTREP compact sequences, complex or raw vectors, the ASCII and native-binary
formats) raises DataError naming the type and the file.
"""

from __future__ import annotations

import bz2
import codecs
import dataclasses
import gzip
import lzma
import pathlib
import struct
import zlib
from typing import Any

from data.errors import DataError

# SEXPTYPE codes of the types this reader understands (R's Rinternals.h / serialize.c).
NILSXP, SYMSXP, LISTSXP, CHARSXP = 0, 1, 2, 9
LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP, EXPRSXP = 10, 13, 14, 16, 19, 20
REFSXP, NILVALUE_SXP = 255, 254

# Names of the other types, for error messages.
_OTHER_TYPES = {
    3: "closure (CLOSXP)", 4: "environment (ENVSXP)", 5: "promise (PROMSXP)",
    6: "call (LANGSXP)", 7: "special function (SPECIALSXP)", 8: "builtin function (BUILTINSXP)",
    15: "complex vector (CPLXSXP)", 17: "dots (DOTSXP)", 21: "byte code (BCODESXP)",
    22: "external pointer (EXTPTRSXP)", 23: "weak reference (WEAKREFSXP)",
    24: "raw vector (RAWSXP)", 25: "S4 object (S4SXP)", 238: "ALTREP object (ALTREP_SXP)",
    239: "pairlist with attributes (ATTRLISTSXP)", 240: "call with attributes (ATTRLANGSXP)",
    241: "base environment", 242: "empty environment", 244: "byte code (BCREPDEF)",
    245: "generic reference", 246: "class reference", 247: "persistent reference (PERSISTSXP)",
    248: "package environment (PACKAGESXP)", 249: "namespace (NAMESPACESXP)",
    250: "base namespace", 251: "missing argument", 252: "unbound value",
    253: "global environment",
}

_KINDS = {LGLSXP: "logical", INTSXP: "integer", REALSXP: "double", STRSXP: "character",
          VECSXP: "list", EXPRSXP: "expression", LISTSXP: "pairlist"}

NA_INTEGER = -(2 ** 31)  # R's NA for integers and logicals; read as None
# Encoding bits of a CHARSXP's levels (R's BYTES_MASK, LATIN1_MASK, UTF8_MASK, ASCII_MASK)
_BYTES_LEVEL, _LATIN1_LEVEL, _UTF8_LEVEL, _ASCII_LEVEL = 1 << 1, 1 << 2, 1 << 3, 1 << 6


@dataclasses.dataclass(frozen=True)
class RSymbol:
    """An R symbol (a name), e.g. the tag of an attribute."""

    name: str


@dataclasses.dataclass
class RObject:
    """An R vector or pairlist.

    kind: 'character', 'logical', 'integer', 'double', 'list', 'expression' or 'pairlist'.
    values: Python values; NA is None (character, logical, integer) or NaN (double).
    attributes: attribute name -> value (e.g. 'names', 'class', 'row.names').
    tags: for a pairlist, the tag (name) of each element, None where untagged.
    """

    kind: str
    values: list
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict)
    tags: list[str | None] | None = None

    @property
    def names(self) -> list[str | None] | None:
        """The `names` attribute as a list of strings, or the tags of a pairlist."""
        if self.kind == "pairlist":
            return self.tags
        names = self.attributes.get("names")
        return None if names is None else names.values

    def as_dict(self) -> dict[str, Any]:
        """{name: value} of a named list (or pairlist); DataError when an element has no name."""
        names = self.names
        if names is None or any(n is None for n in names) or len(names) != len(self.values):
            raise DataError(f"an R {self.kind} with names expected, found names {names}")
        return dict(zip(names, self.values))


class _Reader:
    """Reads one XDR-serialized value from `data` (`where` names the file for errors)."""

    def __init__(self, data: bytes, where: str):
        self.data, self.where, self.pos = data, where, 0
        self.refs: list[Any] = []  # R's reference table: symbols (and environments) in order
        self.native = "utf-8"  # the writer's encoding of unflagged strings (format 3 header)

    def fail(self, message: str) -> DataError:
        return DataError(f"{self.where}: {message} (at byte {self.pos})")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(f"truncated: {n} more bytes expected, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def read_int(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def length(self) -> int:
        n = self.read_int()
        if n == -1:  # long vector: two more words, upper and lower half
            upper, lower = struct.unpack(">II", self.take(8))
            n = (upper << 32) | lower
        elif n < 0:
            raise self.fail(f"negative vector length {n}")
        return n

    def header(self) -> None:
        magic = self.take(2)
        if magic != b"X\n":
            kind = {b"A\n": "ASCII", b"B\n": "native binary"}.get(magic)
            raise self.fail(f"{kind} R serialization is not supported, only XDR" if kind else
                            f"not R XDR serialization (starts with {magic!r}, expected b'X\\n')")
        version = self.read_int()
        if version not in (2, 3):
            raise self.fail(f"R serialization format version {version}; supported: 2, 3")
        self.take(8)  # R version of the writer, oldest R version that can read it
        if version == 3:  # the writer's native encoding, e.g. b'UTF-8', b'ISO-8859-1'
            name = self.take(self.length()).decode("ascii", "replace")
            try:
                self.native = codecs.lookup(name).name
            except LookupError as e:
                raise self.fail(f"unknown native encoding {name!r} of the writer") from e

    def value(self) -> Any:
        self.header()
        result = self.item()
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} unexpected bytes after the value")
        return result

    def item(self, flags: int | None = None) -> Any:
        start = self.pos
        flags = self.read_int() if flags is None else flags
        sexptype, levels = flags & 0xFF, flags >> 12
        has_attr = bool(flags & (1 << 9))
        if sexptype == NILVALUE_SXP:
            return None
        if sexptype == REFSXP:
            index = flags >> 8 or self.read_int()
            if not 1 <= index <= len(self.refs):
                raise self.fail(f"reference {index} to an unknown object ({len(self.refs)} known)")
            return self.refs[index - 1]
        if sexptype == SYMSXP:
            name = self.item()
            if not isinstance(name, str):
                raise self.fail(f"a symbol's name must be a string, found {name!r}")
            symbol = RSymbol(name)
            self.refs.append(symbol)
            return symbol
        if sexptype == CHARSXP:
            return self.charsxp(levels)
        if sexptype == LISTSXP:
            return self.pairlist(flags)
        if sexptype in (LGLSXP, INTSXP, REALSXP, STRSXP, VECSXP, EXPRSXP):
            values = self.vector(sexptype)
            attributes = self.attributes() if has_attr else {}
            return RObject(_KINDS[sexptype], values, attributes)
        what = _OTHER_TYPES.get(sexptype, f"unknown type code {sexptype}")
        self.pos = start
        raise self.fail(f"R object of type {what} is not supported by this minimal reader "
                        "(it reads character/logical/integer/double vectors, lists, pairlists, "
                        "symbols and NULL)")

    def charsxp(self, levels: int) -> str | None:
        n = self.read_int()
        if n == -1:
            return None  # NA_character_
        raw = self.take(n)
        if levels & _BYTES_LEVEL:
            raise self.fail("a string marked as raw bytes (not text) is not supported")
        if levels & _LATIN1_LEVEL:
            encoding = "latin-1"
        elif levels & (_UTF8_LEVEL | _ASCII_LEVEL):
            encoding = "utf-8"
        else:  # unflagged: the writer's native encoding (format 2 does not say: UTF-8 assumed)
            encoding = self.native
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError as e:
            raise self.fail(f"a string is not valid {encoding} ({e})") from e

    def vector(self, sexptype: int) -> list:
        n = self.length()
        if sexptype in (LGLSXP, INTSXP):
            ints = struct.unpack(f">{n}i", self.take(4 * n))
            if sexptype == LGLSXP:
                return [None if v == NA_INTEGER else bool(v) for v in ints]
            return [None if v == NA_INTEGER else v for v in ints]
        if sexptype == REALSXP:
            return list(struct.unpack(f">{n}d", self.take(8 * n)))
        if sexptype == STRSXP:
            out = []
            for _ in range(n):
                flags = self.read_int()
                if flags & 0xFF != CHARSXP:
                    raise self.fail(f"a character vector element of type {flags & 0xFF}, "
                                    f"expected CHARSXP ({CHARSXP})")
                out.append(self.charsxp(flags >> 12))
            return out
        return [self.item() for _ in range(n)]  # list / expression

    def pairlist(self, flags: int) -> RObject:
        """A pairlist (a linked list of tagged cells), read iteratively: cells nest by their CDR."""
        values, tags, attributes = [], [], {}
        while True:
            if flags & (1 << 9):
                attributes.update(self.attributes())
            tag = self.item() if flags & (1 << 10) else None
            if tag is not None and not isinstance(tag, RSymbol):
                raise self.fail(f"a pairlist tag must be a symbol, found {tag!r}")
            tags.append(None if tag is None else tag.name)
            values.append(self.item())
            flags = self.read_int()
            if flags & 0xFF == NILVALUE_SXP:
                return RObject("pairlist", values, attributes, tags)
            if flags & 0xFF != LISTSXP:
                raise self.fail(f"a pairlist ending in type {flags & 0xFF}, expected NULL")

    def attributes(self) -> dict[str, Any]:
        attrs = self.item()
        if not isinstance(attrs, RObject) or attrs.kind != "pairlist":
            raise self.fail(f"attributes must be a pairlist, found {attrs!r}")
        return attrs.as_dict()


def unserialize(data: bytes, where: str = "<bytes>") -> Any:
    """The value of one XDR R serialization (what `serialize(x, NULL, xdr=TRUE)` writes).

    Returns an RObject (vectors, lists, pairlists), a str (a bare CHARSXP), an RSymbol or None.
    """
    return _Reader(data, where).value()


def _decompress_file(raw: bytes) -> bytes:
    """Undoes the compression `saveRDS` may use (gzip, bzip2 or xz), or none."""
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw)
    if raw[:3] == b"BZh":
        return bz2.decompress(raw)
    if raw[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(raw)
    return raw


def read_rds(path: str | pathlib.Path) -> Any:
    """The value in an .rds file (what `saveRDS` writes: XDR serialization, usually gzip'd)."""
    path = pathlib.Path(path)
    try:
        raw = path.read_bytes()
        data = _decompress_file(raw)
    except FileNotFoundError as e:
        raise DataError(f"R data file {path} not found") from e
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as e:
        raise DataError(f"{path}: corrupt compressed R data ({e})") from e
    return unserialize(data, str(path))


def _raw_lzma2(body: bytes) -> bytes:
    """A record R compressed with xz: a raw LZMA2 stream of preset 6, no .xz container."""
    return lzma.decompress(body, format=lzma.FORMAT_RAW,
                           filters=[{"id": lzma.FILTER_LZMA2, "preset": 6}])


def _decompress_record(record: bytes, compressed: Any, where: str) -> bytes:
    """A .rdb record: 4-byte big-endian uncompressed length, then the (compressed) bytes."""
    if len(record) < 4:
        raise DataError(f"{where}: a record of {len(record)} bytes is too short")
    expected = struct.unpack(">I", record[:4])[0]
    body, method = record[4:], "1"  # compressed = TRUE: zlib, no method byte
    if compressed in (2, 3):  # R_compress2/3: a method byte follows the length
        method, body = chr(record[4]), record[5:]
    elif compressed not in (True, 1):
        raise DataError(f"{where}: unknown record compression {compressed!r} in the index")
    decompress = {"Z": _raw_lzma2, "2": bz2.decompress, "1": zlib.decompress,
                  "0": bytes}.get(method)
    if decompress is None:
        raise DataError(f"{where}: record compression method {method!r} is not supported "
                        "(supported: xz 'Z', bzip2 '2', zlib '1', stored '0')")
    try:
        data = decompress(body)
    except (zlib.error, lzma.LZMAError, OSError, ValueError, EOFError) as e:
        raise DataError(f"{where}: corrupt compressed record ({e})") from e
    if len(data) != expected:
        raise DataError(f"{where}: record decompressed to {len(data)} bytes, its header says "
                        f"{expected}")
    return data


class LazyLoadDB:
    """An R lazy-load database (`NAME.rdx` index + `NAME.rdb` records), read on demand.

        db = LazyLoadDB("janeaustenr/data/Rdata")
        db.names        # ['emma', 'mansfieldpark', ...]
        db["emma"]      # RObject(kind='character', values=[...lines...])
    """

    def __init__(self, stem: str | pathlib.Path):
        stem = pathlib.Path(stem)
        self.rdx, self.rdb = stem.with_suffix(".rdx"), stem.with_suffix(".rdb")
        index = read_rds(self.rdx)
        if not isinstance(index, RObject) or index.kind != "list":
            raise DataError(f"{self.rdx}: a lazy-load index is a list, found {index!r}")
        fields = index.as_dict()
        if "variables" not in fields or "compressed" not in fields:
            raise DataError(f"{self.rdx}: a lazy-load index has `variables` and `compressed`, "
                            f"found {sorted(fields)}")
        variables = fields["variables"]
        self.offsets: dict[str, tuple[int, int]] = {}
        for name, where in (variables.as_dict() if variables is not None else {}).items():
            if not isinstance(where, RObject) or len(where.values) != 2:
                raise DataError(f"{self.rdx}: variable {name!r} has no (offset, length) pair")
            self.offsets[name] = (int(where.values[0]), int(where.values[1]))
        compressed = fields["compressed"]
        self.compressed = compressed.values[0] if isinstance(compressed, RObject) else compressed

    @property
    def names(self) -> list[str]:
        return list(self.offsets)

    def __contains__(self, name: str) -> bool:
        return name in self.offsets

    def __getitem__(self, name: str) -> Any:
        if name not in self.offsets:
            raise DataError(f"{self.rdb}: no variable {name!r}; it holds {self.names}")
        offset, length = self.offsets[name]
        try:
            with open(self.rdb, "rb") as f:
                f.seek(offset)
                record = f.read(length)
        except FileNotFoundError as e:
            raise DataError(f"R lazy-load database {self.rdb} not found") from e
        if len(record) != length:
            raise DataError(f"{self.rdb}: truncated: variable {name!r} needs bytes "
                            f"{offset}..{offset + length}, the file has {len(record)} of them")
        where = f"{self.rdb} (variable {name!r})"
        return unserialize(_decompress_record(record, self.compressed, where), where)
