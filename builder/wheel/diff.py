"""Where two wheels differ, in one line: the first member whose name, order, zip entry or bytes
differ and, for an ELF shared object, the first section whose bytes differ (and where in it).
Enough for CI to say why a rebuild is not bit-identical; diffoscope is the tool for the deep look.

Both files are untrusted: members are read under the caps every wheel gets (wheels.read_member),
sections through the bounded reader (elf_sections). Files in, a Difference or None out; no Docker, no subprocess.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .contents import read_member
from .elf_sections import CORRUPT_ELF, SectionRefused, open_elf, section_bytes
from .gate import MAX_MEMBERS

__all__ = ["Difference", "first_difference"]

_ELF_MAGIC = b"\x7fELF"
_BUILD_ID = ".note.gnu.build-id"


@dataclass(frozen=True)
class Difference:
    member: str  # "" when the archives differ before any member (their listings)
    what: str  # "ELF section .symtab: 12840 and 12840 bytes, first differing at byte 8266"

    def __str__(self) -> str:
        return f"{self.member}: {self.what}" if self.member else self.what


def _sha256(path: Path) -> str:
    """A regular file's sha256; a FIFO, a device or a link to one (named like a wheel) is refused
    (ValueError) rather than read forever."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path} is not a regular file (a FIFO, a device, or a link to one)")
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def first_difference(a: Path, b: Path) -> Difference | None:
    """None when the two files are the same bytes; else the first place they differ. Raises
    ValueError for a file that is not a readable wheel."""
    if _sha256(a) == _sha256(b):
        return None
    try:
        return _compared(a, b)
    except zipfile.BadZipFile as bad:
        raise ValueError(str(bad)) from None


def _compared(a: Path, b: Path) -> Difference:
    with zipfile.ZipFile(a) as left, zipfile.ZipFile(b) as right:
        entries = [left.infolist(), right.infolist()]
        if max(len(e) for e in entries) > MAX_MEMBERS:
            raise ValueError(f"a wheel of more than {MAX_MEMBERS} members")
        names = [[i.filename for i in e] for e in entries]
        if set(names[0]) != set(names[1]):
            only = sorted(set(names[0]) ^ set(names[1]))[0]
            side = a.name if only in names[0] else b.name
            return Difference(only, f"only in {side}")
        pairs = list(zip(*entries, strict=True))
        for at, (one, two) in enumerate(pairs):
            if one.filename != two.filename:
                return Difference(
                    one.filename, f"at place {at + 1} in {a.name}, {two.filename} there in {b.name}"
                )
        # What a member holds matters more than how its entry is dated: bytes first.
        for one, two in pairs:
            found = _bytes_difference(read_member(left, one), read_member(right, two))
            if found is not None:
                return Difference(one.filename, found)
        for one, two in pairs:
            found = _entry_difference(one, two)
            if found is not None:
                return Difference(one.filename, found)
    return Difference("", "same members and entries, other bytes (the zip's own records or comment)")


def _bytes_difference(first: bytes, second: bytes) -> str | None:
    if first == second:
        return None
    if first.startswith(_ELF_MAGIC) and second.startswith(_ELF_MAGIC):
        return _elf_difference(first, second)
    return f"{len(first)} and {len(second)} bytes, first differing at byte {_first_byte(first, second)}"


def _entry_difference(one: zipfile.ZipInfo, two: zipfile.ZipInfo) -> str | None:
    for field, shown in (
        ("date_time", "dated"),
        ("external_attr", "permissions"),
        ("compress_type", "compression"),
        ("create_system", "made on system"),
    ):
        if getattr(one, field) != getattr(two, field):
            return f"same bytes, {shown} {getattr(one, field)} and {getattr(two, field)}"
    return None


def _first_byte(first: bytes, second: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y),
        min(len(first), len(second)),
    )


def _elf_difference(first: bytes, second: bytes) -> str:
    """The first section (in the first file's order) whose bytes differ, or the headers."""
    try:
        sections = []
        for data in (first, second):
            stream = io.BytesIO(data)
            elf, size = open_elf(stream)
            sections.append(
                {
                    s.name: (b"" if s["sh_type"] == "SHT_NOBITS" else section_bytes(stream, s, size))
                    for s in elf.iter_sections()
                }
            )
    except (SectionRefused, *CORRUPT_ELF) as bad:
        return f"ELF files that cannot be compared section by section ({bad}); first differing at byte {_first_byte(first, second)}"
    mine, theirs = sections
    # The build id is a hash of the rest: it differs whenever another section does, so it is
    # named only when nothing else differs.
    order = sorted(mine, key=lambda name: name == _BUILD_ID)
    for name in order:
        data = mine[name]
        if name not in theirs:
            return f"ELF section {name or '(unnamed)'} only in the first"
        if data != theirs[name]:
            return (
                f"ELF section {name}: {len(data)} and {len(theirs[name])} bytes, first differing at "
                f"byte {_first_byte(data, theirs[name])}"
            )
    extra = sorted(set(theirs) - set(mine))
    if extra:
        return f"ELF section {extra[0]} only in the second"
    return f"same ELF sections, other headers or layout; first differing at byte {_first_byte(first, second)}"
