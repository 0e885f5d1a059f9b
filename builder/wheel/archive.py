"""One reading of a wheel's bytes: the archive is one well-formed zip, so that pip, uv, zipfile
and a streaming reader all see the same members as the check did.

A zip can be read from its end (the central directory: zipfile, pip, uv) or from its start (the
local headers, one after another: streaming readers). Two different wheels concatenated, a local
entry the central directory does not list, or names and sizes that disagree between the two make
readers disagree. So the archive is walked both ways and must be one and the same:

- the end of central directory record ends the file (a comment may follow it, nothing else), and
  the central directory ends where it begins;
- the first local header starts the file, and every local entry starts right where the one before
  it (its header, name, extra field, data and data descriptor) ends; the last ends where the
  central directory begins: no bytes before, between or after that no reader accounts for;
- each central entry's local header is at its offset, with the same name, method and (where the
  local header carries them) CRC and sizes; no name twice.

CRCs are checked as members are read (zipfile raises on a mismatch), and RECORD then covers every
file (wheel/layout.py). Pure: reads the open file, a header at a time.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["AmbiguousArchive", "NotAZip", "check_one_archive"]

_EOCD = struct.Struct(
    "<4sHHHHIIH"
)  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # signature, disk, zip64 eocd offset, disks
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")  # ..., entries here, entries, cd size, cd offset
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_EOCD_SIG, _LOCATOR_SIG, _ZIP64_SIG = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_CENTRAL_SIG, _LOCAL_SIG, _DESCRIPTOR_SIG = b"PK\x01\x02", b"PK\x03\x04", b"PK\x07\x08"
_MAX_COMMENT = 0xFFFF
_FULL32 = 0xFFFFFFFF
_HAS_DESCRIPTOR = 0x08  # general purpose flag bit 3: CRC and sizes follow the data


class AmbiguousArchive(ValueError):
    """The file is not one well-formed zip: readers could see different wheels in it."""


class NotAZip(ValueError):
    """Nothing in the file says it is a zip: no reader takes it for one."""


@dataclass(frozen=True)
class _Central:
    name: bytes
    flags: int
    method: int
    crc: int
    compressed: int
    size: int
    offset: int


def check_one_archive(file: BinaryIO) -> None:
    """Raise AmbiguousArchive unless *file* is one zip every reader reads alike (module doc)."""
    end = file.seek(0, os.SEEK_END)
    entries, cd_size, cd_offset, cd_end = _end_record(file, end)
    central = _central_directory(file, cd_offset, cd_size, entries)
    if cd_offset + cd_size != cd_end:
        raise AmbiguousArchive(
            f"its central directory ({cd_size} bytes at {cd_offset}) does not end where its end record begins ({cd_end})"
        )
    names = [entry.name for entry in central]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise AmbiguousArchive(f"its central directory lists {_shown(twice)} twice")
    expected = 0
    for entry in sorted(central, key=lambda e: e.offset):
        if entry.offset != expected:
            where = "before its first entry" if expected == 0 else f"after the entry ending at {expected}"
            raise AmbiguousArchive(
                f"{entry.offset - expected} bytes {where} that its central directory does not list "
                f"(before {_shown(entry.name)}): another archive, or a hidden entry"
                if entry.offset > expected
                else f"{_shown(entry.name)} overlaps the entry before it"
            )
        expected = _local_entry_end(file, entry)
    if expected != cd_offset:
        raise AmbiguousArchive(
            f"{cd_offset - expected} bytes between its last entry and its central directory that "
            "no entry accounts for (a hidden entry)"
            if expected < cd_offset
            else "its last entry runs into its central directory"
        )


def _end_record(file: BinaryIO, end: int) -> tuple[int, int, int, int]:
    """(entries, central directory size and offset, where the directory must end: the end
    record, or the zip64 end record before it)."""
    tail_start = max(0, end - _EOCD.size - _MAX_COMMENT)
    file.seek(tail_start)
    tail = file.read(end - tail_start)
    at = len(tail)
    if _EOCD_SIG not in tail:
        raise NotAZip("no end of central directory record at all")
    while (at := tail.rfind(_EOCD_SIG, 0, at)) >= 0:
        if at + _EOCD.size <= len(tail):
            fields = _EOCD.unpack_from(tail, at)
            if at + _EOCD.size + fields[7] == len(tail):
                break
    else:
        raise AmbiguousArchive(
            "no end of central directory record ends it (data after the archive, or not a zip)"
        )
    _sig, disk, cd_disk, here, entries, cd_size, cd_offset, _comment = fields
    eocd_at = tail_start + at
    if disk or cd_disk or here != entries:
        raise AmbiguousArchive("it claims to span several disks")
    cd_end = eocd_at
    locator_at = eocd_at - _ZIP64_LOCATOR.size
    if locator_at >= 0:
        file.seek(locator_at)
        locator = file.read(_ZIP64_LOCATOR.size)
        if locator[:4] == _LOCATOR_SIG:
            _s, _d, zip64_at, _disks = _ZIP64_LOCATOR.unpack(locator)
            file.seek(zip64_at)
            record = file.read(_ZIP64_EOCD.size)
            if len(record) < _ZIP64_EOCD.size or record[:4] != _ZIP64_SIG:
                raise AmbiguousArchive("its zip64 locator points at no zip64 end record")
            fields64 = _ZIP64_EOCD.unpack(record)
            entries, cd_size, cd_offset = fields64[7], fields64[8], fields64[9]
            if zip64_at + 12 + fields64[1] != locator_at:
                raise AmbiguousArchive("its zip64 end record does not end where its locator begins")
            cd_end = zip64_at
    return entries, cd_size, cd_offset, cd_end


def _central_directory(file: BinaryIO, offset: int, size: int, entries: int) -> list[_Central]:
    file.seek(offset)
    data = file.read(size)
    if len(data) != size:
        raise AmbiguousArchive(f"its central directory ({size} bytes at {offset}) runs past the file")
    found: list[_Central] = []
    at = 0
    while at < size:
        if data[at : at + 4] != _CENTRAL_SIG or at + _CENTRAL.size > size:
            raise AmbiguousArchive(
                f"its central directory holds something that is not an entry at {offset + at}"
            )
        fields = _CENTRAL.unpack_from(data, at)
        flags, method, crc, compressed, length = fields[3], fields[4], fields[7], fields[8], fields[9]
        name_len, extra_len, comment_len, local = fields[10], fields[11], fields[12], fields[16]
        name = data[at + _CENTRAL.size : at + _CENTRAL.size + name_len]
        extra = data[at + _CENTRAL.size + name_len : at + _CENTRAL.size + name_len + extra_len]
        length, compressed, local = _zip64_sizes(extra, length, compressed, local)
        found.append(_Central(name, flags, method, crc, compressed, length, local))
        at += _CENTRAL.size + name_len + extra_len + comment_len
    if at != size or len(found) != entries:
        raise AmbiguousArchive(
            f"its central directory holds {len(found)} entries where its end record says {entries}"
        )
    return found


def _zip64_sizes(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset a zip64 extra field gives for those its header marks 0xFFFFFFFF."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if kind == 0x0001:
            values = extra[at + 4 : at + 4 + length]
            index = 0
            result = []
            for value in (size, compressed, offset):
                if value == _FULL32 and index + 8 <= len(values):
                    value = struct.unpack_from("<Q", values, index)[0]
                    index += 8
                result.append(value)
            return result[0], result[1], result[2]
        at += 4 + length
    return size, compressed, offset


def _local_entry_end(file: BinaryIO, entry: _Central) -> int:
    """Where the local entry of *entry* ends, once its header agrees with the central one."""
    file.seek(entry.offset)
    header = file.read(_LOCAL.size)
    if len(header) < _LOCAL.size or header[:4] != _LOCAL_SIG:
        raise AmbiguousArchive(f"{_shown(entry.name)} has no local header where its central entry says")
    fields = _LOCAL.unpack(header)
    flags, method, crc, compressed, size, name_len, extra_len = (
        fields[2], fields[3], fields[6], fields[7], fields[8], fields[9], fields[10]
    )  # fmt: skip
    name = file.read(name_len)
    if name != entry.name:
        raise AmbiguousArchive(
            f"its central directory names {_shown(entry.name)} where the local header names {_shown(name)}"
        )
    if method != entry.method:
        raise AmbiguousArchive(f"{_shown(entry.name)} is compressed one way locally and another centrally")
    data_at = entry.offset + _LOCAL.size + name_len + extra_len
    if not flags & _HAS_DESCRIPTOR:
        extra = file.read(extra_len)
        size, compressed, _offset = _zip64_sizes(extra, size, compressed, 0)
        if (crc, compressed, size) != (entry.crc, entry.compressed, entry.size):
            raise AmbiguousArchive(
                f"the local header of {_shown(entry.name)} gives another CRC or size than its central entry"
            )
        return int(data_at + entry.compressed)
    # A data descriptor follows the data: CRC and sizes, 4- or 8-byte, with or without its signature.
    file.seek(data_at + entry.compressed)
    tail = file.read(24)
    for signed in (True, False):
        start = 4 if signed else 0
        if signed and tail[:4] != _DESCRIPTOR_SIG:
            continue
        for width in ("<III", "<IQQ"):
            fields_size = struct.calcsize(width)
            if len(tail) >= start + fields_size:
                got = struct.unpack_from(width, tail, start)
                if got == (entry.crc, entry.compressed, entry.size):
                    return int(data_at + entry.compressed + start + fields_size)
    raise AmbiguousArchive(
        f"the data descriptor of {_shown(entry.name)} does not give the CRC and sizes its central entry does"
    )


def _shown(name: bytes) -> str:
    return repr(name.decode("utf-8", errors="replace"))
