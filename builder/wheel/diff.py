"""Where two wheels differ, in one line: the first member whose name, order, zip entry or bytes
differ and, for an ELF shared object, the first section whose bytes differ (and where in it).
Enough for CI to say why a rebuild is not bit-identical; diffoscope is the tool for the deep look.

Two builds of one release with other local labels (+cu130torch2.13, +cu130torch2.14) name their
.dist-info (and .data) folders after their versions: the two folders are paired, member by member,
and what differs inside is listed (METADATA field by field, RECORD by the files whose entries
differ), rather than every member reported as only in one wheel.

Both files are untrusted: members are read under the caps every wheel gets (wheels.read_member),
sections through the bounded reader (elf_sections). Files in, a Difference or None out; no Docker, no subprocess.
"""

from __future__ import annotations

import email.parser
import hashlib
import io
import os
import stat
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .contents import read_member
from .elf_sections import CORRUPT_ELF, SectionRefused, open_elf, section_bytes
from .gate import MAX_MEMBERS

__all__ = ["Difference", "DistInfoPairing", "dist_info_pairing", "first_difference"]

_ELF_MAGIC = b"\x7fELF"
_VERSIONED = (".dist-info", ".data")  # a wheel's folders named {distribution}-{version}.<suffix>
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


@dataclass(frozen=True)
class DistInfoPairing:
    """Two wheels' .dist-info folders of other names (other versions), paired, and what differs
    in the files they hold, one line each ("METADATA: Version 0.1.0+cu130torch2.13 and ...")."""

    first: str  # wbtiny-0.1.0+cu130torch2.13.dist-info
    second: str
    differences: tuple[str, ...]


def _folders(names: Sequence[str]) -> dict[str, str]:
    """The versioned top-level folders of one wheel, by suffix: {".dist-info": "x-1.0.dist-info"}."""
    found: dict[str, set[str]] = {}
    for name in names:
        top = name.split("/", 1)[0]
        for suffix in _VERSIONED:
            if "/" in name and top.endswith(suffix):
                found.setdefault(suffix, set()).add(top)
    return {suffix: next(iter(tops)) for suffix, tops in found.items() if len(tops) == 1}


def _pairing_keys(first: Sequence[str], second: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Each member's name as the comparison sees it: inside a versioned folder whose name differs
    between the two wheels (and is alone of its kind in each), the folder is named by its suffix."""
    mine, theirs = _folders(first), _folders(second)
    renamed = {
        s: (mine[s], theirs[s]) for s in _VERSIONED if s in mine and s in theirs and mine[s] != theirs[s]
    }

    def keys(names: Sequence[str], side: int) -> dict[str, str]:
        out = {}
        for name in names:
            top, _, rest = name.partition("/")
            suffix = next((s for s, pair in renamed.items() if pair[side] == top and rest), None)
            out[name] = f"*{suffix}/{rest}" if suffix else name
        return out

    return keys(first, 0), keys(second, 1)


def _compared(a: Path, b: Path) -> Difference:
    with zipfile.ZipFile(a) as left, zipfile.ZipFile(b) as right:
        entries = [left.infolist(), right.infolist()]
        if max(len(e) for e in entries) > MAX_MEMBERS:
            raise ValueError(f"a wheel of more than {MAX_MEMBERS} members")
        names = [[i.filename for i in e] for e in entries]
        first_keys, second_keys = _pairing_keys(*names)
        keyed = [[first_keys[n] for n in names[0]], [second_keys[n] for n in names[1]]]
        if set(keyed[0]) != set(keyed[1]):
            only = sorted(set(keyed[0]) ^ set(keyed[1]))[0]
            side, listing, keys = (
                (a.name, names[0], keyed[0]) if only in keyed[0] else (b.name, names[1], keyed[1])
            )
            return Difference(listing[keys.index(only)], f"only in {side}")
        pairs = list(zip(*entries, strict=True))
        for at, (one, two) in enumerate(pairs):
            if first_keys[one.filename] != second_keys[two.filename]:
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


def dist_info_pairing(a: Path, b: Path) -> DistInfoPairing | None:
    """When the two wheels' .dist-info folders have other names (another version, as two local
    labels of one release), the folders paired and what differs in the files they hold; None
    when the names are the same or either wheel has not exactly one. Raises ValueError for a
    file that is not a readable wheel."""
    try:
        with zipfile.ZipFile(a) as left, zipfile.ZipFile(b) as right:
            entries = [left.infolist(), right.infolist()]
            if max(len(e) for e in entries) > MAX_MEMBERS:
                raise ValueError(f"a wheel of more than {MAX_MEMBERS} members")
            names = [[i.filename for i in e] for e in entries]
            mine, theirs = _folders(names[0]).get(".dist-info"), _folders(names[1]).get(".dist-info")
            if mine is None or theirs is None or mine == theirs:
                return None
            first_keys, second_keys = _pairing_keys(*names)
            inside = [
                {first_keys[i.filename]: i for i in entries[0] if i.filename.startswith(f"{mine}/")},
                {second_keys[i.filename]: i for i in entries[1] if i.filename.startswith(f"{theirs}/")},
            ]
            said: list[str] = []
            for key in sorted(set(inside[0]) | set(inside[1])):
                shown = key.removeprefix("*.dist-info/")
                if key not in inside[1]:
                    said.append(f"{shown}: only in {a.name}")
                elif key not in inside[0]:
                    said.append(f"{shown}: only in {b.name}")
                else:
                    one, two = read_member(left, inside[0][key]), read_member(right, inside[1][key])
                    said += [
                        f"{shown}: {line}"
                        for line in _file_differences(shown, one, two, first_keys, second_keys)
                    ]
    except zipfile.BadZipFile as bad:
        raise ValueError(str(bad)) from None
    return DistInfoPairing(mine, theirs, tuple(said))


def _file_differences(
    name: str, one: bytes, two: bytes, first_keys: Mapping[str, str], second_keys: Mapping[str, str]
) -> list[str]:
    if name == "RECORD":
        return _record_differences(one, two, first_keys, second_keys)
    if name in ("METADATA", "WHEEL"):
        return _header_differences(one, two)
    found = _bytes_difference(one, two)
    return [found] if found else []


def _header_differences(one: bytes, two: bytes) -> list[str]:
    """METADATA or WHEEL (RFC 822 headers), field by field: each field whose values differ."""
    parsed = [email.parser.BytesParser().parsebytes(data, headersonly=False) for data in (one, two)]
    said = []
    fields = list(dict.fromkeys([*parsed[0].keys(), *parsed[1].keys()]))
    for field in fields:
        values = [message.get_all(field) or [] for message in parsed]
        if values[0] != values[1]:
            said.append(f"{field} {', '.join(values[0]) or '(none)'} and {', '.join(values[1]) or '(none)'}")
    if parsed[0].get_payload() != parsed[1].get_payload():
        said.append("the description differs")
    if not said and one != two:
        said.append(f"same fields, other bytes; first differing at byte {_first_byte(one, two)}")
    return said


def _record_differences(
    one: bytes, two: bytes, first_keys: Mapping[str, str], second_keys: Mapping[str, str]
) -> list[str]:
    """RECORD by the files whose entries (sha256, size) differ, the paired folders' paths
    read as one, so a renamed folder alone differs in nothing here."""
    entries = []
    for data, keys in ((one, first_keys), (two, second_keys)):
        rows = {}
        for line in data.decode("utf-8", "replace").splitlines():
            path, _, rest = line.partition(",")
            rows[keys.get(path, path)] = rest
        entries.append(rows)
    differ = sorted(
        key.removeprefix("*.dist-info/") for key in set(entries[0]) | set(entries[1])
        if entries[0].get(key) != entries[1].get(key)
    )  # fmt: skip
    if not differ:
        return [] if one == two else ["the same entries, other order or paths"]
    return [f"the entries of {', '.join(differ)} differ"]
