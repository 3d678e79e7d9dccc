"""A tiny R XDR writer for the tests: R values written as R's `serialize(x, NULL, xdr=TRUE,
version=3)` writes them (the subset the Austen database uses), and lazy-load databases
(`<stem>.rdx/.rdb`) laid out as R's makeLazyLoadDB lays them out."""

from __future__ import annotations

import bz2
import gzip
import lzma
import pathlib
import struct
import zlib


def flags(sexptype, *, attr=False, tag=False, levels=0):
    """An object's header word: its SEXP type, has-attributes and has-tag bits, levels."""
    return struct.pack(">i", sexptype | attr << 9 | tag << 10 | levels << 12)


class RWriter:
    """Writes R values as R's `serialize(x, NULL, xdr=TRUE, version=3)` does (the subset used)."""

    def __init__(self):
        self.symbols = {}  # name -> reference index (1-based), as R's reference table

    def string(self, s):
        if s is None:
            return flags(9) + struct.pack(">i", -1)
        raw = s.encode("utf-8")
        return flags(9, levels=64 if s.isascii() else 8) + struct.pack(">i", len(raw)) + raw

    def symbol(self, name):
        if name in self.symbols:
            return struct.pack(">i", 255 | self.symbols[name] << 8)
        self.symbols[name] = len(self.symbols) + 1
        return flags(1) + self.string(name)

    def attributes(self, attrs):
        out = b""
        for name, value in attrs.items():
            out += flags(2, tag=True) + self.symbol(name) + value
        return out + flags(254)

    def vector(self, sexptype, body, n, attrs=None):
        head = flags(sexptype, attr=bool(attrs)) + struct.pack(">i", n)
        return head + body + (self.attributes(attrs) if attrs else b"")

    def character(self, values, attrs=None):
        return self.vector(16, b"".join(self.string(v) for v in values), len(values), attrs)

    def integer(self, values, attrs=None, sexptype=13):
        ints = [-(2 ** 31) if v is None else int(v) for v in values]
        return self.vector(sexptype, struct.pack(f">{len(ints)}i", *ints), len(ints), attrs)

    def double(self, values):
        return self.vector(14, struct.pack(f">{len(values)}d", *values), len(values))

    def named_list(self, items):
        return self.vector(19, b"".join(items.values()), len(items),
                           {"names": self.character(list(items))})

    @staticmethod
    def serialize(body):
        return b"X\n" + struct.pack(">iii", 3, 0x40201, 0x30500) + struct.pack(">i", 5) + \
            b"UTF-8" + body


# R's record compressors by method byte (R_compress2/3): xz is a raw LZMA2 stream, preset 6.
METHODS = {"Z": lambda b: lzma.compress(b, format=lzma.FORMAT_RAW,
                                        filters=[{"id": lzma.FILTER_LZMA2, "preset": 6}]),
           "2": bz2.compress, "1": zlib.compress, "0": bytes}


def write_lazyload_db(stem, values: dict[str, list[str]], method: str | None = None):
    """Writes `<stem>.rdx/.rdb` holding character vectors, as R's makeLazyLoadDB lays them out:
    `compress = TRUE` (zlib, no method byte) by default, else `compress = 3` with records of
    `method` ('Z' xz, '2' bzip2, '1' zlib, '0' stored)."""
    rdb, offsets = b"", {}
    for name, lines in values.items():
        data = RWriter.serialize(RWriter().character(lines))
        body = zlib.compress(data) if method is None else \
            method.encode() + METHODS[method](data)
        record = struct.pack(">I", len(data)) + body
        offsets[name] = (len(rdb), len(record))
        rdb += record
    w = RWriter()
    index = w.named_list({
        "variables": w.named_list({n: w.integer(o) for n, o in offsets.items()}),
        "references": w.named_list({}),
        "compressed": w.integer([1], sexptype=10) if method is None else w.integer([3]),
    })
    stem = pathlib.Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".rdx").write_bytes(gzip.compress(RWriter.serialize(index), mtime=0))
    stem.with_suffix(".rdb").write_bytes(rdb)
