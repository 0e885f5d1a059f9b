"""The static half of the import gate: what the extension modules in a built wheel need from the
system they are loaded on, and whether that fits the platform tag the wheel claims.

A ``manylinux_2_28_x86_64`` wheel promises to load on any x86_64 Linux with glibc 2.28 and the
libstdc++ of that era. An extension compiled with a newer toolchain breaks that promise silently:
it installs, then fails at import with ``version `GLIBCXX_3.4.32' not found``. The promise is
checked here from the ELF files alone:

- ``.gnu.version_r`` (version needed) lists every symbol version a shared object requires, e.g.
  ``GLIBC_2.34`` from libc.so.6 or ``GLIBCXX_3.4.29`` from libstdc++.so.6; the highest of each
  family is compared (numerically: ``GLIBC_2.34`` is newer than ``GLIBC_2.2.5``) with the highest
  the tag allows.
- The limits per tag are auditwheel's policy file (``auditwheel/policy/manylinux-policy.json``:
  per policy and architecture, every allowed version of each family), the reference that
  ``auditwheel repair`` itself enforces. ``linux_*`` (not manylinux) and non-Linux tags promise
  nothing, so they have no limit.
- The undefined dynamic symbols that no shared object inside the wheel defines are listed, for
  the gate's container check to narrow down against torch, Python and the base system.

A wheel is read as untrusted input: no member is read whose declared size or compression ratio
is over a cap, and a member is never read past its declared size.

Pure: reads bytes and files, returns values. ``demangle`` uses libstdc++ through ctypes, no
subprocess.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.resources
import io
import json
import os
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import StringTableSection, SymbolTableSection
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..errors import AbiMismatch
from .wheels import MAX_COMPRESSION_RATIO, MAX_MEMBER_SIZE, UnsafeMember, read_member

__all__ = [
    "FAMILIES",
    "AbiReport",
    "ElfAbi",
    "Excess",
    "ModuleAbi",
    "SymbolVersion",
    "TagLimits",
    "UndefinedSymbol",
    "UnsafeMember",
    "check_wheel_abi",
    "demangle",
    "symbol_versions",
    "tag_limits",
]

FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI")  # libc, libstdc++, the C++ ABI (also libstdc++)

_NUMBERED = re.compile(r"(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)")
_SHARED_OBJECT = re.compile(r"\.so(?:\.\d+)*\Z")  # _C.cpython-311-x86_64-linux-gnu.so, libfoo-1a2b.so.12
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")
_POLICY_NAME = re.compile(r"manylinux_(\d+)_(\d+)")
_LEGACY_MANYLINUX = re.compile(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)")
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


def _family(version_name: str) -> str:
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
    file_size = stream.seek(0, io.SEEK_END)
    stream.seek(0)
    try:
        return _abi_of(ELFFile(stream), stream, file_size)
    except (
        ELFError,
        ValueError,
        struct.error,
        OverflowError,
        IndexError,
        KeyError,
        ZeroDivisionError,
    ) as exc:
        # pyelftools on a corrupt file: bad offsets and counts surface as any of these
        raise ValueError(f"not a readable ELF file: {exc}") from exc


def _check_bounds(section: Any, file_size: int) -> None:
    """Refuse a section that claims to run past the end of the file (its count would be a lie)."""
    if int(section["sh_offset"]) + int(section["sh_size"]) > file_size:
        raise ValueError(f"section {section.name} extends past the end of the file")


def _section_bytes(stream: IO[bytes], section: Any, file_size: int) -> bytes:
    """A section's bytes as stored (never decompressed)."""
    _check_bounds(section, file_size)
    stream.seek(int(section["sh_offset"]))
    return stream.read(int(section["sh_size"]))


def _version_needs(data: bytes, little_endian: bool, strings: Any) -> dict[int, str]:
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


def _abi_of(elf: Any, stream: IO[bytes], file_size: int) -> ElfAbi:
    # A corrupt header can claim 2**64 sections (e_shnum 0 defers to section 0's sh_size).
    if elf.num_sections() * elf.structs.Elf_Shdr.sizeof() > file_size:
        raise ValueError(f"{elf.num_sections()} section headers do not fit in {file_size} bytes")
    required: dict[int, str] = {}  # .gnu.version index -> version name (vna_other -> vna_name)
    needed: list[str] = []
    dynsym: Any = None
    versym = b""
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            strings = elf.get_section(section["sh_link"])
            if not isinstance(strings, StringTableSection):
                raise ValueError(f"{section.name} does not link a string table")
            data = _section_bytes(stream, section, file_size)
            required.update(_version_needs(data, elf.little_endian, strings))
        elif isinstance(section, GNUVerSymSection):
            versym = _section_bytes(stream, section, file_size)
        elif isinstance(section, DynamicSection):
            _check_bounds(section, file_size)
            needed += [str(getattr(tag, "needed")) for tag in section.iter_tags("DT_NEEDED")]  # noqa: B009
        elif isinstance(section, SymbolTableSection) and section["sh_type"] == "SHT_DYNSYM":
            _check_bounds(section, file_size)
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


# -- platform tags -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Policy:
    name: str  # manylinux_2_28
    aliases: tuple[str, ...]  # manylinux2014
    glibc: tuple[int, int]
    symbol_versions: dict[str, dict[str, tuple[str, ...]]]  # arch -> family -> allowed versions


@functools.cache
def _policies() -> tuple[_Policy, ...]:
    """auditwheel's manylinux policies, oldest glibc first (the ``linux`` entry left out)."""
    source = importlib.resources.files("auditwheel") / "policy" / "manylinux-policy.json"
    policies = []
    for entry in json.loads(source.read_text(encoding="utf-8")):
        match = _POLICY_NAME.fullmatch(str(entry["name"]))
        if match is None:
            continue
        policies.append(
            _Policy(
                name=str(entry["name"]),
                aliases=tuple(str(a) for a in entry.get("aliases", ())),
                glibc=(int(match[1]), int(match[2])),
                symbol_versions={
                    str(arch): {str(family): tuple(map(str, names)) for family, names in families.items()}
                    for arch, families in entry["symbol_versions"].items()
                },
            )
        )
    return tuple(sorted(policies, key=lambda p: p.glibc))


@dataclass(frozen=True)
class Excess:
    """One version a shared object needs beyond what its tag allows."""

    needed: str  # GLIBCXX_3.4.32, or a named version such as GLIBC_PRIVATE
    allowed: str | None  # the tag's highest of that family, GLIBCXX_3.4.24; None: the tag allows no such name


@dataclass(frozen=True)
class TagLimits:
    """What one platform tag allows a shared object to require."""

    tag: str  # manylinux_2_28_x86_64, manylinux2014_x86_64, linux_x86_64
    label: str  # the tag without its architecture, as messages name it: manylinux_2_28, manylinux2014
    policy: str | None  # auditwheel's policy, manylinux_2_17 for manylinux2014; None: no limit
    highest: tuple[SymbolVersion, ...]  # the highest allowed of each family in FAMILIES
    allowed: frozenset[str]  # every allowed version name of those families, named ones included

    @property
    def limited(self) -> bool:
        return self.policy is not None

    def limit(self, family: str) -> SymbolVersion | None:
        """The highest version of *family* allowed; None when unlimited (or, for a limited tag,
        when the family is not in FAMILIES)."""
        return next((v for v in self.highest if v.family == family), None)

    def excess(self, abi: ElfAbi) -> tuple[Excess, ...]:
        """The versions *abi* needs beyond this tag: per family the highest numbered one if it is
        newer than the limit, and every named version (GLIBC_PRIVATE, ...) the tag does not list."""
        if not self.limited:
            return ()
        found = []
        for family in FAMILIES:
            need, limit = abi.highest(family), self.limit(family)
            if need is not None and (limit is None or need > limit):
                found.append(Excess(needed=str(need), allowed=str(limit) if limit else None))
        for name in sorted(abi.versions):
            if _family(name) in FAMILIES and SymbolVersion.parse(name) is None and name not in self.allowed:
                found.append(Excess(needed=name, allowed=None))
        return tuple(found)


def _unlimited(tag: str) -> TagLimits:
    return TagLimits(tag=tag, label=tag, policy=None, highest=(), allowed=frozenset())


def _limits(tag: str, label: str, policy: _Policy, arch: str, glibc: tuple[int, int]) -> TagLimits:
    families = policy.symbol_versions[arch]
    highest: list[SymbolVersion] = []
    allowed: set[str] = set()
    for family in FAMILIES:
        names = families.get(family, ())
        allowed.update(f"{family}_{n}" for n in names)
        numbered = [v for v in (SymbolVersion.parse(f"{family}_{n}") for n in names) if v is not None]
        if family == "GLIBC":
            # PEP 600: manylinux_x_y means glibc x.y, also for a y the policy file has no entry for.
            numbered.append(SymbolVersion("GLIBC", glibc))
        if numbered:
            highest.append(max(numbered))
    return TagLimits(
        tag=tag, label=label, policy=policy.name, highest=tuple(highest), allowed=frozenset(allowed)
    )


def tag_limits(platform_tag: str) -> TagLimits:
    """The limits of one platform tag, from auditwheel's policy file.

    ``manylinux_x_y_<arch>`` and the legacy ``manylinux1/2010/2014_<arch>`` are limited; a
    ``manylinux_x_y`` the file does not list (manylinux_2_30) takes glibc x.y and the libstdc++
    limits of the newest listed policy with an older glibc. Other tags (``linux_x86_64``,
    ``any``, ``macosx_*``, ``musllinux_*``) are unlimited here. Raises ``ValueError`` for a
    manylinux tag whose architecture or glibc auditwheel has no policy for.
    """
    policies = _policies()
    if match := _LEGACY_MANYLINUX.fullmatch(platform_tag):
        alias, arch = match[1], match[2]
        policy = next((p for p in policies if alias in p.aliases), None)
        if policy is None:
            raise ValueError(f"{platform_tag}: auditwheel's policy file names no {alias}")
        if arch not in policy.symbol_versions:
            raise ValueError(f"{platform_tag}: auditwheel has no {policy.name} policy for {arch}")
        return _limits(platform_tag, alias, policy, arch, policy.glibc)
    if match := _MANYLINUX.fullmatch(platform_tag):
        glibc, arch = (int(match[1]), int(match[2])), match[3]
        label = f"manylinux_{glibc[0]}_{glibc[1]}"
        exact = next((p for p in policies if p.glibc == glibc), None)
        if exact is not None and arch not in exact.symbol_versions:
            raise ValueError(f"{platform_tag}: auditwheel has no {exact.name} policy for {arch}")
        older = [p for p in policies if p.glibc <= glibc and arch in p.symbol_versions]
        if not older:
            raise ValueError(
                f"{platform_tag}: auditwheel has no manylinux policy for glibc <= {glibc[0]}.{glibc[1]} on {arch}"
            )
        return _limits(platform_tag, label, older[-1], arch, glibc)
    return _unlimited(platform_tag)


def _strictest(limits: list[TagLimits]) -> TagLimits:
    """A wheel with several platform tags must load wherever any of them matches: the oldest glibc wins."""
    limited = [lim for lim in limits if lim.limited]
    if not limited:
        return min(limits, key=lambda lim: lim.tag)
    return min(limited, key=lambda lim: (lim.limit("GLIBC") or SymbolVersion("GLIBC", ())).number)


# -- wheels --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleAbi:
    """One shared object in a wheel, judged against the wheel's platform tag."""

    member: str  # flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so
    abi: ElfAbi
    excess: tuple[Excess, ...]  # empty when it fits the tag
    unresolved: tuple[UndefinedSymbol, ...]  # strong undefined symbols no shared object in the wheel defines

    @property
    def fits(self) -> bool:
        return not self.excess


@dataclass(frozen=True)
class AbiReport:
    """The static ABI check of one wheel."""

    wheel: str  # file name
    limits: TagLimits  # of the wheel's strictest platform tag
    modules: tuple[ModuleAbi, ...]

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.modules)

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per shared object that needs more than the tag allows."""
        return tuple(_problem(m, self.limits.label) for m in self.modules if not m.fits)

    @property
    def unresolved(self) -> tuple[UndefinedSymbol, ...]:
        """Every module's unresolved symbols, once each, sorted by name."""
        every = {s for m in self.modules for s in m.unresolved}
        return tuple(sorted(every, key=lambda s: (s.name, s.version or "")))

    def errors(self) -> list[AbiMismatch]:
        """The problems as typed errors, one per shared object (for check's problem list)."""
        return [
            AbiMismatch(
                f"{self.wheel}: {line}",
                "build with an older toolchain (the manylinux image's gcc-toolset, whose libstdc++ "
                "links the new symbols statically) or tag the wheel for a newer platform",
            )
            for line in self.problems
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "wheel": self.wheel,
            "platform_tag": self.limits.tag,
            "policy": self.limits.policy,
            "limits": {v.family: str(v) for v in self.limits.highest} if self.limits.limited else None,
            "fits": self.fits,
            "problems": list(self.problems),
            "modules": {
                m.member: {
                    "fits": m.fits,
                    "highest": {f: str(v) for f in FAMILIES if (v := m.abi.highest(f)) is not None},
                    "versions": sorted(m.abi.versions),
                    "needed": list(m.abi.needed),
                    "excess": [{"needed": e.needed, "allowed": e.allowed} for e in m.excess],
                    "unresolved": [str(s) for s in m.unresolved],
                }
                for m in self.modules
            },
        }


def _problem(module: ModuleAbi, label: str) -> str:
    ceilings = [e.allowed for e in module.excess if e.allowed is not None]
    forbidden = [e.needed for e in module.excess if e.allowed is None]
    clauses = []
    if ceilings:
        clauses.append("up to " + ", ".join(ceilings))
    if forbidden:
        clauses.append("no " + ", ".join(forbidden))
    needs = ", ".join(e.needed for e in module.excess)
    return f"{module.member} needs {needs} but {label} allows {' and '.join(clauses)}"


def check_wheel_abi(
    wheel_path: Path,
    *,
    max_member_size: int = MAX_MEMBER_SIZE,
    max_ratio: float = MAX_COMPRESSION_RATIO,
) -> AbiReport:
    """Judge every shared object (``*.so``, ``*.so.N``) in the wheel against its platform tag.

    Raises ``UnsafeMember`` (a ``ValueError``) for a member over the caps, and ``ValueError`` when
    the file name is not a wheel's, the zip is unreadable or a shared object is not ELF.
    """
    try:
        _name, _version, _build, tags = parse_wheel_filename(wheel_path.name)
    except InvalidWheelFilename as exc:
        raise ValueError(f"{wheel_path.name} is not a wheel filename: {exc}") from exc
    limits = _strictest([tag_limits(platform) for platform in sorted({t.platform for t in tags})])
    abis: list[tuple[str, ElfAbi]] = []
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            for info in wheel.infolist():
                if info.is_dir() or not _SHARED_OBJECT.search(info.filename.rpartition("/")[2]):
                    continue
                data = read_member(wheel, info, max_member_size, max_ratio)
                try:
                    abis.append((info.filename, symbol_versions(data)))
                except ValueError as exc:
                    raise ValueError(f"{info.filename}: {exc}") from exc
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{wheel_path.name} is not a zip archive: {exc}") from exc
    # Resolution inside the wheel is by name: a bundled library (auditwheel's <pkg>.libs/) or a
    # sibling extension that exports the symbol. What remains is the container check's to resolve.
    defined = frozenset(name for _, abi in abis for name in abi.defined)
    modules = tuple(
        ModuleAbi(
            member=member,
            abi=abi,
            excess=limits.excess(abi),
            unresolved=tuple(s for s in abi.undefined if not s.weak and s.name not in defined),
        )
        for member, abi in abis
    )
    return AbiReport(wheel=wheel_path.name, limits=limits, modules=modules)


# -- C++ names -----------------------------------------------------------------------------------


@functools.cache
def _demangler() -> tuple[Any, Any] | None:
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
