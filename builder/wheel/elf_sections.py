"""An untrusted ELF file's sections, read only from the bytes the file holds.

pyelftools trusts the headers: ``Section.data()`` of an SHT_NOBITS section returns ``sh_size``
zero bytes (a 16 KiB file can ask for a TiB), and an SHF_COMPRESSED section inflates to whatever
its compression header declares. Every reader of a wheel's ELF files (the fatbin's archs in
contents.py, the dynamic-linking view in elf_abi.py) reads its sections here instead, so what is
read is bounded by the file's real size, and what is inflated by the caps a wheel's zip members
are held to.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import IO

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import Section

__all__ = [
    "CORRUPT_ELF",
    "MAX_INFLATED_SIZE",
    "MAX_INFLATION_RATIO",
    "SectionRefused",
    "check_bounds",
    "open_elf",
    "section_bytes",
]

# Compressed data in a wheel inflates no further than a zip member may (wheels.read_member's
# caps): extension modules can be hundreds of MiB, but machine code does not deflate 100:1; zeros do.
MAX_INFLATED_SIZE = 2 * 1024**3
MAX_INFLATION_RATIO = 100.0
# pyelftools on a corrupt file: bad offsets and counts surface as any of these.
CORRUPT_ELF = (ELFError, ValueError, struct.error, OverflowError, IndexError, KeyError, ZeroDivisionError)
_ELFCOMPRESS_ZLIB = "ELFCOMPRESS_ZLIB"


class SectionRefused(ValueError):
    """A section whose headers ask for bytes the file does not hold: none at all (SHT_NOBITS),
    past the file's end, or inflating past its declared size or the caps."""


def open_elf(stream: IO[bytes]) -> tuple[ELFFile, int]:
    """The ELF file on *stream* and its size in bytes. Refuses (SectionRefused) section headers
    that cannot fit in the file: e_shnum 0 defers the count to section 0's sh_size, which can
    claim 2**64. Lets pyelftools' errors (CORRUPT_ELF) through for the caller to word."""
    file_size = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    elf = ELFFile(stream)
    if elf.num_sections() * elf.structs.Elf_Shdr.sizeof() > file_size:
        raise SectionRefused(f"{elf.num_sections()} section headers do not fit in {file_size} bytes")
    return elf, file_size


def check_bounds(section: Section, file_size: int) -> None:
    """Refuse a section that claims to run past the end of the file (its count would be a lie)."""
    if int(section["sh_offset"]) + int(section["sh_size"]) > file_size:
        raise SectionRefused(f"section {section.name} extends past the end of the file")


def section_bytes(stream: IO[bytes], section: Section, file_size: int) -> bytes:
    """A section's contents, read from the file's own bytes and never more:

    - SHT_NOBITS holds nothing in the file (only a size to reserve at load time): refused,
      where pyelftools would make sh_size zeros;
    - a section past the end of the file is refused unread;
    - SHF_COMPRESSED (zlib) is refused unread when it declares more than MAX_INFLATED_SIZE or
      MAX_INFLATION_RATIO times what it stores, is inflated to at most its declared size plus one
      byte, and is refused when it inflates to more or less than it declares.
    """
    if section["sh_type"] == "SHT_NOBITS":
        raise SectionRefused(
            f"section {section.name} holds no bytes in the file (SHT_NOBITS) but says it has "
            f"{int(section['sh_size'])}"
        )
    check_bounds(section, file_size)
    stream.seek(int(section["sh_offset"]))
    stored = stream.read(int(section["sh_size"]))
    if not section.compressed:
        return stored
    return _inflated(section, stored)


def _inflated(section: Section, stored: bytes) -> bytes:
    header = section.structs.Elf_Chdr
    if len(stored) < header.sizeof():
        raise SectionRefused(f"section {section.name} is too short for its compression header")
    chdr = header.parse(stored[: header.sizeof()])
    kind, declared = chdr["ch_type"], int(chdr["ch_size"])
    if kind != _ELFCOMPRESS_ZLIB:
        raise SectionRefused(f"section {section.name} is compressed with {kind!r}, not zlib")
    if declared > MAX_INFLATED_SIZE or declared > MAX_INFLATION_RATIO * max(len(stored), 1):
        raise SectionRefused(
            f"section {section.name}: {len(stored)} compressed bytes declare {declared} inflated, "
            f"over the cap of {MAX_INFLATED_SIZE} bytes or a ratio of {MAX_INFLATION_RATIO:g}"
        )
    try:
        inflated = zlib.decompressobj().decompress(stored[header.sizeof() :], declared + 1)
    except zlib.error as exc:
        raise SectionRefused(f"section {section.name} cannot be inflated ({exc})") from exc
    if len(inflated) != declared:
        raise SectionRefused(
            f"section {section.name} inflates to {'more' if len(inflated) > declared else 'less'} "
            f"than the {declared} bytes it declares"
        )
    return inflated
