"""One ELF shared object's dynamic-linking view, read from its bytes alone: the sonames it needs
(DT_NEEDED), every symbol version it requires (``.gnu.version_r``: GLIBC_2.34 from libc.so.6,
GLIBCXX_3.4.29 from libstdc++.so.6), its undefined and exported dynamic symbols; and C++ names
demangled through libstdc++. Whether that fits a platform tag is abi.py's to say.

The file is untrusted input: its sections are read through elf_sections, so one that points
past the end of the file, or holds no bytes in it, is refused, not read.
Reads bytes and files, returns values; ``demangle`` uses libstdc++ through ctypes, no
subprocess.
"""

from __future__ import annotations

import ctypes
import functools
import io
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import StringTableSection, SymbolTableSection

from .elf_sections import CORRUPT_ELF, check_bounds, open_elf, section_bytes

FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI")  # libc, libstdc++, the C++ ABI (also libstdc++)

_NUMBERED = re.compile(r"(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)")
_EXPORTED_BINDINGS = frozenset({"STB_GLOBAL", "STB_WEAK", "STB_LOOS"})  # STB_LOOS = STB_GNU_UNIQUE
_EXPORTED_VISIBILITY = frozenset({"STV_DEFAULT", "STV_PROTECTED"})


@dataclass(frozen=True, order=True)
class SymbolVersion:
    """A numbered symbol version, e.g. GLIBCXX_3.4.29 = ("GLIBCXX", (3, 4, 29)); orders numerically."""

    family: str
    number: tuple[int, ...]

    @classmethod
    def parse(cls, name: str) -> SymbolVersion | None:
        """``GLIBC_2.34`` -> SymbolVersion; None for other families and for named versions
        (``GLIBC_PRIVATE``, ``CXXABI_TM_1``, ``GLIBC_ABI_DT_RELR``)."""
        match = _NUMBERED.fullmatch(name)
        if match is None:
            return None
        return cls(match[1], tuple(int(part) for part in match[2].split(".")))

    def __str__(self) -> str:
        return f"{self.family}_{'.'.join(map(str, self.number))}"


def family_of(version_name: str) -> str:
    return version_name.partition("_")[0]


@dataclass(frozen=True)
class UndefinedSymbol:
    """A dynamic symbol a shared object uses but does not define."""

    name: str  # as in the ELF file (mangled for C++): _ZN2wb7missingEi
    version: str | None  # the version it is bound to, e.g. GLIBC_2.34; None when unversioned
    weak: bool  # a weak reference: the loader leaves it null when nothing defines it

    def __str__(self) -> str:
        return f"{self.name}@{self.version}" if self.version else self.name


@dataclass(frozen=True)
class ElfAbi:
    """What one ELF shared object needs from, and offers to, the dynamic loader."""

    needed: tuple[str, ...]  # DT_NEEDED sonames, in order: libc.so.6, libstdc++.so.6, ...
    versions: frozenset[str]  # every version .gnu.version_r requires: GLIBC_2.34, GLIBCXX_3.4.21, ...
    undefined: tuple[UndefinedSymbol, ...]  # in .dynsym order
    defined: frozenset[str]  # exported dynamic symbols (global, weak or unique; default/protected)

    def highest(self, family: str) -> SymbolVersion | None:
        """The newest numbered version of *family* (GLIBC, GLIBCXX, CXXABI) required; None if none."""
        found = [v for v in map(SymbolVersion.parse, self.versions) if v is not None and v.family == family]
        return max(found, default=None)

    @property
    def glibc(self) -> SymbolVersion | None:
        return self.highest("GLIBC")

    @property
    def glibcxx(self) -> SymbolVersion | None:
        return self.highest("GLIBCXX")

    @property
    def cxxabi(self) -> SymbolVersion | None:
        return self.highest("CXXABI")


def symbol_versions(elf: bytes | str | os.PathLike[str]) -> ElfAbi:
    """Read the dynamic-linking view of one ELF shared object: the contents (bytes) or a path.

    Raises ``ValueError`` if it is not a readable ELF file.
    """
    if isinstance(elf, bytes):
        return _read_elf(io.BytesIO(elf))
    with open(elf, "rb") as stream:
        return _read_elf(stream)


def _read_elf(stream: IO[bytes]) -> ElfAbi:
    try:
        elf, file_size = open_elf(stream)
        return _abi_of(elf, stream, file_size)
    except CORRUPT_ELF as exc:  # SectionRefused is a ValueError too
        raise ValueError(f"not a readable ELF file: {exc}") from exc


def _version_needs(data: bytes, little_endian: bool, strings: StringTableSection) -> dict[int, str]:
    """``.gnu.version_r``: version index (vna_other) -> version name, e.g. 3 -> GLIBC_2.34.

    Walked by hand, not with pyelftools' iter_versions: that trusts the entry count in sh_info
    and loops billions of times over one entry when a corrupt file says so. Here the chain ends
    at a zero ``next`` or the end of the section, and no more entries are read than fit in it.
    """
    order = "<" if little_endian else ">"
    verneed = struct.Struct(order + "HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next (ELF32 = ELF64)
    vernaux = struct.Struct(order + "IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next
    found: dict[int, str] = {}
    budget = len(data) // vernaux.size
    at = 0
    while budget > 0 and at + verneed.size <= len(data):
        budget -= 1
        _version, count, _file, aux, next_need = verneed.unpack_from(data, at)
        pos = at + aux
        for _ in range(count):
            if budget <= 0 or pos + vernaux.size > len(data):
                break
            budget -= 1
            _hash, _flags, index, name, next_aux = vernaux.unpack_from(data, pos)
            found[index] = str(strings.get_string(name))
            if next_aux == 0:
                break
            pos += next_aux
        if next_need == 0:
            break
        at += next_need
    return found


def _abi_of(elf: ELFFile, stream: IO[bytes], file_size: int) -> ElfAbi:
    required: dict[int, str] = {}  # .gnu.version index -> version name (vna_other -> vna_name)
    needed: list[str] = []
    dynsym: SymbolTableSection | None = None
    versym = b""
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            strings = elf.get_section(section["sh_link"])
            if not isinstance(strings, StringTableSection):
                raise ValueError(f"{section.name} does not link a string table")
            data = section_bytes(stream, section, file_size)
            required.update(_version_needs(data, elf.little_endian, strings))
        elif isinstance(section, GNUVerSymSection):
            versym = section_bytes(stream, section, file_size)
        elif isinstance(section, DynamicSection):
            check_bounds(section, file_size)
            needed += [str(getattr(tag, "needed")) for tag in section.iter_tags("DT_NEEDED")]  # noqa: B009
        elif isinstance(section, SymbolTableSection) and section["sh_type"] == "SHT_DYNSYM":
            check_bounds(section, file_size)
            if section["sh_entsize"] != elf.structs.Elf_Sym.sizeof():
                raise ValueError(f"{section.name} has entries of {section['sh_entsize']} bytes")
            dynsym = section
    # .gnu.version holds one u16 per .dynsym entry; bit 15 marks a hidden version.
    fmt = "<H" if elf.little_endian else ">H"
    indices = [value & 0x7FFF for (value,) in struct.iter_unpack(fmt, versym[: len(versym) // 2 * 2])]
    undefined: list[UndefinedSymbol] = []
    defined: set[str] = set()
    if dynsym is not None:
        for i, symbol in enumerate(dynsym.iter_symbols()):
            name = str(symbol.name)
            if not name:
                continue
            info, bind = symbol["st_info"], symbol["st_info"]["bind"]
            if symbol["st_shndx"] == "SHN_UNDEF":
                version = required.get(indices[i]) if i < len(indices) else None
                undefined.append(UndefinedSymbol(name=name, version=version, weak=bind == "STB_WEAK"))
            elif (
                bind in _EXPORTED_BINDINGS
                and symbol["st_other"]["visibility"] in _EXPORTED_VISIBILITY
                and info["type"] not in ("STT_SECTION", "STT_FILE")
            ):
                defined.add(name)
    return ElfAbi(
        needed=tuple(needed),
        versions=frozenset(required.values()),
        undefined=tuple(undefined),
        defined=frozenset(defined),
    )


@functools.cache
def _demangler() -> tuple[Callable[..., int | None], Callable[[int], None]] | None:
    """libstdc++'s ``__cxa_demangle`` and libc's ``free``; None when libstdc++ cannot be loaded."""
    try:
        libstdcxx = ctypes.CDLL("libstdc++.so.6")
        cxa_demangle = libstdcxx.__cxa_demangle
        free = ctypes.CDLL(None).free
    except (OSError, AttributeError):
        return None
    # char* __cxa_demangle(const char* mangled, char* buffer, size_t* length, int* status)
    cxa_demangle.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_int),
    ]
    cxa_demangle.restype = ctypes.c_void_p  # keep the pointer: it must be freed
    free.argtypes = [ctypes.c_void_p]
    free.restype = None
    return cxa_demangle, free


def demangle(name: str) -> str:
    """``_ZN2wb7missingEi`` -> ``wb::missing(int)``; any other name (or no libstdc++) unchanged."""
    if not name.startswith("_Z"):  # __cxa_demangle also reads bare type codes: "i" -> "int"
        return name
    functions = _demangler()
    if functions is None:
        return name
    cxa_demangle, free = functions
    try:
        mangled = name.encode("ascii")
    except UnicodeEncodeError:
        return name
    status = ctypes.c_int(-1)
    pointer = cxa_demangle(mangled, None, None, ctypes.byref(status))
    if not pointer:
        return name
    try:
        if status.value != 0:
            return name
        return ctypes.string_at(pointer).decode("utf-8", errors="replace")
    finally:
        free(pointer)
