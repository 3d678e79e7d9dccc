"""SWORD Bible modules in the zText format: read them, and write small ones for test fixtures.

A SWORD library is a folder holding `mods.d/<module>.conf` and the modules' data. A conf is a
`[ModuleName]` line followed by `Key=Value` lines (`#` starts a comment); the keys read here:
  DataPath        data folder relative to the library, e.g. ./modules/texts/ztext/engWEB2015eb/
  ModDrv          zText (the only driver read here)
  CompressType    ZIP (zlib; the only one read here)
  BlockType       BOOK, CHAPTER or VERSE: what one compressed block holds; names the files
  Versification   the verse numbering, e.g. KJV or NRSVA (default KJV)
  Encoding        UTF-8, else Latin-1
For each testament t ('ot', 'nt') the data folder holds three files (shown for BlockType=BOOK,
whose letter is b; CHAPTER uses c, VERSE v), all little-endian:
  t.bzs  block index, 12 bytes a block: uint32 offset in t.bzz, compressed size, uncompressed size
  t.bzv  verse index, 10 bytes a slot: uint32 block number, uint32 start in the uncompressed
         block, uint16 length (0: the slot is empty)
  t.bzz  the zlib-compressed blocks, one after another
The slots of t.bzv follow the versification: slot 0 the module heading, slot 1 the testament
heading, then for each book a book heading slot and, for each chapter, a chapter heading slot
followed by one slot per verse. The books and chapter lengths of each versification are SWORD's
tables as `pysword.canons` carries them (MIT). A verse's text is OSIS markup.

Every problem raises DataError naming the file; callers add how to fetch the files again.
"""

from __future__ import annotations

import dataclasses
import pathlib
import struct
import zlib
from typing import Iterator, Mapping

from pysword.canons import canons

from data.errors import DataError

Ref = tuple[str, int, int]  # (OSIS book name, chapter, verse), e.g. ("Gen", 1, 1)

TESTAMENTS = ("ot", "nt")
_BLOCK_LETTERS = {"BOOK": "b", "CHAPTER": "c", "VERSE": "v"}
_BLOCK_RECORD = struct.Struct("<III")  # offset, compressed size, uncompressed size
_VERSE_RECORD = struct.Struct("<IIH")  # block, start, length


@dataclasses.dataclass(frozen=True)
class ModuleConf:
    """What the reader needs from a module's conf file."""

    name: str  # the module's name, e.g. 'engWEB2015eb'
    conf_path: pathlib.Path
    data_dir: pathlib.Path  # where the testament files are
    versification: str  # key of pysword.canons, e.g. 'nrsva'
    encoding: str  # 'utf-8' or 'latin-1'
    block_letter: str  # 'b', 'c' or 'v': names the files (ot.bzs, ot.czs, ...)
    values: Mapping[str, str]  # every Key=Value of the conf (the first value of repeated keys)

    def files(self, testament: str) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
        """(block index, verse index, compressed text) of a testament."""
        letter = self.block_letter
        return tuple(self.data_dir / f"{testament}.{letter}z{kind}" for kind in "svz")


def conf_path(library: pathlib.Path, module: str) -> pathlib.Path:
    return pathlib.Path(library) / "mods.d" / f"{module}.conf"


def _parse_conf(path: pathlib.Path) -> tuple[str, dict[str, str]]:
    if not path.is_file():
        raise DataError(f"{path}: SWORD module conf not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        lines = path.read_text(encoding="latin-1").splitlines()
    name, values = None, {}
    # `continued`: the last value ended in a backslash, so the next line goes on with it; `key`:
    # whose value that is (None for a repeated key, whose value and continuations are dropped).
    key, continued = None, False
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if name is None:
            if not (stripped.startswith("[") and stripped.endswith("]")):
                raise DataError(f"{path}: not a SWORD module conf (no [ModuleName] line first)")
            name = stripped[1:-1]
            continue
        if continued:  # the previous value ended in a backslash: this line goes on with it
            if key is not None:
                values[key] = values[key][:-1].rstrip() + " " + stripped
            continued = stripped.endswith("\\")
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise DataError(f"{path}: line {line!r} is not Key=Value")
        key, value = key.strip(), value.strip()
        continued = value.endswith("\\")
        if key in values:  # repeated keys (GlobalOptionFilter, ...): keep the first
            key = None
            continue
        values[key] = value
    if name is None:
        raise DataError(f"{path}: empty SWORD module conf")
    return name, values


def read_conf(library: pathlib.Path, module: str) -> ModuleConf:
    """The conf of `module` in the SWORD library folder `library`, checked for what we read."""
    path = conf_path(library, module)
    name, values = _parse_conf(path)
    if name != module:
        raise DataError(f"{path}: conf of module [{name}], expected [{module}]")
    driver = values.get("ModDrv", "")
    if driver.lower() != "ztext":
        raise DataError(f"{path}: ModDrv={driver}; only zText modules can be read")
    compress = values.get("CompressType", "LZSS")
    if compress.upper() != "ZIP":
        raise DataError(f"{path}: CompressType={compress}; only ZIP (zlib) can be read")
    block = values.get("BlockType", "CHAPTER").upper()
    if block not in _BLOCK_LETTERS:
        raise DataError(f"{path}: BlockType={block}; known: {sorted(_BLOCK_LETTERS)}")
    versification = values.get("Versification", "KJV")
    if versification.lower() not in canons:
        raise DataError(f"{path}: Versification={versification} is unknown; known: "
                        f"{sorted(canons)}")
    data_path = values.get("DataPath", "")
    if not data_path:
        raise DataError(f"{path}: no DataPath")
    encoding = "utf-8" if values.get("Encoding", "").upper().replace("-", "") == "UTF8" else \
        "latin-1"
    return ModuleConf(name=name, conf_path=path, data_dir=pathlib.Path(library) / data_path,
                      versification=versification.lower(), encoding=encoding,
                      block_letter=_BLOCK_LETTERS[block], values=values)


def books(versification: str, testament: str) -> list[tuple[str, list[int]]]:
    """[(OSIS book name, verses per chapter)] of a testament in a versification (e.g. 'kjv')."""
    if versification not in canons:
        raise DataError(f"unknown versification {versification!r}; known: {sorted(canons)}")
    return [(osis, list(lengths)) for _, osis, _, lengths in canons[versification][testament]]


def slots(versification: str, testament: str) -> Iterator[tuple[str | None, Ref | None]]:
    """(book, ref) of every verse-index slot in order; ref None for the heading slots."""
    yield None, None  # module heading
    yield None, None  # testament heading
    for book, lengths in books(versification, testament):
        yield book, None  # book heading
        for chapter, num_verses in enumerate(lengths, 1):
            yield book, None  # chapter heading
            for verse in range(1, num_verses + 1):
                yield book, (book, chapter, verse)


def _read(path: pathlib.Path, record: struct.Struct | None = None) -> bytes:
    if not path.is_file():
        raise DataError(f"{path}: SWORD module file not found")
    data = path.read_bytes()
    if record is not None and len(data) % record.size:
        raise DataError(f"{path}: {len(data)} bytes is not a whole number of "
                        f"{record.size}-byte records; the file is truncated or corrupt")
    return data


def check_module(conf: ModuleConf) -> None:
    """Cheap checks (sizes only) that the index files of a module fit its versification."""
    for testament in TESTAMENTS:
        block_index, verse_index, text = conf.files(testament)
        for path in (block_index, text):
            if not path.is_file():
                raise DataError(f"{path}: SWORD module file not found")
        if not verse_index.is_file():
            raise DataError(f"{verse_index}: SWORD module file not found")
        size = verse_index.stat().st_size
        if size % _VERSE_RECORD.size:
            raise DataError(f"{verse_index}: {size} bytes is not a whole number of "
                            f"{_VERSE_RECORD.size}-byte records; the file is truncated or corrupt")
        _check_slot_count(conf, testament, verse_index, size // _VERSE_RECORD.size)


def _check_slot_count(conf: ModuleConf, testament: str, path: pathlib.Path, found: int) -> None:
    expected = sum(1 for _ in slots(conf.versification, testament))
    if found != expected:
        raise DataError(f"{path}: {found} verse slots, but versification "
                        f"{conf.versification.upper()} has {expected} in the {testament.upper()}; "
                        "the file is truncated or does not belong to this conf")


def read_testament(conf: ModuleConf, testament: str) -> Iterator[tuple[Ref, str]]:
    """(ref, OSIS text) of every verse slot of a testament ('' for an empty verse)."""
    block_path, verse_path, text_path = conf.files(testament)
    block_index = _read(block_path, _BLOCK_RECORD)
    verse_index = _read(verse_path, _VERSE_RECORD)
    text = _read(text_path)
    _check_slot_count(conf, testament, verse_path, len(verse_index) // _VERSE_RECORD.size)
    num_blocks = len(block_index) // _BLOCK_RECORD.size
    cache: dict[int, bytes] = {}  # block number -> uncompressed block (one book is ~100 KB)

    def block(number: int, ref: Ref) -> bytes:
        if number not in cache:
            if number >= num_blocks:
                raise DataError(f"{verse_path}: {_ref(ref)} points to block {number}, but "
                                f"{block_path} has {num_blocks} blocks")
            offset, size, expected = _BLOCK_RECORD.unpack_from(block_index,
                                                                number * _BLOCK_RECORD.size)
            if offset + size > len(text):
                raise DataError(f"{text_path}: block {number} ends at byte {offset + size}, "
                                f"past the end of the file ({len(text)} bytes)")
            try:
                data = zlib.decompress(text[offset:offset + size])
            except zlib.error as e:
                raise DataError(f"{text_path}: block {number} is corrupt ({e})") from e
            if len(data) != expected:
                raise DataError(f"{text_path}: block {number} has {len(data)} bytes, "
                                f"{block_path} says {expected}")
            cache.clear()  # blocks are read in order: keep only the current one
            cache[number] = data
        return cache[number]

    for (book, ref), (number, start, length) in zip(slots(conf.versification, testament),
                                                    _VERSE_RECORD.iter_unpack(verse_index)):
        if ref is None:
            continue
        if length == 0:
            yield ref, ""
            continue
        data = block(number, ref)
        if start + length > len(data):
            raise DataError(f"{verse_path}: {_ref(ref)} ends at byte {start + length} of "
                            f"block {number}, which has {len(data)} bytes")
        try:
            yield ref, data[start:start + length].decode(conf.encoding)
        except UnicodeDecodeError as e:
            raise DataError(f"{text_path}: {_ref(ref)} is not {conf.encoding} ({e})") from e


def read_module(library: pathlib.Path, module: str) -> dict[Ref, str]:
    """{ref: OSIS text} of every verse of `module` (both testaments), in canonical order."""
    conf = read_conf(library, module)
    return {ref: text for testament in TESTAMENTS for ref, text in read_testament(conf, testament)}


def _ref(ref: Ref) -> str:
    return "{}.{}.{}".format(*ref)


# ----------------------------------------------------------------------------- writing


def write_module(library: pathlib.Path, module: str, verses: Mapping[Ref, str], *,
                 versification: str = "KJV", lang: str = "", description: str = "") -> ModuleConf:
    """Writes a zText module (BlockType=BOOK, zlib, UTF-8) holding `verses`; returns its conf.

    Verses not in `verses` are empty. For test fixtures: the layout is the one read above, so a
    module written here reads back with `read_module`.
    """
    library = pathlib.Path(library)
    key = versification.lower()
    known = {ref for t in TESTAMENTS for _, ref in slots(key, t) if ref is not None}
    unknown = [r for r in verses if r not in known]
    if unknown:
        raise ValueError(f"verses not in versification {versification}: "
                         f"{[_ref(r) for r in unknown[:5]]}")
    data_path = f"./modules/texts/ztext/{module}/"
    (library / data_path).mkdir(parents=True, exist_ok=True)
    conf = conf_path(library, module)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("\n".join([
        f"[{module}]", f"DataPath={data_path}", "ModDrv=zText", "SourceType=OSIS",
        "Encoding=UTF-8", "CompressType=ZIP", "BlockType=BOOK", f"Versification={versification}",
        f"Lang={lang}", f"Description={description}", ""]), encoding="utf-8")
    for testament in TESTAMENTS:
        blocks: list[bytes] = []  # compressed, one per book with text
        index: list[tuple[int, int, int]] = []
        current, buffer = None, bytearray()

        def close_block():
            if buffer:
                blocks.append(bytes(buffer))
                buffer.clear()

        for book, ref in slots(key, testament):
            if book != current:
                close_block()
                current = book
            text = verses.get(ref, "").encode("utf-8") if ref is not None else b""
            if not text:
                index.append((0, 0, 0))
                continue
            if len(text) > 0xFFFF:
                raise ValueError(f"{_ref(ref)}: {len(text)} bytes; a zText verse holds < 64 KiB")
            index.append((len(blocks), len(buffer), len(text)))
            buffer.extend(text)
        close_block()
        offset, block_index, compressed = 0, bytearray(), bytearray()
        for data in blocks:
            packed = zlib.compress(data, 9)
            block_index += _BLOCK_RECORD.pack(offset, len(packed), len(data))
            compressed += packed
            offset += len(packed)
        paths = read_conf(library, module).files(testament)
        paths[0].write_bytes(bytes(block_index))
        paths[1].write_bytes(b"".join(_VERSE_RECORD.pack(*r) for r in index))
        paths[2].write_bytes(bytes(compressed))
    return read_conf(library, module)
